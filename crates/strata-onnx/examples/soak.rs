//! Soak: several contexts of one plan run the model over and over on their own threads while
//! the process's resident memory is sampled; memory must stay flat after warm-up.
//!
//!   cargo run --release -p strata-onnx --example soak -- [MODEL.onnx|""] [SECONDS] [CONTEXTS]
//!
//! Without a model the built-in ResNet-style model runs. Prints one line per sample
//! (`t_s runs rss_bytes`) and a summary: RSS after warm-up (a fifth of the time, at most 60 s),
//! RSS at the end, and the growth per thousand runs in between. Used by `scripts/soak.sh`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_core::Tensor;
use strata_runtime::PlanConfig;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model = args.first().filter(|m| !m.is_empty()).cloned();
    let seconds: u64 = args.get(1).map_or(Ok(60), |s| s.parse())?;
    let contexts: usize = args.get(2).map_or(Ok(4), |s| s.parse())?;
    let config = PlanConfig::default().with_threads(1);
    let plan = match &model {
        Some(path) => strata_onnx::load(path, config)?,
        None => strata_onnx::load_bytes(
            strata_onnx::models::default_model().to_bytes()?,
            "built-in",
            config,
        )?,
    };
    let inputs: Vec<Tensor> = plan
        .inputs()
        .iter()
        .map(|i| {
            let dims: Vec<usize> = i.dims.iter().map(|d| d.known().unwrap_or(1)).collect();
            Tensor::zeros(&dims, i.dtype)
        })
        .collect::<Result<_, _>>()?;
    let runs = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..contexts)
        .map(|_| {
            let (plan, inputs, runs, stop) =
                (plan.clone(), inputs.clone(), runs.clone(), stop.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut ctx = plan.create_context().map_err(|e| e.to_string())?;
                while !stop.load(Ordering::Relaxed) {
                    for (i, t) in inputs.iter().enumerate() {
                        ctx.set_input_at(i, t).map_err(|e| e.to_string())?;
                    }
                    ctx.execute().map_err(|e| e.to_string())?;
                    let _ = ctx.output_at(0).map_err(|e| e.to_string())?;
                    runs.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    let started = Instant::now();
    let total = Duration::from_secs(seconds);
    let warm_up = (total / 5).min(Duration::from_secs(60));
    let mut after_warm_up = None;
    println!("t_s runs rss_bytes");
    while started.elapsed() < total {
        std::thread::sleep(Duration::from_secs(1).min(total / 10));
        let (t, n, rss) = (
            started.elapsed().as_secs_f64(),
            runs.load(Ordering::Relaxed),
            rss_bytes(),
        );
        println!("{t:.1} {n} {rss}");
        if after_warm_up.is_none() && started.elapsed() >= warm_up {
            after_warm_up = Some((n, rss));
        }
    }
    // Sampled while the contexts are still alive.
    let (end_runs, end_rss) = (runs.load(Ordering::Relaxed), rss_bytes());
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().map_err(|_| "a worker panicked")??;
    }
    let (warm_runs, warm_rss) = after_warm_up.unwrap_or((0, end_rss));
    let per_1000 = (end_rss as f64 - warm_rss as f64) * 1000.0
        / (end_runs.saturating_sub(warm_runs).max(1)) as f64;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "summary: {contexts} contexts, {end_runs} runs in {seconds} s; RSS after warm-up ({:.0} s, {warm_runs} runs) {:.2} MiB, at the end {:.2} MiB; {per_1000:+.0} bytes per 1000 runs",
        warm_up.as_secs_f64(),
        mib(warm_rss),
        mib(end_rss)
    );
    Ok(())
}
