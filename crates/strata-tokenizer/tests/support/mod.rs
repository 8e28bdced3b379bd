//! Loading the reference fixtures written by `scripts/tokenizer_reference.py`: JSON, gzipped or
//! not, and the vocabulary description in it.

#![allow(dead_code)]

use std::io::Read;

use serde_json::Value;
use strata_tokenizer::VocabularyDescription;

/// Reads a `.json` or `.json.gz` file.
pub fn load_json(path: &str) -> Value {
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

/// A list of ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The vocabulary description as the script dumps it (one key per `VocabularyDescription` field).
pub fn description(v: &Value) -> VocabularyDescription {
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
