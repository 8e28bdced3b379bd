//! SmolLM2's tokenizer against llama.cpp: the fixtures are written by
//! `scripts/tokenizer_reference.py` from `../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf` (the
//! vocabulary description read with the `gguf` package, the ids from llama-cpp-python), so this
//! test needs neither Python nor a GGUF reader.

use std::io::Read;

use serde_json::Value;
use strata_tokenizer::{ChatMessage, EncodeOptions, Tokenizer, VocabularyDescription};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn load_json(path: &str) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let text = if path.ends_with(".gz") {
        let mut text = String::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_string(&mut text)
            .unwrap();
        text
    } else {
        String::from_utf8(bytes).unwrap()
    };
    serde_json::from_str(&text).unwrap()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn description(v: &Value) -> VocabularyDescription {
    let id = |key: &str| v[key].as_u64().map(|x| x as u32);
    let flag = |key: &str| v[key].as_bool();
    VocabularyDescription {
        model: v["model"].as_str().unwrap().to_string(),
        pre: v["pre"].as_str().map(str::to_string),
        tokens: strings(&v["tokens"]),
        scores: v["scores"]
            .as_array()
            .map(|a| a.iter().map(|x| x.as_f64().unwrap() as f32).collect())
            .unwrap_or_default(),
        token_types: v["token_types"]
            .as_array()
            .map(|a| a.iter().map(|x| x.as_i64().unwrap() as i32).collect())
            .unwrap_or_default(),
        merges: strings(&v["merges"]),
        bos_id: id("bos_id"),
        eos_id: id("eos_id"),
        eot_id: id("eot_id"),
        eom_id: id("eom_id"),
        unk_id: id("unk_id"),
        pad_id: id("pad_id"),
        add_bos: flag("add_bos"),
        add_eos: flag("add_eos"),
        add_space_prefix: flag("add_space_prefix"),
        chat_template: v["chat_template"].as_str().map(str::to_string),
    }
}

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
