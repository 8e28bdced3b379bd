//! The integer GEMM against a naive i32 reference, on every microkernel this CPU can run.

use super::driver::igemm_with;
use super::*;
use crate::support::rng::Rng;

fn isas() -> Vec<IntIsa> {
    [
        IntIsa::Portable,
        IntIsa::Avx2,
        IntIsa::Avx512Vnni,
        IntIsa::Amx,
    ]
    .into_iter()
    .filter(|isa| isa.is_available())
    .collect()
}

/// Random 8-bit values as i32, in u8's or i8's range.
fn values(rng: &mut Rng, len: usize, signed: bool) -> Vec<i32> {
    (0..len)
        .map(|_| rng.below(256) as i32 - if signed { 128 } else { 0 })
        .collect()
}

fn to_u8(v: &[i32]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

fn to_i8(v: &[i32]) -> Vec<i8> {
    v.iter().map(|&x| x as i8).collect()
}

/// `Σ_k (a[i][k] - za[i]) (b[k][j] - zb[j])`, row-major `m x n`.
fn reference(
    a: &[i32],
    za: &[i32],
    b: &[i32],
    zb: &[i32],
    (m, k, n): (usize, usize, usize),
) -> Vec<i32> {
    let pick = |v: &[i32], i: usize| if v.len() == 1 { v[0] } else { v[i] };
    let mut c = vec![0i32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| (a[i * k + p] - pick(za, i)) * (b[p * n + j] - pick(zb, j)))
                .fold(0i32, i32::wrapping_add);
        }
    }
    c
}

fn slice<'a>(signed: bool, u: &'a [u8], s: &'a [i8]) -> IntSlice<'a> {
    if signed {
        IntSlice::I8(s)
    } else {
        IntSlice::U8(u)
    }
}

#[test]
fn int32_products_match_the_reference_for_every_sign_size_and_zero_point() {
    let mut rng = Rng::new(7);
    let shapes = [
        (1, 1, 1),
        (3, 5, 7),
        (8, 4, 32),
        (13, 37, 45),
        (17, 64, 33),
        (64, 129, 70),
        // AMX: two 32-row tiles (one partial), several 64-deep steps and a partial one, a
        // partial last strip, the next strip prefetched.
        (40, 300, 97),
    ];
    for isa in isas() {
        for &(m, k, n) in &shapes {
            for (a_signed, b_signed) in [(false, true), (true, true), (false, false), (true, false)]
            {
                let a = values(&mut rng, m * k, a_signed);
                let b = values(&mut rng, k * n, b_signed);
                let za = values(&mut rng, if m % 2 == 0 { m } else { 1 }, a_signed);
                let zb = values(&mut rng, if n % 2 == 1 { n } else { 1 }, b_signed);
                let (au, ai, bu, bi) = (to_u8(&a), to_i8(&a), to_u8(&b), to_i8(&b));
                // A also stored column by column (a channel-major convolution input).
                let a_t: Vec<i32> = (0..m * k).map(|x| a[(x % m) * k + x / m]).collect();
                let (atu, ati) = (to_u8(&a_t), to_i8(&a_t));
                let row_major = MatrixA::new(slice(a_signed, &au, &ai), m, k, (k, 1)).unwrap();
                let col_major = MatrixA::new(slice(a_signed, &atu, &ati), m, k, (1, m)).unwrap();
                let packed = PackedB::new(slice(b_signed, &bu, &bi), k, n, (n, 1)).unwrap();
                for (threads, a_mat) in [(1, row_major), (2, row_major), (1, col_major)] {
                    let mut c = vec![0i32; m * n];
                    let out = OutMat {
                        dest: Dest::I32(&mut c),
                        rs: n,
                        cs: 1,
                    };
                    igemm_with(
                        isa,
                        &a_mat,
                        &za,
                        packed.view(),
                        &zb,
                        out,
                        &Epilogue::default(),
                        threads,
                    );
                    assert_eq!(
                        c,
                        reference(&a, &za, &b, &zb, (m, k, n)),
                        "{isa:?} {m}x{k}x{n} signed ({a_signed}, {b_signed}) threads {threads} \
                         A strides ({}, {})",
                        a_mat.strides().0,
                        a_mat.strides().1
                    );
                }
            }
        }
    }
}

