//! Times building the tokenizer from a vocabulary fixture and encoding a text file (a dev tool,
//! not a test; speed is not asserted anywhere).
//! Usage: cargo run --release -p strata-tokenizer --example tokenize_timing -- VOCAB.json.gz TEXT

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use strata_tokenizer::{EncodeOptions, Tokenizer};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, vocab, text] = args.as_slice() else {
        eprintln!("usage: tokenize_timing VOCAB.json.gz TEXT_FILE");
        std::process::exit(2);
    };
    let desc = support::description(&support::load_json(vocab));
    let start = Instant::now();
    let tokenizer = Tokenizer::new(&desc).unwrap();
    let build = start.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(text).unwrap();
    let start = Instant::now();
    let ids = tokenizer
        .encode(
            &text,
            EncodeOptions {
                add_special: false,
                parse_special: true,
            },
        )
        .unwrap();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "build {:.1} ms; encode {} bytes -> {} tokens in {:.1} ms ({:.2} MB/s, {:.0} tokens/s)",
        build * 1e3,
        text.len(),
        ids.len(),
        secs * 1e3,
        text.len() as f64 / secs / 1e6,
        ids.len() as f64 / secs
    );
}
