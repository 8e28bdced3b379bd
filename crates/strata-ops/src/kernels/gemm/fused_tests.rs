//! Products with an epilogue fused into the microkernels' stores (bias per row or per column,
//! residual, and the simple activations) against the plain product followed by the scalar
//! epilogue, on every instruction set this CPU has.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::driver::{Epilogue, FusedEpilogue, MatMut};
use super::isa::Isa;
use super::microkernel::FusedAct;
use super::pack::MatRef;
use super::prepacked::{gemm_prepacked_raw, PackedOperand, Prepacked};
use super::{gemm, GemmFloat};
use crate::kernels::activation::Activation;
use crate::support::rng::Rng;
use crate::support::test_util::assert_close_within;

/// The instruction sets this CPU can run, the portable one first.
fn available_isas() -> Vec<Isa> {
    [Isa::Portable, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|isa| isa.is_available())
        .collect()
}

/// `a` (`m x k`, row-major) or `b` (`k x n`, row-major) packed for `isa`'s microkernels.
fn pack_for<T: GemmFloat + strata_core::Element>(
    isa: Isa,
    side: PackedOperand,
    rows: usize,
    cols: usize,
    data: &[T],
) -> Prepacked<T> {
    let view = MatRef {
        data,
        rs: cols as isize,
        cs: 1,
    };
    match side {
        // A (m x k) is packed as its transpose, in slivers of MR rows.
        PackedOperand::A => {
            let (tile, _) = T::tiles(rows, isa);
            Prepacked::pack(side, isa, rows, cols, tile, view.t()).unwrap()
        }
        PackedOperand::B => {
            let (_, tile) = T::tiles(1, isa);
            Prepacked::pack(side, isa, cols, rows, tile, view).unwrap()
        }
    }
}

/// The epilogue's parts for one case: which are present, and the activation.
struct Case {
    residual: Option<Vec<f32>>,
    row_bias: Option<Vec<f32>>,
    col_bias: Option<Vec<f32>>,
    act: Activation,
}

impl Case {
    /// Element `(i, j)` finished the reference way: the activation's own scalar definition.
    fn finish(&self, x: f32, n: usize, i: usize, j: usize) -> f32 {
        let mut x = x;
        if let Some(r) = &self.residual {
            x += r[i * n + j];
        }
        if let Some(b) = &self.row_bias {
            x += b[i];
        }
        if let Some(b) = &self.col_bias {
            x += b[j];
        }
        self.act.apply(x)
    }
}

