//! strata-gguf: GGUF import (L1).
//!
//! [`GgufFile::open`] maps a GGUF v2 or v3 file and decodes its header: typed metadata
//! ([`Value`], arrays kept typed), tensor infos checked against the file (type, shape, alignment,
//! bounds), `general.alignment`. Tensors are strata [`Tensor`](strata_core::Tensor)s over the
//! mapping, zero-copy, in any of the dtypes GGUF language models use (f32, f16, bf16, the legacy
//! block formats and the k-quants). Malformed files fail with a [`GgufError`] naming the key,
//! tensor or header field; no count is trusted before it is checked against the bytes left.
//! [`GgufWriter`] writes files for tests.

pub mod error;
pub mod file;
pub mod parse;
pub mod tensor_type;
pub mod value;
pub mod writer;

pub use error::{GgufError, Result};
pub use file::{GgufFile, TensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
pub use tensor_type::{ggml_type, ggml_type_id, GgmlType};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;
