//! The integer GEMM (u8 x i8, i32 accumulation, weights packed once) against the f32 GEMM with
//! prepacked weights, on the products of the quantized models: a BERT-base projection (128
//! tokens, 768 -> 768 and 768 -> 3072) and a MobileNetV2 1x1 convolution (12544 pixels, 16 ->
//! 96). Integer outputs: requantized u8 (QLinear*) and scaled f32 (dynamic quantization).
//! Criterion's "elements" are operations (two per multiply-add), so `Gelem/s` reads as GOP/s.
//! The integer products run on the fastest kernel the CPU has (AMX tiles where Linux grants
//! them, else AVX-512 VNNI, AVX2 or portable).
//!
//! `cargo bench -p strata-ops --bench igemm -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use strata_ops::kernels::igemm::{
    igemm, Dest, Epilogue, IntSlice, MatrixA, OutMat, PackedB, Requant,
};
use strata_ops::kernels::{gemm_prepacked, Prepacked};
use strata_ops::parallel::{self, ThreadPool};

const THREADS: [usize; 2] = [1, 2];

fn bytes(len: usize, seed: u32) -> Vec<u8> {
    let mut state = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state >> 24) as u8
        })
        .collect()
}

fn bench_igemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("igemm vs f32 gemm");
    for (name, m, k, n) in [
        ("bert qkv", 128usize, 768usize, 768usize),
        ("bert ffn", 128, 768, 3072),
        ("mobilenet 1x1", 12544, 16, 96),
    ] {
        let a = bytes(m * k, 1);
        let b: Vec<i8> = bytes(k * n, 2).into_iter().map(|v| v as i8).collect();
        let packed = PackedB::new(IntSlice::I8(&b), k, n, (n, 1)).unwrap();
        let a_f: Vec<f32> = a.iter().map(|&v| f32::from(v) / 255.0).collect();
        let b_f: Vec<f32> = b.iter().map(|&v| f32::from(v) / 127.0).collect();
        let packed_f = Prepacked::b(k, n, &b_f, (n as isize, 1)).unwrap();
        let scale = vec![1e-4f32; n];
        let bias = vec![0.5f32; n];
        let mut out_u8 = vec![0u8; m * n];
        let mut out_f32 = vec![0f32; m * n];
        group.throughput(Throughput::Elements((2 * m * n * k) as u64));
        group.sample_size(20);
        for threads in THREADS {
            let pool = ThreadPool::new(threads).unwrap();
            let id = |what: &str| {
                BenchmarkId::new(format!("{name} {m}x{k}x{n} {what}"), format!("{threads}t"))
            };
            let a_mat = MatrixA::new(IntSlice::U8(&a), m, k, (k, 1)).unwrap();
            group.bench_with_input(id("igemm u8 out"), &threads, |bench, &t| {
                let epilogue = Epilogue {
                    scale: Some(Requant {
                        col: &scale,
                        row: None,
                    }),
                    zero_point: 128,
                    ..Epilogue::default()
                };
                parallel::install(&pool, || {
                    bench.iter(|| {
                        let out = OutMat {
                            dest: Dest::U8(&mut out_u8),
                            rs: n,
                            cs: 1,
                        };
                        igemm(
                            black_box(&a_mat),
                            &[3],
                            packed.view(),
                            &[0],
                            out,
                            &epilogue,
                            t,
                        )
                        .unwrap()
                    })
                })
            });
            group.bench_with_input(id("igemm f32 out + bias"), &threads, |bench, &t| {
                let epilogue = Epilogue {
                    scale: Some(Requant {
                        col: &scale[..1],
                        row: None,
                    }),
                    bias_f32: Some(&bias),
                    ..Epilogue::default()
                };
                parallel::install(&pool, || {
                    bench.iter(|| {
                        let out = OutMat {
                            dest: Dest::F32(&mut out_f32),
                            rs: n,
                            cs: 1,
                        };
                        igemm(
                            black_box(&a_mat),
                            &[3],
                            packed.view(),
                            &[0],
                            out,
                            &epilogue,
                            t,
                        )
                        .unwrap()
                    })
                })
            });
            group.bench_with_input(id("f32 gemm prepacked"), &threads, |bench, &t| {
                parallel::install(&pool, || {
                    bench.iter(|| {
                        gemm_prepacked(
                            &packed_f,
                            m,
                            black_box(&a_f),
                            (k as isize, 1),
                            &mut out_f32,
                            (n as isize, 1),
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

criterion_group!(benches, bench_igemm);
criterion_main!(benches);
