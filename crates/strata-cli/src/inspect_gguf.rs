//! `strata inspect MODEL.gguf`: a GGUF language model's architecture, metadata and tensors by
//! type, and for the architectures strata builds the memory plan of its graph (the arena of a
//! session at the largest prefill chunk) and the KV cache's bytes per position.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use strata_gguf::GgufFile;

use crate::report::{bytes, memory_json, memory_text};

/// The plan's memory and the KV cache's size, or why there is none.
fn llm_memory(
    path: &Path,
    memory_limit: Option<usize>,
) -> Result<(serde_json::Value, String), String> {
    let defaults = strata_llm::LoadOptions::default();
    let options = strata_llm::LoadOptions {
        threads: 1,
        memory_limit: memory_limit.unwrap_or(defaults.memory_limit),
        ..defaults
    };
    let model = strata_llm::LanguageModel::load(path, options).map_err(|e| e.to_string())?;
    let c = model.config();
    let per_position = c.layers * 2 * c.kv_heads * c.head_dim * std::mem::size_of::<f32>();
    let plan = model.plan().memory_plan();
    let value = json!({
        "memory_plan": memory_json(plan),
        "prefill_chunk": model.options().prefill_chunk,
        "kv_cache_bytes_per_position": per_position,
        "kv_cache_bytes_full_context": per_position * model.context(),
        "context": model.context(),
    });
    let text = format!(
        "{} (prefill chunks of up to {} tokens)\nKV cache: {} per position, {} at the full context of {} (allocated in blocks as a session grows)",
        memory_text(plan),
        model.options().prefill_chunk,
        bytes(per_position),
        bytes(per_position * model.context()),
        model.context()
    );
    Ok((value, text))
}

/// Whether `path` names a GGUF file (by extension, or by its magic when it has another one).
pub fn is_gguf(path: &Path) -> bool {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return true;
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && &magic == b"GGUF"
}

pub fn inspect(path: &Path, memory_limit: Option<usize>, json_out: bool) -> Result<(), String> {
    let file = GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let architecture = file.architecture().unwrap_or("(none)").to_string();
    // Tensor count and bytes per dtype.
    let mut by_type: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for t in file.tensors() {
        let entry = by_type.entry(t.dtype.to_string()).or_default();
        entry.0 += 1;
        entry.1 += t.size_in_bytes;
    }
    let total: usize = file.tensors().iter().map(|t| t.size_in_bytes).sum();
    let memory = llm_memory(path, memory_limit);
    if json_out {
        let mut value = json!({
            "model": path.display().to_string(),
            "format": "gguf",
            "version": file.version(),
            "architecture": architecture,
            "alignment": file.alignment(),
            "metadata": file.metadata().iter().map(|(k, v)| json!({
                "key": k, "type": v.type_description(), "value": v.to_string(),
            })).collect::<Vec<_>>(),
            "tensor_count": file.tensors().len(),
            "tensor_bytes": total,
            "tensors_by_type": by_type.iter().map(|(d, (n, b))| (d.clone(), json!({ "count": n, "bytes": b }))).collect::<serde_json::Map<_, _>>(),
        });
        value["memory"] = match &memory {
            Ok((v, _)) => v.clone(),
            Err(reason) => json!({ "unavailable": reason }),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!("model: {} (GGUF v{})", path.display(), file.version());
    println!("architecture: {architecture}");
    println!("metadata ({} keys):", file.metadata().len());
    for (k, v) in file.metadata() {
        println!("  {k} = {v}");
    }
    println!(
        "tensors: {} ({}, alignment {})",
        file.tensors().len(),
        bytes(total),
        file.alignment()
    );
    for (dtype, (n, b)) in &by_type {
        println!("  {dtype:<6} {n:>5} tensors  {}", bytes(*b));
    }
    match memory {
        Ok((_, text)) => println!("{text}"),
        Err(reason) => println!("memory plan: unavailable ({reason})"),
    }
    Ok(())
}
