//! `TensorProto` ↔ [`Tensor`]: initializers and constants become strata tensors, in place
//! when the bytes allow it.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;
use strata_core::{DType, Device, Layout, MemoryBlock, MemoryKind, Shape, Storage, Tensor};

use crate::data_type::{dtype_from_onnx, dtype_to_onnx};
use crate::error::{OnnxError, Result};
use crate::external::external_ref;
use crate::proto::tensor_proto::DataLocation;
use crate::proto::TensorProto;
use crate::weights::WeightSource;

const OP: &str = "tensor_from_proto";

/// Converts an ONNX tensor (an initializer, a `Constant`'s value, a test-data `.pb`) into a
/// `Persistent` host tensor.
///
/// `raw_data` and external data are little-endian bytes. When they are aligned to the element
/// size (on a little-endian host) the tensor is a read-only view of them, zero-copy: of the
/// model's `Bytes` (a memory map for [`crate::open_model`]) or of the mapped external file.
/// Otherwise, and for the typed repeated fields, the data is copied once into a fresh tensor.
pub fn tensor_from_proto(tp: &TensorProto, weights: &WeightSource) -> Result<Tensor> {
    let name = tp.name();
    let data_type = tp.data_type();
    let dtype = dtype_from_onnx(data_type).ok_or_else(|| OnnxError::UnsupportedDataType {
        tensor: name.to_string(),
        data_type,
    })?;
    let dims = tp
        .dims
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                OnnxError::invalid(
                    name,
                    format!("negative dimension {d} in dims {:?}", tp.dims),
                )
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    let numel = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            OnnxError::invalid(name, format!("dims {dims:?} overflow the element count"))
        })?;
    let byte_len = dtype
        .bytes_for(numel)
        .map_err(|err| OnnxError::invalid(name, err.to_string()))?;
    if tp.segment.is_some() {
        return Err(OnnxError::invalid(
            name,
            "segmented tensors are not supported",
        ));
    }
    match tp.data_location {
        None => {}
        Some(code) if code == DataLocation::Default as i32 => {}
        Some(code) if code == DataLocation::External as i32 => {
            return from_external(tp, weights, &dims, dtype, byte_len);
        }
        Some(code) => {
            return Err(OnnxError::invalid(
                name,
                format!("unknown data_location {code}"),
            ))
        }
    }
    match tp.raw_data.as_ref().filter(|raw| !raw.is_empty()) {
        Some(raw) => from_raw(name, raw, &dims, dtype, byte_len),
        None => from_typed_fields(tp, &dims, dtype, numel),
    }
}

/// True when `tensor` uses memory owned elsewhere (the model's bytes or a mapped file) in place.
pub fn is_zero_copy(tensor: &Tensor) -> bool {
    tensor
        .storage()
        .is_ok_and(|storage| storage.block().is_external())
}

/// A `TensorProto` named `name` holding `tensor`'s elements as little-endian `raw_data`.
pub fn tensor_to_proto(name: &str, tensor: &Tensor) -> Result<TensorProto> {
    let dtype = tensor.dtype();
    let data_type = dtype_to_onnx(dtype).ok_or_else(|| {
        OnnxError::builder(format!(
            "tensor '{name}': ONNX has no element type for {dtype}"
        ))
    })?;
    let tensor = tensor.contiguous()?;
    let start = tensor.storage_offset() * dtype.size_in_bytes();
    let len = tensor.size_in_bytes()?;
    let read = tensor.read_bytes("tensor_to_proto")?;
    let mut raw = read.bytes()[start..start + len].to_vec();
    to_little_endian(&mut raw, dtype);
    Ok(TensorProto {
        name: Some(name.to_string()),
        data_type: Some(data_type),
        dims: tensor.dims().iter().map(|&d| d as i64).collect(),
        raw_data: Some(Bytes::from(raw)),
        ..Default::default()
    })
}

