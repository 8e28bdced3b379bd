//! GFLOP/s of the f32 GEMM with prepacked weights as B that are streamed from memory, as in a
//! transformer's forward pass (each weight matrix used once per run, the whole set larger than
//! the last-level cache):
//!
//! `target/release/examples/gemm_streamed M N K [threads] [copies]`
//!
//! Computes `C[M, N] = X[M, K] W[K, N]` over `copies` distinct prepacked `W` (default: enough
//! for 256 MiB), one after another, and reports the rate beside the same product repeated on
//! one `W` (which stays in cache).

use std::hint::black_box;
use std::time::Instant;

use strata_ops::kernels::gemm::{gemm_prepacked, Prepacked};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|s| s.parse().unwrap())
        .collect();
    let (m, n, k) = (args[0], args[1], args[2]);
    let threads = args.get(3).copied().unwrap_or(1);
    let copies = args
        .get(4)
        .copied()
        .unwrap_or(((256 << 20) / (4 * n * k)).max(2));
    let x: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32 * 0.1).collect();
    let weights: Vec<Prepacked<f32>> = (0..copies)
        .map(|c| {
            let w: Vec<f32> = (0..k * n).map(|i| ((i + c) % 7) as f32 * 0.1).collect();
            Prepacked::b(k, n, &w, (n as isize, 1)).unwrap()
        })
        .collect();
    let mut c = vec![0f32; m * n];
    let mut run = |w: &Prepacked<f32>| {
        gemm_prepacked(
            w,
            m,
            &x,
            (k as isize, 1),
            &mut c,
            (n as isize, 1),
            1.0,
            0.0,
            threads,
        )
        .unwrap();
        black_box(&c);
    };
    let flop = 2.0 * (m * n * k) as f64;
    let mut rate = |which: &mut dyn FnMut(usize) -> usize| {
        let (start, mut runs) = (Instant::now(), 0);
        while start.elapsed().as_secs_f64() < 1.0 {
            run(&weights[which(runs)]);
            runs += 1;
        }
        flop * runs as f64 / start.elapsed().as_secs_f64() / 1e9
    };
    let streamed = rate(&mut |r| r % copies);
    let cached = rate(&mut |_| 0);
    println!(
        "M={m} N={n} K={k} t={threads} ({copies} weight copies): streamed {streamed:.1} GFLOP/s, \
         cached {cached:.1} GFLOP/s"
    );
}