#[test]
fn extreme_values_do_not_saturate() {
    // 255 * 127 summed over K = 300: every pair sum overflows i16, the total fits i32.
    let (m, k, n) = (9, 300, 40);
    let a = vec![255i32; m * k];
    let b = vec![127i32; k * n];
    let expected = reference(&a, &[0], &b, &[0], (m, k, n));
    assert_eq!(expected[0], 255 * 127 * 300);
    let (au, bi) = (to_u8(&a), to_i8(&b));
    let b_neg: Vec<i8> = vec![-128; k * n];
    for isa in isas() {
        let a_mat = MatrixA::new(IntSlice::U8(&au), m, k, (k, 1)).unwrap();
        for (b_vals, want) in [(&bi, 255 * 127 * 300), (&b_neg, 255 * -128 * 300)] {
            let packed = PackedB::new(IntSlice::I8(b_vals), k, n, (n, 1)).unwrap();
            let mut c = vec![0i32; m * n];
            let out = OutMat {
                dest: Dest::I32(&mut c),
                rs: n,
                cs: 1,
            };
            igemm_with(
                isa,
                &a_mat,
                &[0],
                packed.view(),
                &[0],
                out,
                &Epilogue::default(),
                1,
            );
            assert!(c.iter().all(|&v| v == want), "{isa:?}: {:?}", &c[..4]);
        }
    }
}

#[test]
fn requantization_rounds_half_to_even_and_saturates_per_channel() {
    // A = identity rows picking B's row, so C[i][j] = B[i][j] exactly; scales 0.5 per column 0
    // and 1.0 per column 1 then expose the rounding of halves and the clamps.
    let (m, k, n) = (4, 4, 2);
    let a: Vec<u8> = (0..m * k).map(|x| u8::from(x / k == x % k)).collect();
    let b: Vec<i8> = vec![5, 100, 7, -100, -5, 127, -3, -128];
    let packed = PackedB::new(IntSlice::I8(&b), k, n, (n, 1)).unwrap();
    let a_mat = MatrixA::new(IntSlice::U8(&a), m, k, (k, 1)).unwrap();
    let scale = [0.5f32, 1.0];
    for isa in isas() {
        let mut c = vec![0u8; m * n];
        let epilogue = Epilogue {
            scale: Some(Requant {
                col: &scale,
                row: None,
            }),
            zero_point: 100,
            ..Epilogue::default()
        };
        let out = OutMat {
            dest: Dest::U8(&mut c),
            rs: n,
            cs: 1,
        };
        igemm_with(isa, &a_mat, &[0], packed.view(), &[0], out, &epilogue, 1);
        // 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, -1.5 -> -2 (plus 100); 200, 0, 227 -> 255, -28 -> 0.
        assert_eq!(
            c,
            [102, 200, 104, 0, 98, 227, 98, 0].map(|v: i32| v.clamp(0, 255) as u8)
        );
        let mut c = vec![0i8; m * n];
        let epilogue = Epilogue {
            zero_point: -10,
            ..epilogue
        };
        let out = OutMat {
            dest: Dest::I8(&mut c),
            rs: n,
            cs: 1,
        };
        igemm_with(isa, &a_mat, &[0], packed.view(), &[0], out, &epilogue, 1);
        assert_eq!(c, [-8, 90, -6, -110, -12, 117, -12, -128]);
    }
}

#[test]
fn float_output_scales_adds_bias_and_writes_transposed() {
    let mut rng = Rng::new(3);
    let (m, k, n) = (11, 19, 5);
    let a = values(&mut rng, m * k, false);
    let b = values(&mut rng, k * n, true);
    let (au, bi) = (to_u8(&a), to_i8(&b));
    let want = reference(&a, &[3], &b, &[0], (m, k, n));
    let scale: Vec<f32> = (0..n).map(|j| 0.25 * (j + 1) as f32).collect();
    let bias: Vec<f32> = (0..n).map(|j| j as f32 - 2.0).collect();
    for isa in isas() {
        let a_mat = MatrixA::new(IntSlice::U8(&au), m, k, (k, 1)).unwrap();
        let packed = PackedB::new(IntSlice::I8(&bi), k, n, (n, 1)).unwrap();
        let mut c = vec![0f32; m * n];
        let epilogue = Epilogue {
            scale: Some(Requant {
                col: &scale,
                row: None,
            }),
            bias_f32: Some(&bias),
            ..Epilogue::default()
        };
        // C stored column-major (as a convolution's [channel, pixel] output is).
        let out = OutMat {
            dest: Dest::F32(&mut c),
            rs: 1,
            cs: m,
        };
        igemm_with(isa, &a_mat, &[3], packed.view(), &[0], out, &epilogue, 2);
        for i in 0..m {
            for j in 0..n {
                let expect = want[i * n + j] as f32 * scale[j] + bias[j];
                assert_eq!(c[j * m + i], expect, "{isa:?} ({i}, {j})");
            }
        }
    }
}

