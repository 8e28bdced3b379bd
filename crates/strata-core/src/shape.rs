//! Shapes and strides (C3, C4): up to five dims inline, spilling to the heap beyond; every size
//! computation is checked.

use std::fmt;
use std::ops::Deref;

use smallvec::SmallVec;

use crate::{CoreError, DType, Result};

/// The most dims a tensor may have. ONNX sets no bound, but a rank is often read from the length
/// of a shape-carrying input, and a model may declare that length as 2^62; every rank taken from
/// data is checked against this before anything is sized by it. (numpy's bound is the same.)
pub const MAX_RANK: usize = 64;

/// Dims stored inline before spilling to the heap.
pub const INLINE_DIMS: usize = 5;

/// Dimension sizes, row-major. Construction checks that the element count fits in `usize`, and
/// caches it.
#[derive(PartialEq, Eq, Hash, Default)]
pub struct Shape {
    dims: SmallVec<[usize; INLINE_DIMS]>,
    numel: usize,
}

impl Clone for Shape {
    /// Cloning is on the path of every tensor clone and view, so inline dims are copied as a
    /// fixed-size array instead of through `SmallVec`'s generic element-by-element clone.
    #[inline]
    fn clone(&self) -> Self {
        if self.dims.spilled() {
            return Shape {
                dims: SmallVec::from_slice(&self.dims),
                numel: self.numel,
            };
        }
        Shape {
            dims: SmallVec::from_buf_and_len(inline_copy(&self.dims), self.dims.len()),
            numel: self.numel,
        }
    }
}

/// Element strides, one per dim. Signed: a slice with a negative step walks memory backwards,
/// and `expand` uses stride 0.
pub type Strides = SmallVec<[isize; INLINE_DIMS]>;

impl Shape {
    /// A shape from unsigned dims; errors if the element count overflows.
    #[inline]
    pub fn new(dims: &[usize]) -> Result<Self> {
        let numel = numel_of(dims)?;
        Ok(Shape::with_numel(dims, numel))
    }

    /// A shape of `dims` whose element count `numel` was already computed (checked) from them.
    #[inline]
    pub(crate) fn with_numel(dims: &[usize], numel: usize) -> Self {
        if dims.len() > INLINE_DIMS {
            debug_assert_eq!(checked_numel(dims).ok(), Some(numel));
            return Shape {
                dims: SmallVec::from_slice(dims),
                numel,
            };
        }
        Shape::inline(dims, numel)
    }

    /// [`Shape::with_numel`] of at most [`INLINE_DIMS`] dims (more panic). On the path of every
    /// tensor creation, so the dims are a fixed-size copy.
    #[inline]
    pub(crate) fn inline(dims: &[usize], numel: usize) -> Self {
        debug_assert_eq!(checked_numel(dims).ok(), Some(numel));
        Shape {
            dims: SmallVec::from_buf_and_len(inline_copy(dims), dims.len()),
            numel,
        }
    }

    /// A shape from signed dims (as ONNX stores them); a negative dim is an error naming its axis.
    pub fn from_i64(dims: &[i64]) -> Result<Self> {
        let mut out = SmallVec::with_capacity(dims.len());
        for (axis, &value) in dims.iter().enumerate() {
            let dim = usize::try_from(value).map_err(|_| CoreError::NegativeDim { axis, value })?;
            out.push(dim);
        }
        let numel = checked_numel(&out)?;
        Ok(Shape { dims: out, numel })
    }

    /// The rank-0 shape of a scalar (one element).
    #[inline]
    pub fn scalar() -> Self {
        Shape {
            dims: SmallVec::new(),
            numel: 1,
        }
    }

    #[inline]
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    #[inline]
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Number of elements (cached; 1 for a scalar, 0 when any dim is 0).
    #[inline]
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// Bytes needed for this shape in `dtype`, checked.
    #[inline]
    pub fn size_in_bytes(&self, dtype: DType) -> Result<usize> {
        dtype.bytes_for(self.numel)
    }

    /// Row-major (C-order) strides in elements.
    pub fn contiguous_strides(&self) -> Strides {
        contiguous_strides(&self.dims)
    }

    /// True when the dims live inline (no heap allocation).
    pub fn is_inline(&self) -> bool {
        !self.dims.spilled()
    }

    /// Resolves a possibly negative axis against this rank.
    pub fn axis(&self, op: &'static str, axis: isize) -> Result<usize> {
        normalize_axis(op, axis, self.rank())
    }
}

impl Deref for Shape {
    type Target = [usize];

    #[inline]
    fn deref(&self) -> &[usize] {
        &self.dims
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.dims.as_slice())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.dims.as_slice())
    }
}

