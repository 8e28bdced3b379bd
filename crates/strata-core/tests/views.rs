//! Property tests for zero-copy views (T3), strided copies and `contiguous()` (T7).
//!
//! Every view is checked against a naive reference that materializes each step into a fresh
//! dense row-major `Vec` plus dims, written here independently of the library's stride logic.

use proptest::prelude::*;
use strata_core::{CoreError, DType, Layout, Shape, Tensor};

// ---------------------------------------------------------------------------------------------
// The naive reference: a dense row-major array.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
struct Dense {
    dims: Vec<usize>,
    data: Vec<i32>,
}

/// Every index of `dims` in row-major order.
fn indices(dims: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let mut idx = vec![0usize; dims.len()];
    for _ in 0..n {
        out.push(idx.clone());
        for axis in (0..dims.len()).rev() {
            idx[axis] += 1;
            if idx[axis] < dims[axis] {
                break;
            }
            idx[axis] = 0;
        }
    }
    out
}

impl Dense {
    fn iota(dims: &[usize]) -> Dense {
        let n: usize = dims.iter().product();
        Dense {
            dims: dims.to_vec(),
            data: (0..n as i32).collect(),
        }
    }

    fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    fn get(&self, idx: &[usize]) -> i32 {
        let mut flat = 0;
        for (&i, &d) in idx.iter().zip(&self.dims) {
            assert!(i < d, "reference index {idx:?} out of {:?}", self.dims);
            flat = flat * d + i;
        }
        self.data[flat]
    }

    /// A new array of `dims` whose element at `out` is this array's element at `source(out)`.
    fn gather(&self, dims: Vec<usize>, source: impl Fn(&[usize]) -> Vec<usize>) -> Dense {
        let data = indices(&dims)
            .iter()
            .map(|out| self.get(&source(out)))
            .collect();
        Dense { dims, data }
    }

    fn with_dims(&self, dims: Vec<usize>) -> Dense {
        assert_eq!(dims.iter().product::<usize>(), self.numel());
        Dense {
            dims,
            data: self.data.clone(),
        }
    }
}

/// Python's slice semantics (`PySlice_AdjustIndices`), in i128 so nothing can overflow:
/// (first index, count).
fn python_slice(len: usize, start: isize, stop: isize, step: isize) -> (i128, usize) {
    let (len, step) = (len as i128, step as i128);
    let adjust = |i: isize| {
        let mut i = i as i128;
        if i < 0 {
            i += len;
            if i < 0 {
                i = if step < 0 { -1 } else { 0 };
            }
        } else if i >= len {
            i = if step < 0 { len - 1 } else { len };
        }
        i
    };
    let (start, stop) = (adjust(start), adjust(stop));
    let count = if step < 0 {
        if stop < start {
            (start - stop - 1) / (-step) + 1
        } else {
            0
        }
    } else if start < stop {
        (stop - start - 1) / step + 1
    } else {
        0
    };
    (start, count as usize)
}

// ---------------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------------

/// A tiny deterministic generator for derived choices (shapes to view as, permutations).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng((seed ^ 0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random dims with `numel` elements (any numel, including 0 and 1).
fn random_dims_with_numel(numel: usize, rng: &mut Rng) -> Vec<usize> {
    if numel == 0 {
        let rank = 1 + rng.below(3);
        let mut dims: Vec<usize> = (0..rank).map(|_| rng.below(4)).collect();
        let zero = rng.below(rank);
        dims[zero] = 0;
        return dims;
    }
    let mut primes = Vec::new();
    let mut n = numel;
    let mut p = 2;
    while n > 1 {
        while n.is_multiple_of(p) {
            primes.push(p);
            n /= p;
        }
        p += 1;
    }
    let buckets = 1 + rng.below(4);
    let mut dims = vec![1usize; buckets];
    for p in primes {
        let b = rng.below(buckets);
        dims[b] *= p;
    }
    // Sprinkle size-1 axes, or drop to a scalar.
    for _ in 0..rng.below(3) {
        let at = rng.below(dims.len() + 1);
        dims.insert(at, 1);
    }
    if numel == 1 && rng.below(3) == 0 {
        dims.clear();
    }
    dims
}

fn random_permutation(rank: usize, rng: &mut Rng) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        perm.swap(i, rng.below(i + 1));
    }
    perm
}

/// An axis from a raw number: alternately a plain index and its negative form.
fn pick_axis(raw: usize, rank: usize) -> (isize, usize) {
    let axis = (raw / 2) % rank;
    if raw.is_multiple_of(2) {
        (axis as isize, axis)
    } else {
        (axis as isize - rank as isize, axis)
    }
}

/// Element positions (in storage elements) of every logical element, row-major, computed from
/// the tensor's strides and offset directly.
fn positions(t: &Tensor) -> Vec<i128> {
    indices(t.dims())
        .iter()
        .map(|idx| {
            let mut p = t.storage_offset() as i128;
            for (&i, &s) in idx.iter().zip(t.strides()) {
                p += i as i128 * s as i128;
            }
            p
        })
        .collect()
}

