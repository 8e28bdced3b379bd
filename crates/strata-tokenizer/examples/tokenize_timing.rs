//! Times encoding a text file with a vocabulary fixture (a dev tool, not a test).
//! Usage: cargo run --release -p strata-tokenizer --example tokenize_timing -- VOCAB.json.gz TEXT_FILE
use std::io::Read;
use std::time::Instant;

use strata_tokenizer::{EncodeOptions, Tokenizer, VocabularyDescription};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bytes = std::fs::read(&args[1]).unwrap();
    let mut json = String::new();
    flate2::read::GzDecoder::new(bytes.as_slice()).read_to_string(&mut json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let strings = |k: &str| v[k].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect::<Vec<_>>();
    let desc = VocabularyDescription {
        model: v["model"].as_str().unwrap().into(),
        pre: v["pre"].as_str().map(Into::into),
        tokens: strings("tokens"),
        token_types: v["token_types"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap() as i32).collect(),
        merges: strings("merges"),
        ..Default::default()
    };
    let start = Instant::now();
    let t = Tokenizer::new(&desc).unwrap();
    let build = start.elapsed();
    let text = std::fs::read_to_string(&args[2]).unwrap();
    let start = Instant::now();
    let ids = t.encode(&text, EncodeOptions { add_special: false, parse_special: true }).unwrap();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "build {:.1} ms; encode {} bytes -> {} tokens in {:.1} ms ({:.2} MB/s)",
        build.as_secs_f64() * 1e3,
        text.len(),
        ids.len(),
        secs * 1e3,
        text.len() as f64 / secs / 1e6
    );
}
