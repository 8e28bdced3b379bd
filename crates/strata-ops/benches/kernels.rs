//! Throughput of the hot CPU kernels. Criterion's "elements" are floating-point operations
//! (2 per multiply-add), so its Gelem/s reads as GFLOP/s.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use strata_ops::kernels::{gemm_f32, gemm_prepacked, Prepacked};
use strata_ops::ops::convolution::conv_kernel::{
    conv_f32, conv_output_dims, conv_scratch_len, ConvParams,
};
use strata_ops::parallel::{self, ThreadPool};

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
            let pool = ThreadPool::new(threads).unwrap();
            group.bench_with_input(
                BenchmarkId::new(format!("{size}^3 strata"), format!("{threads}t")),
                &threads,
                |bench, &t| {
                    parallel::install(&pool, || {
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

/// Skinny products (batch-1 MatMul/Gemm): `m x k` by `k x n`, B row-major (`k x n`) or
/// transposed (`n x k`, Gemm's transB weights), each thread count in a pool of that size.
fn bench_skinny_gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemm skinny");
    for (m, k, n) in [(1usize, 784usize, 512usize), (1, 768, 3072), (4, 768, 3072)] {
        let (a, b) = (data(m * k, 1), data(k * n, 2));
        let mut out = vec![0.0f32; m * n];
        group.throughput(Throughput::Elements(2 * (m * n * k) as u64));
        for threads in THREADS {
            let pool = ThreadPool::new(threads).unwrap();
            for (layout, b_strides) in [("B", (n as isize, 1)), ("B^T", (1, k as isize))] {
                group.bench_with_input(
                    BenchmarkId::new(format!("{m}x{k}x{n} {layout}"), format!("{threads}t")),
                    &threads,
                    |bench, &t| {
                        parallel::install(&pool, || {
                            bench.iter(|| {
                                gemm_f32(
                                    m,
                                    n,
                                    k,
                                    black_box(&a),
                                    (k as isize, 1),
                                    black_box(&b),
                                    b_strides,
                                    &mut out,
                                    (n as isize, 1),
                                    1.0,
                                    0.0,
                                    t,
                                )
                                .unwrap()
                            })
                        })
                    },
                );
            }
        }
    }
    group.finish();
}

/// Products with a constant operand packed once beforehand (what plans do for weights) against
/// the same product packing it on every call: a 3x3 convolution's weights as A (256 x 576 by a
/// 56x56 unfolded input) and a fully connected layer's weights as B (batch 64, 784 -> 512).
fn bench_prepacked_gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemm prepacked");
    for (name, m, k, n, packed_side_a) in [
        ("conv A", 256usize, 576usize, 3136usize, true),
        ("fc B", 64, 784, 512, false),
    ] {
        let (a, b) = (data(m * k, 1), data(k * n, 2));
        let mut out = vec![0.0f32; m * n];
        let (sa, sb, sc) = ((k as isize, 1), (n as isize, 1), (n as isize, 1));
        let packed = if packed_side_a {
            Prepacked::a(m, k, &a, sa).unwrap()
        } else {
            Prepacked::b(k, n, &b, sb).unwrap()
        };
        group.throughput(Throughput::Elements(2 * (m * n * k) as u64));
        group.sample_size(20);
        for threads in THREADS {
            let pool = ThreadPool::new(threads).unwrap();
            let id = |what: &str| {
                BenchmarkId::new(format!("{name} {m}x{k}x{n} {what}"), format!("{threads}t"))
            };
            group.bench_with_input(id("prepacked"), &threads, |bench, &t| {
                parallel::install(&pool, || {
                    bench.iter(|| {
                        let (other, other_strides, rows_or_cols) = if packed_side_a {
                            (&b, sb, n)
                        } else {
                            (&a, sa, m)
                        };
                        gemm_prepacked(
                            &packed,
                            rows_or_cols,
                            black_box(other),
                            other_strides,
                            &mut out,
                            sc,
                            1.0,
                            0.0,
                            t,
                        )
                        .unwrap()
                    })
                })
            });
            group.bench_with_input(id("packed per call"), &threads, |bench, &t| {
                parallel::install(&pool, || {
                    bench.iter(|| {
                        gemm_f32(
                            m,
                            n,
                            k,
                            black_box(&a),
                            sa,
                            black_box(&b),
                            sb,
                            &mut out,
                            sc,
                            1.0,
                            0.0,
                            t,
                        )
                        .unwrap()
                    })
                })
            });
        }
    }
    group.finish();
}

/// Each convolution path on a layer shape real networks use: 3x3 (im2col + GEMM), 1x1
/// (GEMM on the input), 3x3 depthwise stride 1 and 2 (direct kernel).
fn bench_conv(c: &mut Criterion) {
    let mut group = c.benchmark_group("conv");
    let pad1 = ConvParams {
        pads_begin: vec![1, 1],
        pads_end: vec![1, 1],
        ..ConvParams::default()
    };
    let cases = [
        (
            "3x3 1x64x56x56->64",
            [1usize, 64, 56, 56],
            [64usize, 64, 3, 3],
            pad1.clone(),
        ),
        (
            "1x1 1x64x56x56->256",
            [1, 64, 56, 56],
            [256, 64, 1, 1],
            ConvParams::default(),
        ),
        (
            "dw3x3 1x144x56x56",
            [1, 144, 56, 56],
            [144, 1, 3, 3],
            ConvParams {
                groups: 144,
                ..pad1.clone()
            },
        ),
        (
            "dw3x3/2 1x144x56x56",
            [1, 144, 56, 56],
            [144, 1, 3, 3],
            ConvParams {
                groups: 144,
                strides: vec![2, 2],
                ..pad1.clone()
            },
        ),
    ];
    for (name, in_dims, w_dims, p) in cases {
        let out_dims = conv_output_dims(&in_dims, &w_dims, &p).unwrap();
        let input = data(in_dims.iter().product(), 3);
        let weight = data(w_dims.iter().product(), 4);
        let bias = data(w_dims[0], 5);
        let mut out = vec![0.0f32; out_dims.iter().product()];
        let mut scratch = vec![0.0f32; conv_scratch_len(&in_dims, &w_dims, &p)];
        let depth = (w_dims[1] * w_dims[2] * w_dims[3]) as u64;
        group.throughput(Throughput::Elements(2 * out.len() as u64 * depth));
        group.sample_size(20);
        for threads in THREADS {
            let pool = ThreadPool::new(threads).unwrap();
            group.bench_with_input(
                BenchmarkId::new(name, format!("{threads}t")),
                &threads,
                |bench, &t| {
                    parallel::install(&pool, || {
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
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_gemm,
    bench_skinny_gemm,
    bench_prepacked_gemm,
    bench_conv
);
criterion_main!(benches);
