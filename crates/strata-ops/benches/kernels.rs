//! Throughput of the hot CPU kernels. Criterion's "elements" are floating-point operations
//! (2 per multiply-add), so its Gelem/s reads as GFLOP/s.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use strata_ops::kernels::gemm_f32;
use strata_ops::ops::convolution::conv_kernel::{
    conv_f32, conv_output_dims, conv_scratch_len, ConvParams,
};

const THREADS: [usize; 2] = [1, 2];

/// Deterministic non-trivial data (values in [-1, 1)).
fn data(len: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// The `gemm` crate (the previous backend) on the same row-major product, for comparison.
fn gemm_crate(size: usize, a: &[f32], b: &[f32], out: &mut [f32], threads: usize) {
    let ld = size as isize;
    let parallelism = if threads <= 1 {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(threads.min(rayon::current_num_threads()))
    };
    assert!(a.len() >= size * size && b.len() >= size * size && out.len() >= size * size);
    // SAFETY: all three are size x size row-major matrices (row stride `size`, column stride 1)
    // inside their slices (asserted above); `out` is borrowed mutably, so it aliases nothing.
    unsafe {
        gemm::gemm(
            size,
            size,
            size,
            out.as_mut_ptr(),
            1,
            ld,
            false,
            a.as_ptr(),
            1,
            ld,
            b.as_ptr(),
            1,
            ld,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    }
}

fn bench_gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemm");
    for size in [64usize, 256, 1024] {
        let (a, b) = (data(size * size, 1), data(size * size, 2));
        let mut out = vec![0.0f32; size * size];
        let ld = (size as isize, 1isize);
        group.throughput(Throughput::Elements(2 * (size as u64).pow(3)));
        group.sample_size(if size >= 1024 { 10 } else { 50 });
        for threads in THREADS {
            group.bench_with_input(
                BenchmarkId::new(format!("{size}^3 strata"), format!("{threads}t")),
                &threads,
                |bench, &t| {
                    bench.iter(|| {
                        gemm_f32(
                            size,
                            size,
                            size,
                            black_box(&a),
                            ld,
                            black_box(&b),
                            ld,
                            &mut out,
                            ld,
                            1.0,
                            0.0,
                            t,
                        )
                        .unwrap()
                    })
                },
            );
            group.bench_with_input(
                BenchmarkId::new(format!("{size}^3 gemm-crate"), format!("{threads}t")),
                &threads,
                |bench, &t| bench.iter(|| gemm_crate(size, black_box(&a), &b, &mut out, t)),
            );
        }
    }
    group.finish();
}

fn bench_conv(c: &mut Criterion) {
    let mut group = c.benchmark_group("conv");
    let in_dims = [1usize, 64, 56, 56];
    let w_dims = [64usize, 64, 3, 3];
    let p = ConvParams {
        pads_begin: vec![1, 1],
        pads_end: vec![1, 1],
        ..ConvParams::default()
    };
    let out_dims = conv_output_dims(&in_dims, &w_dims, &p).unwrap();
    let input = data(in_dims.iter().product(), 3);
    let weight = data(w_dims.iter().product(), 4);
    let bias = data(64, 5);
    let mut out = vec![0.0f32; out_dims.iter().product()];
    let mut scratch = vec![0.0f32; conv_scratch_len(&in_dims, &w_dims, &p)];
    let flops = 2 * out.len() as u64 * (64 * 9);
    group.throughput(Throughput::Elements(flops));
    group.sample_size(20);
    for threads in THREADS {
        group.bench_with_input(
            BenchmarkId::new("3x3 1x64x56x56->64", format!("{threads}t")),
            &threads,
            |bench, &t| {
                bench.iter(|| {
                    conv_f32(
                        black_box(&input),
                        &in_dims,
                        &weight,
                        &w_dims,
                        Some(&bias),
                        &p,
                        &mut out,
                        &mut scratch,
                        t,
                    )
                    .unwrap()
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench_gemm, bench_conv);
criterion_main!(benches);
