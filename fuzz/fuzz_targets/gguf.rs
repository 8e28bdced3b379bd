//! GGUF bytes → the GGUF reader; when the file parses, a language model built from it, and when
//! that loads, a short prompt prefilled and one decode step. Anything but a typed error (a panic,
//! an abort, a hang, a huge allocation) is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_gguf::GgufFile;
use strata_llm::{LanguageModel, LoadOptions};

/// The reader maps a file: each input is written to one per-process path first.
fn path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("strata-fuzz-gguf-{}.gguf", std::process::id()))
}

fuzz_target!(|data: &[u8]| {
    let path = path();
    // A fresh file each time: a mapping of the previous input may still be alive.
    let _ = std::fs::remove_file(&path);
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let Ok(file) = GgufFile::open(&path) else {
        return;
    };
    for info in file.tensors().iter().take(8) {
        let _ = file.tensor(&info.name);
    }
    let options = LoadOptions {
        threads: 1,
        context: Some(32),
        prefill_chunk: 8,
        all_logits: false,
        memory_limit: 1 << 30,
    };
    let Ok(model) = LanguageModel::from_gguf(&file, options) else {
        return;
    };
    let Ok(ids) = model.encode_prompt("Hello, fuzz") else {
        return;
    };
    let Ok(mut session) = model.session() else {
        return;
    };
    let ids: Vec<u32> = ids.into_iter().take(8).collect();
    if session.prefill(&ids).is_ok() {
        let _ = session.step(ids.first().copied().unwrap_or(0));
    }
});
