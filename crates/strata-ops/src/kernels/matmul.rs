//! ONNX MatMul: numpy-style matrix product with broadcast batch dims, on contiguous row-major
//! operands, as a sequence of [`gemm`] calls (one call when B is shared by every batch).

use super::error::{KernelError, KernelResult};
use super::gemm::{gemm, GemmFloat};
use super::spatial::{check_len, checked_product, Dims};

const OP: &str = "MatMul";

/// Output dims of ONNX MatMul (numpy `matmul`): a rank-1 A is promoted to `[1, K]` and a rank-1
/// B to `[K, 1]`, the promoted axis being dropped from the result; batch dims broadcast.
pub fn matmul_output_dims(a_dims: &[usize], b_dims: &[usize]) -> KernelResult<Vec<usize>> {
    Ok(MatMulGeometry::new(a_dims, b_dims)?.out_dims.to_vec())
}

/// ONNX MatMul in `f32`. See [`batched_matmul`].
pub fn batched_matmul_f32(
    a: &[f32],
    a_dims: &[usize],
    b: &[f32],
    b_dims: &[usize],
    out: &mut [f32],
    threads: usize,
) -> KernelResult<()> {
    batched_matmul(a, a_dims, b, b_dims, out, threads)
}

/// ONNX MatMul: `out = a @ b` with contiguous row-major operands of `a_dims` / `b_dims` and an
/// output of [`matmul_output_dims`]. Errors when the dims do not combine or a slice length does
/// not match its dims.
///
/// With `threads > 1`, batches are spread over threads when there are at least as many batches as
/// threads (each product then single-threaded); otherwise each product is itself threaded.
pub fn batched_matmul<T: GemmFloat>(
    a: &[T],
    a_dims: &[usize],
    b: &[T],
    b_dims: &[usize],
    out: &mut [T],
    threads: usize,
) -> KernelResult<()> {
    let g = MatMulGeometry::new(a_dims, b_dims)?;
    check_len(OP, "A", a.len(), checked_product(OP, "A size", a_dims)?)?;
    check_len(OP, "B", b.len(), checked_product(OP, "B size", b_dims)?)?;
    check_len(OP, "output", out.len(), g.out_len)?;
    let (m, n, k) = (g.m, g.n, g.k);
    if out.is_empty() {
        return Ok(());
    }
    let (mat_a, mat_b, mat_out) = (m * k, k * n, m * n);
    let row = |cols: usize| (cols as isize, 1isize);

    // B shared by all batches and A not broadcast: the batches stack into one tall product.
    if g.b_batches <= 1 && g.a_batches == g.batches {
        return gemm(
            g.batches * m,
            n,
            k,
            a,
            row(k),
            b,
            row(n),
            out,
            row(n),
            T::ONE,
            T::ZERO,
            threads,
        );
    }

    let product = |index: usize, out: &mut [T], threads: usize| {
        let (a_at, b_at) = g.batch_offsets(index);
        let a = &a[a_at * mat_a..(a_at + 1) * mat_a];
        let b = &b[b_at * mat_b..(b_at + 1) * mat_b];
        gemm(
            m,
            n,
            k,
            a,
            row(k),
            b,
            row(n),
            out,
            row(n),
            T::ONE,
            T::ZERO,
            threads,
        )
    };
    if threads > 1 && g.batches >= threads {
        let per_task = g.batches.div_ceil(threads);
        crate::parallel::try_for_each_chunk_mut(out, mat_out, per_task, |index, out| {
            product(index, out, 1)
        })
    } else {
        out.chunks_mut(mat_out)
            .enumerate()
            .try_for_each(|(index, out)| product(index, out, threads))
    }
}

/// Validated MatMul dims: the product sizes and how each output batch maps to input matrices.
pub(crate) struct MatMulGeometry {
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    /// Inline (no heap allocation per run) for up to 6 dims.
    out_dims: Dims,
    out_len: usize,
    /// Broadcast batch dims of the output.
    batch_dims: Dims,
    /// Per batch axis, the step in A's (B's) matrix index; 0 where that operand broadcasts.
    a_steps: Dims,
    b_steps: Dims,
    pub(crate) batches: usize,
    pub(crate) a_batches: usize,
    pub(crate) b_batches: usize,
}