/// Brute force: can the elements of `t` be addressed as `dims` with some strides, without moving?
fn viewable(t: &Tensor, dims: &[usize]) -> bool {
    let pos = positions(t);
    if pos.len() <= 1 {
        return true;
    }
    // The stride of each new axis is fixed by the position of its unit step.
    let flat = |idx: &[usize]| {
        idx.iter()
            .zip(dims)
            .fold(0usize, |acc, (&i, &d)| acc * d + i)
    };
    let strides: Vec<i128> = (0..dims.len())
        .map(|axis| {
            if dims[axis] <= 1 {
                return 0;
            }
            let mut unit = vec![0usize; dims.len()];
            unit[axis] = 1;
            pos[flat(&unit)] - pos[0]
        })
        .collect();
    indices(dims).iter().enumerate().all(|(k, idx)| {
        let p = pos[0]
            + idx
                .iter()
                .zip(&strides)
                .map(|(&i, &s)| i as i128 * s)
                .sum::<i128>();
        p == pos[k]
    })
}

/// Brute force contiguity: element k sits at position offset + k.
fn dense_in_order(t: &Tensor) -> bool {
    let pos = positions(t);
    pos.iter()
        .enumerate()
        .all(|(k, &p)| p == pos[0] + k as i128)
}

/// A base tensor of `dims` holding 0, 1, 2, ... (i32), optionally bound at an element offset
/// inside a larger buffer filled with -7.
fn base_tensor(dims: &[usize], offset: usize) -> Tensor {
    let numel: usize = dims.iter().product();
    let values: Vec<i32> = (0..numel as i32).collect();
    if offset == 0 {
        return Tensor::from_slice(&values, dims).unwrap();
    }
    let buffer =
        Tensor::from_slice(&vec![-7i32; numel + offset + 3], &[numel + offset + 3]).unwrap();
    let t = Tensor::bind(buffer.storage().unwrap(), offset * 4, dims, DType::I32).unwrap();
    if numel > 0 {
        t.write::<i32>()
            .unwrap()
            .as_mut_slice()
            .unwrap()
            .copy_from_slice(&values);
    }
    t
}

// ---------------------------------------------------------------------------------------------
// Random view chains.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    View(u64),
    Reshape(u64),
    Permute(u64),
    Transpose(usize, usize),
    Narrow(usize, usize, usize),
    Slice(usize, isize, isize, isize),
    Select(usize, isize),
    Expand(u64),
    Squeeze(Option<usize>),
    Unsqueeze(isize),
    Flatten(usize, usize),
}

fn index_value() -> impl Strategy<Value = isize> {
    prop_oneof![4 => -12isize..12, 1 => any::<isize>(), 1 => Just(isize::MIN), 1 => Just(isize::MAX)]
}

fn step_value() -> impl Strategy<Value = isize> {
    prop_oneof![
        4 => -4isize..=-1,
        4 => 1isize..=4,
        1 => any::<isize>().prop_filter("step must be non-zero", |s| *s != 0),
        1 => Just(isize::MIN),
        1 => Just(isize::MAX),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<u64>().prop_map(Op::View),
        any::<u64>().prop_map(Op::Reshape),
        any::<u64>().prop_map(Op::Permute),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Transpose(a, b)),
        (any::<usize>(), any::<usize>(), any::<usize>()).prop_map(|(a, s, l)| Op::Narrow(a, s, l)),
        (any::<usize>(), index_value(), index_value(), step_value())
            .prop_map(|(a, s, e, st)| Op::Slice(a, s, e, st)),
        (any::<usize>(), any::<isize>()).prop_map(|(a, i)| Op::Select(a, i)),
        any::<u64>().prop_map(Op::Expand),
        proptest::option::of(any::<usize>()).prop_map(Op::Squeeze),
        any::<isize>().prop_map(Op::Unsqueeze),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Flatten(a, b)),
    ]
}

fn dims_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![1 => Just(0usize), 2 => Just(1usize), 8 => 2usize..5],
        0..=4,
    )
}

/// What applying an op produced.
struct Step {
    tensor: Tensor,
    reference: Dense,
    /// Whether the result must share storage with its input (false: a copy is allowed).
    must_share: Option<bool>,
}

const MAX_NUMEL: usize = 2048;