fn from_raw(
    name: &str,
    raw: &Bytes,
    dims: &[usize],
    dtype: DType,
    byte_len: usize,
) -> Result<Tensor> {
    if raw.len() != byte_len {
        return Err(OnnxError::invalid(
            name,
            format!(
                "raw_data has {} bytes but dims {dims:?} of {dtype} need {byte_len}",
                raw.len()
            ),
        ));
    }
    check_bools(name, raw, dtype)?;
    place(raw, dims, dtype, || {
        let ptr = NonNull::new(raw.as_ptr().cast_mut())
            .ok_or(OnnxError::invalid(name, "raw_data has a null address"))?;
        let keep_alive: Arc<dyn Any + Send + Sync> = Arc::new(raw.clone());
        // SAFETY: `raw` is a `Bytes` slice: immutable, initialized host memory that stays at this
        // address while any clone of it lives, and the clone in `keep_alive` lives as long as the
        // block. Nobody can write it (`Bytes` gives no mutable access and the block is read-only).
        let block = unsafe {
            MemoryBlock::from_external(
                ptr,
                raw.len(),
                Device::Cpu,
                MemoryKind::Persistent,
                true,
                keep_alive,
            )
        };
        Ok(Storage::new(Arc::new(block)))
    })
}

fn from_external(
    tp: &TensorProto,
    weights: &WeightSource,
    dims: &[usize],
    dtype: DType,
    byte_len: usize,
) -> Result<Tensor> {
    let name = tp.name();
    let reference = external_ref(tp, name)?;
    let file = weights.external_file(name, &reference.relative_path)?;
    let path = file.path().display().to_string();
    let length = reference.length.unwrap_or(byte_len);
    if length != byte_len {
        return Err(OnnxError::external(
            name,
            format!("'{path}': length {length} but dims {dims:?} of {dtype} need {byte_len} bytes"),
        ));
    }
    let region = reference
        .offset
        .checked_add(length)
        .and_then(|end| file.bytes().get(reference.offset..end))
        .ok_or_else(|| {
            OnnxError::external(
                name,
                format!(
                    "'{path}' has {} bytes; range {}..+{length} is outside it",
                    file.len(),
                    reference.offset
                ),
            )
        })?;
    check_bools(name, region, dtype)?;
    place(region, dims, dtype, || {
        Ok(file.storage(reference.offset, length)?)
    })
}

/// Wraps `bytes` in place through `wrap` when that is sound for typed access (aligned to the
/// element, little-endian host, non-empty); otherwise copies them once.
fn place(
    bytes: &[u8],
    dims: &[usize],
    dtype: DType,
    wrap: impl FnOnce() -> Result<Storage>,
) -> Result<Tensor> {
    let aligned = (bytes.as_ptr() as usize).is_multiple_of(dtype.size_in_bytes());
    if aligned && !bytes.is_empty() && cfg!(target_endian = "little") {
        let layout = Layout::contiguous(Shape::new(dims)?, 0);
        return Ok(Tensor::from_storage(wrap()?, layout, dtype)?);
    }
    let tensor = Tensor::empty(dims, dtype, Device::Cpu, MemoryKind::Persistent)?;
    {
        let mut write = tensor.write_bytes(OP)?;
        let out = exactly(write.bytes(), bytes.len())?;
        out.copy_from_slice(bytes);
        to_little_endian(out, dtype);
    }
    Ok(tensor)
}

/// The first `len` bytes of a fresh tensor's storage (allocators may round capacity up).
fn exactly(bytes: &mut [u8], len: usize) -> Result<&mut [u8]> {
    let available = bytes.len();
    bytes
        .get_mut(..len)
        .ok_or(OnnxError::Core(strata_core::CoreError::CapacityExceeded {
            op: OP,
            needed: len,
            capacity: available,
        }))
}

/// Swaps each element between little-endian and host order (a no-op on little-endian hosts).
fn to_little_endian(bytes: &mut [u8], dtype: DType) {
    if cfg!(target_endian = "big") && dtype.size_in_bytes() > 1 {
        bytes
            .chunks_exact_mut(dtype.size_in_bytes())
            .for_each(<[u8]>::reverse);
    }
}

fn check_bools(name: &str, bytes: &[u8], dtype: DType) -> Result<()> {
    if dtype != DType::Bool {
        return Ok(());
    }
    match bytes.iter().position(|&b| b > 1) {
        Some(index) => Err(OnnxError::invalid(
            name,
            format!("bool element {index} is {}, not 0 or 1", bytes[index]),
        )),
        None => Ok(()),
    }
}