impl MatMulGeometry {
    pub(crate) fn new(a_dims: &[usize], b_dims: &[usize]) -> KernelResult<Self> {
        let mismatch = |reason: String| KernelError::ShapeMismatch {
            op: OP,
            a: a_dims.to_vec(),
            b: b_dims.to_vec(),
            reason,
        };
        for (operand, dims) in [("A", a_dims), ("B", b_dims)] {
            if dims.is_empty() {
                return Err(KernelError::Rank {
                    op: OP,
                    operand,
                    rank: 0,
                    expected: "must be at least 1".into(),
                });
            }
        }
        let (a_batch, m, ka) = match a_dims {
            [k] => (&[][..], 1, *k),
            [batch @ .., m, k] => (batch, *m, *k),
            [] => unreachable!("rank checked above"),
        };
        let (b_batch, kb, n) = match b_dims {
            [k] => (&[][..], *k, 1),
            [batch @ .., k, n] => (batch, *k, *n),
            [] => unreachable!("rank checked above"),
        };
        if ka != kb {
            return Err(mismatch(format!("A has {ka} columns but B has {kb} rows")));
        }

        let rank = a_batch.len().max(b_batch.len());
        let aligned = |batch: &[usize], axis: usize| {
            let missing = rank - batch.len();
            if axis < missing {
                1
            } else {
                batch[axis - missing]
            }
        };
        let mut batch_dims = Dims::new();
        for axis in 0..rank {
            let (da, db) = (aligned(a_batch, axis), aligned(b_batch, axis));
            if da != db && da != 1 && db != 1 {
                return Err(mismatch(format!(
                    "batch dims {da} and {db} do not broadcast (output batch axis {axis})"
                )));
            }
            batch_dims.push(if da == 1 { db } else { da });
        }
        // Row-major steps over each operand's own batch dims, zeroed where it broadcasts.
        let steps = |batch: &[usize]| {
            let mut steps = Dims::from_elem(0, rank);
            let mut step = 1usize;
            for axis in (0..rank).rev() {
                let d = aligned(batch, axis);
                if d != 1 {
                    steps[axis] = step;
                }
                step = step.saturating_mul(d);
            }
            steps
        };

        let mut out_dims = batch_dims.clone();
        if a_dims.len() >= 2 {
            out_dims.push(m);
        }
        if b_dims.len() >= 2 {
            out_dims.push(n);
        }
        Ok(MatMulGeometry {
            m,
            n,
            k: ka,
            out_len: checked_product(OP, "output size", &out_dims)?,
            out_dims,
            a_steps: steps(a_batch),
            b_steps: steps(b_batch),
            batches: checked_product(OP, "batch count", &batch_dims)?,
            a_batches: checked_product(OP, "A batch count", a_batch)?,
            b_batches: checked_product(OP, "B batch count", b_batch)?,
            batch_dims,
        })
    }

