//! Where initializer bytes land in the written files: big ones in an external data file at
//! aligned offsets, inline ones padded to aligned offsets of the model file, so that a mapped
//! model can use every weight in place.

use bytes::Bytes;
use prost::Message;

use crate::error::{OnnxError, Result};
use crate::proto::tensor_proto::DataLocation;
use crate::proto::{ModelProto, StringStringEntryProto, TensorProto};

/// Offset alignment of tensors in external data files (the ONNX spec's page-size advice).
pub(crate) const EXTERNAL_ALIGN: usize = 4096;

/// File-offset alignment of inline `raw_data` (a cache line, enough for every element type).
pub(crate) const INLINE_ALIGN: usize = 64;

/// Moves the `raw_data` of every initializer of at least `threshold` bytes into one buffer, at
/// [`EXTERNAL_ALIGN`]ed offsets, and points the initializer at `location`. Returns the buffer.
pub(crate) fn move_to_external(
    initializers: &mut [TensorProto],
    threshold: usize,
    location: Option<&str>,
) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    for tensor in initializers.iter_mut() {
        let Some(raw) = tensor
            .raw_data
            .as_ref()
            .filter(|raw| raw.len() >= threshold && !raw.is_empty())
        else {
            continue;
        };
        let location = location.ok_or_else(|| {
            OnnxError::builder(format!(
                "initializer '{}' ({} bytes) goes to external data; write the model with save()",
                tensor.name(),
                raw.len()
            ))
        })?;
        let offset = data.len().next_multiple_of(EXTERNAL_ALIGN);
        data.resize(offset, 0);
        data.extend_from_slice(raw);
        let entry = |key: &str, value: String| StringStringEntryProto {
            key: Some(key.into()),
            value: Some(value),
        };
        tensor.external_data = vec![
            entry("location", location.to_string()),
            entry("offset", offset.to_string()),
            entry("length", raw.len().to_string()),
        ];
        tensor.raw_data = None;
        tensor.data_location = Some(DataLocation::External as i32);
    }
    Ok(data)
}

/// Pads each initializer's doc string (which prost writes just before `raw_data`) so that its
/// `raw_data` starts at an [`INLINE_ALIGN`]ed offset of the encoded model.
///
/// Padding shifts everything after it, and can lengthen the varint length prefixes of the
/// enclosing messages, so this measures the real encoding and repeats until it is stable
/// (usually one or two rounds). Initializers with their own doc string are left alone.
pub(crate) fn align_inline_raw_data(model: &mut ModelProto) {
    let Some(graph) = model.graph.as_ref() else {
        return;
    };
    let owned: Vec<bool> = graph
        .initializer
        .iter()
        .map(|t| t.doc_string.is_none())
        .collect();
    if !owned.contains(&true) {
        return;
    }
    for _ in 0..8 {
        let encoded = Bytes::from(model.encode_to_vec());
        let base = encoded.as_ptr() as usize;
        let Ok(decoded) = ModelProto::decode(encoded.clone()) else {
            return;
        };
        let Some(decoded_graph) = decoded.graph else {
            return;
        };
        let offsets: Vec<Option<usize>> = decoded_graph
            .initializer
            .iter()
            .map(|t| {
                t.raw_data
                    .as_ref()
                    .filter(|raw| !raw.is_empty())
                    .map(|raw| raw.as_ptr() as usize - base)
            })
            .collect();
        let Some(graph) = model.graph.as_mut() else {
            return;
        };
        let mut shift = 0isize;
        let mut changed = false;
        for ((tensor, offset), owned) in graph.initializer.iter_mut().zip(offsets).zip(&owned) {
            let (Some(offset), true) = (offset, *owned) else {
                continue;
            };
            let old_pad = tensor.doc_string.as_ref().map_or(0, |s| s.len() + 2);
            let unpadded = offset as isize + shift - old_pad as isize;
            let new_pad = padding_for(unpadded.rem_euclid(INLINE_ALIGN as isize) as usize);
            if new_pad != old_pad {
                // A doc string costs a tag byte and a length byte before its text.
                tensor.doc_string = (new_pad > 0).then(|| " ".repeat(new_pad - 2));
                changed = true;
            }
            shift += new_pad as isize - old_pad as isize;
        }
        if !changed {
            return;
        }
    }
}

/// Encoded doc-string bytes that move a field at `misalignment` to the next aligned offset: 0,
/// or 2 and up (a doc string is at least its tag and length bytes).
fn padding_for(misalignment: usize) -> usize {
    match (INLINE_ALIGN - misalignment) % INLINE_ALIGN {
        0 => 0,
        1 => 1 + INLINE_ALIGN,
        gap => gap,
    }
}