#[test]
fn im2col_operand_matches_a_naive_convolution_with_padding_at_the_zero_point() {
    let mut rng = Rng::new(11);
    let (c_in, h, w, c_out, kh, kw) = (3, 7, 6, 5, 3, 2);
    let (stride, pad, dil) = ((2, 1), (1, 1), (1, 2));
    let out_h = (h + 2 * pad.0 - dil.0 * (kh - 1) - 1) / stride.0 + 1;
    let out_w = (w + 2 * pad.1 - dil.1 * (kw - 1) - 1) / stride.1 + 1;
    let x = values(&mut rng, c_in * h * w, true);
    let wt = values(&mut rng, c_out * c_in * kh * kw, true);
    let (x_zp, w_zp) = (-7, 2);
    let xi = to_i8(&x);
    let wi = to_i8(&wt);
    let k = c_in * kh * kw;
    let mut expected = vec![0i32; c_out * out_h * out_w];
    for co in 0..c_out {
        for oy in 0..out_h {
            for ox in 0..out_w {
                let mut s = 0;
                for ci in 0..c_in {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let iy = (oy * stride.0 + ky * dil.0) as isize - pad.0 as isize;
                            let ix = (ox * stride.1 + kx * dil.1) as isize - pad.1 as isize;
                            let inside =
                                (0..h as isize).contains(&iy) && (0..w as isize).contains(&ix);
                            let xv = if inside {
                                x[ci * h * w + iy as usize * w + ix as usize]
                            } else {
                                x_zp
                            };
                            s += (xv - x_zp) * (wt[co * k + (ci * kh + ky) * kw + kx] - w_zp);
                        }
                    }
                }
                expected[co * out_h * out_w + oy * out_w + ox] = s;
            }
        }
    }
    let geometry = Im2colGeometry {
        offset: 0,
        channels: c_in,
        in_h: h,
        in_w: w,
        kernel: (kh, kw),
        stride,
        dilation: dil,
        pad,
        out_h,
        out_w,
    };
    for isa in isas() {
        let a = Im2colA::new(IntSlice::I8(&xi), geometry, x_zp).unwrap();
        // B[k][co] = W[co][k]: strides (1, K).
        let packed = PackedB::new(IntSlice::I8(&wi), k, c_out, (1, k)).unwrap();
        let pixels = out_h * out_w;
        let mut c = vec![0i32; c_out * pixels];
        let out = OutMat {
            dest: Dest::I32(&mut c),
            rs: 1,
            cs: pixels,
        };
        igemm_with(
            isa,
            &a,
            &[x_zp],
            packed.view(),
            &[w_zp],
            out,
            &Epilogue::default(),
            1,
        );
        assert_eq!(c, expected, "{isa:?}");
    }
}

