//! Layout (T2, T3): sizes, strides and offset of a strided view, and the pure arithmetic of every
//! zero-copy view. Tensors delegate here; nothing in this file touches memory.

use smallvec::SmallVec;

use crate::shape::{contiguous_strides, inline_copy, normalize_axis, numel_of, INLINE_DIMS};
use crate::{CoreError, Result, Shape, Strides};

/// How logical indices map to element positions in storage:
/// `position = offset + Σ index[i] * strides[i]`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: Shape,
    strides: Strides,
    /// Element offset of the logical first element within the storage.
    offset: usize,
    contiguous: bool,
}

impl Clone for Layout {
    /// Cloning is on the path of every tensor clone, so the strides are copied as plain memory
    /// instead of through `SmallVec`'s generic element-by-element clone.
    #[inline]
    fn clone(&self) -> Self {
        Layout {
            shape: self.shape.clone(),
            strides: copy_strides(&self.strides),
            offset: self.offset,
            contiguous: self.contiguous,
        }
    }
}

#[cold]
fn invalid(op: &'static str, message: impl Into<String>) -> CoreError {
    CoreError::InvalidView {
        op,
        message: message.into(),
    }
}

impl Layout {
    /// A row-major layout of `shape` starting at element `offset`.
    #[inline]
    pub fn contiguous(shape: Shape, offset: usize) -> Self {
        let strides = row_major_strides(shape.dims());
        Layout {
            shape,
            strides,
            offset,
            contiguous: true,
        }
    }

    /// The row-major layout at offset 0 of at most [`INLINE_DIMS`] `dims`, whose element count
    /// `numel` was checked. The tensor-creation path: no branch on the rank, so the layout is
    /// built in place rather than merged from two paths through stack copies.
    #[inline]
    pub(crate) fn contiguous_inline(dims: &[usize], numel: usize) -> Self {
        Layout {
            shape: Shape::inline(dims, numel),
            strides: row_major_inline(dims),
            offset: 0,
            contiguous: true,
        }
    }

    /// A layout with explicit strides (checked: one stride per dim).
    pub fn strided(shape: Shape, strides: Strides, offset: usize) -> Result<Self> {
        if strides.len() != shape.rank() {
            return Err(invalid(
                "Layout::strided",
                format!("{} strides for rank {}", strides.len(), shape.rank()),
            ));
        }
        let contiguous = is_contiguous(&shape, &strides);
        Ok(Layout {
            shape,
            strides,
            offset,
            contiguous,
        })
    }

