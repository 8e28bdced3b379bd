//! [`Q4Slivers`]: every fill (AVX-512, AVX2, portable) and the product on each ISA against the
//! weights dequantized straight from their integers, for every block size and kind of zero
//! point, sizes off the 32-feature and 32-step grids, and 1 to 3 threads.

use super::q4_slivers_product::fill_block_portable;
use super::*;
use crate::kernels::gemm::BBlock;

/// A random `n × k` matrix: its integers, scales and zero points (8, integers or floats), the
/// layout's buffers, and the dequantized values `(q - zero) · scale` with `|zero · scale|` for
/// the error bound of `q · scale - zero · scale`.
struct Case {
    qs: Vec<u8>,
    params: Vec<f32>,
    values: Vec<f32>,
    offsets: Vec<f32>,
}

fn case(n: usize, k: usize, block: usize, zeros: u8, seed: u32) -> Case {
    let nb = k.div_ceil(block);
    let hash =
        |i: usize, salt: u32| ((i as u32 ^ seed ^ salt).wrapping_mul(2654435761) >> 7) as usize;
    let q: Vec<u8> = (0..n * k).map(|i| (hash(i, 1) % 16) as u8).collect();
    let scales: Vec<f32> = (0..n * nb)
        .map(|b| 0.002 + (hash(b, 2) % 1000) as f32 * 1e-5)
        .collect();
    let zero = |b: usize| match zeros {
        0 => 8.0,
        1 => (hash(b, 3) % 16) as f32,
        _ => (hash(b, 4) % 1600) as f32 / 100.0,
    };
    let mut qs = vec![0xA5u8; Q4Slivers::qs_len(n, k)];
    let mut params = vec![f32::NAN; Q4Slivers::params_len(n, k, block)];
    pack_slivers(
        (n, k, block),
        |j, p| q[j * k + p],
        |j, b| (scales[j * nb + b], zero(j * nb + b)),
        &mut qs,
        &mut params,
    )
    .unwrap();
    let values = (0..n * k)
        .map(|i| {
            let b = (i / k) * nb + (i % k) / block;
            (q[i] as f32 - zero(b)) * scales[b]
        })
        .collect();
    let offsets = (0..n * k)
        .map(|i| {
            let b = (i / k) * nb + (i % k) / block;
            (zero(b) * scales[b]).abs()
        })
        .collect();
    Case {
        qs,
        params,
        values,
        offsets,
    }
}

fn isas() -> Vec<Isa> {
    [Isa::Portable, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.is_available())
        .collect()
}

/// Dequantizing by one multiply-add (`q · s + (-z · s)`) rounds `z · s` once more than
/// `(q - z) · s`.
fn close(got: f32, want: f32, offset: f32) -> bool {
    (got - want).abs() <= 1e-6 * (want.abs() + offset) + 1e-9
}