/// Applies `op` to the tensor and to the reference; `None` when the op does not apply to this
/// shape (e.g. an axis op on a scalar).
fn apply(op: &Op, t: &Tensor, r: &Dense) -> Result<Option<Step>, TestCaseError> {
    let rank = r.dims.len();
    let step = |tensor: Tensor, reference: Dense, must_share: Option<bool>| {
        Ok(Some(Step {
            tensor,
            reference,
            must_share,
        }))
    };
    match *op {
        Op::View(seed) | Op::Reshape(seed) => {
            let dims = random_dims_with_numel(r.numel(), &mut Rng::new(seed));
            let expect_view = viewable(t, &dims);
            if matches!(op, Op::View(_)) {
                let result = t.view(&dims);
                prop_assert_eq!(
                    result.is_ok(),
                    expect_view,
                    "view {:?} -> {:?} strides {:?}: {:?}",
                    t.dims(),
                    dims,
                    t.strides(),
                    result.as_ref().err()
                );
                if t.is_contiguous() {
                    prop_assert!(result.is_ok(), "a contiguous tensor can always be viewed");
                }
                match result {
                    Ok(v) => step(v, r.with_dims(dims), Some(true)),
                    Err(CoreError::InvalidView { .. }) => Ok(None),
                    Err(e) => Err(TestCaseError::fail(format!("unexpected view error {e}"))),
                }
            } else {
                let v = t
                    .reshape(&dims)
                    .map_err(|e| TestCaseError::fail(format!("reshape: {e}")))?;
                step(v, r.with_dims(dims), Some(expect_view))
            }
        }
        Op::Permute(seed) => {
            let perm = random_permutation(rank, &mut Rng::new(seed));
            let dims: Vec<usize> = perm.iter().map(|&p| r.dims[p]).collect();
            let reference = r.gather(dims, |out| {
                let mut src = vec![0; rank];
                for (i, &p) in perm.iter().enumerate() {
                    src[p] = out[i];
                }
                src
            });
            step(t.permute(&perm).unwrap(), reference, Some(true))
        }
        Op::Transpose(a, b) => {
            if rank == 0 {
                return Ok(None);
            }
            let ((sa, ua), (sb, ub)) = (pick_axis(a, rank), pick_axis(b, rank));
            let mut dims = r.dims.clone();
            dims.swap(ua, ub);
            let reference = r.gather(dims, |out| {
                let mut src = out.to_vec();
                src.swap(ua, ub);
                src
            });
            step(t.transpose(sa, sb).unwrap(), reference, Some(true))
        }
        Op::Narrow(a, s, l) => {
            if rank == 0 {
                return Ok(None);
            }
            let (sa, axis) = pick_axis(a, rank);
            let dim = r.dims[axis];
            let start = s % (dim + 1);
            let len = l % (dim - start + 1);
            let mut dims = r.dims.clone();
            dims[axis] = len;
            let reference = r.gather(dims, |out| {
                let mut src = out.to_vec();
                src[axis] += start;
                src
            });
            step(t.narrow(sa, start, len).unwrap(), reference, Some(true))
        }
        Op::Slice(a, start, end, st) => {
            if rank == 0 {
                return Ok(None);
            }
            let (sa, axis) = pick_axis(a, rank);
            let (first, count) = python_slice(r.dims[axis], start, end, st);
            let mut dims = r.dims.clone();
            dims[axis] = count;
            let reference = r.gather(dims, |out| {
                let mut src = out.to_vec();
                src[axis] = (first + out[axis] as i128 * st as i128) as usize;
                src
            });
            let v = t.slice(sa, start, end, st).map_err(|e| {
                TestCaseError::fail(format!(
                    "slice({sa}, {start}, {end}, {st}) of {:?}: {e}",
                    t.dims()
                ))
            })?;
            step(v, reference, Some(true))
        }
        Op::Select(a, i) => {
            if rank == 0 {
                return Ok(None);
            }
            let (sa, axis) = pick_axis(a, rank);
            let dim = r.dims[axis];
            if dim == 0 {
                return Ok(None);
            }
            let index = (i.rem_euclid(2 * dim as isize)) - dim as isize; // in -dim..dim
            let resolved = if index < 0 {
                (index + dim as isize) as usize
            } else {
                index as usize
            };
            let mut dims = r.dims.clone();
            dims.remove(axis);
            let reference = r.gather(dims, |out| {
                let mut src = out.to_vec();
                src.insert(axis, resolved);
                src
            });
            step(t.select(sa, index).unwrap(), reference, Some(true))
        }
        Op::Expand(seed) => {
            let mut rng = Rng::new(seed);
            let lead = rng.below(3);
            let mut dims: Vec<usize> = (0..lead).map(|_| rng.below(4)).collect();
            for &d in &r.dims {
                dims.push(if d == 1 { rng.below(4) } else { d });
            }
            if dims.iter().product::<usize>() > MAX_NUMEL {
                return Ok(None);
            }
            let reference = r.gather(dims.clone(), |out| {
                out[lead..]
                    .iter()
                    .zip(&r.dims)
                    .map(|(&o, &d)| if d == 1 { 0 } else { o })
                    .collect()
            });
            step(t.expand(&dims).unwrap(), reference, Some(true))
        }
        Op::Squeeze(axis) => {
            let ones: Vec<usize> = (0..rank).filter(|&i| r.dims[i] == 1).collect();
            match axis {
                Some(raw) if !ones.is_empty() => {
                    let axis = ones[raw % ones.len()];
                    let signed = if raw % 2 == 0 {
                        axis as isize
                    } else {
                        axis as isize - rank as isize
                    };
                    let mut dims = r.dims.clone();
                    dims.remove(axis);
                    step(
                        t.squeeze(Some(signed)).unwrap(),
                        r.with_dims(dims),
                        Some(true),
                    )
                }
                _ => {
                    let dims: Vec<usize> = r.dims.iter().copied().filter(|&d| d != 1).collect();
                    step(t.squeeze(None).unwrap(), r.with_dims(dims), Some(true))
                }
            }
        }
        Op::Unsqueeze(raw) => {
            let n = rank as isize + 1;
            let axis = raw.rem_euclid(2 * n) - n; // in -(rank+1)..=rank
            let at = if axis < 0 {
                (axis + n) as usize
            } else {
                axis as usize
            };
            let mut dims = r.dims.clone();
            dims.insert(at, 1);
            step(t.unsqueeze(axis).unwrap(), r.with_dims(dims), Some(true))
        }
        Op::Flatten(a, b) => {
            if rank == 0 {
                let v = t.flatten(0, -1).unwrap();
                return step(v, r.with_dims(vec![1]), Some(true));
            }
            let (ss, s) = pick_axis(a, rank);
            let e = s + b % (rank - s);
            let se = if b % 2 == 0 {
                e as isize
            } else {
                e as isize - rank as isize
            };
            let mut dims = r.dims[..s].to_vec();
            dims.push(r.dims[s..=e].iter().product());
            dims.extend_from_slice(&r.dims[e + 1..]);
            let expect_view = viewable(t, &dims);
            let v = t
                .flatten(ss, se)
                .map_err(|err| TestCaseError::fail(format!("flatten: {err}")))?;
            step(v, r.with_dims(dims), Some(expect_view))
        }
    }
}

