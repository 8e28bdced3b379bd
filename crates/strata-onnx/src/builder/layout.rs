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

/// Pads doc strings so that every initializer's `raw_data` starts at an [`INLINE_ALIGN`]ed
/// offset of the encoded model.
///
/// prost writes fields in tag order, so what precedes initializer `i`'s `raw_data` and can be
/// padded harmlessly is the doc string of initializer `i - 1` (tag 12, after its raw_data) and,
/// for the first one, the last node's doc string or else the model's (both encoded before the
/// graph's initializers). Only doc strings nobody set are used. Padding shifts everything after
/// it and can lengthen the varint length prefixes of the enclosing messages, so this measures
/// the real encoding and repeats until every offset is aligned; pads only ever grow, so the
/// varints only grow, which bounds the rounds (usually one or two).
pub(crate) fn align_inline_raw_data(model: &mut ModelProto) {
    let Some(graph) = model.graph.as_ref() else {
        return;
    };
    let carriers: Vec<Option<Carrier>> = (0..graph.initializer.len())
        .map(|i| match i.checked_sub(1) {
            Some(previous) => graph.initializer[previous]
                .doc_string
                .is_none()
                .then_some(Carrier::Tensor(previous)),
            None => match graph.node.last() {
                Some(node) if node.doc_string.is_none() => {
                    Some(Carrier::Node(graph.node.len() - 1))
                }
                _ => model.doc_string.is_none().then_some(Carrier::Model),
            },
        })
        .collect();
    for _ in 0..16 {
        let encoded = Bytes::from(model.encode_to_vec());
        let base = encoded.as_ptr() as usize;
        let Ok(decoded) = ModelProto::decode(encoded.clone()) else {
            return;
        };
        let Some(decoded_graph) = decoded.graph else {
            return;
        };
        // Decoding from `Bytes` is zero-copy, so raw_data points into `encoded`.
        let offsets: Vec<Option<usize>> = decoded_graph
            .initializer
            .iter()
            .map(|t| {
                t.raw_data
                    .as_ref()
                    .filter(|raw| !raw.is_empty())
                    .and_then(|raw| (raw.as_ptr() as usize).checked_sub(base))
            })
            .collect();
        let mut shift = 0usize;
        let mut changed = false;
        for (offset, carrier) in offsets.into_iter().zip(&carriers) {
            let (Some(offset), Some(carrier)) = (offset, carrier) else {
                continue;
            };
            let Some(doc) = carrier.doc_string(model) else {
                return;
            };
            let old_pad = doc.as_ref().map_or(0, |text| doc_string_size(text.len()));
            let misalignment = (offset + shift) % INLINE_ALIGN;
            let mut pad = old_pad + (INLINE_ALIGN - misalignment) % INLINE_ALIGN;
            while pad > 0 && text_len_for(pad).is_none() {
                pad += INLINE_ALIGN;
            }
            if pad != old_pad {
                *doc = text_len_for(pad).map(|len| " ".repeat(len));
                changed = true;
            }
            shift += pad - old_pad;
        }
        if !changed {
            return;
        }
    }
}

/// A doc string encoded before some initializer's `raw_data`.
#[derive(Debug, Clone, Copy)]
enum Carrier {
    Model,
    Node(usize),
    Tensor(usize),
}

impl Carrier {
    fn doc_string(self, model: &mut ModelProto) -> Option<&mut Option<String>> {
        match self {
            Carrier::Model => Some(&mut model.doc_string),
            Carrier::Node(i) => model
                .graph
                .as_mut()?
                .node
                .get_mut(i)
                .map(|n| &mut n.doc_string),
            Carrier::Tensor(i) => model
                .graph
                .as_mut()?
                .initializer
                .get_mut(i)
                .map(|t| &mut t.doc_string),
        }
    }
}

/// Encoded bytes of a doc string field with `text_len` bytes of text: tag, length, text.
fn doc_string_size(text_len: usize) -> usize {
    1 + prost::encoding::encoded_len_varint(text_len as u64) + text_len
}

/// The text length whose doc string field takes exactly `size` bytes, if one does (a field is at
/// least 2 bytes, and some sizes fall between varint widths).
fn text_len_for(size: usize) -> Option<usize> {
    (1..=3)
        .filter_map(|varint| size.checked_sub(1 + varint))
        .find(|&len| doc_string_size(len) == size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_string_sizes_invert() {
        assert_eq!(text_len_for(0), None);
        assert_eq!(text_len_for(1), None);
        assert_eq!(text_len_for(2), Some(0));
        assert_eq!(text_len_for(129), Some(127));
        assert_eq!(
            text_len_for(130),
            None,
            "127 text bytes take 129, 128 take 131"
        );
        assert_eq!(text_len_for(131), Some(128));
        for size in 2..20_000 {
            if let Some(len) = text_len_for(size) {
                assert_eq!(doc_string_size(len), size);
            }
        }
    }
}
