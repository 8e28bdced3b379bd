//! Times the fused attention kernel on BERT-base's shapes (12 heads of 64, 128 tokens) with
//! Q/K/V head-major and packed as the projections write them, with and without a key mask.
//! `cargo run --release -p strata-ops --example sdpa_timing [THREADS] [Q,K SPREAD] [TOKENS]`
//! (128 tokens unless given).

use std::time::Instant;

use strata_ops::kernels::sdpa::{sdpa_f32, sdpa_slot_len, ScoreStep, Sdpa, View4};
use strata_ops::parallel::{self, ThreadPool};

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

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    let pool = ThreadPool::new(threads).expect("pool");
    let s: usize = std::env::args()
        .nth(3)
        .and_then(|t| t.parse().ok())
        .unwrap_or(128);
    let (h, d) = (12, 64);
    let hd = h * d;
    // Scores spread as in a model with random weights (differences far past exp's range).
    let spread: f32 = std::env::args()
        .nth(2)
        .and_then(|t| t.parse().ok())
        .unwrap_or(1.0);
    let scaled = |seed| -> Vec<f32> { data(s * hd, seed).iter().map(|x| x * spread).collect() };
    let (q, k, v) = (scaled(1), scaled(2), data(s * hd, 3));
    let mask = vec![0.0f32; s];
    let heads = [h * s * d, s * d, d, 1];
    let packed = [s * hd, d, hd, 1];
    let mut out = vec![0.0f32; s * hd];
    let mut scratch = vec![0.0f32; threads * sdpa_slot_len(s, s, d)];
    for (name, strides, masked) in [
        ("heads", heads, false),
        ("packed", packed, false),
        ("packed+mask", packed, true),
    ] {
        let view = |data: &'static [f32]| View4 {
            data,
            dims: [1, h, s, d],
            strides,
        };
        let (q, k, v): (&'static [f32], &'static [f32], &'static [f32]) = (
            Box::leak(q.clone().into_boxed_slice()),
            Box::leak(k.clone().into_boxed_slice()),
            Box::leak(v.clone().into_boxed_slice()),
        );
        let steps = [ScoreStep::Add(View4 {
            data: &mask,
            dims: [1, h, s, s],
            strides: [s, 0, 0, 1],
        })];
        let p = Sdpa {
            q: view(q),
            k: view(k),
            v: view(v),
            scale: 0.125,
            steps: if masked { &steps } else { &[] },
            causal: false,
            zero_empty_rows: false,
        };
        let mut run = || {
            parallel::install(&pool, || {
                sdpa_f32(&p, &mut out, strides, &mut scratch, threads, threads).unwrap()
            })
        };
        for _ in 0..20 {
            run();
        }
        let mut times: Vec<f64> = (0..200)
            .map(|_| {
                let t = Instant::now();
                run();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "{name:12} {threads} threads: median {:.3} ms, min {:.3} ms",
            times[100], times[0]
        );
    }
}