/// Everything that must hold of a tensor and its reference.
fn check(t: &Tensor, r: &Dense, base: &Tensor) -> Result<(), TestCaseError> {
    prop_assert_eq!(t.dims(), &r.dims[..]);
    prop_assert_eq!(t.numel(), r.numel());
    prop_assert_eq!(t.rank(), r.dims.len());
    prop_assert_eq!(t.to_vec::<i32>().unwrap(), r.data.clone());
    prop_assert_eq!(
        t.is_contiguous(),
        dense_in_order(t),
        "cached contiguity of {:?} strides {:?}",
        t.dims(),
        t.strides()
    );
    let dense = t.contiguous().unwrap();
    prop_assert!(dense.is_contiguous());
    prop_assert_eq!(dense.dims(), t.dims());
    prop_assert_eq!(dense.to_vec::<i32>().unwrap(), r.data.clone());
    prop_assert_eq!(
        dense.shares_storage(t),
        t.is_contiguous(),
        "contiguous() copies exactly when needed"
    );
    if t.shares_storage(base) {
        prop_assert_eq!(
            t.version(),
            base.version(),
            "views share the version counter"
        );
    }
    // Element-by-element access agrees too.
    if r.numel() > 0 {
        let guard = t.read::<i32>().unwrap();
        let last: Vec<usize> = r.dims.iter().map(|d| d - 1).collect();
        prop_assert_eq!(guard.get(&last).unwrap(), r.get(&last));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, ..ProptestConfig::default() })]

    #[test]
    fn view_chains_match_the_dense_reference(
        dims in dims_strategy(),
        offset in prop_oneof![3 => Just(0usize), 1 => 1usize..9],
        ops in prop::collection::vec(op(), 1..8),
    ) {
        let base = base_tensor(&dims, offset);
        let mut t = base.clone();
        let mut r = Dense::iota(&dims);
        check(&t, &r, &base)?;
        for op in &ops {
            let Some(Step { tensor, reference, must_share }) = apply(op, &t, &r)? else { continue };
            if let Some(share) = must_share {
                prop_assert_eq!(tensor.shares_storage(&t), share, "{:?} on {:?} strides {:?}", op, t.dims(), t.strides());
            }
            check(&tensor, &reference, &base)?;
            t = tensor;
            r = reference;
        }
    }

    #[test]
    fn slices_with_any_bounds_and_steps(
        len in 0usize..12,
        start in index_value(),
        end in index_value(),
        step in step_value(),
    ) {
        let t = base_tensor(&[len], 0);
        let (first, count) = python_slice(len, start, end, step);
        let s = t.slice(0, start, end, step).unwrap();
        let expected: Vec<i32> = (0..count).map(|k| (first + k as i128 * step as i128) as i32).collect();
        prop_assert_eq!(s.to_vec::<i32>().unwrap(), expected);
        prop_assert!(s.shares_storage(&t));
    }
}

// ---------------------------------------------------------------------------------------------
// Strided copies between random layouts.
// ---------------------------------------------------------------------------------------------

