//! GlobalAveragePool, GlobalMaxPool and GlobalLpPool: one reduction per (batch, channel) plane,
//! which is contiguous, so each is a straight pass over memory.

use crate::kernels::error::{KernelError, KernelResult};
use crate::kernels::float::Float;
use crate::kernels::spatial::{check_len, checked_product};
use crate::ops::pooling::pool_kernel::{lp_power, LpPower};

/// Output dims of the global pools: `[N, C, 1, ..., 1]`, keeping the input rank (>= 2).
pub fn global_pool_output_dims(input_dims: &[usize]) -> KernelResult<Vec<usize>> {
    planes("GlobalPool", input_dims)?;
    let mut dims = vec![1; input_dims.len()];
    dims[..2].copy_from_slice(&input_dims[..2]);
    Ok(dims)
}

/// GlobalAveragePool in `f32`. See [`global_average_pool`].
pub fn global_average_pool_f32(
    input: &[f32],
    input_dims: &[usize],
    out: &mut [f32],
) -> KernelResult<()> {
    global_average_pool(input, input_dims, out, 1)
}

/// Mean of each plane (NaN for an empty plane: 0 / 0), on up to `threads` threads.
pub fn global_average_pool<T: Float>(
    input: &[T],
    input_dims: &[usize],
    out: &mut [T],
    threads: usize,
) -> KernelResult<()> {
    reduce_planes(
        "GlobalAveragePool",
        input,
        input_dims,
        out,
        threads,
        |plane| plane_sum(plane, |x| x) / T::from_usize(plane.len()),
    )
}

/// GlobalMaxPool in `f32`. See [`global_max_pool`].
pub fn global_max_pool_f32(
    input: &[f32],
    input_dims: &[usize],
    out: &mut [f32],
) -> KernelResult<()> {
    global_max_pool(input, input_dims, out, 1)
}

/// Maximum of each plane; NaN propagates; an empty plane gives the lowest value. On up to
/// `threads` threads.
pub fn global_max_pool<T: Float>(
    input: &[T],
    input_dims: &[usize],
    out: &mut [T],
    threads: usize,
) -> KernelResult<()> {
    reduce_planes("GlobalMaxPool", input, input_dims, out, threads, |plane| {
        let mut best = match plane.first() {
            Some(&x) => x,
            None => return T::LOWEST,
        };
        for &x in plane {
            if x > best || x.is_nan() {
                best = x;
                if x.is_nan() {
                    break;
                }
            }
        }
        best
    })
}

/// GlobalLpPool in `f32`. See [`global_lp_pool`].
pub fn global_lp_pool_f32(
    input: &[f32],
    input_dims: &[usize],
    norm: u32,
    out: &mut [f32],
) -> KernelResult<()> {
    global_lp_pool(input, input_dims, norm, out, 1)
}

/// `(sum |x|^norm)^(1/norm)` of each plane; `norm` (ONNX `p`) must be at least 1. On up to
/// `threads` threads.
pub fn global_lp_pool<T: Float>(
    input: &[T],
    input_dims: &[usize],
    norm: u32,
    out: &mut [T],
    threads: usize,
) -> KernelResult<()> {
    const OP: &str = "GlobalLpPool";
    let power: LpPower = lp_power(OP, norm)?;
    reduce_planes(OP, input, input_dims, out, threads, |plane| {
        power.root(plane_sum(plane, |x| power.raise(x)))
    })
}

/// (planes, plane length) of an `[N, C, spatial...]` input.
fn planes(op: &'static str, input_dims: &[usize]) -> KernelResult<(usize, usize)> {
    if input_dims.len() < 2 {
        return Err(KernelError::Rank {
            op,
            operand: "input",
            rank: input_dims.len(),
            expected: "must be at least 2 (N, C, spatial...)".into(),
        });
    }
    let planes = checked_product(op, "N * C", &input_dims[..2])?;
    let plane_len = checked_product(op, "plane size", &input_dims[2..])?;
    planes
        .checked_mul(plane_len)
        .ok_or(KernelError::SizeOverflow {
            op,
            what: "input size",
        })?;
    Ok((planes, plane_len))
}

fn reduce_planes<T: Float>(
    op: &'static str,
    input: &[T],
    input_dims: &[usize],
    out: &mut [T],
    threads: usize,
    reduce: impl Fn(&[T]) -> T + Sync,
) -> KernelResult<()> {
    let (planes, plane_len) = planes(op, input_dims)?;
    check_len(op, "input", input.len(), planes * plane_len)?;
    check_len(op, "output", out.len(), planes)?;
    for_each_plane(input, plane_len, out, threads, reduce);
    Ok(())
}

