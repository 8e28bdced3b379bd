//! SmolLM2-135M-Instruct (Q4_1) from ../shared/models against llama.cpp: the tokenizer built from
//! the file's metadata returns llama.cpp's ids; greedy generation and prefill argmax match the
//! reference recorded by `scripts/llama_cpp_reference.py` in `tests/fixtures/smollm2_llama_cpp.json`.
//! Skipped, with a notice, when the shared models folder is absent.

use std::path::PathBuf;

use serde_json::Value;
use strata_gguf::GgufFile;
use strata_llm::{tokenizer_from_gguf, GenerateOptions, LanguageModel, LoadOptions};
use strata_tokenizer::EncodeOptions;

fn model_path() -> Option<PathBuf> {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    ));
    if path.exists() {
        Some(path)
    } else {
        println!("skipped: {} is absent", path.display());
        None
    }
}

fn json(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn tokenizer_from_gguf_metadata_gives_llama_cpp_ids() {
    let Some(path) = model_path() else { return };
    let file = GgufFile::open(&path).unwrap();
    let t = tokenizer_from_gguf(&file).unwrap();
    let reference = json(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../strata-tokenizer/tests/fixtures/smollm2_ids.json"
    ));
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    let options = [
        ("ids", false, false),
        ("ids_add_special", true, false),
        ("ids_parse_special", false, true),
    ];
    let mut compared = 0;
    for case in cases {
        let text = case["text"].as_str().unwrap();
        for (key, add_special, parse_special) in options {
            let ours = t
                .encode(
                    text,
                    EncodeOptions {
                        add_special,
                        parse_special,
                    },
                )
                .unwrap();
            assert_eq!(ours, ids(&case[key]), "{key} {text:?}");
            compared += 1;
        }
    }
    assert!(compared >= 90);
    assert!(t.chat_template().is_ok(), "the file's chat template parses");
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn greedy_generation_and_prefill_argmax_match_llama_cpp() {
    let Some(path) = model_path() else { return };
    let reference = json(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/smollm2_llama_cpp.json"
    ));
    let options = LoadOptions {
        threads: 2,
        context: Some(512),
        all_logits: true,
        ..Default::default()
    };
    let model = LanguageModel::load(&path, options).unwrap();
    let v = model.vocab_size();
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 4);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["prompt"].as_str().unwrap();
        let prompt = model.encode_prompt(text).unwrap();
        assert_eq!(prompt, ids(&case["prompt_ids"]), "prompt ids of {text:?}");

        let mut session = model.session().unwrap();
        let logits = session.prefill_all(&prompt).unwrap();
        let ours: Vec<u32> = logits.chunks_exact(v).map(argmax).collect();
        let expected = ids(&case["prefill_argmax"]);
        if ours != expected {
            failures.push(format!("prefill argmax of {text:?}:\n  llama.cpp {expected:?}\n  strata    {ours:?}"));
        }

        let mut session = model.session().unwrap();
        let options = GenerateOptions {
            max_tokens: reference["generate"].as_u64().unwrap() as usize,
            ..Default::default()
        };
        let generated: Vec<u32> = model
            .generate(&mut session, &prompt, &options)
            .unwrap()
            .map(|p| p.unwrap().id)
            .collect();
        let expected = ids(&case["generated"]);
        if generated != expected {
            let same = generated.iter().zip(&expected).take_while(|(a, b)| a == b).count();
            failures.push(format!(
                "greedy tokens of {text:?} differ from token {same}:\n  llama.cpp {expected:?}\n  strata    {generated:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