/// Random products with random fused epilogues, through a packed A (the driver, always) and a
/// packed B (the driver, or the skinny path for a few rows, which runs the row closure),
/// one and two threads, depths over several depth blocks, edge tiles on both sides.
#[test]
fn fused_epilogues_equal_the_product_then_the_scalar_epilogue() {
    let mut rng = Rng::new(0xf05e);
    let acts = [
        Activation::None,
        Activation::Relu,
        Activation::Clip {
            min: -0.5,
            max: 0.7,
        },
        Activation::Clip { min: 0.0, max: 6.0 },
        Activation::LeakyRelu { alpha: 0.1 },
    ];
    for isa in available_isas() {
        for case in 0..160 {
            let m = [1, 3, 5, 8, 14, 29, 64][rng.below(7)];
            let n = [1, 3, 17, 32, 33, 64, 100, 600][rng.below(8)];
            let k = [1, 7, 64, 300, 600][rng.below(5)];
            let side = [PackedOperand::A, PackedOperand::B][rng.below(2)];
            let (alpha, beta) = ([1.0, -0.5][rng.below(2)], [0.0, 1.0][rng.below(2)]);
            let threads = 1 + rng.below(2);
            let c_case = Case {
                residual: (rng.below(2) == 0).then(|| rng.vec(m * n)),
                row_bias: (rng.below(2) == 0).then(|| rng.vec(m)),
                col_bias: (rng.below(3) == 0).then(|| rng.vec(n)),
                act: acts[rng.below(acts.len())],
            };
            let a = rng.vec(m * k);
            let b = rng.vec(k * n);
            let c0 = rng.vec(m * n);
            let what = format!("{isa:?} case {case}: {side:?} m{m} n{n} k{k} t{threads}");

            let mut expected = c0.clone();
            let row = |cols: usize| (cols as isize, 1);
            gemm(
                m,
                n,
                k,
                &a,
                row(k),
                &b,
                row(n),
                &mut expected,
                row(n),
                alpha,
                beta,
                1,
            )
            .unwrap();
            for (index, x) in expected.iter_mut().enumerate() {
                *x = c_case.finish(*x, n, index / n, index % n);
            }

            // Closure calls on more than the columns of C's partial last register tile (all
            // tiles are at most 32 wide).
            let wide_calls = AtomicUsize::new(0);
            let closure = |i: usize, j: usize, values: &mut [f32]| {
                if j + values.len() != n || values.len() >= 32 {
                    wide_calls.fetch_add(1, Ordering::Relaxed);
                }
                for (d, x) in values.iter_mut().enumerate() {
                    *x = c_case.finish(*x, n, i, j + d);
                }
            };
            let fused = FusedEpilogue {
                residual: c_case.residual.as_deref().map(|r| (r, n as isize)),
                row_bias: c_case.row_bias.as_deref(),
                col_bias: c_case.col_bias.as_deref(),
                act: FusedAct::of(c_case.act).unwrap(),
            };
            let (packed, other) = match side {
                PackedOperand::A => (pack_for(isa, side, m, k, &a), &b),
                PackedOperand::B => (pack_for(isa, side, k, n, &b), &a),
            };
            let n_or_m = if side == PackedOperand::A { n } else { m };
            let other_cols = if side == PackedOperand::A { n } else { k };
            let mut c = c0.clone();
            let pool = crate::parallel::ThreadPool::new(threads).unwrap();
            crate::parallel::install(&pool, || {
                let out = MatMut {
                    ptr: c.as_mut_ptr(),
                    rs: n as isize,
                    cs: 1,
                };
                // SAFETY: `c` holds the m x n product, row-major, and is not touched elsewhere
                // during the call.
                unsafe {
                    gemm_prepacked_raw(
                        &packed,
                        n_or_m,
                        other,
                        row(other_cols),
                        out,
                        (alpha, beta),
                        Some(&closure as &Epilogue<'_, f32>),
                        Some(fused),
                        threads,
                    )
                }
            })
            .unwrap();
            assert_close_within(&c, &expected, 1e-4, &what);
            // The driver applies the fused form to whole tiles (with the stores of the last
            // depth block) and the closure only to a partial last one; the skinny product of a
            // few rows against a packed B runs the closure.
            let wide = wide_calls.load(Ordering::Relaxed);
            if side == PackedOperand::A || m > 4 {
                assert_eq!(wide, 0, "{what}: closure ran on whole tiles");
            }
        }
    }
}

/// NaNs, infinities and signed zeros come out of the fused activations as out of the scalar
/// ones: Relu turns a NaN into 0, Clip and LeakyRelu keep it, a -0 stays -0 through Clip.
#[test]
fn fused_activations_keep_the_scalar_special_values() {
    let specials = [
        f32::NAN,
        -0.0,
        0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        -3.0,
        7.0,
    ];
    let (m, n, k) = (14, 64, 3);
    // A and B zero: C is exactly the residual.
    let a = vec![0.0f32; m * k];
    let b = vec![0.0f32; k * n];
    let residual: Vec<f32> = (0..m * n).map(|i| specials[i % specials.len()]).collect();
    let acts = [
        Activation::Relu,
        Activation::Clip { min: 0.0, max: 6.0 },
        Activation::LeakyRelu { alpha: 0.5 },
    ];
    for isa in available_isas() {
        let packed = pack_for(isa, PackedOperand::A, m, k, &a);
        for act in acts {
            let expected: Vec<f32> = residual.iter().map(|&r| act.apply(0.0 + r)).collect();
            let closure = |_: usize, _: usize, _: &mut [f32]| {};
            let fused = FusedEpilogue {
                residual: Some((&residual[..], n as isize)),
                row_bias: None,
                col_bias: None,
                act: FusedAct::of(act).unwrap(),
            };
            let mut c = vec![f32::NAN; m * n];
            let out = MatMut {
                ptr: c.as_mut_ptr(),
                rs: n as isize,
                cs: 1,
            };
            // SAFETY: `c` holds the m x n product, row-major, and is ours alone.
            unsafe {
                gemm_prepacked_raw(
                    &packed,
                    n,
                    &b,
                    (n as isize, 1),
                    out,
                    (1.0, 0.0),
                    Some(&closure as &Epilogue<'_, f32>),
                    Some(fused),
                    1,
                )
            }
            .unwrap();
            for (index, (&got, &want)) in c.iter().zip(&expected).enumerate() {
                let same = (got.is_nan() && want.is_nan())
                    || (got == want && got.is_sign_negative() == want.is_sign_negative());
                assert!(same, "{isa:?} {act:?} element {index}: {got} vs {want}");
            }
        }
    }
}

/// A fused epilogue whose parts do not cover the product, or without its row form, is an
/// error, not a read out of bounds.
#[test]
fn short_fused_parts_are_errors() {
    let (m, n, k) = (8, 10, 4);
    let a = vec![1.0f32; m * k];
    let b = vec![1.0f32; k * n];
    let packed = Prepacked::a(m, k, &a, (k as isize, 1)).unwrap();
    let short = vec![0.0f32; m * n - 1];
    let closure = |_: usize, _: usize, _: &mut [f32]| {};
    let base = FusedEpilogue {
        residual: None,
        row_bias: None,
        col_bias: None,
        act: FusedAct::Relu,
    };
    let parts = [
        FusedEpilogue {
            residual: Some((&short[..], n as isize)),
            ..base
        },
        FusedEpilogue {
            row_bias: Some(&short[..m - 1]),
            ..base
        },
        FusedEpilogue {
            col_bias: Some(&short[..n - 1]),
            ..base
        },
    ];
    let mut c = vec![0.0f32; m * n];
    for fused in parts {
        let out = MatMut {
            ptr: c.as_mut_ptr(),
            rs: n as isize,
            cs: 1,
        };
        // SAFETY: `c` holds the m x n product and is ours alone.
        let done = unsafe {
            gemm_prepacked_raw(
                &packed,
                n,
                &b,
                (n as isize, 1),
                out,
                (1.0, 0.0),
                Some(&closure as &Epilogue<'_, f32>),
                Some(fused),
                1,
            )
        };
        assert!(done.is_err(), "{fused:?}");
    }
    let out = MatMut {
        ptr: c.as_mut_ptr(),
        rs: n as isize,
        cs: 1,
    };
    // SAFETY: as above.
    let alone = unsafe {
        gemm_prepacked_raw(
            &packed,
            n,
            &b,
            (n as isize, 1),
            out,
            (1.0, 0.0),
            None,
            Some(base),
            1,
        )
    };
    assert!(alone.is_err(), "fused without its closure");
}
