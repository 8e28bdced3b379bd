//! GFLOP/s of the f32 GEMM on convolution-shaped products, both orientations:
//!
//! `target/release/examples/gemm_shapes M N K [threads]`
//!
//! `wA`: weights prepacked as A (`C[M, N] = W[M, K] X[K, N]`, how a 1x1 convolution runs).
//! `wB`: the transposed product with the weights prepacked as B (`C^T[N, M] = X^T W^T`).

use std::hint::black_box;
use std::time::Instant;

use strata_ops::kernels::gemm::{gemm_prepacked, Prepacked};

fn rate(m: usize, n: usize, k: usize, mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    let mut runs = 0;
    while start.elapsed().as_secs_f64() < 1.0 {
        f();
        runs += 1;
    }
    let secs = start.elapsed().as_secs_f64() / runs as f64;
    2.0 * (m * n * k) as f64 / secs / 1e9
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap())
        .collect();
    let (m, n, k) = (args[0], args[1], args[2]);
    let threads = args.get(3).copied().unwrap_or(1);
    let w: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
    let x: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0f32; m * n];
    let pa = Prepacked::a(m, k, &w, (k as isize, 1)).unwrap();
    let wa = rate(m, n, k, || {
        gemm_prepacked(
            &pa,
            n,
            &x,
            (n as isize, 1),
            &mut c,
            (n as isize, 1),
            1.0,
            0.0,
            threads,
        )
        .unwrap();
        black_box(&c);
    });
    let pb = Prepacked::b(k, m, &w, (1, k as isize)).unwrap();
    let wb = rate(m, n, k, || {
        gemm_prepacked(
            &pb,
            n,
            &x,
            (1, n as isize),
            &mut c,
            (m as isize, 1),
            1.0,
            0.0,
            threads,
        )
        .unwrap();
        black_box(&c);
    });
    println!("M={m} N={n} K={k} t={threads}: wA {wa:.1} GFLOP/s, wB {wb:.1} GFLOP/s");
}
