//! An opened GGUF file: its metadata, its tensor infos (checked) and its tensors as strata
//! `Tensor`s over the mapping, zero-copy (T10).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use strata_core::{DType, MappedFile, Tensor};

use crate::error::{GgufError, Result};
use crate::parse::{parse_header, RawTensorInfo};
use crate::tensor_type::{ggml_type, GgmlType};
use crate::value::{Array, Value};

/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;

/// The metadata key that overrides the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// One tensor's description, checked against the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// Strata order, outermost first: a GGML `[ne0 = cols, ne1 = rows]` matrix is `[rows, cols]`.
    pub dims: Vec<usize>,
    /// Byte offset of the tensor's data in the file.
    pub file_offset: usize,
    pub size_in_bytes: usize,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// A GGUF file mapped in memory, its header decoded and every tensor checked.
#[derive(Debug)]
pub struct GgufFile {
    map: Arc<MappedFile>,
    version: u32,
    alignment: usize,
    data_offset: usize,
    metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl GgufFile {
    /// Maps and decodes the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        GgufFile::from_map(MappedFile::open(path)?)
    }

    /// Decodes a mapped GGUF file.
    pub fn from_map(map: Arc<MappedFile>) -> Result<GgufFile> {
        let header = parse_header(map.bytes())?;
        let index: HashMap<String, usize> = header
            .metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let alignment = match index.get(ALIGNMENT_KEY) {
            None => DEFAULT_ALIGNMENT,
            Some(&i) => {
                let value = &header.metadata[i].1;
                let n = value.as_u64().ok_or_else(|| GgufError::WrongType {
                    key: ALIGNMENT_KEY.to_string(),
                    expected: "an unsigned integer",
                    found: value.type_description(),
                })?;
                match usize::try_from(n) {
                    Ok(a) if a.is_power_of_two() => a,
                    _ => return Err(GgufError::BadAlignment { value: n }),
                }
            }
        };
        let data_offset = header
            .end
            .checked_next_multiple_of(alignment)
            .unwrap_or(usize::MAX);
        let available = map.len().saturating_sub(data_offset);
        let mut tensors = Vec::with_capacity(header.tensors.len());
        let mut tensor_index = HashMap::with_capacity(header.tensors.len());
        for raw in header.tensors {
            let info = check_tensor(raw, alignment, data_offset, available)?;
            if tensor_index
                .insert(info.name.clone(), tensors.len())
                .is_some()
            {
                return Err(GgufError::DuplicateTensor { tensor: info.name });
            }
            tensors.push(info);
        }
        Ok(GgufFile {
            map,
            version: header.version,
            alignment,
            data_offset,
            metadata: header.metadata,
            index,
            tensors,
            tensor_index,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    pub fn file_len(&self) -> usize {
        self.map.len()
    }

    pub fn path(&self) -> &Path {
        self.map.path()
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The value of `key`, which must be present.
    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let value = self.require(key)?;
        value
            .as_str()
            .ok_or_else(|| wrong_type(key, "a string", value))
    }

    /// An unsigned integer value (any integer type holding a non-negative value).
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let value = self.require(key)?;
        value
            .as_u64()
            .ok_or_else(|| wrong_type(key, "an unsigned integer", value))
    }

    /// A float value (f32 or f64).
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        let value = self.require(key)?;
        value
            .as_f64()
            .ok_or_else(|| wrong_type(key, "a float", value))
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Result<&Array> {
        let value = self.require(key)?;
        value
            .as_array()
            .ok_or_else(|| wrong_type(key, "an array", value))
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| GgufError::NoTensor {
                name: name.to_string(),
            })
    }

    /// The raw bytes of a tensor, in place.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.tensor_info(name)?;
        Ok(&self.map.bytes()[info.file_offset..info.file_offset + info.size_in_bytes])
    }

    /// The tensor `name` as a read-only strata tensor over the mapping (no copy); it keeps the
    /// mapping alive.
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        let info = self.tensor_info(name)?;
        let storage = self.map.storage(info.file_offset, info.size_in_bytes)?;
        Ok(Tensor::bind(&storage, 0, &info.dims, info.dtype)?)
    }
}

fn wrong_type(key: &str, expected: &'static str, value: &Value) -> GgufError {
    GgufError::WrongType {
        key: key.to_string(),
        expected,
        found: value.type_description(),
    }
}

/// Checks a tensor info's type, shape and placement; `available` is the data section's length.
fn check_tensor(
    raw: RawTensorInfo,
    alignment: usize,
    data_offset: usize,
    available: usize,
) -> Result<TensorInfo> {
    let name = raw.name;
    let dtype = match ggml_type(raw.type_id) {
        Some(GgmlType::Supported(dtype)) => dtype,
        Some(GgmlType::Unsupported(type_name)) => {
            return Err(GgufError::UnsupportedTensorType {
                tensor: name,
                type_name,
            })
        }
        None => {
            return Err(GgufError::UnknownTensorType {
                tensor: name,
                type_id: raw.type_id,
            })
        }
    };
    let bad_shape = |reason: String| GgufError::BadShape {
        tensor: name.clone(),
        reason,
    };
    let mut dims = Vec::with_capacity(raw.dims.len());
    for &d in raw.dims.iter().rev() {
        dims.push(
            usize::try_from(d).map_err(|_| bad_shape(format!("dimension {d} is too large")))?,
        );
    }
    let numel = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad_shape(format!("{:?} overflows the element count", raw.dims)))?;
    let row = raw.dims.first().copied().unwrap_or(1);
    if !row.is_multiple_of(dtype.block_size() as u64) {
        return Err(bad_shape(format!(
            "rows of {row} elements are not whole {dtype} blocks of {}",
            dtype.block_size()
        )));
    }
    let size_in_bytes = dtype
        .bytes_for(numel)
        .map_err(|e| bad_shape(e.to_string()))?;
    if !raw.offset.is_multiple_of(alignment as u64) {
        return Err(GgufError::MisalignedTensor {
            tensor: name,
            offset: raw.offset,
            alignment,
        });
    }
    let end = raw.offset.checked_add(size_in_bytes as u64);
    match end {
        Some(end) if end <= available as u64 => {}
        _ => {
            return Err(GgufError::TensorOutOfFile {
                tensor: name,
                offset: raw.offset,
                end: end.unwrap_or(u64::MAX),
                available,
            })
        }
    }
    Ok(TensorInfo {
        name,
        dtype,
        dims,
        file_offset: data_offset + raw.offset as usize,
        size_in_bytes,
    })
}