    /// Matrix indices into A and B for output batch `index` (row-major over `batch_dims`).
    pub(crate) fn batch_offsets(&self, mut index: usize) -> (usize, usize) {
        let (mut a, mut b) = (0, 0);
        for axis in (0..self.batch_dims.len()).rev() {
            let d = self.batch_dims[axis];
            let i = index % d;
            index /= d;
            a += i * self.a_steps[axis];
            b += i * self.b_steps[axis];
        }
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;
    use crate::support::test_util::assert_close_within;

    /// Straightforward numpy-matmul reference in f64.
    fn naive(a: &[f32], a_dims: &[usize], b: &[f32], b_dims: &[usize]) -> Vec<f32> {
        let a2: Vec<usize> = if a_dims.len() == 1 {
            vec![1, a_dims[0]]
        } else {
            a_dims.to_vec()
        };
        let b2: Vec<usize> = if b_dims.len() == 1 {
            vec![b_dims[0], 1]
        } else {
            b_dims.to_vec()
        };
        let (m, k, n) = (a2[a2.len() - 2], a2[a2.len() - 1], b2[b2.len() - 1]);
        let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
        let rank = ab.len().max(bb.len());
        let pad = |d: &[usize]| [vec![1; rank - d.len()], d.to_vec()].concat();
        let (ab, bb) = (pad(ab), pad(bb));
        let batch: Vec<usize> = ab
            .iter()
            .zip(&bb)
            .map(|(&x, &y)| if x == 1 { y } else { x })
            .collect();
        let count: usize = batch.iter().product();
        let mut out = Vec::new();
        for flat in 0..count {
            let mut idx = vec![0; rank];
            let mut rem = flat;
            for axis in (0..rank).rev() {
                idx[axis] = rem % batch[axis];
                rem /= batch[axis];
            }
            let lin = |dims: &[usize]| {
                idx.iter()
                    .zip(dims)
                    .fold(0, |acc, (&i, &d)| acc * d + if d == 1 { 0 } else { i })
            };
            let (ao, bo) = (lin(&ab) * m * k, lin(&bb) * k * n);
            for i in 0..m {
                for j in 0..n {
                    let s: f64 = (0..k)
                        .map(|p| a[ao + i * k + p] as f64 * b[bo + p * n + j] as f64)
                        .sum();
                    out.push(s as f32);
                }
            }
        }
        out
    }

    #[test]
    fn output_dims_follow_numpy_matmul() {
        assert_eq!(matmul_output_dims(&[3], &[3]).unwrap(), Vec::<usize>::new());
        assert_eq!(matmul_output_dims(&[3], &[3, 4]).unwrap(), vec![4]);
        assert_eq!(matmul_output_dims(&[2, 3], &[3]).unwrap(), vec![2]);
        assert_eq!(matmul_output_dims(&[5, 2, 3], &[3]).unwrap(), vec![5, 2]);
        assert_eq!(matmul_output_dims(&[3], &[5, 3, 4]).unwrap(), vec![5, 4]);
        assert_eq!(
            matmul_output_dims(&[2, 1, 3, 4], &[5, 4, 6]).unwrap(),
            vec![2, 5, 3, 6]
        );
        assert_eq!(
            matmul_output_dims(&[0, 3, 4], &[1, 4, 6]).unwrap(),
            vec![0, 3, 6]
        );
    }

    #[test]
    fn mismatches_are_reported_with_both_shapes() {
        let err = matmul_output_dims(&[2, 3], &[4, 5]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MatMul: cannot combine shapes [2, 3] and [4, 5]: A has 3 columns but B has 4 rows"
        );
        let err = matmul_output_dims(&[2, 3, 4], &[5, 4, 6]).unwrap_err();
        assert!(
            err.to_string()
                .contains("batch dims 2 and 5 do not broadcast"),
            "{err}"
        );
        let err = matmul_output_dims(&[], &[4]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MatMul: A has rank 0 but must be at least 1"
        );
    }

    #[test]
    fn random_broadcast_matmuls_match_reference() {
        let mut rng = Rng::new(0xa11ce);
        for case in 0..200 {
            let (m, n, k) = (rng.range(1, 9), rng.range(1, 9), rng.below(9));
            let batch_rank = rng.below(4);
            let full: Vec<usize> = (0..batch_rank).map(|_| rng.range(1, 3)).collect();
            // Each operand keeps a suffix of the batch dims, some set to 1 to broadcast.
            let pick = |rng: &mut Rng| -> Vec<usize> {
                let keep = rng.below(batch_rank + 1);
                full[batch_rank - keep..]
                    .iter()
                    .map(|&d| if rng.below(3) == 0 { 1 } else { d })
                    .collect()
            };
            let (ab, bb) = (pick(&mut rng), pick(&mut rng));
            let a_dims = if rng.below(6) == 0 {
                vec![k]
            } else {
                [ab, vec![m, k]].concat()
            };
            let b_dims = if rng.below(6) == 0 {
                vec![k]
            } else {
                [bb, vec![k, n]].concat()
            };
            let a = rng.vec(a_dims.iter().product());
            let b = rng.vec(b_dims.iter().product());
            let out_dims = matmul_output_dims(&a_dims, &b_dims).unwrap();
            let expected = naive(&a, &a_dims, &b, &b_dims);
            assert_eq!(
                expected.len(),
                out_dims.iter().product::<usize>(),
                "case {case}"
            );
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; expected.len()];
                batched_matmul_f32(&a, &a_dims, &b, &b_dims, &mut out, threads).unwrap();
                assert_close_within(
                    &out,
                    &expected,
                    1e-4,
                    &format!("case {case}: {a_dims:?} x {b_dims:?}, {threads} threads"),
                );
            }
        }
    }

    #[test]
    fn large_batched_matmul_in_parallel() {
        let mut rng = Rng::new(3);
        let (a_dims, b_dims) = ([4, 1, 33, 70], [1, 3, 70, 45]);
        let a = rng.vec(a_dims.iter().product());
        let b = rng.vec(b_dims.iter().product());
        let expected = naive(&a, &a_dims, &b, &b_dims);
        let mut out = vec![0.0; expected.len()];
        batched_matmul_f32(&a, &a_dims, &b, &b_dims, &mut out, 2).unwrap();
        assert_close_within(&out, &expected, 1e-4, "parallel batches");
    }

    #[test]
    fn wrong_slice_lengths_are_errors() {
        let mut out = vec![0.0; 4];
        let err =
            batched_matmul_f32(&[0.0; 5], &[2, 3], &[0.0; 6], &[3, 2], &mut out, 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "MatMul: A has 5 elements but 6 are required"
        );
        let err = batched_matmul_f32(&[0.0; 6], &[2, 3], &[0.0; 6], &[3, 2], &mut out[..3], 1)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "MatMul: output has 3 elements but 4 are required"
        );
    }

    #[test]
    fn empty_operands() {
        let mut out = vec![f32::NAN; 6];
        // K = 0: an all-zero product.
        batched_matmul_f32(&[], &[2, 0], &[], &[0, 3], &mut out, 1).unwrap();
        assert_eq!(out, [0.0; 6]);
        batched_matmul_f32(&[], &[0, 2, 3], &[0.0; 6], &[3, 2], &mut [], 1).unwrap();
    }
}