    #[inline]
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    #[inline]
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }

    #[inline]
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    #[inline]
    pub fn offset(&self) -> usize {
        self.offset
    }

    #[inline]
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    #[inline]
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    /// True when elements are row-major and dense (cached at construction).
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        self.contiguous
    }

    /// The element range `[lo, hi)` this layout can touch, relative to the storage start.
    /// Empty layouts touch nothing and return `(offset, offset)`.
    pub fn span(&self) -> Result<(usize, usize)> {
        if self.numel() == 0 {
            return Ok((self.offset, self.offset));
        }
        let mut lo = self.offset as i128;
        let mut hi = self.offset as i128;
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            let extent = (d as i128 - 1) * s as i128;
            if extent < 0 {
                lo += extent;
            } else {
                hi += extent;
            }
        }
        if lo < 0 {
            return Err(invalid(
                "Layout::span",
                format!("view reaches element {lo}, before the storage start"),
            ));
        }
        usize::try_from(hi + 1)
            .map(|hi| (lo as usize, hi))
            .map_err(|_| CoreError::overflow("layout span"))
    }

    /// The element position of a logical index (checked against the shape).
    pub fn position(&self, index: &[usize]) -> Result<usize> {
        if index.len() != self.rank() {
            return Err(invalid(
                "index",
                format!(
                    "index of rank {} for a tensor of rank {}",
                    index.len(),
                    self.rank()
                ),
            ));
        }
        let mut pos = self.offset as isize;
        for (axis, ((&i, &d), &s)) in index
            .iter()
            .zip(self.shape.iter())
            .zip(&self.strides)
            .enumerate()
        {
            if i >= d {
                return Err(invalid(
                    "index",
                    format!("index {i} out of range for axis {axis} of size {d}"),
                ));
            }
            pos += i as isize * s;
        }
        Ok(pos as usize)
    }

    /// Same elements with new dims, without copying. Works whenever the new shape can be expressed
    /// with strides over the old one (always for contiguous layouts).
    #[inline]
    pub fn view(&self, dims: &[usize]) -> Result<Layout> {
        let numel = numel_of(dims)?;
        if numel != self.numel() {
            return Err(self.numel_mismatch(dims, numel));
        }
        if self.contiguous && dims.len() <= INLINE_DIMS {
            // The common case, built in place (see `contiguous_inline`).
            return Ok(Layout {
                offset: self.offset,
                ..Layout::contiguous_inline(dims, numel)
            });
        }
        self.view_general(dims, numel)
    }

    /// [`Layout::view`] of a non-contiguous layout, or to more than the inline dims.
    fn view_general(&self, dims: &[usize], numel: usize) -> Result<Layout> {
        let shape = Shape::with_numel(dims, numel);
        if self.contiguous {
            return Ok(Layout::contiguous(shape, self.offset));
        }
        self.view_strided(shape, dims)
    }

    #[cold]
    fn numel_mismatch(&self, dims: &[usize], to_numel: usize) -> CoreError {
        CoreError::NumelMismatch {
            op: "view",
            from: self.dims().to_vec(),
            from_numel: self.numel(),
            to: dims.to_vec(),
            to_numel,
        }
    }

    /// [`Layout::view`] of a non-contiguous layout.
    fn view_strided(&self, shape: Shape, dims: &[usize]) -> Result<Layout> {
        let strides = view_strides(self.dims(), &self.strides, dims).ok_or_else(|| {
            invalid(
                "view",
                format!(
                    "shape {:?} with strides {:?} cannot be viewed as {dims:?} without a copy",
                    self.dims(),
                    self.strides()
                ),
            )
        })?;
        Layout::strided(shape, strides, self.offset)
    }

    /// Reorders dims: output dim `i` is input dim `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Result<Layout> {
        let rank = self.rank();
        if perm.len() != rank {
            return Err(invalid(
                "permute",
                format!("permutation {perm:?} for rank {rank}"),
            ));
        }
        let mut seen: SmallVec<[bool; 8]> = SmallVec::from_elem(false, rank);
        let mut dims: SmallVec<[usize; INLINE_DIMS]> = SmallVec::from_slice(self.dims());
        let mut strides = copy_strides(&self.strides);
        for (i, &p) in perm.iter().enumerate() {
            if p >= rank || std::mem::replace(&mut seen[p], true) {
                return Err(invalid(
                    "permute",
                    format!("{perm:?} is not a permutation of 0..{rank}"),
                ));
            }
            dims[i] = self.shape[p];
            strides[i] = self.strides[p];
        }
        Layout::strided(Shape::new(&dims)?, strides, self.offset)
    }

    /// Swaps two dims (negative axes count from the end).
    pub fn transpose(&self, a: isize, b: isize) -> Result<Layout> {
        let a = normalize_axis("transpose", a, self.rank())?;
        let b = normalize_axis("transpose", b, self.rank())?;
        let mut dims: SmallVec<[usize; INLINE_DIMS]> = SmallVec::from_slice(self.dims());
        let mut strides = copy_strides(&self.strides);
        dims.swap(a, b);
        strides.swap(a, b);
        Layout::strided(Shape::new(&dims)?, strides, self.offset)
    }

    /// `len` elements of `axis` starting at `start`.
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Layout> {
        let axis = normalize_axis("narrow", axis, self.rank())?;
        let dim = self.shape[axis];
        if start.checked_add(len).is_none_or(|end| end > dim) {
            return Err(invalid(
                "narrow",
                format!(
                    "range {start}..{} out of bounds for axis {axis} of size {dim}",
                    start.saturating_add(len)
                ),
            ));
        }
        self.slice_axis(axis, start, len, 1)
    }

    /// Python-style `start:end:step` on `axis`: negative indices count from the end, bounds are
    /// clamped, a negative step walks backwards, and a zero step is an error. Any `isize` bounds
    /// and non-zero step are accepted (none of the arithmetic can overflow).
    pub fn slice(&self, axis: isize, start: isize, end: isize, step: isize) -> Result<Layout> {
        let axis = normalize_axis("slice", axis, self.rank())?;
        if step == 0 {
            return Err(invalid("slice", "step must not be zero"));
        }
        let dim = dim_as_isize("slice", self.shape[axis])?;
        let resolve = |i: isize, lo: isize, hi: isize| {
            // `i + dim` cannot overflow: i < 0 <= dim.
            let i = if i < 0 { i + dim } else { i };
            i.clamp(lo, hi)
        };
        let (first, len) = if step > 0 {
            let s = resolve(start, 0, dim);
            let e = resolve(end, 0, dim);
            // 0 <= s < e <= dim, so e - s - 1 is a non-negative isize.
            (
                s,
                if e > s {
                    (e - s - 1) as usize / step.unsigned_abs() + 1
                } else {
                    0
                },
            )
        } else {
            let s = resolve(start, -1, dim - 1);
            let e = resolve(end, -1, dim - 1);
            (
                s,
                if s > e {
                    (s - e - 1) as usize / step.unsigned_abs() + 1
                } else {
                    0
                },
            )
        };
        if len == 0 {
            return self.slice_axis(axis, 0, 0, step);
        }
        self.slice_axis(axis, first as usize, len, step)
    }

    /// `len` elements of `axis`, the first at index `first`, then every `step`-th. The caller
    /// guarantees the selected indices lie inside the axis.
    fn slice_axis(&self, axis: usize, first: usize, len: usize, step: isize) -> Result<Layout> {
        let mut dims: SmallVec<[usize; INLINE_DIMS]> = SmallVec::from_slice(self.dims());
        dims[axis] = len;
        let shape = Shape::new(&dims)?;
        let mut strides = copy_strides(&self.strides);
        if len > 1 {
            // (len - 1) * step indices fit inside the axis, so this only fails for layouts whose
            // strides could never address real memory.
            strides[axis] = self.strides[axis].checked_mul(step).ok_or_else(|| {
                invalid(
                    "slice",
                    format!("stride {} times step {step} overflows", self.strides[axis]),
                )
            })?;
        }
        // A size-1 (or empty) axis keeps its stride: it is never multiplied by a non-zero index.
        let offset = if shape.numel() == 0 {
            self.offset
        } else {
            self.moved_offset(axis, first)?
        };
        Layout::strided(shape, strides, offset)
    }

    /// The offset of index `index` on `axis` (index < dim, checked by the caller).
    fn moved_offset(&self, axis: usize, index: usize) -> Result<usize> {
        let delta = (index as i128) * (self.strides[axis] as i128);
        usize::try_from(self.offset as i128 + delta)
            .map_err(|_| invalid("view", "offset outside the addressable range"))
    }

    /// Picks `index` on `axis` and drops that axis.
    pub fn select(&self, axis: isize, index: isize) -> Result<Layout> {
        let axis = normalize_axis("select", axis, self.rank())?;
        let dim = dim_as_isize("select", self.shape[axis])?;
        let i = if index < 0 { index + dim } else { index };
        if !(0..dim).contains(&i) {
            return Err(invalid(
                "select",
                format!("index {index} out of range for axis {axis} of size {dim}"),
            ));
        }
        let mut dims: SmallVec<[usize; INLINE_DIMS]> = SmallVec::from_slice(self.dims());
        let mut strides = copy_strides(&self.strides);
        dims.remove(axis);
        strides.remove(axis);
        let shape = Shape::new(&dims)?;
        let offset = if shape.numel() == 0 {
            self.offset
        } else {
            self.moved_offset(axis, i as usize)?
        };
        Layout::strided(shape, strides, offset)
    }

    /// Broadcasts to `dims` (numpy rules, aligned from the right) with stride 0 on repeated dims.
    pub fn expand(&self, dims: &[usize]) -> Result<Layout> {
        let rank = self.rank();
        if dims.len() < rank {
            return Err(invalid(
                "expand",
                format!("cannot expand {:?} to fewer dims {dims:?}", self.dims()),
            ));
        }
        let lead = dims.len() - rank;
        let mut strides: Strides = SmallVec::from_elem(0, dims.len());
        for (i, &target) in dims.iter().enumerate().skip(lead) {
            let (d, s) = (self.shape[i - lead], self.strides[i - lead]);
            strides[i] = if d == target {
                s
            } else if d == 1 {
                0
            } else {
                return Err(invalid(
                    "expand",
                    format!(
                        "cannot expand {:?} to {dims:?}: axis {} has size {d}",
                        self.dims(),
                        i - lead
                    ),
                ));
            };
        }
        Layout::strided(Shape::new(dims)?, strides, self.offset)
    }

    /// Removes `axis` if given (it must have size 1), or every size-1 axis.
    pub fn squeeze(&self, axis: Option<isize>) -> Result<Layout> {
        let keep: SmallVec<[usize; INLINE_DIMS]> = match axis {
            Some(a) => {
                let a = normalize_axis("squeeze", a, self.rank())?;
                if self.shape[a] != 1 {
                    return Err(invalid(
                        "squeeze",
                        format!("axis {a} has size {}, not 1", self.shape[a]),
                    ));
                }
                (0..self.rank()).filter(|&i| i != a).collect()
            }
            None => (0..self.rank()).filter(|&i| self.shape[i] != 1).collect(),
        };
        let dims: SmallVec<[usize; INLINE_DIMS]> = keep.iter().map(|&i| self.shape[i]).collect();
        let strides: Strides = keep.iter().map(|&i| self.strides[i]).collect();
        Layout::strided(Shape::new(&dims)?, strides, self.offset)
    }

    /// Inserts a size-1 axis at `axis` (in `-(rank+1)..=rank`).
    pub fn unsqueeze(&self, axis: isize) -> Result<Layout> {
        let axis = normalize_axis("unsqueeze", axis, self.rank() + 1)?;
        let mut dims: SmallVec<[usize; INLINE_DIMS]> = SmallVec::from_slice(self.dims());
        let mut strides = copy_strides(&self.strides);
        // The stride of a size-1 axis is irrelevant; pick the one that keeps contiguity.
        let stride = if axis < self.rank() {
            isize::try_from(self.shape[axis].max(1))
                .ok()
                .and_then(|d| self.strides[axis].checked_mul(d))
                .unwrap_or(1)
        } else {
            1
        };
        dims.insert(axis, 1);
        strides.insert(axis, stride);
        Layout::strided(Shape::new(&dims)?, strides, self.offset)
    }

    /// Merges axes `start..=end` into one (a view when the strides allow it).
    /// A scalar flattens to `[1]`, with axes checked as for rank 1 (`0` or `-1`).
    pub fn flatten(&self, start: isize, end: isize) -> Result<Layout> {
        if self.rank() == 0 {
            normalize_axis("flatten", start, 1)?;
            normalize_axis("flatten", end, 1)?;
            return self.view(&[1]);
        }
        let s = normalize_axis("flatten", start, self.rank())?;
        let e = normalize_axis("flatten", end, self.rank())?;
        if s > e {
            return Err(invalid(
                "flatten",
                format!("start axis {s} is after end axis {e}"),
            ));
        }
        let merged = self.dims()[s..=e]
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| {
                CoreError::overflow(format!("flattened dims {:?}", &self.dims()[s..=e]))
            })?;
        let mut dims: SmallVec<[usize; INLINE_DIMS]> = SmallVec::from_slice(&self.dims()[..s]);
        dims.push(merged);
        dims.extend_from_slice(&self.dims()[e + 1..]);
        self.view(&dims)
    }
}

