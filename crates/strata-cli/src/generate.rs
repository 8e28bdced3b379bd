//! `strata generate MODEL.gguf (--prompt TEXT | --chat TEXT)`: streams generated text to stdout,
//! or with `--json` prints one object with the ids, the text, prefill and decode speeds and the
//! KV cache's bytes.

use std::io::Write;

use serde_json::json;
use strata_llm::{ChatMessage, GenerateOptions, LanguageModel, LoadOptions, SamplerConfig};

use crate::args::GenerateArgs;

pub fn generate(args: &GenerateArgs) -> Result<(), String> {
    let fail = |e: strata_llm::LlmError| format!("{}: {e}", args.model.display());
    let mut options = LoadOptions {
        context: args.context,
        ..LoadOptions::default()
    };
    if let Some(threads) = args.threads {
        options.threads = threads;
    }
    if let Some(limit) = args.memory_limit {
        options.memory_limit = limit;
    }
    let model = LanguageModel::load(&args.model, options).map_err(fail)?;
    let text = match (&args.prompt, &args.chat) {
        (Some(prompt), _) => prompt.clone(),
        (None, Some(message)) => model
            .render_chat(&[ChatMessage::new("user", message.as_str())])
            .map_err(fail)?,
        (None, None) => return Err("give --prompt TEXT or --chat TEXT".into()),
    };
    let prompt_ids = model.encode_prompt(&text).map_err(fail)?;
    let generate_options = GenerateOptions {
        max_tokens: args.max_tokens,
        sampler: SamplerConfig {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            repetition_penalty: args.repeat_penalty,
            seed: args.seed,
            ..SamplerConfig::default()
        },
        stop_strings: args.stop.clone(),
    };
    let mut session = model.session().map_err(fail)?;
    session.set_timeout(args.timeout);
    let mut generation = model
        .generate(&mut session, &prompt_ids, &generate_options)
        .map_err(fail)?;
    let mut ids = Vec::new();
    let mut out = String::new();
    let stdout = std::io::stdout();
    for piece in generation.by_ref() {
        let piece = piece.map_err(fail)?;
        ids.push(piece.id);
        if args.json {
            out.push_str(&piece.text);
        } else {
            let mut lock = stdout.lock();
            lock.write_all(piece.text.as_bytes())
                .and_then(|_| lock.flush())
                .map_err(|e| e.to_string())?;
        }
    }
    let stats = generation.stats();
    drop(generation);
    if args.json {
        let value = json!({
            "model": args.model.display().to_string(),
            "prompt_ids": prompt_ids,
            "generated_ids": ids,
            "text": out,
            "prefill_tokens_per_s": stats.prefill_tokens_per_s(),
            "decode_tokens_per_s": stats.decode_tokens_per_s(),
            "kv_cache_bytes": session.kv_cache_bytes(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?
        );
    } else {
        println!();
        eprintln!(
            "prompt {} tokens at {:.1} tok/s, {} generated at {:.1} tok/s, KV cache {} bytes",
            stats.prompt_tokens,
            stats.prefill_tokens_per_s(),
            stats.generated_tokens,
            stats.decode_tokens_per_s(),
            session.kv_cache_bytes()
        );
    }
    Ok(())
}