/// `src` (at most `N` long) in a fixed array, the rest zero. Element by element under a fixed
/// trip count, so a copy of a few dims is a few moves rather than a `memcpy` call (which a
/// `copy_from_slice` of a length unknown at compile time becomes).
#[inline]
pub(crate) fn inline_copy<T: Copy + Default, const N: usize>(src: &[T]) -> [T; N] {
    debug_assert!(src.len() <= N);
    let mut buf = [T::default(); N];
    for (i, slot) in buf.iter_mut().enumerate() {
        if let Some(&v) = src.get(i) {
            *slot = v;
        }
    }
    buf
}

/// [`checked_numel`] for the hot path: one pass of multiplies that only notes an overflow, and
/// the exact (zero-aware) check only when one happened.
#[inline]
pub(crate) fn numel_of(dims: &[usize]) -> Result<usize> {
    let mut numel = 1usize;
    let mut overflowed = false;
    for &d in dims {
        let (product, o) = numel.overflowing_mul(d);
        numel = product;
        overflowed |= o;
    }
    if overflowed {
        // An error, unless a later zero dim makes the tensor empty.
        return checked_numel_cold(dims);
    }
    Ok(numel)
}

#[cold]
fn checked_numel_cold(dims: &[usize]) -> Result<usize> {
    checked_numel(dims)
}

/// Product of `dims`, checked for overflow.
pub fn checked_numel(dims: &[usize]) -> Result<usize> {
    // A zero dim makes the tensor empty however large the others are.
    if dims.contains(&0) {
        return Ok(0);
    }
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| CoreError::overflow(format!("element count of shape {dims:?}")))
}

/// Row-major strides for `dims`. Only called on shapes whose numel is known to fit.
pub fn contiguous_strides(dims: &[usize]) -> Strides {
    let mut strides: Strides = SmallVec::from_elem(0, dims.len());
    let mut acc: isize = 1;
    for (stride, &dim) in strides.iter_mut().zip(dims).rev() {
        *stride = acc;
        acc = acc.wrapping_mul(dim.max(1) as isize);
    }
    strides
}

/// Resolves `axis` in `-rank..rank` to `0..rank`.
pub fn normalize_axis(op: &'static str, axis: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    let resolved = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&resolved) {
        Ok(resolved as usize)
    } else {
        Err(CoreError::AxisOutOfRange { op, axis, rank })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_up_to_five_dims() {
        let s = Shape::new(&[2, 3, 4, 5, 6]).unwrap();
        assert!(s.is_inline());
        assert_eq!(s.numel(), 720);
        let big = Shape::new(&[1, 2, 3, 4, 5, 6]).unwrap();
        assert!(!big.is_inline());
        assert_eq!(big.numel(), 720);
        assert_eq!(Shape::scalar().numel(), 1);
    }

    #[test]
    fn strides_row_major() {
        let s = Shape::new(&[2, 3, 4]).unwrap();
        assert_eq!(s.contiguous_strides().as_slice(), &[12, 4, 1]);
        assert_eq!(Shape::new(&[]).unwrap().contiguous_strides().len(), 0);
    }

    #[test]
    fn inline_and_spilled_shapes_clone_equal() {
        for dims in [&[][..], &[2, 3], &[1, 2, 3, 4, 5], &[1, 2, 3, 4, 5, 6, 7]] {
            let s = Shape::new(dims).unwrap();
            let c = s.clone();
            assert_eq!((c.dims(), c.numel()), (dims, dims.iter().product()));
            assert_eq!(c, s);
            assert_eq!(c.is_inline(), dims.len() <= INLINE_DIMS);
        }
    }

    #[test]
    fn checked_sizes() {
        assert!(matches!(
            Shape::from_i64(&[2, -1]),
            Err(CoreError::NegativeDim { axis: 1, value: -1 })
        ));
        assert_eq!(Shape::new(&[0, usize::MAX, 7]).unwrap().numel(), 0);
        // A product that overflows before a zero dim still makes an empty tensor.
        assert_eq!(Shape::new(&[usize::MAX, 2, 0]).unwrap().numel(), 0);
        assert!(matches!(
            Shape::new(&[usize::MAX, 2, 1]),
            Err(CoreError::SizeOverflow { .. })
        ));
        assert_eq!(
            Shape::new(&[0, 3])
                .unwrap()
                .size_in_bytes(DType::F32)
                .unwrap(),
            0
        );
        assert!(matches!(
            Shape::new(&[usize::MAX, 2]),
            Err(CoreError::SizeOverflow { .. })
        ));
        let s = Shape::new(&[usize::MAX / 2]).unwrap();
        assert!(matches!(
            s.size_in_bytes(DType::F32),
            Err(CoreError::SizeOverflow { .. })
        ));
    }

    #[test]
    fn axes() {
        assert_eq!(normalize_axis("t", -1, 3).unwrap(), 2);
        assert!(normalize_axis("t", 3, 3).is_err());
        assert!(normalize_axis("t", -4, 3).is_err());
    }
}
