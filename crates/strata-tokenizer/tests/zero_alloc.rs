//! After setup, sampling a token, streaming a token's text and checking stop conditions allocate
//! nothing. Allocations are counted by the workspace's counting allocator (shared with
//! strata-onnx's zero-allocation tests; `STRATA_ALLOC_BACKTRACE=1` shows where one comes from).

#[path = "../../strata-onnx/tests/alloc_counter/mod.rs"]
mod alloc_counter;

use alloc_counter::allocations_during;
use strata_tokenizer::sampling::{Sampler, SamplerConfig, StopChecker};
use strata_tokenizer::StreamDecoder;
use strata_tokenizer::{EncodeOptions, Tokenizer, VocabularyDescription};

fn logits(step: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 31 + step * 17) % 97) as f32 * 0.1)
        .collect()
}

#[test]
fn sampling_allocates_nothing_per_token() {
    let n = 5000;
    let steps: Vec<Vec<f32>> = (0..20).map(|s| logits(s, n)).collect();
    let config = SamplerConfig {
        temperature: 0.8,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.05,
        repetition_penalty: 1.1,
        repetition_window: 8,
        seed: 42,
    };
    for config in [
        config,
        SamplerConfig::greedy(),
        SamplerConfig {
            top_p: 0.5,
            ..SamplerConfig::default()
        },
    ] {
        let mut sampler = Sampler::new(config, n).unwrap();
        let count = allocations_during(|| {
            for step in &steps {
                sampler.sample(step).unwrap();
            }
        });
        assert_eq!(count, 0, "sampling with {:?} allocated", sampler.config());
    }
}

#[test]
fn streaming_decode_and_stop_checks_allocate_nothing_once_warm() {
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| {
            let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let n = (0..b)
                .filter(|&x| !matches!(x, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF))
                .count() as u32;
            if printable {
                char::from(b)
            } else {
                char::from_u32(256 + n).unwrap()
            }
            .to_string()
        })
        .collect();
    tokens.push("<end>".into());
    let types = (0..tokens.len())
        .map(|i| if i == 256 { 3 } else { 1 })
        .collect();
    let desc = VocabularyDescription {
        model: "gpt2".into(),
        pre: Some("gpt-2".into()),
        tokens,
        token_types: types,
        eos_id: Some(256),
        ..Default::default()
    };
    let t = Tokenizer::new(&desc).unwrap();
    let ids = t
        .encode(
            "héllo wörld 😀 ",
            EncodeOptions {
                add_special: false,
                parse_special: false,
            },
        )
        .unwrap();
    let mut decoder = StreamDecoder::new(&t, false);
    let mut stop = StopChecker::new(t.end_of_generation_ids(), &["STOP"]);
    // Warm up: the buffers grow to their working size.
    for &id in &ids {
        let text = decoder.push(id).unwrap().to_string();
        stop.push(id, &text);
    }
    let count = allocations_during(|| {
        for &id in &ids {
            let text = decoder.push(id).unwrap();
            assert!(!stop.push(id, text).stop);
        }
    });
    assert_eq!(count, 0);
}
