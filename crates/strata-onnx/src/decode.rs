//! Decoding ONNX protobuf files, from memory or from a read-only memory map.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use strata_core::{MappedFile, MappedFileBytes};

use crate::error::{OnnxError, Result};
use crate::proto::{ModelProto, TensorProto};

/// Decodes a model from `bytes`. `source` names the bytes in errors (usually the file path).
///
/// Every `bytes` field of the result (notably `TensorProto::raw_data`) is a slice of `bytes`,
/// sharing its buffer: decoding copies no weights. Beyond protobuf well-formedness, the model
/// must have an IR version, a graph and (IR ≥ 3) an opset import, which is what a file cut at a
/// field boundary lacks.
pub fn load_model_bytes(bytes: Bytes, source: &str) -> Result<ModelProto> {
    let model: ModelProto = decode_message(bytes, source)?;
    let missing = |what: &str| OnnxError::Decode {
        path: source.to_string(),
        message: format!("model has no {what}"),
    };
    let ir_version = model.ir_version.ok_or_else(|| missing("ir_version"))?;
    if model.graph.is_none() {
        return Err(missing("graph"));
    }
    // Opset imports arrived with IR version 3; later models without one are incomplete.
    if ir_version >= 3 && model.opset_import.is_empty() {
        return Err(missing("opset_import"));
    }
    Ok(model)
}

/// Memory-maps the model file at `path` read-only and decodes it.
///
/// Returns the model and the `Bytes` that own the mapping: the model's `raw_data` fields are
/// slices of it, so initializers can be used in place (see [`crate::tensor_from_proto`]).
pub fn open_model(path: impl AsRef<Path>) -> Result<(ModelProto, Bytes)> {
    let path = path.as_ref();
    let bytes = map_file(path)?;
    let model = load_model_bytes(bytes.clone(), &path.display().to_string())?;
    Ok((model, bytes))
}

/// Decodes one serialized `TensorProto` (the `.pb` files of the ONNX backend tests).
pub fn load_tensor_bytes(bytes: Bytes, source: &str) -> Result<TensorProto> {
    decode_message(bytes, source)
}

/// Memory-maps and decodes a serialized `TensorProto` file.
pub fn open_tensor(path: impl AsRef<Path>) -> Result<TensorProto> {
    let path = path.as_ref();
    load_tensor_bytes(map_file(path)?, &path.display().to_string())
}

/// The whole file at `path` as `Bytes` that own a read-only memory map of it.
pub fn map_file(path: &Path) -> Result<Bytes> {
    Ok(match map_model_file(path)? {
        Some(map) => Bytes::from_owner(MappedFileBytes(map)),
        None => Bytes::new(),
    })
}

/// A read-only memory map of the whole file at `path` (`None` for an empty file, which cannot
/// be mapped). Handed to [`crate::WeightSource::with_model_map`], it lets weights view the map
/// and leave the resident set once copied or freed.
pub fn map_model_file(path: &Path) -> Result<Option<Arc<MappedFile>>> {
    let file = File::open(path).map_err(|err| OnnxError::io(path, err))?;
    let metadata = file.metadata().map_err(|err| OnnxError::io(path, err))?;
    if metadata.is_dir() {
        // Mapping a directory fails with "No such device", which says nothing useful.
        let err = std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "is a directory, not a model file",
        );
        return Err(OnnxError::io(path, err));
    }
    let len = metadata.len();
    // An empty file cannot be mapped; it simply has no bytes (and decodes to an error).
    if len == 0 {
        return Ok(None);
    }
    let map = MappedFile::map(&file, path.to_path_buf()).map_err(|err| OnnxError::io(path, err))?;
    Ok(Some(map))
}

fn decode_message<M: Message + Default>(bytes: Bytes, source: &str) -> Result<M> {
    M::decode(bytes).map_err(|err| OnnxError::Decode {
        path: source.to_string(),
        message: err.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_named_as_one() {
        let dir = std::env::temp_dir();
        let message = map_file(&dir).unwrap_err().to_string();
        assert!(message.contains("is a directory"), "{message}");
        assert!(message.contains(&dir.display().to_string()), "{message}");
    }
}
