//! Decoding the GGUF header: magic, version, counts, metadata key/values and tensor infos.
//!
//! Every read is bounds-checked against the file, and every count is bounded by the bytes left
//! (a count of N items that each take at least k bytes needs N·k bytes), so a corrupt count fails
//! before anything is allocated for it.

use crate::error::{GgufError, Result};
use crate::value::{Array, Value, ValueType};

/// GGUF's magic, "GGUF" in file order.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Deepest nesting of arrays inside arrays accepted (GGUF files use at most one level).
pub const MAX_ARRAY_NESTING: usize = 4;

/// GGML's limit on tensor rank.
pub const MAX_DIMS: usize = 4;

/// A tensor info as written in the header, before its type and placement are checked.
#[derive(Debug, Clone)]
pub struct RawTensorInfo {
    pub name: String,
    /// GGML order: `dims[0]` is the innermost (row length).
    pub dims: Vec<u64>,
    pub type_id: u32,
    /// From the start of the data section.
    pub offset: u64,
}

/// The decoded header.
#[derive(Debug)]
pub struct Header {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<RawTensorInfo>,
    /// Where the tensor infos end (the data section starts at the next aligned offset).
    pub end: usize,
}

/// A reading position in the file's bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos,
                end: self.pos as u64 + n as u64,
                len: self.bytes.len(),
            });
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items that each take at least `min_len` bytes, checked against what is left.
    fn count(&mut self, min_len: usize, what: &dyn Fn() -> String) -> Result<usize> {
        let count = self.u64(what)?;
        let remaining = self.remaining();
        match usize::try_from(count) {
            Ok(n) if n.checked_mul(min_len).is_some_and(|b| b <= remaining) => Ok(n),
            _ => Err(GgufError::CountTooLarge {
                what: what(),
                count,
                remaining,
            }),
        }
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let len = self.count(1, what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::InvalidUtf8 { what: what() })
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value> {
        let what = || format!("value of metadata key {key:?}");
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(&what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => Value::Bool(self.array::<1>(&what)?[0] != 0),
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => Value::Array(self.array_value(key, depth)?),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
        })
    }

    fn value_type(&mut self, key: &str) -> Result<ValueType> {
        let type_id = self.u32(&|| format!("type of metadata key {key:?}"))?;
        ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.to_string(),
            type_id,
        })
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<Array> {
        if depth >= MAX_ARRAY_NESTING {
            return Err(GgufError::NestingTooDeep {
                key: key.to_string(),
                limit: MAX_ARRAY_NESTING,
            });
        }
        let elem = self.value_type(key)?;
        let what = || format!("array of metadata key {key:?}");
        let n = self.count(elem.min_encoded_len(), &what)?;
        // Fixed-size elements: one bounds check for the whole array, then decode in place.
        macro_rules! fixed {
            ($variant:ident, $t:ty, $decode:expr) => {{
                let bytes = self.take(n * std::mem::size_of::<$t>(), &what)?;
                Array::$variant(
                    bytes
                        .chunks_exact(std::mem::size_of::<$t>())
                        .map(|c| $decode(c.try_into().expect("chunk size")))
                        .collect(),
                )
            }};
        }
        Ok(match elem {
            ValueType::U8 => fixed!(U8, u8, |c: [u8; 1]| c[0]),
            ValueType::I8 => fixed!(I8, i8, |c: [u8; 1]| c[0] as i8),
            ValueType::U16 => fixed!(U16, u16, u16::from_le_bytes),
            ValueType::I16 => fixed!(I16, i16, i16::from_le_bytes),
            ValueType::U32 => fixed!(U32, u32, u32::from_le_bytes),
            ValueType::I32 => fixed!(I32, i32, i32::from_le_bytes),
            ValueType::F32 => fixed!(F32, f32, f32::from_le_bytes),
            ValueType::Bool => fixed!(Bool, u8, |c: [u8; 1]| c[0] != 0),
            ValueType::U64 => fixed!(U64, u64, u64::from_le_bytes),
            ValueType::I64 => fixed!(I64, i64, i64::from_le_bytes),
            ValueType::F64 => fixed!(F64, f64, f64::from_le_bytes),
            ValueType::String => {
                let mut items = Vec::with_capacity(n);
                for i in 0..n {
                    items.push(self.string(&|| format!("element {i} of metadata key {key:?}"))?);
                }
                Array::String(items)
            }
            ValueType::Array => {
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.array_value(key, depth + 1)?);
                }
                Array::Array(items)
            }
        })
    }

    fn tensor_info(&mut self, index: usize) -> Result<RawTensorInfo> {
        let name = self.string(&|| format!("name of tensor #{index}"))?;
        let what = || format!("info of tensor {name:?}");
        let n_dims = self.u32(&what)? as usize;
        if n_dims > MAX_DIMS {
            return Err(GgufError::BadShape {
                tensor: name,
                reason: format!("{n_dims} dimensions, GGML allows at most {MAX_DIMS}"),
            });
        }
        let mut dims = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            dims.push(self.u64(&what)?);
        }
        let type_id = self.u32(&what)?;
        let offset = self.u64(&what)?;
        Ok(RawTensorInfo {
            name,
            dims,
            type_id,
            offset,
        })
    }
}

/// Fewest bytes a metadata entry takes: key length, value type, one byte of value.
const MIN_KV_LEN: usize = 8 + 4 + 1;
/// Fewest bytes a tensor info takes: name length, rank, type, offset.
const MIN_TENSOR_INFO_LEN: usize = 8 + 4 + 4 + 8;

/// Decodes the header of a GGUF v2 or v3 file.
pub fn parse_header(bytes: &[u8]) -> Result<Header> {
    let mut cur = Cursor { bytes, pos: 0 };
    let magic = cur.array::<4>(&|| "magic".to_string())?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let version = cur.u32(&|| "version".to_string())?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let tensor_count = cur.count(MIN_TENSOR_INFO_LEN, &|| "tensor count".to_string())?;
    let kv_count = cur.count(MIN_KV_LEN, &|| "metadata count".to_string())?;
    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(kv_count);
    let mut seen = std::collections::HashSet::with_capacity(kv_count);
    for index in 0..kv_count {
        let key = cur.string(&|| format!("key of metadata entry #{index}"))?;
        let ty = cur.value_type(&key)?;
        let value = cur.value(ty, &key, 0)?;
        if !seen.insert(key.clone()) {
            return Err(GgufError::DuplicateKey { key });
        }
        metadata.push((key, value));
    }
    let mut tensors = Vec::with_capacity(tensor_count);
    for index in 0..tensor_count {
        tensors.push(cur.tensor_info(index)?);
    }
    Ok(Header {
        version,
        metadata,
        tensors,
        end: cur.pos,
    })
}
