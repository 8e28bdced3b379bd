//! Tiny models written by strata's GGUF writer, with random weights in each tensor type, against
//! a plain f32 reference implementation of the architecture on the dequantized weights
//! (`common::reference_logits`): llama with tied and separate heads, qwen2 (q/k/v biases, NeoX
//! RoPE), mistral; prefill of several tokens, then decode steps, then a reset and again.

mod common;

use common::{open, reference_logits, Tiny};
use strata_core::DType;
use strata_llm::{LanguageModel, LoadOptions};

/// Largest |ours - reference| over the largest |reference|, over every position.
fn relative_error(ours: &[Vec<f32>], reference: &[Vec<f32>]) -> f32 {
    let scale = reference
        .iter()
        .flatten()
        .fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = ours
        .iter()
        .zip(reference)
        .flat_map(|(a, b)| a.iter().zip(b).map(|(a, b)| (a - b).abs()))
        .fold(0.0f32, f32::max);
    worst / scale
}

/// Prefill of 5 tokens then 4 steps (twice: the second run after a reset) against the reference.
fn check(t: &Tiny, tolerance: f32) {
    let file = open(t);
    let options = LoadOptions {
        threads: 2,
        all_logits: true,
        prefill_chunk: 8,
        ..Default::default()
    };
    let model = LanguageModel::from_gguf(&file, options).unwrap();
    let ids: Vec<u32> = vec![3, 17, 42, 5, 63, 8, 0, 29, 11];
    let reference = reference_logits(t, &file, &ids);
    let v = model.vocab_size();
    let mut session = model.session().unwrap();
    for round in 0..2 {
        let all = session.prefill_all(&ids[..5]).unwrap();
        let mut ours: Vec<Vec<f32>> = all.chunks_exact(v).map(<[f32]>::to_vec).collect();
        for &id in &ids[5..] {
            ours.push(session.step(id).unwrap().to_vec());
        }
        let error = relative_error(&ours, &reference);
        println!(
            "{} {:?} round {round}: relative error {error}",
            t.arch, t.dtype
        );
        assert!(
            error <= tolerance,
            "{} {:?} round {round}: relative error {error} > {tolerance}",
            t.arch,
            t.dtype
        );
        assert_eq!(session.len(), ids.len());
        assert!(session.kv_cache_bytes() > 0);
        session.reset();
        assert_eq!(session.kv_cache_bytes(), 0, "reset releases the cache");
    }
}

// Float weights: only the f16 KV cache and f16 attention weights round.
const FLOAT: f32 = 0.005;
// Block weights: activations are quantized to 8 bits for the integer dot products.
const BLOCKS: f32 = 0.04;

#[test]
fn llama_f32_matches_the_reference() {
    check(&Tiny::new("llama", DType::F32), FLOAT);
}

#[test]
fn llama_f16_matches_the_reference() {
    check(&Tiny::new("llama", DType::F16), FLOAT);
}

#[test]
fn llama_legacy_block_types_match_the_reference() {
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
    ] {
        check(&Tiny::new("llama", dtype), BLOCKS);
    }
}

#[test]
fn llama_k_quants_match_the_reference() {
    for dtype in [DType::Q4_K, DType::Q5_K, DType::Q6_K] {
        check(&Tiny::new("llama", dtype), FLOAT);
    }
}

#[test]
fn separate_output_head_matches_the_reference() {
    let mut t = Tiny::new("llama", DType::Q8_0);
    t.separate_head = true;
    check(&t, BLOCKS);
}

#[test]
fn qwen2_biases_and_neox_rope_match_the_reference() {
    let mut t = Tiny::new("qwen2", DType::Q8_0);
    t.rope_base = 1_000_000.0;
    check(&t, BLOCKS);
}

#[test]
fn mistral_with_one_kv_head_matches_the_reference() {
    let mut t = Tiny::new("mistral", DType::F32);
    t.kv_heads = 1;
    check(&t, FLOAT);
}

#[test]
fn prefill_in_chunks_equals_prefill_at_once() {
    let t = Tiny::new("llama", DType::Q4_0);
    let file = open(&t);
    let ids: Vec<u32> = (0..20).map(|i| (i * 7 % 64) as u32).collect();
    let logits = |chunk: usize| {
        let options = LoadOptions {
            threads: 1,
            prefill_chunk: chunk,
            ..Default::default()
        };
        let model = LanguageModel::from_gguf(&file, options).unwrap();
        let mut session = model.session().unwrap();
        session.prefill(&ids).unwrap().to_vec()
    };
    assert_eq!(logits(3), logits(32));
}
