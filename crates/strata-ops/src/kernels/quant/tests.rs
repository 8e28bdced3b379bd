//! Every quantized product against the f32 reference on dequantized weights, for every weight
//! type, strategy, ISA and thread count; embedding lookup against row dequantization.

use strata_core::dtype::block::{dequantize_row, random_blocks, GGUF_WEIGHT_TYPES};
use strata_core::DType;

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
            for b in 0..k / 32 {
                let amax = xi[b * 32..b * 32 + 32]
                    .iter()
                    .fold(0.0f32, |a, v| a.max(v.abs())) as f64;
                for t in b * 32..b * 32 + 32 {
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
    let isas: Vec<Isa> = [Isa::Portable, Isa::Avx2]
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

/// The four-row integer dots give bit for bit the one-row dot's numbers (llama.cpp's order), so
/// a product's rows do not depend on how many rows share it.
#[test]
fn four_row_integer_dots_equal_one_row_dots() {
    for dtype in GGUF_WEIGHT_TYPES {
        let (Some(dot), Some(dot4)) = (
            int_dot_kernel(dtype, Isa::detect()),
            int_dot_kernel4(dtype, Isa::detect()),
        ) else {
            continue;
        };
        let (n, k) = (3, 320);
        let bytes = random_blocks(dtype, n * k, 7 + dtype as u64, 0.02).unwrap();
        let w = QuantMatrix::new(dtype, n, k, &bytes).unwrap();
        let blocks = k / 32;
        let x = activations(4 * k, 11);
        let mut xq = vec![Q8Block::default(); 4 * blocks];
        quantize_activations(&x, &mut xq);
        for j in 0..n {
            let ys = std::array::from_fn(|r| &xq[r * blocks..(r + 1) * blocks]);
            // SAFETY: both kernels are for the detected ISA; whole blocks of equal counts.
            let four = unsafe { dot4(w.row(j), ys) };
            for (r, &v) in four.iter().enumerate() {
                // SAFETY: as above.
                let one = unsafe { dot(w.row(j), ys[r]) };
                assert_eq!(
                    v.to_bits(),
                    one.to_bits(),
                    "{dtype} row {j} activation row {r}"
                );
            }
        }
    }
}
