//! The real SmolLM2-135M-Instruct (Q4_1 with a Q8_0 embedding) from `../shared/models`, when
//! present: every tensor's type, shape and byte size check out, the tensors tile the data
//! section, and the token embedding dequantizes to finite values.

use std::path::Path;

use strata_core::dtype::block::dequantize_row;
use strata_core::DType;
use strata_gguf::GgufFile;

fn model() -> Option<GgufFile> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        eprintln!("skipping: {} is not present", path.display());
        return None;
    }
    Some(GgufFile::open(&path).expect("SmolLM2 loads"))
}

#[test]
fn smollm2_loads_with_the_expected_tensors() {
    let Some(file) = model() else { return };
    assert_eq!(file.version(), 3);
    assert_eq!(file.architecture().unwrap(), "llama");
    assert_eq!(file.get_u64("llama.block_count").unwrap(), 30);
    assert_eq!(file.get_u64("llama.embedding_length").unwrap(), 576);
    assert_eq!(file.get_u64("llama.attention.head_count").unwrap(), 9);
    assert_eq!(file.get_u64("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(file.get_u64("llama.feed_forward_length").unwrap(), 1536);
    assert_eq!(file.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    let tokens = file.get_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.as_strings().map(<[String]>::len), Some(49152));
    assert_eq!(
        file.get_array("tokenizer.ggml.merges").unwrap().len(),
        48900
    );

    let (hidden, kv, ffn, vocab) = (576, 192, 1536, 49152);
    let mut by_type = std::collections::BTreeMap::new();
    for t in file.tensors() {
        *by_type.entry(t.dtype).or_insert(0) += 1;
        let dims: Vec<usize> = match t.name.rsplit_once('.').map(|(n, _)| n) {
            Some("token_embd") => vec![vocab, hidden],
            Some("output_norm") => vec![hidden],
            _ => {
                let kind = t.name.split('.').nth(2).expect("blk.N.kind.weight");
                match kind {
                    "attn_norm" | "ffn_norm" => vec![hidden],
                    "attn_q" | "attn_output" => vec![hidden, hidden],
                    "attn_k" | "attn_v" => vec![kv, hidden],
                    "ffn_gate" | "ffn_up" => vec![ffn, hidden],
                    "ffn_down" => vec![hidden, ffn],
                    other => panic!("unexpected tensor kind {other} in {}", t.name),
                }
            }
        };
        assert_eq!(t.dims, dims, "{}", t.name);
        assert_eq!(
            t.size_in_bytes,
            t.dtype.bytes_for(t.numel()).unwrap(),
            "{}",
            t.name
        );
        let tensor = file.tensor(&t.name).unwrap();
        assert_eq!((tensor.dtype(), tensor.dims()), (t.dtype, &dims[..]));
    }
    assert_eq!(by_type.get(&DType::Q4_1), Some(&210));
    assert_eq!(by_type.get(&DType::Q8_0), Some(&1));
    assert_eq!(by_type.get(&DType::F32), Some(&61));
    assert_eq!(file.tensors().len(), 272);

    // The tensors tile the data section: each starts at the aligned end of the previous one,
    // and the last ends at the end of the file.
    let mut spans: Vec<(usize, usize)> = file
        .tensors()
        .iter()
        .map(|t| (t.file_offset, t.size_in_bytes))
        .collect();
    spans.sort();
    let mut at = file.data_offset();
    for (offset, size) in spans {
        assert_eq!(offset, at.next_multiple_of(file.alignment()));
        at = offset + size;
    }
    assert_eq!(at, file.file_len());
}

#[test]
fn smollm2_token_embedding_dequantizes_to_finite_values() {
    let Some(file) = model() else { return };
    let info = file.tensor_info("token_embd.weight").unwrap();
    assert_eq!(info.dtype, DType::Q8_0);
    let bytes = file.tensor_bytes("token_embd.weight").unwrap();
    let mut values = vec![0.0f32; info.numel()];
    dequantize_row(DType::Q8_0, bytes, &mut values).unwrap();
    assert!(values.iter().all(|v| v.is_finite()));
    let mean_abs = values.iter().map(|v| v.abs() as f64).sum::<f64>() / values.len() as f64;
    assert!(mean_abs > 1e-3 && mean_abs < 10.0, "mean |w| = {mean_abs}");
}
