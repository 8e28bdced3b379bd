//! The tokenizer's description from a GGUF file's `tokenizer.ggml.*` keys (and
//! `tokenizer.chat_template`), checked: each key present has the type it must have.

use strata_gguf::{Array, GgufFile, Value};
use strata_tokenizer::{Tokenizer, VocabularyDescription};

use crate::error::{LlmError, Result};

/// The `VocabularyDescription` the file's tokenizer keys describe.
pub fn vocabulary_description(file: &GgufFile) -> Result<VocabularyDescription> {
    let tokens = strings(file, "tokenizer.ggml.tokens")?.ok_or_else(|| {
        LlmError::metadata(
            "tokenizer.ggml.tokens",
            "is missing: the file has no tokenizer",
        )
    })?;
    let scores = match file.get("tokenizer.ggml.scores") {
        None => Vec::new(),
        Some(Value::Array(Array::F32(v))) => v.clone(),
        Some(other) => return Err(wrong("tokenizer.ggml.scores", "[f32]", other)),
    };
    let token_types = match file.get("tokenizer.ggml.token_type") {
        None => Vec::new(),
        Some(Value::Array(Array::I32(v))) => v.clone(),
        Some(Value::Array(Array::U32(v))) => v.iter().map(|&t| t as i32).collect(),
        Some(other) => return Err(wrong("tokenizer.ggml.token_type", "[i32]", other)),
    };
    for (key, len) in [
        ("tokenizer.ggml.scores", scores.len()),
        ("tokenizer.ggml.token_type", token_types.len()),
    ] {
        if len != 0 && len != tokens.len() {
            return Err(LlmError::metadata(
                key,
                format!("has {len} entries for {} tokens", tokens.len()),
            ));
        }
    }
    Ok(VocabularyDescription {
        model: string(file, "tokenizer.ggml.model")?
            .ok_or_else(|| LlmError::metadata("tokenizer.ggml.model", "is missing"))?,
        pre: string(file, "tokenizer.ggml.pre")?,
        tokens,
        scores,
        token_types,
        merges: strings(file, "tokenizer.ggml.merges")?.unwrap_or_default(),
        bos_id: id(file, "tokenizer.ggml.bos_token_id")?,
        eos_id: id(file, "tokenizer.ggml.eos_token_id")?,
        eot_id: id(file, "tokenizer.ggml.eot_token_id")?,
        eom_id: id(file, "tokenizer.ggml.eom_token_id")?,
        unk_id: id(file, "tokenizer.ggml.unknown_token_id")?,
        pad_id: id(file, "tokenizer.ggml.padding_token_id")?,
        add_bos: flag(file, "tokenizer.ggml.add_bos_token")?,
        add_eos: flag(file, "tokenizer.ggml.add_eos_token")?,
        add_space_prefix: flag(file, "tokenizer.ggml.add_space_prefix")?,
        chat_template: string(file, "tokenizer.chat_template")?,
    })
}

/// The file's tokenizer.
pub fn tokenizer_from_gguf(file: &GgufFile) -> Result<Tokenizer> {
    Ok(Tokenizer::new(&vocabulary_description(file)?)?)
}

fn wrong(key: &str, expected: &str, found: &Value) -> LlmError {
    LlmError::metadata(
        key,
        format!("holds {}, expected {expected}", found.type_description()),
    )
}

fn string(file: &GgufFile, key: &str) -> Result<Option<String>> {
    match file.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(wrong(key, "a string", other)),
    }
}

fn strings(file: &GgufFile, key: &str) -> Result<Option<Vec<String>>> {
    match file.get(key) {
        None => Ok(None),
        Some(Value::Array(Array::String(v))) => Ok(Some(v.clone())),
        Some(other) => Err(wrong(key, "[string]", other)),
    }
}

fn id(file: &GgufFile, key: &str) -> Result<Option<u32>> {
    match file.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| wrong(key, "a token id (u32)", v)),
    }
}

fn flag(file: &GgufFile, key: &str) -> Result<Option<bool>> {
    match file.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(wrong(key, "a bool", other)),
    }
}
