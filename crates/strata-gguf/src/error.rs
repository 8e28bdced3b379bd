//! The error type of GGUF import. Every variant names the key, tensor or header field at fault.

use strata_core::CoreError;

pub type Result<T, E = GgufError> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GgufError {
    #[error("not a GGUF file: magic {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: Vec<u8> },

    #[error("GGUF version {version} is not supported (v2 and v3 are)")]
    UnsupportedVersion { version: u32 },

    #[error("truncated GGUF file: {what} needs bytes {offset}..{end} but the file has {len}")]
    Truncated {
        what: String,
        offset: usize,
        end: u64,
        len: usize,
    },

    #[error("{what}: count {count} cannot fit in the {remaining} bytes left in the file")]
    CountTooLarge {
        what: String,
        count: u64,
        remaining: usize,
    },

    #[error("{what}: string is not valid UTF-8")]
    InvalidUtf8 { what: String },

    #[error("metadata key {key:?}: unknown value type {type_id}")]
    UnknownValueType { key: String, type_id: u32 },

    #[error("metadata key {key:?}: arrays nested deeper than {limit} levels")]
    NestingTooDeep { key: String, limit: usize },

    #[error("metadata key {key:?} appears twice")]
    DuplicateKey { key: String },

    #[error("metadata key {key:?} is missing")]
    MissingKey { key: String },

    #[error("metadata key {key:?} holds {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },

    #[error("general.alignment = {value}: must be a non-zero power of two")]
    BadAlignment { value: u64 },

    #[error("tensor {tensor:?}: unknown GGML type id {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },

    #[error("tensor {tensor:?}: GGML type {type_name} is not supported")]
    UnsupportedTensorType {
        tensor: String,
        type_name: &'static str,
    },

    #[error("tensor {tensor:?}: {reason}")]
    BadShape { tensor: String, reason: String },

    #[error("tensor {tensor:?} appears twice")]
    DuplicateTensor { tensor: String },

    #[error(
        "tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: usize,
    },

    #[error(
        "tensor {tensor:?}: bytes {offset}..{end} (from the data section) lie outside the \
         {available} data bytes in the file"
    )]
    TensorOutOfFile {
        tensor: String,
        offset: u64,
        end: u64,
        available: usize,
    },

    #[error("no tensor named {name:?}")]
    NoTensor { name: String },

    #[error(transparent)]
    Core(#[from] CoreError),
}