#[test]
fn fills_write_the_gemm_layout_for_every_width_offset_and_block_size() {
    for block in [16, 32, 64, 128] {
        for (n, k) in [(70, 300), (32, 64), (45, 17), (96, 130)] {
            for zeros in 0..3u8 {
                let c = case(
                    n,
                    k,
                    block,
                    zeros,
                    (block * 3 + n + k) as u32 + zeros as u32,
                );
                let w = Q4Slivers::new(n, k, block, &c.qs, &c.params).unwrap();
                let mut row = vec![0.0f32; k];
                w.dequantize_row(n - 1, &mut row);
                for (p, (&g, &v)) in row.iter().zip(&c.values[(n - 1) * k..]).enumerate() {
                    assert!(
                        close(g, v, c.offsets[(n - 1) * k + p]),
                        "row {p}: {g} vs {v}"
                    );
                }
                for nr in [32, 16, 8] {
                    // Blocks starting on and off the 32-step grid, crossing quantization
                    // blocks, from the first and from a later sliver, to the last column.
                    let j0s = [0, nr, (n / 2 / nr) * nr];
                    let depths = [(0, k), (5, (k - 5).min(40)), (k / 2, k - k / 2), (k - 1, 1)];
                    for j0 in j0s.into_iter().filter(|&j| j < n) {
                        for cols in [n - j0, (n - j0).min(nr + 3), 1] {
                            for (p0, kc) in depths {
                                let blk = BBlock {
                                    p0,
                                    kc,
                                    j0,
                                    cols,
                                    nr,
                                };
                                for isa in isas() {
                                    let mut dst = vec![f32::NAN; blk.elements() + 3];
                                    if isa == Isa::Portable {
                                        fill_block_portable(&w, blk, &mut dst);
                                    } else {
                                        q4s_fill_block(isa, &w, blk, &mut dst);
                                    }
                                    check_block(&c, k, blk, &dst, isa);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn check_block(c: &Case, k: usize, blk: BBlock, dst: &[f32], isa: Isa) {
    let (kc, nr) = (blk.kc, blk.nr);
    for (at, &got) in dst.iter().enumerate() {
        if at >= blk.elements() {
            assert!(got.is_nan(), "{isa:?} {blk:?} wrote past the block at {at}");
            continue;
        }
        let (s, p, l) = (at / (kc * nr), at / nr % kc, at % nr);
        let j = blk.j0 + s * nr + l;
        if s * nr + l >= blk.cols {
            assert_eq!(
                got.to_bits(),
                0,
                "{isa:?} {blk:?}: lane {l} past the columns"
            );
            continue;
        }
        let i = j * k + blk.p0 + p;
        assert!(
            close(got, c.values[i], c.offsets[i]),
            "{isa:?} {blk:?} sliver {s} step {p} lane {l}: {got} vs {}",
            c.values[i]
        );
    }
}

#[test]
fn products_match_the_dequantized_reference_on_every_isa_and_thread_count() {
    let pool = crate::parallel::ThreadPool::new(3).unwrap();
    for block in [16, 32, 64, 128] {
        // 290 x 520: several column and depth blocks of the GEMM; 2100 x 40: decode rows
        // split over threads.
        for (n, k) in [(37, 256), (70, 300), (9, 17), (290, 520), (2100, 40)] {
            for zeros in 0..3u8 {
                let c = case(n, k, block, zeros, (block + k + n) as u32 ^ zeros as u32);
                let w = Q4Slivers::new(n, k, block, &c.qs, &c.params).unwrap();
                for m in [1, 2, 3, 4, 5, 33] {
                    let x = activations(m * k, (m * 31 + k) as u32);
                    for isa in isas() {
                        for threads in 1..=3 {
                            let mut y = vec![f32::NAN; m * n];
                            crate::parallel::install(&pool, || {
                                q4s_matmul_with(isa, &w, &x, m, &mut y, threads, None)
                            })
                            .unwrap();
                            check_product(&c, &x, (m, n, k), &y, &format!("{isa:?} t{threads}"));
                        }
                    }
                }
            }
        }
    }
}

fn activations(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2654435761) >> 8;
            (h % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// `y` against the f64 product on the dequantized values, within f32 accumulation error.
fn check_product(c: &Case, x: &[f32], (m, n, k): (usize, usize, usize), y: &[f32], what: &str) {
    for i in 0..m {
        for j in 0..n {
            let (xi, at) = (&x[i * k..(i + 1) * k], j * k);
            let mut want = 0.0f64;
            let mut bound = 1e-5f64;
            for (p, &xv) in xi.iter().enumerate() {
                let (v, o) = (c.values[at + p] as f64, c.offsets[at + p] as f64);
                want += v * xv as f64;
                bound += (v.abs() * 5e-5 + o * 1e-6) * (xv as f64).abs();
            }
            let got = y[i * n + j] as f64;
            assert!(
                (got - want).abs() <= bound,
                "{what} m {m} n {n} k {k} ({i},{j}): {got} vs {want} (bound {bound})"
            );
        }
    }
}

#[test]
fn the_epilogue_sees_finished_rows_on_both_paths() {
    let (n, k) = (100, 96);
    let c = case(n, k, 32, 1, 7);
    let w = Q4Slivers::new(n, k, 32, &c.qs, &c.params).unwrap();
    let finish = |i: usize, j: usize, row: &mut [f32]| {
        for (t, v) in row.iter_mut().enumerate() {
            *v = *v * 2.0 + (1000 * i + j + t) as f32;
        }
    };
    for m in [2, 9] {
        let x = activations(m * k, 3);
        let mut plain = vec![0.0f32; m * n];
        q4s_matmul_fused(&w, &x, m, &mut plain, 1, None).unwrap();
        let mut fused = vec![f32::NAN; m * n];
        q4s_matmul_fused(&w, &x, m, &mut fused, 2, Some(&finish)).unwrap();
        for (t, (&f, &p)) in fused.iter().zip(&plain).enumerate() {
            let want = p * 2.0 + (1000 * (t / n) + t % n) as f32;
            assert!(
                (f - want).abs() <= 1e-4 * want.abs(),
                "m {m} at {t}: {f} vs {want}"
            );
        }
    }
}

#[test]
fn wrong_sizes_are_errors() {
    let c = case(40, 64, 32, 0, 1);
    assert!(Q4Slivers::new(40, 64, 24, &c.qs, &c.params).is_err());
    assert!(Q4Slivers::new(40, 64, 32, &c.qs[1..], &c.params).is_err());
    assert!(Q4Slivers::new(40, 64, 32, &c.qs, &c.params[1..]).is_err());
    assert!(Q4Slivers::new(40, 64, 16, &c.qs, &c.params).is_err());
    let w = Q4Slivers::new(40, 64, 32, &c.qs, &c.params).unwrap();
    let mut y = vec![0.0f32; 40];
    assert!(q4s_matmul_fused(&w, &[0.0; 63], 1, &mut y, 1, None).is_err());
    assert!(q4s_matmul_fused(&w, &[0.0; 64], 1, &mut y[1..], 1, None).is_err());
    let (mut qs, mut params) = (c.qs.clone(), c.params.clone());
    let bad = pack_slivers(
        (40, 64, 32),
        |_, _| 0,
        |_, _| (1.0, 0.0),
        &mut qs[1..],
        &mut params,
    );
    assert!(bad.is_err());
}
