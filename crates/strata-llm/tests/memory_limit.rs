//! `LoadOptions::memory_limit`: a model whose weights cannot fit fails to load; a conversation
//! whose KV cache outgrows the limit fails at the step that would pass it, with a typed error,
//! and resetting the session gives the memory back.

mod common;

use std::sync::Arc;

use common::{open, Tiny};
use strata_core::{CoreError, DType, MemoryKind};
use strata_llm::{LanguageModel, LlmError, LoadOptions};
use strata_ops::ops::llm::KV_BLOCK_TOKENS;

fn model(t: &Tiny, memory_limit: usize) -> Result<Arc<LanguageModel>, LlmError> {
    let options = LoadOptions {
        threads: 1,
        memory_limit,
        ..Default::default()
    };
    LanguageModel::from_gguf(&open(t), options)
}

fn limit_kind(err: &LlmError) -> Option<MemoryKind> {
    match err {
        LlmError::Runtime(err) => match err.memory_limit_exceeded()? {
            CoreError::MemoryLimitExceeded { kind, .. } => Some(*kind),
            _ => None,
        },
        _ => None,
    }
}

#[test]
fn weights_over_the_limit_fail_to_load() {
    let t = Tiny::new("llama", DType::Q8_0);
    let err = model(&t, 4096).unwrap_err();
    assert_eq!(limit_kind(&err), Some(MemoryKind::Persistent), "{err}");
    assert!(err.to_string().contains("memory limit exceeded"), "{err}");
}

#[test]
fn a_kv_cache_past_the_limit_fails_at_the_step_and_reset_gives_it_back() {
    let mut t = Tiny::new("llama", DType::Q8_0);
    t.context = 4 * KV_BLOCK_TOKENS;
    let within = KV_BLOCK_TOKENS - 4;
    // What a conversation of `within` tokens needs at most, and what one KV block holds.
    let free = model(&t, usize::MAX).unwrap();
    let mut session = free.session().unwrap();
    session.prefill(&[1]).unwrap();
    for _ in 1..within {
        session.step(2).unwrap();
    }
    let block = session.kv_cache_bytes();
    let peak = free.plan().memory_budget().peak();
    assert!(block > 0 && peak > block, "{block} {peak}");

    let bounded = model(&t, peak + block / 2).unwrap();
    let mut session = bounded.session().unwrap();
    session.prefill(&[1]).unwrap();
    for _ in 1..within {
        session.step(2).unwrap();
    }
    // The next block of the KV cache does not fit.
    let mut failure = None;
    for _ in within..2 * KV_BLOCK_TOKENS {
        if let Err(err) = session.step(2) {
            failure = Some(err);
            break;
        }
    }
    let err = failure.expect("the conversation outgrew the limit");
    assert_eq!(limit_kind(&err), Some(MemoryKind::KVCache), "{err}");
    let used = bounded.plan().memory_budget().used();
    session.reset();
    assert!(bounded.plan().memory_budget().used() < used);
    session.prefill(&[1]).unwrap();
}
