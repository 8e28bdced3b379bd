//! SmolLM2's tokenizer against llama.cpp: the fixtures are written by
//! `scripts/tokenizer_reference.py` from `../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf` (the
//! vocabulary description read with the `gguf` package, the ids from llama-cpp-python), so this
//! test needs neither Python nor a GGUF reader.

mod support;

use serde_json::Value;
use strata_tokenizer::StreamDecoder;
use strata_tokenizer::{ChatMessage, EncodeOptions, Tokenizer};
use support::{description, ids, load_json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// The tokenizer and reference of `{stem}_ids.json`: its vocabulary fixture with the recorded
/// overrides (another `pre`, `add_bos` left to the model's default, added tokens and merges).
fn reference(stem: &str) -> (Tokenizer, Value) {
    let reference = load_json(&format!("{FIXTURES}/{stem}_ids.json"));
    let vocabulary = reference["vocabulary"].as_str().unwrap();
    let mut desc = description(&load_json(&format!("{FIXTURES}/{vocabulary}")));
    let overrides = reference["overrides"].as_object().unwrap();
    if let Some(pre) = overrides.get("pre") {
        desc.pre = pre.as_str().map(str::to_string);
    }
    if let Some(add_bos) = overrides.get("add_bos") {
        desc.add_bos = add_bos.as_bool();
    }
    if let Some(extra) = overrides.get("extra_tokens") {
        for token in extra.as_array().unwrap() {
            desc.tokens.push(token.as_str().unwrap().to_string());
            desc.token_types.push(1);
        }
    }
    if let Some(extra) = overrides.get("extra_merges") {
        desc.merges.extend(
            extra
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_str().unwrap().to_string()),
        );
    }
    (Tokenizer::new(&desc).unwrap(), reference)
}

/// Our ids for every text and option against llama.cpp's; returns how many encodings compared.
fn assert_same_ids(stem: &str) -> usize {
    let (t, reference) = reference(stem);
    let cases = reference["cases"].as_array().unwrap();
    assert!(
        cases.len() >= 30,
        "{stem}: the fixture has {} texts",
        cases.len()
    );
    let options = [
        (
            "ids",
            EncodeOptions {
                add_special: false,
                parse_special: false,
            },
        ),
        (
            "ids_add_special",
            EncodeOptions {
                add_special: true,
                parse_special: false,
            },
        ),
        (
            "ids_parse_special",
            EncodeOptions {
                add_special: false,
                parse_special: true,
            },
        ),
    ];
    let mut mismatches = Vec::new();
    let mut compared = 0;
    for case in cases {
        let text = case["text"].as_str().unwrap();
        for (key, opts) in options {
            compared += 1;
            let expected = ids(&case[key]);
            let ours = t.encode(text, opts).unwrap();
            if ours != expected {
                mismatches.push(format!(
                    "{key} {text:?}:\n  llama.cpp {expected:?}\n  strata    {ours:?}"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{stem}: {} of {compared} encodings differ from llama.cpp:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    compared
}

/// decode(encode(text)) == text, streamed or not, and the pieces match llama.cpp's bytes.
fn assert_decoding(stem: &str) {
    let (t, reference) = reference(stem);
    for case in reference["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let plain = t
            .encode(
                text,
                EncodeOptions {
                    add_special: false,
                    parse_special: false,
                },
            )
            .unwrap();
        assert_eq!(
            t.decode(&plain, false).unwrap(),
            text,
            "{stem}: decode(encode(text)) for {text:?}"
        );

        let mut stream = StreamDecoder::new(&t, false);
        let mut streamed = String::new();
        for &id in &plain {
            streamed.push_str(stream.push(id).unwrap());
        }
        streamed.push_str(stream.finish());
        assert_eq!(streamed, text, "{stem}: streamed decode of {text:?}");

        // llama-cpp-python's detokenize(special=True): every token's piece, back to back.
        let parsed = ids(&case["ids_parse_special"]);
        let expected = case["detokenized_hex"].as_str().unwrap();
        let ours: String = parsed
            .iter()
            .flat_map(|&id| t.token_bytes(id, true).unwrap().to_vec())
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(ours, expected, "{stem}: detokenized bytes of {text:?}");
    }
}

#[test]
fn smollm2_ids_match_llama_cpp() {
    assert_same_ids("smollm2");
}

#[test]
fn llama_bpe_pre_tokenizer_ids_match_llama_cpp() {
    assert_same_ids("smollm2_llama_bpe");
}

#[test]
fn qwen2_pre_tokenizer_ids_match_llama_cpp() {
    assert_same_ids("smollm2_qwen2");
}

#[test]
fn gpt2_pre_tokenizer_ids_match_llama_cpp() {
    assert_same_ids("smollm2_gpt_2");
}

#[test]
fn sentence_piece_ids_match_llama_cpp() {
    assert_same_ids("spm");
}

#[test]
fn decoding_round_trips_and_matches_llama_cpp_bytes() {
    for stem in ["smollm2", "smollm2_llama_bpe", "spm"] {
        assert_decoding(stem);
    }
}

#[test]
fn smollm2_chat_template_renders_like_jinja2() {
    let (t, reference) = reference("smollm2");
    let template = t.chat_template().unwrap();
    for chat in reference["chats"].as_array().unwrap() {
        let messages: Vec<ChatMessage> = chat["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let rendered = template
            .render(&messages, chat["add_generation_prompt"].as_bool().unwrap())
            .unwrap();
        assert_eq!(rendered, chat["rendered"].as_str().unwrap());
        let ours = t
            .encode(
                &rendered,
                EncodeOptions {
                    add_special: false,
                    parse_special: true,
                },
            )
            .unwrap();
        assert_eq!(
            ours,
            ids(&chat["rendered_ids"]),
            "ids of the rendered conversation"
        );
    }
}

#[test]
fn smollm2_end_of_generation_tokens() {
    let (t, _) = reference("smollm2");
    let special = t.special_tokens();
    assert_eq!((special.bos, special.eos), (Some(1), Some(2)));
    assert!(!t.adds_bos(), "SmolLM2's file sets add_bos_token = false");
    // <|im_end|> (the eos) and <|endoftext|> end generation, as in llama.cpp.
    assert_eq!(t.end_of_generation_ids(), [0, 2]);
}
