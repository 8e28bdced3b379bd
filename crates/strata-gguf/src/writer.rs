//! A GGUF writer (v2 or v3), for tests and tools: metadata of every value type, tensors of
//! every supported dtype from raw bytes, f32 values or f32 values quantized to a legacy format.

use std::path::Path;

use strata_core::dtype::block::block_quantizer;
use strata_core::{CoreError, DType};

use crate::error::{GgufError, Result};
use crate::file::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
use crate::parse::MAGIC;
use crate::tensor_type::ggml_type_id;
use crate::value::{Array, Value};

struct PendingTensor {
    name: String,
    dtype: DType,
    dims: Vec<usize>,
    bytes: Vec<u8>,
}

/// Builds a GGUF file in memory.
pub struct GgufWriter {
    version: u32,
    alignment: usize,
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// A v3 writer with the default alignment.
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Writes GGUF `version` (2 or 3: the layouts are the same).
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Aligns the data section and tensors to `alignment`, recorded as `general.alignment`.
    pub fn alignment(mut self, alignment: usize) -> Self {
        self.alignment = alignment;
        self.metadata.retain(|(k, _)| k != ALIGNMENT_KEY);
        self.metadata
            .push((ALIGNMENT_KEY.to_string(), Value::U32(alignment as u32)));
        self
    }

    /// Adds a metadata entry.
    pub fn metadata(mut self, key: &str, value: Value) -> Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a string metadata entry.
    pub fn string(self, key: &str, value: &str) -> Self {
        self.metadata(key, Value::String(value.to_string()))
    }

    /// Adds a tensor of `dims` (strata order, outermost first) from its raw bytes.
    pub fn tensor(
        mut self,
        name: &str,
        dtype: DType,
        dims: &[usize],
        bytes: Vec<u8>,
    ) -> Result<Self> {
        let numel = dims.iter().product::<usize>();
        let need = dtype.bytes_for(numel)?;
        if ggml_type_id(dtype).is_none() || bytes.len() != need {
            return Err(GgufError::BadShape {
                tensor: name.to_string(),
                reason: format!(
                    "{} bytes given for {dims:?} of {dtype} (needs {need}, and a GGML type)",
                    bytes.len()
                ),
            });
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dtype,
            dims: dims.to_vec(),
            bytes,
        });
        Ok(self)
    }

    /// Adds an f32 tensor.
    pub fn tensor_f32(self, name: &str, dims: &[usize], values: &[f32]) -> Result<Self> {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, DType::F32, dims, bytes)
    }

    /// Adds a tensor of f32 `values` quantized to a legacy block format (q4_0 … q8_0).
    pub fn tensor_quantized(
        self,
        name: &str,
        dtype: DType,
        dims: &[usize],
        values: &[f32],
    ) -> Result<Self> {
        let quantize = block_quantizer(dtype).ok_or(CoreError::UnsupportedDType {
            op: "GgufWriter::tensor_quantized",
            dtype,
            reason: "only the legacy 32-element formats have a reference quantizer",
        })?;
        let bytes_len = dtype.bytes_for(values.len())?;
        let mut bytes = vec![0u8; bytes_len];
        for (x, b) in values
            .chunks_exact(dtype.block_size())
            .zip(bytes.chunks_exact_mut(dtype.size_in_bytes()))
        {
            quantize(x, b);
        }
        self.tensor(name, dtype, dims, bytes)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            out.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            put_string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for &d in t.dims.iter().rev() {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            let id = ggml_type_id(t.dtype).expect("checked when added");
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.bytes.len()).next_multiple_of(self.alignment);
        }
        let data_start = out.len().next_multiple_of(self.alignment);
        out.resize(data_start, 0);
        for (t, &at) in self.tensors.iter().zip(&offsets) {
            out.resize(data_start + at, 0);
            out.extend_from_slice(&t.bytes);
        }
        out
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_bytes()).map_err(|err| {
            GgufError::Core(CoreError::Io {
                path: path.display().to_string(),
                message: err.to_string(),
            })
        })
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.push(*v as u8),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(*v as u8),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, array: &Array) {
    out.extend_from_slice(&(array.element_type() as u32).to_le_bytes());
    out.extend_from_slice(&(array.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr, $put:expr) => {
            for x in $v {
                $put(out, x)
            }
        };
    }
    match array {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each!(v, |o: &mut Vec<u8>, x: &i8| o.push(*x as u8)),
        Array::U16(v) => each!(v, |o: &mut Vec<u8>, x: &u16| o
            .extend_from_slice(&x.to_le_bytes())),
        Array::I16(v) => each!(v, |o: &mut Vec<u8>, x: &i16| o
            .extend_from_slice(&x.to_le_bytes())),
        Array::U32(v) => each!(v, |o: &mut Vec<u8>, x: &u32| o
            .extend_from_slice(&x.to_le_bytes())),
        Array::I32(v) => each!(v, |o: &mut Vec<u8>, x: &i32| o
            .extend_from_slice(&x.to_le_bytes())),
        Array::F32(v) => each!(v, |o: &mut Vec<u8>, x: &f32| o
            .extend_from_slice(&x.to_le_bytes())),
        Array::Bool(v) => each!(v, |o: &mut Vec<u8>, x: &bool| o.push(*x as u8)),
        Array::String(v) => each!(v, |o: &mut Vec<u8>, x: &String| put_string(o, x)),
        Array::Array(v) => each!(v, put_array),
        Array::U64(v) => each!(v, |o: &mut Vec<u8>, x: &u64| o
            .extend_from_slice(&x.to_le_bytes())),
        Array::I64(v) => each!(v, |o: &mut Vec<u8>, x: &i64| o
            .extend_from_slice(&x.to_le_bytes())),
        Array::F64(v) => each!(v, |o: &mut Vec<u8>, x: &f64| o
            .extend_from_slice(&x.to_le_bytes())),
    }
}
