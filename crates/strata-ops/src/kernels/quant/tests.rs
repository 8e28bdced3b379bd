//! Every quantized product against the f32 reference on dequantized weights, for every weight
//! type, strategy, ISA and thread count; embedding lookup against row dequantization.

use strata_core::dtype::block::{dequantize_row, random_blocks, GGUF_WEIGHT_TYPES};
use strata_core::{DType, QUANT_BLOCK};

use super::*;

fn activations(len: usize, seed: u32) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2654435761) >> 8;
            (h % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// The reference `y = x · Wᵀ` in f64 on dequantized weights, and for each output the bound on
/// the error f32 accumulation and, for the integer dot, quantizing the activations to 8 bits
/// (Σ |w| · half a step) may add.
fn reference(w: &[f32], x: &[f32], m: usize, n: usize, k: usize, q8: bool) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0f64; m * n];
    let mut bound = vec![0.0f64; m * n];
    for i in 0..m {
        let xi = &x[i * k..(i + 1) * k];
        for j in 0..n {
            let wj = &w[j * k..(j + 1) * k];
            let mut sum = 0.0f64;
            let mut err = 0.0f64;
            for b in 0..k.div_ceil(32) {
                let end = (b * 32 + 32).min(k);
                let amax = xi[b * 32..end].iter().fold(0.0f32, |a, v| a.max(v.abs())) as f64;
                for t in b * 32..end {
                    sum += wj[t] as f64 * xi[t] as f64;
                    // f32 accumulation: a generous k·ε relative to Σ |w·x|.
                    err += (wj[t] as f64 * xi[t] as f64).abs() * 5e-5;
                    if q8 {
                        err += wj[t].abs() as f64 * amax / 254.0;
                    }
                }
            }
            y[i * n + j] = sum;
            bound[i * n + j] = err * 1.01 + 1e-5;
        }
    }
    (y, bound)
}