/// Row-major strides (what `Shape::contiguous_strides` computes), written into an inline buffer
/// directly: this is on the path of every tensor creation.
#[inline]
fn row_major_strides(dims: &[usize]) -> Strides {
    if dims.len() > INLINE_DIMS {
        return contiguous_strides(dims);
    }
    row_major_inline(dims)
}

/// [`row_major_strides`] of at most [`INLINE_DIMS`] dims.
#[inline]
fn row_major_inline(dims: &[usize]) -> Strides {
    let mut buf = [0isize; INLINE_DIMS];
    let mut acc: isize = 1;
    for (stride, &dim) in buf[..dims.len()].iter_mut().zip(dims).rev() {
        *stride = acc;
        // Wrapping like `contiguous_strides`: only empty shapes can exceed isize, and their
        // strides are never used to address memory.
        acc = acc.wrapping_mul(dim.max(1) as isize);
    }
    Strides::from_buf_and_len(buf, dims.len())
}

/// A copy of `strides`, through a fixed-size inline buffer when they fit (no `memcpy` call).
#[inline]
fn copy_strides(strides: &[isize]) -> Strides {
    if strides.len() > INLINE_DIMS {
        return Strides::from_slice(strides);
    }
    Strides::from_buf_and_len(inline_copy(strides), strides.len())
}

