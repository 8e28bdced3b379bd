//! Quantized products (L2): matrix-vector GB/s of weight bytes per weight type and strategy,
//! against the f32 GEMM on the same weights dequantized (the "dequant reference": what running
//! without quantized kernels costs), and a 32-row prefill-sized product per strategy. Then
//! MatMulNBits' two 4-bit layouts on the f32 products, per ISA: the row layout (`Q4Weights`)
//! against the sliver order (`Q4Slivers`).
//!
//! `cargo bench -p strata-ops --bench quant` (append a filter such as `matvec/q4_1` or
//! `q4-layouts`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use strata_core::dtype::block::{dequantize_row, random_blocks};
use strata_core::DType;
use strata_ops::kernels::gemm_f32;
use strata_ops::kernels::quant::{
    pack_group, pack_slivers, q4_matmul_with, q4s_matmul_with, quant_matmul_with, Compute, Isa,
    Q4Slivers, Q4Weights, Q4Zeros, Q8Block, QuantMatrix, Strategy,
};

/// Output rows and inputs of the benchmarked weight matrix: 4096² is 8.4–64 MiB of weights
/// depending on the type, larger than the last-level cache, as a model's layers are in turn.
const N: usize = 4096;
const K: usize = 4096;

const TYPES: [DType; 9] = [
    DType::F16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
];

fn activations(len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 % 2001) as f32 - 1000.0) / 1000.0)
        .collect()
}

fn run(
    c: &mut Criterion,
    group: &str,
    m: usize,
    threads: usize,
    strategies: &[Strategy],
    types: &[DType],
) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let x = activations(m * K);
    let mut y = vec![0.0f32; m * N];
    let mut scratch = vec![Q8Block::default(); m * K / 32];
    for &dtype in types {
        let bytes = random_blocks(dtype, N * K, 7, 0.01).unwrap();
        let w = QuantMatrix::new(dtype, N, K, &bytes).unwrap();
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        for &strategy in strategies {
            if !strategy.supports(dtype) {
                continue;
            }
            let id = BenchmarkId::new(format!("{dtype}/{strategy:?}"), format!("{threads}t"));
            g.bench_function(id, |b| {
                b.iter(|| {
                    quant_matmul_with(
                        strategy,
                        Isa::detect(),
                        &w,
                        black_box(&x),
                        m,
                        &mut y,
                        &mut scratch,
                        threads,
                    )
                    .unwrap()
                })
            });
        }
        if dtype == DType::Q4_1 {
            // The peer: the same product with the weights dequantized to f32 once, through the
            // float GEMM (throughput still counted in q4_1 bytes, so the ratio is the speedup).
            let mut wf = vec![0.0f32; N * K];
            dequantize_row(dtype, &bytes, &mut wf).unwrap();
            let id = BenchmarkId::new("q4_1/f32-gemm-on-dequantized", format!("{threads}t"));
            g.bench_function(id, |b| {
                b.iter(|| {
                    gemm_f32(
                        m,
                        N,
                        K,
                        black_box(&x),
                        (K as isize, 1),
                        &wf,
                        (1, K as isize),
                        &mut y,
                        (N as isize, 1),
                        1.0,
                        0.0,
                        threads,
                    )
                    .unwrap()
                })
            });
        }
    }
    g.finish();
}

fn bench_quant(c: &mut Criterion) {
    let both = [Strategy::IntDot, Strategy::Dequant];
    for threads in [1, 2] {
        run(c, "matvec", 1, threads, &both, &TYPES);
    }
    run(
        c,
        "prefill32",
        32,
        2,
        &both,
        &[DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K],
    );
}

/// gpt2's 768 → 3072 MatMulNBits (blocks of 32, no zero points) in both layouts, on 1 and 3
/// rows (decode) and 64 (the GEMM), one thread, per ISA.
fn bench_q4_layouts(c: &mut Criterion) {
    let (n, k, block) = (3072, 768, 32);
    let q = |j: usize, p: usize| ((j * 31 + p * 17) % 16) as u8;
    let nb = k / block;
    let scales: Vec<f32> = (0..n * nb)
        .map(|b| 0.001 + (b % 97) as f32 * 1e-4)
        .collect();
    let rows: Vec<u8> = (0..n)
        .flat_map(|j| {
            (0..k / 32).flat_map(move |g| pack_group(&std::array::from_fn(|t| q(j, 32 * g + t))))
        })
        .collect();
    let row_w = Q4Weights::new(n, k, block, &rows, &scales, Q4Zeros::Default).unwrap();
    let mut qs = vec![0u8; Q4Slivers::qs_len(n, k)];
    let mut params = vec![0.0f32; Q4Slivers::params_len(n, k, block)];
    let param = |j: usize, b: usize| (scales[j * nb + b], 8.0);
    pack_slivers((n, k, block), q, param, &mut qs, &mut params).unwrap();
    let sliver_w = Q4Slivers::new(n, k, block, &qs, &params).unwrap();
    let mut g = c.benchmark_group("q4-layouts");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Bytes((n * k / 2) as u64));
    for isa in [Isa::Avx2, Isa::Avx512] {
        if !isa.is_available() {
            continue;
        }
        for m in [1, 3, 64] {
            let x = activations(m * k);
            let mut y = vec![0.0f32; m * n];
            g.bench_function(BenchmarkId::new(format!("rows/{isa:?}"), m), |b| {
                b.iter(|| {
                    q4_matmul_with(isa, &row_w, Compute::F32, black_box(&x), m, &mut y, 1, None)
                        .unwrap()
                })
            });
            g.bench_function(BenchmarkId::new(format!("slivers/{isa:?}"), m), |b| {
                b.iter(|| {
                    q4s_matmul_with(isa, &sliver_w, black_box(&x), m, &mut y, 1, None).unwrap()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_quant, bench_q4_layouts);
criterion_main!(benches);