/// `out[i] = reduce(plane i of input)` (planes of `plane_len`; lengths checked by the caller).
/// With threads, each takes one contiguous run of planes, the same on every run: the
/// convolution before a network's final pool splits its output channels the same way, so
/// each core reduces the planes already in its cache (on one core, the other half came from
/// the other core's cache and two threads were slower than one).
pub(crate) fn for_each_plane<T: Float>(
    input: &[T],
    plane_len: usize,
    out: &mut [T],
    threads: usize,
    reduce: impl Fn(&[T]) -> T + Sync,
) {
    let one = |i: usize, y: &mut T| *y = reduce(&input[i * plane_len..][..plane_len]);
    if threads > 1 && out.len().saturating_mul(plane_len) >= PARALLEL_MIN_ELEMENTS {
        crate::parallel::for_each_chunk_mut_pinned(out, 1, |i, y| one(i, &mut y[0]));
    } else {
        out.iter_mut().enumerate().for_each(|(i, y)| one(i, y));
    }
}

/// Below this many input elements the planes are reduced on the calling thread.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// Sum of `f(x)` with eight independent accumulators: the compiler may not reorder float adds,
/// so this is what lets the loop vectorize, and it also shortens the rounding chain.
pub(crate) fn plane_sum<T: Float>(values: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::ZERO; 8];
    let mut chunks = values.chunks_exact(8);
    for chunk in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a += f(x);
        }
    }
    let mut total = chunks.remainder().iter().fold(T::ZERO, |s, &x| s + f(x));
    for a in acc {
        total += a;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;
    use crate::support::test_util::assert_close_within;

    #[test]
    fn global_pools_match_reference() {
        let mut rng = Rng::new(21);
        for dims in [
            vec![2, 3, 5, 7],
            vec![1, 4, 9],
            vec![1, 2, 3, 4, 5],
            vec![2, 2, 1000],
        ] {
            let input = rng.vec(dims.iter().product());
            let out_dims = global_pool_output_dims(&dims).unwrap();
            assert_eq!(out_dims.len(), dims.len());
            let planes = dims[0] * dims[1];
            let len = input.len() / planes;
            let planes_of = |f: &dyn Fn(&[f32]) -> f64| -> Vec<f32> {
                input.chunks(len).map(|p| f(p) as f32).collect()
            };
            let mut out = vec![0.0; planes];
            global_average_pool_f32(&input, &dims, &mut out).unwrap();
            assert_close_within(
                &out,
                &planes_of(&|p| p.iter().map(|&x| x as f64).sum::<f64>() / len as f64),
                1e-4,
                "avg",
            );
            global_max_pool_f32(&input, &dims, &mut out).unwrap();
            assert_close_within(
                &out,
                &planes_of(&|p| p.iter().fold(f64::MIN, |m, &x| m.max(x as f64))),
                1e-4,
                "max",
            );
            for q in [1, 2, 3] {
                global_lp_pool_f32(&input, &dims, q, &mut out).unwrap();
                let expected = planes_of(&|p| {
                    p.iter()
                        .map(|&x| (x as f64).abs().powi(q as i32))
                        .sum::<f64>()
                        .powf(1.0 / q as f64)
                });
                assert_close_within(&out, &expected, 1e-4, &format!("lp{q}"));
            }
        }
    }

    /// Split over threads (planes in runs per thread), the pools give the one-thread bits.
    #[test]
    fn threads_give_the_same_planes() {
        let mut rng = Rng::new(22);
        // 2 x 67 planes of 17 x 15: past the split threshold, an odd plane count.
        let dims = [2, 67, 17, 15];
        let input = rng.vec(dims.iter().product());
        let planes = dims[0] * dims[1];
        for threads in [2, 3] {
            let pool = crate::parallel::ThreadPool::new(threads).unwrap();
            crate::parallel::install(&pool, || {
                let (mut one, mut many) = (vec![0.0; planes], vec![0.0; planes]);
                global_average_pool(&input, &dims, &mut one, 1).unwrap();
                global_average_pool(&input, &dims, &mut many, threads).unwrap();
                assert_eq!(one, many, "avg, {threads} threads");
                global_max_pool(&input, &dims, &mut one, 1).unwrap();
                global_max_pool(&input, &dims, &mut many, threads).unwrap();
                assert_eq!(one, many, "max, {threads} threads");
                global_lp_pool(&input, &dims, 2, &mut one, 1).unwrap();
                global_lp_pool(&input, &dims, 2, &mut many, threads).unwrap();
                assert_eq!(one, many, "lp, {threads} threads");
                assert!(one.iter().all(|v| *v != 0.0), "every plane written");
            });
        }
    }

    #[test]
    fn output_dims_errors_and_empty_inputs() {
        assert_eq!(
            global_pool_output_dims(&[2, 3, 7, 7]).unwrap(),
            [2, 3, 1, 1]
        );
        let err = global_pool_output_dims(&[3]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "GlobalPool: input has rank 1 but must be at least 2 (N, C, spatial...)"
        );
        let err = global_average_pool_f32(&[0.0; 5], &[1, 2, 3], &mut [0.0; 2]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "GlobalAveragePool: input has 5 elements but 6 are required"
        );
        global_average_pool_f32(&[], &[0, 3, 4, 4], &mut []).unwrap();
        let mut out = [0.0; 2];
        global_average_pool_f32(&[], &[1, 2, 0], &mut out).unwrap();
        assert!(out[0].is_nan());
        global_max_pool_f32(&[1.0, f32::NAN, 5.0], &[1, 1, 3], &mut out[..1]).unwrap();
        assert!(out[0].is_nan());
    }
}
