//! `strata bench MODEL.gguf [--prompt-tokens N] [--gen-tokens N] [--threads N] [--json]`:
//! prefill and decode tokens per second, the best of the timed runs after the warm-up ones
//! (each run a fresh conversation: reset, prefill the prompt, then decode steps).

use std::time::Instant;

use serde_json::json;
use strata_llm::{LanguageModel, LoadOptions};

use crate::args::BenchArgs;

pub fn bench(args: &BenchArgs) -> Result<(), String> {
    let path = args.model.model.as_ref().ok_or("no model given")?;
    let fail = |e: strata_llm::LlmError| format!("{}: {e}", path.display());
    if args.prompt_tokens == 0 || args.gen_tokens == 0 {
        return Err("--prompt-tokens and --gen-tokens must be at least 1".into());
    }
    let mut options = LoadOptions {
        context: Some(args.prompt_tokens + args.gen_tokens + 1),
        prefill_chunk: args.prompt_tokens,
        ..LoadOptions::default()
    };
    if let Some(threads) = args.model.threads {
        options.threads = threads;
    }
    if let Some(limit) = args.model.memory_limit {
        options.memory_limit = limit;
    }
    let model = LanguageModel::load(path, options).map_err(fail)?;
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(args.prompt_tokens);
    let mut prompt = model.encode_prompt(&text).map_err(fail)?;
    prompt.truncate(args.prompt_tokens);
    let mut session = model.session().map_err(fail)?;
    let (mut best_prefill, mut best_decode) = (0.0f64, 0.0f64);
    let runs = args.runs.clamp(1, 10);
    for run in 0..args.warmup.min(2) + runs {
        session.reset();
        let started = Instant::now();
        let mut next = argmax(session.prefill(&prompt).map_err(fail)?);
        let prefill = prompt.len() as f64 / started.elapsed().as_secs_f64();
        let started = Instant::now();
        for _ in 0..args.gen_tokens {
            next = argmax(session.step(next).map_err(fail)?);
        }
        let decode = args.gen_tokens as f64 / started.elapsed().as_secs_f64();
        if run >= args.warmup.min(2) {
            best_prefill = best_prefill.max(prefill);
            best_decode = best_decode.max(decode);
        }
    }
    let threads = model.options().threads;
    if args.json {
        let value = json!({
            "model": path.display().to_string(),
            "threads": threads,
            "prompt_tokens": prompt.len(),
            "gen_tokens": args.gen_tokens,
            "runs": runs,
            "prefill_tokens_per_s": best_prefill,
            "decode_tokens_per_s": best_decode,
            "kv_cache_bytes": session.kv_cache_bytes(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "model: {} ({threads} threads, best of {runs} runs)",
            path.display()
        );
        println!(
            "prefill: {} tokens at {best_prefill:.1} tok/s",
            prompt.len()
        );
        println!(
            "decode: {} tokens at {best_decode:.1} tok/s",
            args.gen_tokens
        );
        println!("KV cache: {} bytes", session.kv_cache_bytes());
    }
    Ok(())
}

fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}