#[test]
fn products_match_the_dequantized_reference() {
    let isas: Vec<Isa> = [Isa::Portable, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.is_available())
        .collect();
    for dtype in GGUF_WEIGHT_TYPES {
        for (m, n, k) in [(1, 37, 256), (3, 5, 512), (7, 130, 768)] {
            let bytes = random_blocks(dtype, n * k, dtype as u64 + k as u64, 0.02).unwrap();
            let w = QuantMatrix::new(dtype, n, k, &bytes).unwrap();
            let mut wf = vec![0.0f32; n * k];
            dequantize_row(dtype, &bytes, &mut wf).unwrap();
            let x = activations(m * k, m as u32);
            for strategy in [Strategy::IntDot, Strategy::Dequant] {
                if !strategy.supports(dtype) {
                    continue;
                }
                let (want, bound) = reference(&wf, &x, m, n, k, strategy == Strategy::IntDot);
                for &isa in &isas {
                    for threads in [1, 2] {
                        let mut y = vec![f32::NAN; m * n];
                        let mut scratch = vec![Q8Block::default(); m * k / 32];
                        quant_matmul_with(strategy, isa, &w, &x, m, &mut y, &mut scratch, threads)
                            .unwrap();
                        for (t, (&got, (&want, &bound))) in
                            y.iter().zip(want.iter().zip(&bound)).enumerate()
                        {
                            assert!(
                                (got as f64 - want).abs() <= bound,
                                "{dtype} {strategy:?} {isa:?} m={m} n={n} k={k} threads={threads} \
                                 at {t}: {got} vs {want} (bound {bound})"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_default_entry_point_uses_its_scratch_and_checks_lengths() {
    let (m, n, k) = (2, 64, 256);
    let bytes = random_blocks(DType::Q4_1, n * k, 1, 0.02).unwrap();
    let w = QuantMatrix::new(DType::Q4_1, n, k, &bytes).unwrap();
    let x = activations(m * k, 3);
    let mut y = vec![0.0f32; m * n];
    let mut scratch = vec![Q8Block::default(); quant_matmul_scratch_len(DType::Q4_1, m, k)];
    quant_matmul(&w, &x, m, &mut y, &mut scratch, 2).unwrap();
    assert!(y.iter().all(|v| v.is_finite()));
    assert!(matches!(
        quant_matmul(&w, &x, m, &mut y, &mut [], 1),
        Err(KernelError::BufferLength {
            buffer: "scratch",
            ..
        })
    ));
    assert!(matches!(
        quant_matmul(&w, &x[1..], m, &mut y, &mut scratch, 1),
        Err(KernelError::BufferLength { buffer: "x", .. })
    ));
    assert!(QuantMatrix::new(DType::Q4_1, n, k, &bytes[1..]).is_err());
    assert!(QuantMatrix::new(DType::Q4_1, n, 48, &bytes).is_err());
    assert!(QuantMatrix::new(DType::I32, 1, 4, &[0; 16]).is_err());
    assert_eq!(quant_matmul_scratch_len(DType::Q6_K, m, k), 0);
    assert_eq!(Strategy::best(DType::Q4_1, 1), Strategy::IntDot);
    assert_eq!(Strategy::best(DType::Q4_1, 64), Strategy::Dequant);
    assert_eq!(Strategy::best(DType::Q4_K, 1), Strategy::Dequant);
}

#[test]
fn embedding_rows_are_dequantized_rows() {
    for dtype in GGUF_WEIGHT_TYPES {
        let (rows, cols) = (10, 256);
        let bytes = random_blocks(dtype, rows * cols, 5, 0.05).unwrap();
        let table = QuantMatrix::new(dtype, rows, cols, &bytes).unwrap();
        let ids = [3i64, 0, 9, 3];
        let mut out = vec![0.0f32; ids.len() * cols];
        embedding_lookup(&table, &ids, &mut out).unwrap();
        for (t, &id) in ids.iter().enumerate() {
            let mut want = vec![0.0f32; cols];
            dequantize_row(dtype, table.row(id as usize), &mut want).unwrap();
            assert_eq!(&out[t * cols..(t + 1) * cols], &want[..], "{dtype} id {id}");
        }
        let err = embedding_lookup(&table, &[10], &mut out[..cols]).unwrap_err();
        assert!(err.to_string().contains("10 is outside"), "{err}");
        assert!(embedding_lookup(&table, &[-1], &mut out[..cols]).is_err());
    }
}

/// The four-activation-row integer dots (prefill) give bit for bit the one-row dot's numbers
/// (llama.cpp's order) on every ISA, for random and raw blocks, so
/// a product's rows do not depend on how many rows share it.
#[test]
fn four_row_integer_dots_equal_one_row_dots() {
    let isas = [Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.is_available());
    for isa in isas {
        for dtype in GGUF_WEIGHT_TYPES {
            let (Some(dot), Some(dot4)) = (int_dot_kernel(dtype, isa), int_dot_kernel4(dtype, isa))
            else {
                continue;
            };
            for (n, k) in [(3, 320), (2, 32), (2, 1536)] {
                let blocks = k / QUANT_BLOCK;
                for raw in [false, true] {
                    let seed = 7 + dtype as u32 + k as u32;
                    let bytes = if raw {
                        raw_blocks(dtype, n * blocks, seed)
                    } else {
                        random_blocks(dtype, n * k, seed as u64, 0.02).unwrap()
                    };
                    let w = QuantMatrix::new(dtype, n, k, &bytes).unwrap();
                    let x = activations(4 * k, 11 + k as u32);
                    let mut xq = vec![Q8Block::default(); 4 * blocks];
                    quantize_activations(&x, &mut xq);
                    for j in 0..n {
                        let ys = std::array::from_fn(|r| &xq[r * blocks..(r + 1) * blocks]);
                        // SAFETY: both kernels are for an available ISA; whole blocks of equal
                        // counts.
                        let four = unsafe { dot4(w.row(j), ys) };
                        for (r, &v) in four.iter().enumerate() {
                            // SAFETY: as above.
                            let one = unsafe { dot(w.row(j), ys[r]) };
                            assert_eq!(
                                v.to_bits(),
                                one.to_bits(),
                                "{isa:?} {dtype} k {k} raw {raw} row {j} activation row {r}: \
                                 {v} vs {one}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Blocks of `dtype` with every quantized byte random (all nibbles, fifth bits and q8 values,
/// -128 included, which the quantizer never writes) and finite f16 scales and offsets.
fn raw_blocks(dtype: DType, blocks: usize, seed: u32) -> Vec<u8> {
    let size = dtype.bytes_for(QUANT_BLOCK).unwrap();
    let mut bytes: Vec<u8> = (0..blocks * size)
        .map(|i| ((i as u32 ^ seed).wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let halves = if matches!(dtype, DType::Q4_1 | DType::Q5_1) {
        2
    } else {
        1
    };
    for (b, block) in bytes.chunks_exact_mut(size).enumerate() {
        for h in 0..halves {
            let v = (b as f32 * 0.37 + h as f32).sin() * 0.01;
            let bits = crate::support::f16_bits::f32_to_f16(v).to_le_bytes();
            block[2 * h..2 * h + 2].copy_from_slice(&bits);
        }
    }
    bytes
}

/// The four-weight-row dots (decode's matrix-vector step) give bit for bit the one-row dot's
/// numbers for each row, on every ISA: random and raw blocks, block counts that are not a
/// multiple of four (1, 3, 10, 48), and rows that are not consecutive in memory.
#[test]
fn four_weight_row_dots_equal_one_row_dots() {
    let isas = [Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.is_available());
    for isa in isas {
        for dtype in GGUF_WEIGHT_TYPES {
            let (Some(dot), Some(rows4)) = (int_dot_kernel(dtype, isa), int_dot_rows4(dtype, isa))
            else {
                continue;
            };
            for (n, k) in [(8, 320), (8, 32), (12, 96), (4, 1536)] {
                let blocks = k / QUANT_BLOCK;
                for raw in [false, true] {
                    let seed = 13 + dtype as u32 + k as u32;
                    let bytes = if raw {
                        raw_blocks(dtype, n * blocks, seed)
                    } else {
                        random_blocks(dtype, n * k, seed as u64, 0.02).unwrap()
                    };
                    let w = QuantMatrix::new(dtype, n, k, &bytes).unwrap();
                    let x = activations(k, 17 + k as u32);
                    let mut xq = vec![Q8Block::default(); blocks];
                    quantize_activations(&x, &mut xq);
                    let groups = (0..n / 4)
                        .map(|g| [4 * g, 4 * g + 1, 4 * g + 2, 4 * g + 3])
                        .chain([[n - 1, 0, n / 2, 1]]);
                    for group in groups {
                        let rows = group.map(|j| w.row(j));
                        // SAFETY: both kernels are for an available ISA; whole blocks of equal
                        // counts.
                        let four = unsafe { rows4(rows, &xq) };
                        for (&j, &v) in group.iter().zip(&four) {
                            // SAFETY: as above.
                            let one = unsafe { dot(w.row(j), &xq) };
                            assert_eq!(
                                v.to_bits(),
                                one.to_bits(),
                                "{isa:?} {dtype} k {k} raw {raw} weight row {j}: {v} vs {one}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The raw blocks' products (every byte value) agree with the dequantized reference on every
/// ISA, so the bit-equal vector forms are also right.
#[test]
fn raw_block_products_match_the_dequantized_reference() {
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
    ] {
        let (m, n, k) = (1, 13, 160);
        let bytes = raw_blocks(dtype, n * k / QUANT_BLOCK, 5 + dtype as u32);
        let w = QuantMatrix::new(dtype, n, k, &bytes).unwrap();
        let mut wf = vec![0.0f32; n * k];
        dequantize_row(dtype, &bytes, &mut wf).unwrap();
        let x = activations(m * k, 23);
        let (want, bound) = reference(&wf, &x, m, n, k, true);
        for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512] {
            if !isa.is_available() {
                continue;
            }
            let mut y = vec![f32::NAN; m * n];
            let mut scratch = vec![Q8Block::default(); m * k / QUANT_BLOCK];
            quant_matmul_with(Strategy::IntDot, isa, &w, &x, m, &mut y, &mut scratch, 1).unwrap();
            for (j, (&got, (&want, &bound))) in y.iter().zip(want.iter().zip(&bound)).enumerate() {
                assert!(
                    (got as f64 - want).abs() <= bound,
                    "{dtype} {isa:?} row {j}: {got} vs {want} (bound {bound})"
                );
            }
        }
    }
}

/// A matrix-vector product large enough to be split over threads gives the one-thread numbers
/// bit for bit: chunks start every few rows and the odd rows at the end go one at a time.
#[test]
fn split_matrix_vector_products_equal_one_thread() {
    let pool = crate::parallel::ThreadPool::new(2).unwrap();
    let (n, k) = (517, 512);
    assert!(n * k >= DECODE_PARALLEL_MIN_WEIGHTS);
    for dtype in [DType::Q4_1, DType::Q8_0] {
        let bytes = random_blocks(dtype, n * k, 3, 0.02).unwrap();
        let w = QuantMatrix::new(dtype, n, k, &bytes).unwrap();
        let x = activations(k, 5);
        let mut scratch = vec![Q8Block::default(); k / QUANT_BLOCK];
        let isa = Isa::detect();
        let mut one = vec![f32::NAN; n];
        quant_matmul_with(Strategy::IntDot, isa, &w, &x, 1, &mut one, &mut scratch, 1).unwrap();
        let mut two = vec![f32::NAN; n];
        crate::parallel::install(&pool, || {
            quant_matmul_with(Strategy::IntDot, isa, &w, &x, 1, &mut two, &mut scratch, 2)
        })
        .unwrap();
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&one), bits(&two), "{dtype}");
        let dot = int_dot_kernel(dtype, isa).unwrap();
        for j in [0, 1, 255, 512, 516] {
            // SAFETY: the kernel is for the detected ISA; whole blocks of equal counts.
            let want = unsafe { dot(w.row(j), &scratch) };
            assert_eq!(one[j].to_bits(), want.to_bits(), "{dtype} row {j}");
        }
    }
}

/// A random `n × k` 4-bit matrix in [`Q4Weights`]' layout, and its f32 values computed
/// directly from the unpacked integers.
struct Q4Case {
    qs: Vec<u8>,
    scales: Vec<f32>,
    int_zeros: Vec<u8>,
    float_zeros: Vec<f32>,
    values: Vec<f32>,
}

fn q4_case(n: usize, k: usize, block: usize, zeros: u8, seed: u32) -> Q4Case {
    let nb = k.div_ceil(block);
    let hash =
        |i: usize, salt: u32| ((i as u32 ^ seed ^ salt).wrapping_mul(2654435761) >> 7) as usize;
    let q: Vec<u8> = (0..n * k).map(|i| (hash(i, 1) % 16) as u8).collect();
    let scales: Vec<f32> = (0..n * nb)
        .map(|b| 0.002 + (hash(b, 2) % 1000) as f32 * 1e-5)
        .collect();
    let int_zeros: Vec<u8> = (0..n * nb).map(|b| (hash(b, 3) % 16) as u8).collect();
    let float_zeros: Vec<f32> = (0..n * nb)
        .map(|b| (hash(b, 4) % 1600) as f32 / 100.0)
        .collect();
    let groups = k.div_ceil(32);
    let mut qs = Vec::new();
    for j in 0..n {
        for g in 0..groups {
            let vals: [u8; 32] = std::array::from_fn(|t| {
                let kk = g * 32 + t;
                if kk < k {
                    q[j * k + kk]
                } else {
                    0
                }
            });
            qs.extend_from_slice(&pack_group(&vals));
        }
    }
    let values = (0..n * k)
        .map(|i| {
            let (j, kk) = (i / k, i % k);
            let b = j * nb + kk / block;
            let z = match zeros {
                0 => 8.0,
                1 => int_zeros[b] as f32,
                _ => float_zeros[b],
            };
            (q[i] as f32 - z) * scales[b]
        })
        .collect();
    Q4Case {
        qs,
        scales,
        int_zeros,
        float_zeros,
        values,
    }
}

#[test]
fn q4_products_match_the_dequantized_reference_for_every_block_size() {
    let isas: Vec<Isa> = [Isa::Portable, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.is_available())
        .collect();
    let pool = crate::parallel::ThreadPool::new(2).unwrap();
    for block in [16, 32, 64, 128, 256] {
        // 290 x 520: several column and depth blocks of the GEMM (dequantized block by block).
        for (n, k) in [(37, 256), (70, 300), (9, 17), (290, 520)] {
            for zeros in 0..3u8 {
                let c = q4_case(n, k, block, zeros, (block + k + zeros as usize) as u32);
                let z = match zeros {
                    0 => Q4Zeros::Default,
                    1 => Q4Zeros::Int(&c.int_zeros),
                    _ => Q4Zeros::Float(&c.float_zeros),
                };
                let w = Q4Weights::new(n, k, block, &c.qs, &c.scales, z).unwrap();
                let mut row = vec![0.0f32; k];
                w.dequantize_row(n - 1, &mut row);
                assert_eq!(row, c.values[(n - 1) * k..]);
                for m in [1, 3, 5, 33] {
                    let x = activations(m * k, m as u32 * 7 + k as u32);
                    let (want, f32_bound) = reference(&c.values, &x, m, n, k, false);
                    for compute in [Compute::F32, Compute::Int8] {
                        if compute == Compute::Int8 && zeros == 2 {
                            let mut y = vec![0.0f32; m * n];
                            assert!(q4_matmul(&w, compute, &x, m, &mut y, 1).is_err());
                            continue;
                        }
                        for &isa in &isas {
                            for threads in [1, 2] {
                                let mut y = vec![f32::NAN; m * n];
                                crate::parallel::install(&pool, || {
                                    q4_matmul_with(isa, &w, compute, &x, m, &mut y, threads, None)
                                })
                                .unwrap();
                                for (t, (&g, &r)) in y.iter().zip(&want).enumerate() {
                                    let (i, j) = (t / n, t % n);
                                    let bound = if compute == Compute::F32 {
                                        f32_bound[t]
                                    } else {
                                        // 8-bit activations: half a step of each block's absmax
                                        // per |w|, plus the f16 rounding of the scales.
                                        let xi = &x[i * k..(i + 1) * k];
                                        let wj = &c.values[j * k..(j + 1) * k];
                                        let mut e = 0.0f64;
                                        for (b, xs) in xi.chunks(32).enumerate() {
                                            let amax =
                                                xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                                            for (u, xv) in xs.iter().enumerate() {
                                                let wv = wj[b * 32 + u] as f64;
                                                e += wv.abs() * amax as f64 / 254.0
                                                    + (wv * *xv as f64).abs() * 1e-3;
                                            }
                                        }
                                        e * 1.01 + 1e-5
                                    };
                                    assert!(
                                        (g as f64 - r).abs() <= bound,
                                        "block {block} n {n} k {k} zeros {zeros} m {m} \
                                         {compute:?} {isa:?} t{threads} ({i},{j}): {g} vs {r} \
                                         (bound {bound})"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn q4_weights_reject_wrong_sizes() {
    let c = q4_case(2, 64, 32, 1, 1);
    assert!(Q4Weights::new(2, 64, 24, &c.qs, &c.scales, Q4Zeros::Default).is_err());
    assert!(Q4Weights::new(2, 64, 32, &c.qs[1..], &c.scales, Q4Zeros::Default).is_err());
    assert!(Q4Weights::new(2, 64, 32, &c.qs, &c.scales[1..], Q4Zeros::Default).is_err());
    assert!(Q4Weights::new(2, 64, 32, &c.qs, &c.scales, Q4Zeros::Int(&c.int_zeros[1..])).is_err());
    let w = Q4Weights::new(2, 64, 32, &c.qs, &c.scales, Q4Zeros::Default).unwrap();
    let mut y = vec![0.0f32; 2];
    assert!(q4_matmul(&w, Compute::F32, &[0.0; 63], 1, &mut y, 1).is_err());
}

#[test]
fn vectorized_activation_quantization_equals_the_scalar_one() {
    if !Isa::Avx2.is_available() {
        return;
    }
    let mut x = activations(32 * 40, 11);
    // Ties: block 1 holds multiples of absmax/254 (half steps), block 2 is all zeros.
    for (i, v) in x[32..64].iter_mut().enumerate() {
        *v = (i as f32 - 16.0) * 0.5 * 127.0 / 254.0 * (16.0 / 127.0);
    }
    x[32] = 16.0 * 0.5 * 127.0 / 254.0 * (16.0 / 127.0) * 127.0 / 8.0;
    x[64..96].fill(0.0);
    x[100] = 1e-30;
    let mut want = vec![Q8Block::default(); 40];
    let mut got = vec![Q8Block::default(); 40];
    q8::quantize_portable(&x, &mut want);
    // SAFETY: AVX2, FMA and F16C were checked above.
    unsafe { avx2::quantize_activations(&x, &mut got) };
    assert_eq!(got, want);
    if Isa::Avx512.is_available() {
        let mut got = vec![Q8Block::default(); 40];
        // SAFETY: the AVX-512 set was checked just above.
        unsafe { avx512::quantize_activations(&x, &mut got) };
        assert_eq!(got, want);
    }
}

/// The vector float dots (the dequantizing strategy's) agree with an f64 dot within f32
/// accumulation error on every ISA, for lengths around every vector and unroll width (tails
/// included).
#[test]
fn float_dots_match_an_f64_dot() {
    let isas: Vec<Isa> = [Isa::Portable, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|i| i.is_available())
        .collect();
    let a = activations(1100, 3);
    let b = activations(1100, 5);
    for n in (0..80).chain([127, 128, 129, 576, 1000, 1100]) {
        let (x, y) = (&a[..n], &b[..n]);
        let want: f64 = x
            .iter()
            .zip(y)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum();
        let size: f64 = x.iter().zip(y).map(|(&p, &q)| f64::from(p * q).abs()).sum();
        // Each lane sums at most n/8 products (the portable dot's eight lanes), then a few adds.
        let bound = size * (n / 8 + 16) as f64 * f64::from(f32::EPSILON) + 1e-30;
        for &isa in &isas {
            let got = dot_f32(isa, x, y);
            assert!(
                (f64::from(got) - want).abs() <= bound,
                "{isa:?} n {n}: {got} vs {want} (bound {bound})"
            );
        }
    }
}
