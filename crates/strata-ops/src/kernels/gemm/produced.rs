//! Products whose B is computed block by block instead of read from memory: quantized weights
//! dequantized straight into the microkernel's packed layout, one cache block at a time, so no
//! dequantized copy of the matrix (or of a panel of it) is made, and A is packed once.

use super::driver::{Epilogue, MatMut, Problem};
use super::isa::Isa;
use super::pack::MatRef;
use super::{check_distinct, check_operand, GemmFloat};
use crate::kernels::error::{KernelError, KernelResult};

pub use super::driver::{BBlock, ProduceB};
pub use super::pack::pack_transposed_sliver;

/// `C = A B` (C overwritten), with A `m x k` (element `(i, p)` at `a[i * rs + p * cs]`), C
/// `m x n` with contiguous rows (`c_strides.1 == 1`), and B `k x n` written block by block by
/// `produce` (see [`ProduceB`]), each block once per thread that needs it. `threads` as in
/// [`super::gemm`]; several threads split C's columns when it has a column tile for each, so
/// each produces only its own part of B. `epilogue` runs on each finished piece of a
/// row of C while it is still in cache, as in [`super::gemm_prepacked_with`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_produced_b<T: GemmFloat>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_strides: (isize, isize),
    c: &mut [T],
    c_strides: (isize, isize),
    produce: ProduceB<'_, T>,
    epilogue: Option<&Epilogue<'_, T>>,
    threads: usize,
) -> KernelResult<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    check_operand("C", c.len(), m, n, c_strides)?;
    check_distinct(m, n, c_strides)?;
    if n > 1 && c_strides.1 != 1 {
        return Err(KernelError::InvalidLayout {
            op: super::OP,
            operand: "C",
            rows: m,
            cols: n,
            strides: c_strides,
            reason: "a product with a produced B needs C's columns contiguous".into(),
        });
    }
    if k == 0 {
        super::scale(m, n, c, c_strides, T::ZERO);
        if let Some(epilogue) = epilogue {
            for i in 0..m {
                let row = &mut c[(i as isize * c_strides.0) as usize..][..n];
                epilogue(i, 0, row);
            }
        }
        return Ok(());
    }
    check_operand("A", a.len(), m, k, a_strides)?;
    let problem = Problem {
        m,
        n,
        k,
        a: MatRef {
            data: a,
            rs: a_strides.0,
            cs: a_strides.1,
        },
        // Never read: `produce_b` stands in for it.
        b: MatRef {
            data: &[],
            rs: 0,
            cs: 0,
        },
        // `c` stays mutably borrowed until the product returns.
        c: MatMut::of(c, c_strides),
        alpha: T::ONE,
        beta: T::ZERO,
        packed_a: None,
        packed_b: None,
        produce_b: Some(produce),
        epilogue,
        fused: None,
        depth_split: None,
    };
    // The driver, not the skinny paths: they read B from memory.
    T::dispatch(&problem, Isa::detect(), threads);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A block of B from its dense transpose `bt` (row `j` = column `j` of B, `k` long).
    fn fill_from_transposed(bt: &[f32], k: usize, block: BBlock, dst: &mut [f32]) {
        for (s, sliver) in dst.chunks_mut(block.kc * block.nr).enumerate() {
            let j = block.j0 + s * block.nr;
            let cols = (block.j0 + block.cols - j).min(block.nr);
            let src = &bt[j * k + block.p0..];
            pack_transposed_sliver(sliver, block.nr, src, k, block.kc, cols);
        }
    }

    /// B from a dense row-major matrix, block by block through `pack_transposed_sliver` (from
    /// Bᵀ, as quantized weights are stored), against the plain product; every block request is
    /// checked against the alignment contract. Sizes cover columns in several cache blocks (A
    /// packed whole) on one thread and on shares of columns or rows.
    #[test]
    fn produced_blocks_give_the_plain_product() {
        for (m, n, k, align, threads) in [
            (5, 7, 3, 1, 1),
            (13, 40, 64, 32, 1),
            (29, 600, 96, 32, 2),
            (64, 1100, 800, 32, 2),
            (130, 70, 300, 4, 2),
            (16, 33, 257, 1, 3),
            // Split by rows, each share's A packed whole from its own first row.
            (700, 300, 40, 1, 2),
        ] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7 % 23) as f32 - 11.0) / 8.0)
                .collect();
            // Bᵀ: row j holds column j of B.
            let bt: Vec<f32> = (0..n * k)
                .map(|i| ((i * 5 % 19) as f32 - 9.0) / 4.0)
                .collect();
            let mut want = vec![0.0f32; m * n];
            super::super::gemm(
                m,
                n,
                k,
                &a,
                (k as isize, 1),
                &bt,
                (1, k as isize),
                &mut want,
                (n as isize, 1),
                1.0,
                0.0,
                1,
            )
            .unwrap();
            let requests = Mutex::new(Vec::new());
            let fill = |block: BBlock, dst: &mut [f32]| {
                requests.lock().unwrap().push(block);
                fill_from_transposed(&bt, k, block, dst);
            };
            let mut got = vec![f32::NAN; m * n];
            gemm_produced_b(
                m,
                n,
                k,
                &a,
                (k as isize, 1),
                &mut got,
                (n as isize, 1),
                ProduceB { align, fill: &fill },
                None,
                threads,
            )
            .unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{m}x{n}x{k} at {i}: {g} vs {w}"
                );
            }
            let requests = requests.into_inner().unwrap();
            assert!(!requests.is_empty());
            for r in requests {
                assert_eq!(r.p0 % align, 0, "{r:?}");
                assert!(r.p0 + r.kc == k || r.kc % align == 0, "{r:?}");
                assert!(r.j0 + r.cols <= n, "{r:?}");
            }
        }
    }

    /// The epilogue sees every element once, with its (row, column), after the whole depth.
    #[test]
    fn the_epilogue_runs_on_finished_rows() {
        let (m, n, k) = (20, 300, 70);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 - 2.0).collect();
        let fill = |block: BBlock, dst: &mut [f32]| fill_from_transposed(&bt, k, block, dst);
        let finish = |i: usize, j: usize, row: &mut [f32]| {
            for (t, v) in row.iter_mut().enumerate() {
                *v = *v * 2.0 + (1000 * i + j + t) as f32;
            }
        };
        for threads in [1, 2] {
            let mut c = vec![f32::NAN; m * n];
            gemm_produced_b(
                m,
                n,
                k,
                &a,
                (k as isize, 1),
                &mut c,
                (n as isize, 1),
                ProduceB {
                    align: 32,
                    fill: &fill,
                },
                Some(&finish),
                threads,
            )
            .unwrap();
            for i in 0..m {
                for j in 0..n {
                    let dot: f32 = (0..k).map(|p| a[i * k + p] * bt[j * k + p]).sum();
                    let want = dot * 2.0 + (1000 * i + j) as f32;
                    assert_eq!(c[i * n + j], want, "({i}, {j}) on {threads} threads");
                }
            }
        }
    }

    #[test]
    fn c_with_strided_columns_is_refused() {
        let fill = |_: BBlock, _: &mut [f32]| {};
        let mut c = vec![0.0f32; 8];
        let err = gemm_produced_b(
            2,
            4,
            1,
            &[1.0, 2.0],
            (1, 1),
            &mut c,
            (1, 2),
            ProduceB {
                align: 1,
                fill: &fill,
            },
            None,
            1,
        );
        assert!(
            matches!(err, Err(KernelError::InvalidLayout { operand: "C", .. })),
            "{err:?}"
        );
    }
}