/// How a logical shape is laid out inside a larger base tensor.
#[derive(Clone, Debug)]
struct Placement {
    perm_seed: u64,
    /// Per logical axis: (padding before, padding after, step, reversed).
    axes: Vec<(usize, usize, usize, bool)>,
}

fn placement(rank: usize) -> impl Strategy<Value = Placement> {
    (
        any::<u64>(),
        prop::collection::vec((0usize..3, 0usize..3, 1usize..4, any::<bool>()), rank),
    )
        .prop_map(|(perm_seed, axes)| Placement { perm_seed, axes })
}

/// A base tensor filled with -1 and a view of it with logical dims `dims`, laid out per `p`.
fn placed_view(dims: &[usize], p: &Placement) -> (Tensor, Tensor) {
    let rank = dims.len();
    let extents: Vec<usize> = dims
        .iter()
        .zip(&p.axes)
        .map(|(&d, &(lo, hi, step, _))| lo + hi + if d == 0 { 0 } else { (d - 1) * step + 1 })
        .collect();
    let perm = random_permutation(rank, &mut Rng::new(p.perm_seed));
    let base_dims: Vec<usize> = perm.iter().map(|&q| extents[q]).collect();
    let numel: usize = base_dims.iter().product();
    let base = Tensor::from_slice(&vec![-1i32; numel], &base_dims).unwrap();
    // Undo the permutation: axis q of the view is axis perm^-1(q) of the base.
    let mut inverse = vec![0; rank];
    for (i, &q) in perm.iter().enumerate() {
        inverse[q] = i;
    }
    let mut view = base.permute(&inverse).unwrap();
    assert_eq!(view.dims(), &extents[..]);
    for (axis, (&d, &(lo, _, step, reversed))) in dims.iter().zip(&p.axes).enumerate() {
        let span = if d == 0 { 0 } else { (d - 1) * step + 1 };
        view = view.narrow(axis as isize, lo, span).unwrap();
        view = if reversed {
            view.slice(axis as isize, -1, isize::MIN, -(step as isize))
                .unwrap()
        } else {
            view.slice(axis as isize, 0, span as isize, step as isize)
                .unwrap()
        };
    }
    assert_eq!(view.dims(), dims);
    (base, view)
}

fn dims_and_two_placements() -> impl Strategy<Value = (Vec<usize>, Placement, Placement)> {
    prop::collection::vec(prop_oneof![1 => Just(0usize), 6 => 1usize..5], 0..=4).prop_flat_map(
        |dims| {
            let rank = dims.len();
            (Just(dims), placement(rank), placement(rank))
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn strided_copy_round_trips((dims, ps, pd) in dims_and_two_placements()) {
        let (src_base, src) = placed_view(&dims, &ps);
        let numel: usize = dims.iter().product();
        let values = Dense::iota(&dims);
        // Write distinct values through the (strided) source view.
        {
            let mut guard = src.write::<i32>().unwrap();
            for (idx, &v) in indices(&dims).iter().zip(&values.data) {
                guard.set(idx, v).unwrap();
            }
        }
        prop_assert_eq!(src.to_vec::<i32>().unwrap(), values.data.clone());
        let untouched = src_base.to_vec::<i32>().unwrap().iter().filter(|&&v| v == -1).count();
        prop_assert_eq!(untouched, src_base.numel() - numel, "writes stay inside the view");

        let (dst_base, dst) = placed_view(&dims, &pd);
        let version = dst.version();
        dst.copy_from(&src).unwrap();
        prop_assert!(dst.version() > version, "copy_from bumps the destination's version");
        prop_assert_eq!(dst.to_vec::<i32>().unwrap(), values.data.clone());
        let untouched = dst_base.to_vec::<i32>().unwrap().iter().filter(|&&v| v == -1).count();
        prop_assert_eq!(untouched, dst_base.numel() - numel, "the copy writes only the view");

        // And back, into a fresh dense tensor.
        let back = Tensor::zeros(&dims, DType::I32).unwrap();
        back.copy_from(&dst).unwrap();
        prop_assert_eq!(back.to_vec::<i32>().unwrap(), values.data);
        prop_assert!(!back.shares_storage(&dst));
    }
}

// ---------------------------------------------------------------------------------------------
// Invalid arguments are errors, never panics.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Bad {
    TransposeAxis(isize, bool),
    NarrowRange(usize, usize, usize),
    NarrowAxis(isize),
    SliceZeroStep(usize, isize, isize),
    SliceAxis(isize),
    SelectIndex(usize, isize),
    PermuteLength(u64),
    PermuteDuplicate(u64),
    PermuteOutOfRange(u64, usize),
    ExpandFewerDims,
    ExpandMismatch(usize, usize),
    SqueezeNonOne(usize),
    UnsqueezeAxis(isize),
    FlattenReversed(usize, usize),
    ViewNumel(u64, usize),
    ViewOverflow,
    AsStridedOutside(usize),
}

fn bad_op() -> impl Strategy<Value = Bad> {
    prop_oneof![
        (any::<isize>(), any::<bool>()).prop_map(|(a, first)| Bad::TransposeAxis(a, first)),
        (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(a, s, l)| Bad::NarrowRange(a, s, l)),
        any::<isize>().prop_map(Bad::NarrowAxis),
        (any::<usize>(), any::<isize>(), any::<isize>())
            .prop_map(|(a, s, e)| Bad::SliceZeroStep(a, s, e)),
        any::<isize>().prop_map(Bad::SliceAxis),
        (any::<usize>(), any::<isize>()).prop_map(|(a, i)| Bad::SelectIndex(a, i)),
        any::<u64>().prop_map(Bad::PermuteLength),
        any::<u64>().prop_map(Bad::PermuteDuplicate),
        (any::<u64>(), any::<usize>()).prop_map(|(s, v)| Bad::PermuteOutOfRange(s, v)),
        Just(Bad::ExpandFewerDims),
        (any::<usize>(), 2usize..10).prop_map(|(a, d)| Bad::ExpandMismatch(a, d)),
        any::<usize>().prop_map(Bad::SqueezeNonOne),
        any::<isize>().prop_map(Bad::UnsqueezeAxis),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Bad::FlattenReversed(a, b)),
        (any::<u64>(), 1usize..5).prop_map(|(s, k)| Bad::ViewNumel(s, k)),
        Just(Bad::ViewOverflow),
        (1usize..100).prop_map(Bad::AsStridedOutside),
    ]
}

