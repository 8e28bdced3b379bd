//! Sessions on one shared model: concurrent sessions give the serial results, the KV cache grows
//! in blocks of `KVCache` memory and shows in the per-kind stats, and bad input is a typed error.

mod common;

use std::sync::Arc;

use common::{open, open_writer, writer_with, Tiny};
use strata_core::{AllocatorRegistry, DType, Device, MemoryKind};
use strata_gguf::Value;
use strata_llm::{GenerateOptions, LanguageModel, LlmError, LoadOptions, SamplerConfig};
use strata_ops::ops::llm::KV_BLOCK_TOKENS;

fn model(t: &Tiny, threads: usize) -> Arc<LanguageModel> {
    let options = LoadOptions {
        threads,
        ..Default::default()
    };
    LanguageModel::from_gguf(&open(t), options).unwrap()
}

/// Greedy ids after `prompt`, and the logits of the last step.
fn run(model: &Arc<LanguageModel>, prompt: &[u32], steps: usize) -> (Vec<u32>, Vec<f32>) {
    let mut session = model.session().unwrap();
    let options = GenerateOptions {
        max_tokens: steps,
        sampler: SamplerConfig::greedy(),
        stop_strings: Vec::new(),
    };
    let ids: Vec<u32> = model
        .generate(&mut session, prompt, &options)
        .unwrap()
        .map(|p| p.unwrap().id)
        .collect();
    (ids, session.logits().to_vec())
}

#[test]
fn concurrent_sessions_on_one_model_match_serial_runs() {
    let mut t = Tiny::new("llama", DType::Q4_0);
    t.context = 256;
    let model = model(&t, 2);
    let prompts: Vec<Vec<u32>> = (0..4)
        .map(|s| (0..6 + s).map(|i| ((i * 5 + s * 11) % 64) as u32).collect())
        .collect();
    let serial: Vec<_> = prompts.iter().map(|p| run(&model, p, 24)).collect();
    let concurrent: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = prompts
            .iter()
            .map(|p| {
                let model = model.clone();
                scope.spawn(move || run(&model, p, 24))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(serial, concurrent);
    // Different prompts, different continuations: the sessions do not share a cache.
    assert_ne!(serial[0].0, serial[1].0);
}

#[test]
fn kv_cache_grows_in_blocks_of_kv_cache_memory_and_reset_releases_it() {
    let mut t = Tiny::new("llama", DType::Q8_0);
    t.context = 4 * KV_BLOCK_TOKENS;
    let model = model(&t, 1);
    let per_block = t.layers * KV_BLOCK_TOKENS * 2 * t.kv_heads * t.head_dim() * 2;
    let mut session = model.session().unwrap();
    assert_eq!(session.kv_cache_bytes(), 0, "a new session holds no cache");
    let registry = AllocatorRegistry::global();
    let before = registry.stats(Device::Cpu, MemoryKind::KVCache);
    session.prefill(&[1, 2, 3]).unwrap();
    assert_eq!(session.kv_cache_bytes(), per_block);
    let during = registry.stats(Device::Cpu, MemoryKind::KVCache);
    assert!(during.allocations >= before.allocations + t.layers as u64);
    for i in 0..KV_BLOCK_TOKENS {
        session.step((i % 64) as u32).unwrap();
    }
    assert_eq!(session.len(), KV_BLOCK_TOKENS + 3);
    assert_eq!(
        session.kv_cache_bytes(),
        2 * per_block,
        "a second block per layer"
    );
    session.reset();
    assert_eq!(session.kv_cache_bytes(), 0);
    assert_eq!(session.len(), 0);
}

#[test]
fn a_full_context_and_bad_ids_are_typed_errors() {
    let mut t = Tiny::new("llama", DType::F32);
    t.context = 8;
    let model = model(&t, 1);
    let mut session = model.session().unwrap();
    assert!(matches!(
        session.prefill(&[64]),
        Err(LlmError::TokenOutOfRange { id: 64, vocab: 64 })
    ));
    assert!(matches!(session.prefill(&[]), Err(LlmError::Usage { .. })));
    session.prefill(&[1, 2, 3, 4, 5, 6]).unwrap();
    session.step(7).unwrap();
    session.step(8).unwrap();
    let err = session.step(9).unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::ContextFull {
                held: 8,
                asked: 1,
                max: 8
            }
        ),
        "{err}"
    );
    assert!(matches!(
        session.prefill_all(&[1]),
        Err(LlmError::Usage {
            what: "prefill_all",
            ..
        })
    ));
    // Generation stops at the context's end instead of failing.
    let mut session = model.session().unwrap();
    let options = GenerateOptions {
        max_tokens: 100,
        ..Default::default()
    };
    let mut n = 0;
    for piece in model.generate(&mut session, &[1, 2, 3], &options).unwrap() {
        piece.unwrap();
        n += 1;
    }
    assert!(n <= 6, "{n} tokens from a context of 8 after 3");
}