/// The typed repeated fields, with ONNX's packing: small integers, bools and 16-bit floats (as
/// bit patterns) ride in `int32_data`, uint32 and uint64 in `uint64_data`.
fn from_typed_fields(
    tp: &TensorProto,
    dims: &[usize],
    dtype: DType,
    numel: usize,
) -> Result<Tensor> {
    let name = tp.name();
    let tensor = Tensor::empty(dims, dtype, Device::Cpu, MemoryKind::Persistent)?;
    {
        let mut write = tensor.write_bytes(OP)?;
        let out = exactly(write.bytes(), tensor.size_in_bytes()?)?;
        let fill = Fill { name, dtype, numel };
        let bits16 = |v: i32| {
            (-0x8000..=0xFFFF)
                .contains(&v)
                .then(|| (v as u16).to_ne_bytes())
        };
        match dtype {
            DType::F32 => fill.put(out, "float_data", &tp.float_data, |v| Some(v.to_ne_bytes()))?,
            DType::F64 => fill.put(out, "double_data", &tp.double_data, |v| {
                Some(v.to_ne_bytes())
            })?,
            DType::I32 => fill.put(out, "int32_data", &tp.int32_data, |v| Some(v.to_ne_bytes()))?,
            DType::I64 => fill.put(out, "int64_data", &tp.int64_data, |v| Some(v.to_ne_bytes()))?,
            DType::U64 => fill.put(out, "uint64_data", &tp.uint64_data, |v| {
                Some(v.to_ne_bytes())
            })?,
            DType::U32 => fill.put(out, "uint64_data", &tp.uint64_data, |v| {
                u32::try_from(v).ok().map(u32::to_ne_bytes)
            })?,
            DType::I8 => fill.put(out, "int32_data", &tp.int32_data, |v| {
                i8::try_from(v).ok().map(i8::to_ne_bytes)
            })?,
            DType::I16 => fill.put(out, "int32_data", &tp.int32_data, |v| {
                i16::try_from(v).ok().map(i16::to_ne_bytes)
            })?,
            DType::U8 => fill.put(out, "int32_data", &tp.int32_data, |v| {
                u8::try_from(v).ok().map(u8::to_ne_bytes)
            })?,
            DType::U16 => fill.put(out, "int32_data", &tp.int32_data, |v| {
                u16::try_from(v).ok().map(u16::to_ne_bytes)
            })?,
            DType::Bool => fill.put(out, "int32_data", &tp.int32_data, |v| {
                matches!(v, 0 | 1).then_some([v as u8])
            })?,
            DType::F16 | DType::BF16 => fill.put(out, "int32_data", &tp.int32_data, bits16)?,
            // ONNX data types never map to the block-quantized dtypes.
            DType::Q8_0 | DType::Q4_0 => {
                return Err(OnnxError::UnsupportedDataType {
                    tensor: name.to_string(),
                    data_type: tp.data_type(),
                })
            }
        }
    }
    Ok(tensor)
}

/// Fills a fresh tensor's bytes from one typed field, element by element.
struct Fill<'a> {
    name: &'a str,
    dtype: DType,
    numel: usize,
}

impl Fill<'_> {
    fn put<S: Copy + std::fmt::Display, const N: usize>(
        &self,
        out: &mut [u8],
        field: &str,
        values: &[S],
        convert: impl Fn(S) -> Option<[u8; N]>,
    ) -> Result<()> {
        if values.len() != self.numel {
            return Err(OnnxError::invalid(
                self.name,
                format!("{field} holds {} values (and raw_data is empty) but dims need {} elements of {}", values.len(), self.numel, self.dtype),
            ));
        }
        for (index, (chunk, &value)) in out.chunks_exact_mut(N).zip(values).enumerate() {
            let bytes = convert(value).ok_or_else(|| {
                OnnxError::invalid(
                    self.name,
                    format!("{field}[{index}] = {value} does not fit {}", self.dtype),
                )
            })?;
            chunk.copy_from_slice(&bytes);
        }
        Ok(())
    }
}
