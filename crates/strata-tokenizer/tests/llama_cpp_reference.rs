//! SmolLM2's tokenizer against llama.cpp: the fixtures are written by
//! `scripts/tokenizer_reference.py` from `../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf` (the
//! vocabulary description read with the `gguf` package, the ids from llama-cpp-python), so this
//! test needs neither Python nor a GGUF reader.

mod support;

use serde_json::Value;
use strata_tokenizer::{ChatMessage, EncodeOptions, Tokenizer};
use support::{description, ids, load_json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn smollm2() -> (Tokenizer, Value) {
    let desc = description(&load_json(&format!("{FIXTURES}/smollm2_vocab.json.gz")));
    assert_eq!(desc.tokens.len(), 49152);
    assert_eq!(desc.merges.len(), 48900);
    (
        Tokenizer::new(&desc).unwrap(),
        load_json(&format!("{FIXTURES}/smollm2_ids.json")),
    )
}

#[test]
fn smollm2_ids_match_llama_cpp_for_every_text_and_option() {
    let (t, reference) = smollm2();
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 30, "the fixture has {} texts", cases.len());
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
        "{} of {compared} encodings differ from llama.cpp:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn smollm2_decoding_round_trips_and_matches_llama_cpp_bytes() {
    let (t, reference) = smollm2();
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
            "decode(encode(text)) for {text:?}"
        );

        let mut stream = t.stream_decoder(false);
        let mut streamed = String::new();
        for &id in &plain {
            streamed.push_str(stream.push(id).unwrap());
        }
        streamed.push_str(stream.finish());
        assert_eq!(streamed, text, "streamed decode of {text:?}");

        // llama.cpp's detokenize(special=True) of the special-parsed ids, byte for byte.
        let parsed = ids(&case["ids_parse_special"]);
        let expected = case["detokenized_hex"].as_str().unwrap();
        let ours: String = parsed
            .iter()
            .flat_map(|&id| t.token_bytes(id, true).unwrap().to_vec())
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(ours, expected, "detokenized bytes of {text:?}");
    }
}

#[test]
fn smollm2_chat_template_renders_like_jinja2() {
    let (t, reference) = smollm2();
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
    let (t, _) = smollm2();
    let special = t.special_tokens();
    assert_eq!((special.bos, special.eos), (Some(1), Some(2)));
    assert!(!t.adds_bos(), "SmolLM2's file sets add_bos_token = false");
    // <|im_end|> (the eos) and <|endoftext|> end generation, as in llama.cpp.
    assert_eq!(t.end_of_generation_ids(), [0, 2]);
}