/// A cancelled or late call is a typed error that keeps nothing: the session goes on from what
/// it held before, with the logits a session that never saw the call gives.
#[test]
fn cancelled_and_timed_out_calls_are_typed_errors_and_keep_nothing() {
    let mut t = Tiny::new("llama", DType::Q8_0);
    t.context = 64;
    let model = model(&t, 2);
    let mut plain = model.session().unwrap();
    let want = plain.prefill(&[1, 2, 3, 4]).unwrap().to_vec();

    let mut session = model.session().unwrap();
    session.prefill(&[1, 2]).unwrap();
    session.cancel_flag().cancel();
    let err = session.step(3).unwrap_err();
    assert!(err.is_cancelled() && !err.is_timeout(), "{err}");
    assert_eq!(session.len(), 2);
    // The flag is lowered once a run has stopped at it.
    session.set_timeout(Some(std::time::Duration::from_nanos(1)));
    let err = session.prefill(&[3, 4]).unwrap_err();
    assert!(err.is_timeout() && !err.is_cancelled(), "{err}");
    assert_eq!(session.len(), 2);
    session.set_timeout(None);
    assert_eq!(session.prefill(&[3, 4]).unwrap(), &want[..]);
}

#[test]
fn malformed_models_are_typed_errors_naming_the_key_or_tensor() {
    let t = Tiny::new("llama", DType::F32);
    let load = |t: &Tiny, overrides: &[(&str, Option<Value>)]| {
        let file = open_writer(&writer_with(t, overrides));
        LanguageModel::from_gguf(&file, LoadOptions::default()).map(|_| ())
    };
    assert!(load(&t, &[]).is_ok());
    // Unknown architecture.
    let mut other = t.clone();
    other.arch = "gptj";
    let err = load(&other, &[]).unwrap_err();
    assert!(
        matches!(err, LlmError::UnsupportedArchitecture(ref a) if a == "gptj"),
        "{err}"
    );
    // KV heads that do not divide the query heads.
    let err = load(
        &t,
        &[("llama.attention.head_count_kv", Some(Value::U32(3)))],
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("llama.attention.head_count_kv"),
        "{err}"
    );
    // A missing constant.
    let err = load(&t, &[("llama.block_count", None)]).unwrap_err();
    assert!(err.to_string().contains("llama.block_count"), "{err}");
    // A tensor whose dims do not fit the constants.
    let err = load(&t, &[("llama.feed_forward_length", Some(Value::U32(768)))]).unwrap_err();
    assert!(
        matches!(err, LlmError::BadTensor { ref tensor, .. } if tensor == "blk.0.ffn_gate.weight"),
        "{err}"
    );
    // A missing tensor.
    let err = load(&t, &[("llama.block_count", Some(Value::U32(3)))]).unwrap_err();
    assert!(err.to_string().contains("blk.2."), "{err}");
    // No tokenizer, or one of the wrong type.
    let err = load(&t, &[("tokenizer.ggml.tokens", None)]).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.tokens"), "{err}");
    let err = load(&t, &[("tokenizer.ggml.tokens", Some(Value::U32(0)))]).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.tokens"), "{err}");
    // A vocabulary that does not fit the embedding table.
    let few: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    let err = load(
        &t,
        &[(
            "tokenizer.ggml.tokens",
            Some(Value::Array(strata_gguf::Array::String(few))),
        )],
    )
    .unwrap_err();
    assert!(err.to_string().contains("token_embd.weight"), "{err}");
}
