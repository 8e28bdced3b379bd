//! Seeds for the `gguf` fuzz target (`scripts/fuzz.sh gguf`): tiny models, written into
//! `$STRATA_FUZZ_SEED_DIR` when it is set. Without it, the test checks that each seed loads and
//! runs (a seed that fails to load would only teach the fuzzer the reader's error paths).

mod common;

use common::{open_writer, writer, Tiny};
use strata_core::DType;
use strata_llm::{LanguageModel, LoadOptions};

/// Small enough that the fuzzer mutates them quickly: widths of one or two 32-value blocks.
fn seeds() -> Vec<(String, Tiny)> {
    let mut out = Vec::new();
    for arch in ["llama", "qwen2"] {
        for dtype in [DType::F32, DType::Q8_0, DType::Q4_0] {
            let mut t = Tiny::new(arch, dtype);
            (t.embedding, t.feed_forward, t.heads, t.kv_heads) = (32, 64, 2, 1);
            (t.layers, t.vocab, t.context) = (1, 16, 16);
            out.push((format!("{arch}-{dtype}"), t));
        }
    }
    out
}

#[test]
fn fuzz_seeds_load_and_run_or_are_written() {
    let dir = std::env::var_os("STRATA_FUZZ_SEED_DIR");
    for (name, t) in seeds() {
        let w = writer(&t);
        match &dir {
            Some(dir) => w
                .write(std::path::Path::new(dir).join(format!("{name}.gguf")))
                .unwrap(),
            None => {
                let options = LoadOptions {
                    threads: 1,
                    ..Default::default()
                };
                let model = LanguageModel::from_gguf(&open_writer(&w), options).unwrap();
                model.session().unwrap().prefill(&[1, 2]).unwrap();
            }
        }
    }
}