/// An axis outside `-rank..rank`, derived from a raw value.
fn invalid_axis(raw: isize, rank: usize) -> isize {
    let r = rank as isize;
    let k = raw.rem_euclid(1000);
    if raw % 2 == 0 {
        r.saturating_add(k)
    } else {
        (-r - 1).saturating_sub(k)
    }
}

/// Applies the invalid op; `None` when this shape cannot make it invalid.
fn apply_bad(bad: &Bad, t: &Tensor) -> Option<Result<Tensor, CoreError>> {
    let rank = t.rank();
    let dims = t.dims().to_vec();
    Some(match *bad {
        Bad::TransposeAxis(raw, first) => {
            let bad_axis = invalid_axis(raw, rank);
            if first {
                t.transpose(bad_axis, 0)
            } else {
                t.transpose(0, bad_axis)
            }
        }
        Bad::NarrowRange(a, s, l) => {
            if rank == 0 {
                return None;
            }
            let (sa, axis) = pick_axis(a, rank);
            let dim = dims[axis];
            // start + len > dim, including sums that overflow usize.
            let start = s % (dim + 2);
            let len = if l % 3 == 0 {
                usize::MAX
            } else {
                (dim + 1).saturating_sub(start) + l % 5
            };
            t.narrow(sa, start, len)
        }
        Bad::NarrowAxis(raw) => t.narrow(invalid_axis(raw, rank), 0, 0),
        Bad::SliceZeroStep(a, s, e) => {
            if rank == 0 {
                return None;
            }
            t.slice(pick_axis(a, rank).0, s, e, 0)
        }
        Bad::SliceAxis(raw) => t.slice(invalid_axis(raw, rank), 0, 1, 1),
        Bad::SelectIndex(a, i) => {
            if rank == 0 {
                return None;
            }
            let (sa, axis) = pick_axis(a, rank);
            let dim = dims[axis] as isize;
            let index = if i >= 0 {
                dim.saturating_add(i % 1000)
            } else {
                (-dim - 1).saturating_add(i % 1000)
            };
            t.select(sa, index)
        }
        Bad::PermuteLength(seed) => {
            let mut rng = Rng::new(seed);
            let mut perm = random_permutation(rank, &mut rng);
            if rank > 0 && rng.below(2) == 0 {
                perm.pop();
            } else {
                perm.push(rank);
            }
            t.permute(&perm)
        }
        Bad::PermuteDuplicate(seed) => {
            if rank < 2 {
                return None;
            }
            let mut rng = Rng::new(seed);
            let mut perm = random_permutation(rank, &mut rng);
            let (i, j) = (rng.below(rank), rng.below(rank));
            if i == j {
                return None;
            }
            perm[i] = perm[j];
            t.permute(&perm)
        }
        Bad::PermuteOutOfRange(seed, v) => {
            if rank == 0 {
                return None;
            }
            let mut rng = Rng::new(seed);
            let mut perm = random_permutation(rank, &mut rng);
            perm[rng.below(rank)] = rank.saturating_add(v % 100);
            t.permute(&perm)
        }
        Bad::ExpandFewerDims => {
            if rank == 0 {
                return None;
            }
            t.expand(&dims[1..])
        }
        Bad::ExpandMismatch(a, d) => {
            let candidates: Vec<usize> = (0..rank).filter(|&i| dims[i] != 1).collect();
            if candidates.is_empty() {
                return None;
            }
            let axis = candidates[a % candidates.len()];
            let mut target = dims.clone();
            target[axis] = dims[axis] + d;
            t.expand(&target)
        }
        Bad::SqueezeNonOne(a) => {
            let candidates: Vec<usize> = (0..rank).filter(|&i| dims[i] != 1).collect();
            if candidates.is_empty() {
                return None;
            }
            t.squeeze(Some(candidates[a % candidates.len()] as isize))
        }
        Bad::UnsqueezeAxis(raw) => t.unsqueeze(invalid_axis(raw, rank + 1)),
        Bad::FlattenReversed(a, b) => {
            if rank < 2 {
                return None;
            }
            let s = 1 + a % (rank - 1);
            let e = b % s;
            t.flatten(s as isize, e as isize)
        }
        Bad::ViewNumel(seed, k) => {
            let numel = t.numel() + k;
            t.view(&random_dims_with_numel(numel, &mut Rng::new(seed)))
        }
        Bad::ViewOverflow => t.view(&[usize::MAX, 2, 3]),
        Bad::AsStridedOutside(extra) => {
            // One element past the end of the storage.
            let Ok(storage) = t.storage() else {
                return Some(t.as_strided(Layout::contiguous(Shape::new(&[1]).unwrap(), 0)));
            };
            let elems = storage.len() / 4;
            let layout = Layout::contiguous(Shape::new(&[1]).unwrap(), elems + extra - 1);
            t.as_strided(layout)
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn invalid_arguments_are_errors(dims in dims_strategy(), bad in bad_op()) {
        let t = base_tensor(&dims, 0);
        let before = t.to_vec::<i32>().unwrap();
        if let Some(result) = apply_bad(&bad, &t) {
            prop_assert!(result.is_err(), "{:?} on {:?} should fail, got {:?}", bad, dims, result);
        }
        // The same op on the undefined tensor is an error too.
        if let Some(result) = apply_bad(&bad, &Tensor::undefined()) {
            prop_assert!(result.is_err());
        }
        prop_assert_eq!(t.to_vec::<i32>().unwrap(), before, "a failed view changes nothing");
    }
}

// ---------------------------------------------------------------------------------------------
// Fixed cases.
// ---------------------------------------------------------------------------------------------

#[test]
fn every_view_op_on_the_undefined_tensor_is_an_error() {
    let u = Tensor::undefined();
    assert!(!u.is_defined());
    assert!(matches!(u.view(&[0]), Err(CoreError::Undefined { .. })));
    assert!(u.reshape(&[0]).is_err());
    assert!(u.contiguous().is_err());
    assert!(u.permute(&[]).is_err());
    assert!(u.expand(&[2]).is_err());
    assert!(u.squeeze(None).is_err());
    assert!(u.unsqueeze(0).is_err());
    assert!(u.flatten(0, -1).is_err());
    assert!(u.to_vec::<f32>().is_err());
    assert!(!u.shares_storage(&Tensor::undefined()));
}

#[test]
fn views_never_copy_and_share_one_version_counter() {
    let t = Tensor::from_slice(&(0..24).map(|v| v as f32).collect::<Vec<_>>(), &[2, 3, 4]).unwrap();
    let ptr = t.storage().unwrap().as_ptr();
    let views = [
        t.view(&[6, 4]).unwrap(),
        t.reshape(&[4, 6]).unwrap(),
        t.permute(&[2, 0, 1]).unwrap(),
        t.transpose(0, -1).unwrap(),
        t.narrow(1, 1, 2).unwrap(),
        t.slice(2, -1, isize::MIN, -2).unwrap(),
        t.select(0, -1).unwrap(),
        t.unsqueeze(0).unwrap().expand(&[5, 2, 3, 4]).unwrap(),
        t.unsqueeze(3).unwrap().squeeze(Some(-1)).unwrap(),
        t.flatten(0, 1).unwrap(),
        t.clone(),
    ];
    for v in &views {
        assert!(v.shares_storage(&t), "{v:?}");
        assert_eq!(v.storage().unwrap().as_ptr(), ptr, "{v:?}");
    }
    let before = t.version();
    views[4].fill(1.0f32).unwrap();
    for v in &views {
        assert_eq!(v.version(), before + 1, "{v:?}");
    }
    // The narrow wrote only its own elements.
    // The narrow wrote only its own 16 elements (plus element 1, which held 1.0 already).
    assert_eq!(
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .filter(|&&x| x == 1.0)
            .count(),
        2 * 2 * 4 + 1
    );
}

#[test]
fn huge_steps_do_not_overflow() {
    let t = base_tensor(&[7], 0);
    for step in [
        isize::MAX,
        isize::MIN,
        isize::MAX - 1,
        isize::MIN + 1,
        1 << 62,
        -(1 << 62),
    ] {
        let s = t.slice(0, 0, 7, step).unwrap();
        let expected: Vec<i32> = if step > 0 { vec![0] } else { vec![] };
        assert_eq!(s.to_vec::<i32>().unwrap(), expected, "step {step}");
        let r = t.slice(0, -1, isize::MIN, step).unwrap();
        let expected: Vec<i32> = if step > 0 { vec![] } else { vec![6] };
        assert_eq!(r.to_vec::<i32>().unwrap(), expected, "step {step}");
        // A size-1 result can be viewed, transposed and sliced again.
        assert_eq!(
            r.unsqueeze(0)
                .unwrap()
                .transpose(0, 1)
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            expected
        );
    }
}

#[test]
fn empty_tensors_with_huge_dims() {
    // Zero elements, so these fit whatever the other dims are.
    let t = Tensor::empty(
        &[0, 1 << 40, 1 << 40],
        DType::F32,
        strata_core::Device::Cpu,
        strata_core::MemoryKind::Default,
    )
    .unwrap();
    assert_eq!(t.numel(), 0);
    assert!(
        t.flatten(1, 2).is_err(),
        "the flattened dim overflows usize"
    );
    let f = t.flatten(0, 1).unwrap();
    assert_eq!(f.dims(), &[0, 1 << 40]);
    assert_eq!(
        t.transpose(0, 2).unwrap().to_vec::<f32>().unwrap(),
        Vec::<f32>::new()
    );
    assert_eq!(t.select(1, 5).unwrap().dims(), &[0, 1 << 40]);
}

#[test]
fn views_inside_empty_tensors() {
    // Regression: a view of an empty tensor used to move its offset past the (empty) storage
    // and fail the bounds check.
    let t = Tensor::zeros(&[0, 3, 4], DType::F32).unwrap();
    let s = t.select(1, 2).unwrap();
    assert_eq!(s.dims(), &[0, 4]);
    assert_eq!(s.to_vec::<f32>().unwrap(), Vec::<f32>::new());
    let n = t.narrow(2, 1, 3).unwrap();
    assert_eq!(n.dims(), &[0, 3, 3]);
    assert_eq!(n.contiguous().unwrap().numel(), 0);
    let r = t
        .slice(1, -1, isize::MIN, -1)
        .unwrap()
        .transpose(0, 2)
        .unwrap();
    assert_eq!(r.dims(), &[4, 3, 0]);
    r.fill_zero().unwrap();
    Tensor::zeros(&[4, 3, 0], DType::F32)
        .unwrap()
        .copy_from(&r)
        .unwrap();
    assert_eq!(r.to_npy_bytes().unwrap().len() % 64, 0);
}

#[test]
fn flatten_with_reversed_axes_is_an_error_not_a_stack_overflow() {
    // Regression: the copy fallback retried on a contiguous tensor forever.
    let t = Tensor::zeros(&[2, 3, 4], DType::F32).unwrap();
    assert!(matches!(
        t.flatten(2, 0),
        Err(CoreError::InvalidView { .. })
    ));
    assert!(t.transpose(0, 2).unwrap().flatten(1, 0).is_err());
    assert!(t.flatten(0, 3).is_err());
    let s = Tensor::scalar(1.0f32).unwrap();
    assert_eq!(s.flatten(0, -1).unwrap().dims(), &[1]);
    assert!(
        s.flatten(1, 1).is_err(),
        "a scalar flattens like rank 1: axes 0 or -1"
    );
}

#[test]
fn ranks_beyond_the_inline_dims_create_view_and_clone() {
    use strata_core::{Device, MemoryKind};
    // Rank 7: more dims than a shape holds inline, so creation and views take their spilled
    // paths.
    let dims = [2, 1, 3, 1, 2, 1, 2];
    let t = Tensor::empty(&dims, DType::F32, Device::Cpu, MemoryKind::Default).unwrap();
    assert_eq!(t.dims(), &dims);
    assert_eq!(t.strides(), &[12, 12, 4, 4, 2, 2, 1]);
    assert!(t.is_contiguous() && !t.shape().is_inline());
    assert_eq!(t.clone().strides(), t.strides());
    let v = t.view(&[3, 2, 2, 2, 1, 1]).unwrap();
    assert_eq!(v.strides(), &[8, 4, 2, 1, 1, 1]);
    assert!(v.shares_storage(&t));
    assert_eq!(v.view(&[24]).unwrap().strides(), &[1]);
    assert!(matches!(
        t.view(&[25]),
        Err(CoreError::NumelMismatch { to_numel: 25, .. })
    ));
    // A non-contiguous layout viewed with more dims than fit inline.
    let tr = Tensor::zeros(&[4, 6], DType::F32)
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    let s = tr.view(&[6, 4, 1, 1, 1, 1]).unwrap();
    assert_eq!(
        (s.dims(), &s.strides()[..2]),
        (&[6, 4, 1, 1, 1, 1][..], &[1, 6][..])
    );
    assert!(tr.view(&[24]).is_err());
}
