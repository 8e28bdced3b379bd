//! GFLOP/s of the f32 GEMM on convolution-shaped products, both orientations:
//!
//! `target/release/examples/gemm_shapes M N K [threads] [cold]`
//!
//! `wA`: weights prepacked as A (`C[M, N] = W[M, K] X[K, N]`, how a 1x1 convolution runs).
//! `wB`: the transposed product with the weights prepacked as B (`C^T[N, M] = X^T W^T`).
//! `cold`: before every timed product, 64 MiB are read (evicting the weights and the output from
//! every cache level) and the input is read back into cache: the state of a layer inside a
//! network whose weights exceed the caches. On Zen 3 this halves the rate of MobileNetV2's 1x1
//! shapes (576 x 196 x 96: 71 warm, 25-31 cold), and warming the weights, the output and the
//! input again after the flush does not bring it back.

use std::hint::black_box;
use std::time::{Duration, Instant};

use strata_ops::kernels::gemm::{gemm_prepacked, Prepacked};

/// Bytes read between cold runs: twice a 32 MiB L3.
const FLUSH_BYTES: usize = 64 << 20;

fn rate(m: usize, n: usize, k: usize, mut before: impl FnMut(), mut f: impl FnMut()) -> f64 {
    f();
    let (mut spent, mut runs) = (Duration::ZERO, 0);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < 2.0 || runs < 5 {
        before();
        let t = Instant::now();
        f();
        spent += t.elapsed();
        runs += 1;
    }
    2.0 * (m * n * k) as f64 / (spent.as_secs_f64() / runs as f64) / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> Option<usize> { args.get(i).and_then(|s| s.parse().ok()) };
    let (m, n, k) = (num(0).unwrap(), num(1).unwrap(), num(2).unwrap());
    let threads = num(3).unwrap_or(1);
    let cold = args.iter().any(|a| a == "cold");
    let w: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
    let x: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0f32; m * n];
    let flush = vec![1u8; if cold { FLUSH_BYTES } else { 0 }];
    let pa = Prepacked::a(m, k, &w, (k as isize, 1)).unwrap();
    let pb = Prepacked::b(k, m, &w, (1, k as isize)).unwrap();
    let mut before = || {
        if cold {
            // Read, not written: no dirty lines left for the product to write back.
            black_box(
                flush
                    .chunks(64)
                    .fold(0u8, |a, line| a.wrapping_add(line[0])),
            );
            black_box(x.iter().sum::<f32>());
        }
    };
    let wa = rate(m, n, k, &mut before, || {
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
    let wb = rate(m, n, k, &mut before, || {
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
    let state = if cold { "cold" } else { "warm" };
    println!("M={m} N={n} K={k} t={threads} {state}: wA {wa:.1} GFLOP/s, wB {wb:.1} GFLOP/s");
}