/// A dim as `isize` for signed index arithmetic; dims beyond `isize::MAX` only exist in empty
/// shapes, and indexing them is refused.
fn dim_as_isize(op: &'static str, dim: usize) -> Result<isize> {
    isize::try_from(dim).map_err(|_| invalid(op, format!("dimension {dim} is too large to index")))
}

/// True when `strides` are the row-major strides of `shape` (size-1 axes may have any stride).
fn is_contiguous(shape: &Shape, strides: &[isize]) -> bool {
    if shape.numel() <= 1 {
        return true;
    }
    // The product of the dims is at most numel <= usize::MAX, so it fits in i128.
    let mut expected = 1i128;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 {
            if s as i128 != expected {
                return false;
            }
            expected *= d as i128;
        }
    }
    true
}

/// Strides that view `old` (with `old_strides`) as `new` without moving data, if any exist.
/// Groups old dims into chunks that are contiguous among themselves and matches new dims to
/// chunk products (the algorithm PyTorch's `computeStride` uses).
fn view_strides(old: &[usize], old_strides: &[isize], new: &[usize]) -> Option<Strides> {
    let numel: usize = old.iter().product();
    if numel == 0 {
        return Some(contiguous_strides(new));
    }
    // Products of dims are at most numel, and strides fit isize, so i128 cannot overflow here.
    let mut out: Strides = SmallVec::from_elem(0, new.len());
    let mut view_d = new.len() as isize - 1;
    let mut chunk_base_stride = *old_strides.last().unwrap_or(&1) as i128;
    let mut tensor_numel = 1i128;
    let mut view_numel = 1i128;
    for tensor_d in (0..old.len()).rev() {
        tensor_numel *= old[tensor_d] as i128;
        let chunk_ends = tensor_d == 0
            || (old[tensor_d - 1] != 1
                && old_strides[tensor_d - 1] as i128 != tensor_numel * chunk_base_stride);
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new[view_d as usize] == 1) {
                out[view_d as usize] = isize::try_from(view_numel * chunk_base_stride).ok()?;
                view_numel *= new[view_d as usize] as i128;
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = old_strides[tensor_d - 1] as i128;
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    if view_d != -1 {
        return None;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(dims: &[usize]) -> Layout {
        Layout::contiguous(Shape::new(dims).unwrap(), 0)
    }

    #[test]
    fn contiguity_is_cached_and_correct() {
        let a = l(&[2, 3, 4]);
        assert!(a.is_contiguous());
        let t = a.transpose(0, 2).unwrap();
        assert!(!t.is_contiguous());
        assert_eq!(t.strides(), &[1, 4, 12]);
        assert!(a.unsqueeze(1).unwrap().is_contiguous());
        assert!(a.narrow(0, 1, 1).unwrap().is_contiguous());
        assert!(!a.narrow(2, 1, 2).unwrap().is_contiguous());
    }

    #[test]
    fn views_of_non_contiguous_layouts() {
        let t = l(&[4, 6]).transpose(0, 1).unwrap(); // [6,4] strides [1,6]
        assert!(t.view(&[24]).is_err());
        let u = t.view(&[2, 3, 4]).unwrap();
        assert_eq!(u.strides(), &[3, 1, 6]);
        assert!(matches!(
            l(&[2, 3]).view(&[7]),
            Err(CoreError::NumelMismatch { .. })
        ));
    }

    #[test]
    fn slicing() {
        let a = l(&[10]);
        let s = a.slice(0, 1, 8, 3).unwrap();
        assert_eq!(
            (s.dims(), s.strides(), s.offset()),
            (&[3usize][..], &[3isize][..], 1)
        );
        let r = a.slice(0, -1, isize::MIN, -1).unwrap();
        assert_eq!(
            (r.dims(), r.strides(), r.offset()),
            (&[10usize][..], &[-1isize][..], 9)
        );
        assert_eq!(r.span().unwrap(), (0, 10));
        assert_eq!(a.slice(0, 5, 2, 1).unwrap().numel(), 0);
        assert!(a.slice(0, 0, 1, 0).is_err());
        assert!(a.narrow(0, 8, 3).is_err());
    }

    #[test]
    fn select_expand_squeeze() {
        let a = l(&[2, 3]);
        let s = a.select(0, -1).unwrap();
        assert_eq!((s.dims(), s.offset()), (&[3usize][..], 3));
        assert!(a.select(1, 3).is_err());
        let e = l(&[3, 1]).expand(&[2, 3, 4]).unwrap();
        assert_eq!(e.strides(), &[0, 1, 0]);
        assert!(l(&[3, 2]).expand(&[3, 4]).is_err());
        assert_eq!(l(&[1, 3, 1]).squeeze(None).unwrap().dims(), &[3]);
        assert!(l(&[2, 3]).squeeze(Some(0)).is_err());
        assert_eq!(l(&[2, 3]).unsqueeze(-1).unwrap().dims(), &[2, 3, 1]);
        assert_eq!(l(&[2, 3, 4]).flatten(1, -1).unwrap().dims(), &[2, 12]);
        assert!(l(&[2, 3]).permute(&[0, 0]).is_err());
    }
}