#[test]
fn bad_operands_are_errors() {
    let a = [1u8; 6];
    assert!(MatrixA::new(IntSlice::U8(&a), 2, 4, (4, 1)).is_err());
    let b = [1i8; 6];
    assert!(PackedB::new(IntSlice::I8(&b), 4, 2, (2, 1)).is_err());
    let a_mat = MatrixA::new(IntSlice::U8(&a), 2, 3, (3, 1)).unwrap();
    let packed = PackedB::new(IntSlice::I8(&b), 2, 3, (3, 1)).unwrap();
    let mut c = [0i32; 6];
    let run = |c: &mut [i32], rs, cs, za: &[i32]| {
        igemm(
            &a_mat,
            za,
            packed.view(),
            &[0],
            OutMat {
                dest: Dest::I32(c),
                rs,
                cs,
            },
            &Epilogue::default(),
            1,
        )
    };
    // Inner dims 3 vs 2.
    assert!(run(&mut c, 3, 1, &[0]).is_err());
    let packed3 = PackedB::new(IntSlice::I8(&[1i8; 9]), 3, 3, (3, 1)).unwrap();
    let run3 = |c: &mut [i32], rs, cs, za: &[i32], epilogue: &Epilogue<'_>| {
        igemm(
            &a_mat,
            za,
            packed3.view(),
            &[0],
            OutMat {
                dest: Dest::I32(c),
                rs,
                cs,
            },
            epilogue,
            1,
        )
    };
    assert!(run3(&mut c, 3, 1, &[0], &Epilogue::default()).is_ok());
    assert!(
        run3(&mut c, 4, 1, &[0], &Epilogue::default()).is_err(),
        "outside C"
    );
    assert!(
        run3(&mut c, 1, 1, &[0], &Epilogue::default()).is_err(),
        "overlapping C"
    );
    assert!(
        run3(&mut c, 3, 1, &[0, 0, 0], &Epilogue::default()).is_err(),
        "zero points"
    );
    let mut q = [0u8; 6];
    let quantized = igemm(
        &a_mat,
        &[0],
        packed3.view(),
        &[0],
        OutMat {
            dest: Dest::U8(&mut q),
            rs: 3,
            cs: 1,
        },
        &Epilogue::default(),
        1,
    );
    assert!(quantized.is_err(), "a u8 output without a scale");
}

#[test]
fn requantized_tiles_match_the_reference_in_both_layouts_with_zero_points_and_bias() {
    // Partial tiles in both directions, per-row A and per-column B zero points, an int32 bias
    // and per-column scales: the vectorized 8-bit write-back against a naive one.
    let mut rng = Rng::new(21);
    // The second shape takes AMX's partial tiles and steps (where the CPU has AMX).
    for ((m, k, n), (a_signed, b_signed, out_signed)) in [(13, 37, 45), (45, 130, 70)]
        .into_iter()
        .flat_map(|shape| [(shape, (false, true, false)), (shape, (true, false, true))])
    {
        let a = values(&mut rng, m * k, a_signed);
        let b = values(&mut rng, k * n, b_signed);
        let za = values(&mut rng, m, a_signed);
        let zb = values(&mut rng, n, b_signed);
        let bias: Vec<i32> = (0..n).map(|j| j as i32 * 97 - 2000).collect();
        let scale: Vec<f32> = (0..n).map(|j| 1e-4 + j as f32 * 3e-5).collect();
        let zero_point = if out_signed { -7 } else { 131 };
        let (lo, hi) = if out_signed { (-128, 127) } else { (0, 255) };
        let acc = reference(&a, &za, &b, &zb, (m, k, n));
        let want: Vec<i32> = acc
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let j = i % n;
                let x = (v + bias[j]) as f32 * scale[j];
                (x.round_ties_even() as i32 + zero_point).clamp(lo, hi)
            })
            .collect();
        assert!(want.contains(&lo) && want.iter().any(|&v| v != lo && v != hi));
        let (au, ai, bu, bi) = (to_u8(&a), to_i8(&a), to_u8(&b), to_i8(&b));
        let packed = PackedB::new(slice(b_signed, &bu, &bi), k, n, (n, 1)).unwrap();
        let a_mat = MatrixA::new(slice(a_signed, &au, &ai), m, k, (k, 1)).unwrap();
        let epilogue = Epilogue {
            bias_i32: Some(&bias),
            scale: Some(Requant {
                col: &scale,
                row: None,
            }),
            zero_point,
            bias_f32: None,
        };
        for isa in isas() {
            for transposed in [false, true] {
                let (rs, cs) = if transposed { (1, m) } else { (n, 1) };
                let mut cu = vec![0u8; m * n];
                let mut ci = vec![0i8; m * n];
                let dest = if out_signed {
                    Dest::I8(&mut ci)
                } else {
                    Dest::U8(&mut cu)
                };
                let out = OutMat { dest, rs, cs };
                igemm_with(isa, &a_mat, &za, packed.view(), &zb, out, &epilogue, 2);
                for i in 0..m {
                    for j in 0..n {
                        let got = if out_signed {
                            i32::from(ci[i * rs + j * cs])
                        } else {
                            i32::from(cu[i * rs + j * cs])
                        };
                        assert_eq!(
                            got,
                            want[i * n + j],
                            "{isa:?} {m}x{k}x{n} transposed {transposed} ({i}, {j})"
                        );
                    }
                }
            }
        }
    }
}
