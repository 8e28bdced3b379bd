//! `TensorProto` ↔ [`Tensor`]: initializers and constants become strata tensors, in place
//! when the bytes allow it.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;
use strata_core::{
    DType, Device, Layout, MappedFile, MemoryBlock, MemoryKind, Shape, Storage, Tensor,
};

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
    if tp.segment.is_some() {
        return Err(OnnxError::invalid(
            name,
            "segmented tensors are not supported",
        ));
    }
    if dtype.is_string() {
        return from_string_data(tp, &dims, numel);
    }
    if let Some(bits) = packed_bits(dtype) {
        return from_packed(tp, weights, &dims, dtype, numel, bits);
    }
    let byte_len = dtype
        .bytes_for(numel)
        .map_err(|err| OnnxError::invalid(name, err.to_string()))?;
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
        Some(raw) => match weights
            .model_map()
            .and_then(|map| Some((map, map.offset_of(raw)?)))
        {
            // Inside the mapped model file: a region of the map, evicted once no tensor needs it.
            Some((map, offset)) => {
                check_length(name, raw, dims.as_slice(), dtype, byte_len)?;
                from_map(name, map, offset, raw, &dims, dtype)
            }
            None => from_raw(name, raw, &dims, dtype, byte_len),
        },
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
    if dtype.is_string() {
        return Ok(TensorProto {
            name: Some(name.to_string()),
            data_type: Some(data_type),
            dims: tensor.dims().iter().map(|&d| d as i64).collect(),
            string_data: tensor
                .strings()?
                .into_iter()
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect(),
            ..Default::default()
        });
    }
    let tensor = tensor.contiguous()?;
    let start = tensor.storage_offset() * dtype.size_in_bytes();
    let len = tensor.size_in_bytes()?;
    let read = tensor.read_bytes("tensor_to_proto")?;
    let mut raw = read.bytes()[start..start + len].to_vec();
    to_little_endian(&mut raw, dtype);
    if let Some(bits) = packed_bits(dtype) {
        raw = pack(&raw, bits);
    }
    Ok(TensorProto {
        name: Some(name.to_string()),
        data_type: Some(data_type),
        dims: tensor.dims().iter().map(|&d| d as i64).collect(),
        raw_data: Some(Bytes::from(raw)),
        ..Default::default()
    })
}

/// Text rides in `string_data`, one entry per element (ONNX forbids `raw_data` for it); every
/// entry must be UTF-8.
fn from_string_data(tp: &TensorProto, dims: &[usize], numel: usize) -> Result<Tensor> {
    let name = tp.name();
    if tp.raw_data.as_ref().is_some_and(|raw| !raw.is_empty())
        || tp
            .data_location
            .is_some_and(|l| l == DataLocation::External as i32)
    {
        return Err(OnnxError::invalid(
            name,
            "string tensors must use string_data, not raw or external data",
        ));
    }
    if tp.string_data.len() != numel {
        return Err(OnnxError::invalid(
            name,
            format!(
                "string_data has {} entries for dims {dims:?} ({numel} elements)",
                tp.string_data.len()
            ),
        ));
    }
    let elements = tp
        .string_data
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            std::str::from_utf8(bytes).map_err(|err| {
                OnnxError::invalid(name, format!("string_data[{i}] is not UTF-8: {err}"))
            })
        })
        .collect::<Result<Vec<&str>>>()?;
    Ok(Tensor::from_strings(dims, elements)?)
}

fn from_raw(
    name: &str,
    raw: &Bytes,
    dims: &[usize],
    dtype: DType,
    byte_len: usize,
) -> Result<Tensor> {
    check_length(name, raw, dims, dtype, byte_len)?;
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

fn check_length(
    name: &str,
    raw: &[u8],
    dims: &[usize],
    dtype: DType,
    byte_len: usize,
) -> Result<()> {
    if raw.len() != byte_len {
        return Err(OnnxError::invalid(
            name,
            format!(
                "raw_data has {} bytes but dims {dims:?} of {dtype} need {byte_len}",
                raw.len()
            ),
        ));
    }
    Ok(())
}

/// Bytes `offset..` of a mapped file (`region`) as a tensor: a zero-copy view of the mapping
/// when aligned, else a copy, after which the region's pages leave the resident set (the copy
/// is what the model reads from now on).
fn from_map(
    name: &str,
    file: &Arc<MappedFile>,
    offset: usize,
    region: &[u8],
    dims: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    check_bools(name, region, dtype)?;
    let tensor = place(region, dims, dtype, || {
        Ok(file.storage(offset, region.len())?)
    })?;
    if !is_zero_copy(&tensor) {
        file.evict(offset, region.len());
    }
    Ok(tensor)
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
    from_map(name, &file, reference.offset, region, dims, dtype)
}

/// Bits per element of the sub-byte types, which ONNX packs (low bits first) and strata holds
/// unpacked, one element per byte; `None` for every other dtype.
fn packed_bits(dtype: DType) -> Option<u32> {
    match dtype {
        DType::I4 | DType::U4 | DType::F4E2M1 => Some(4),
        DType::I2 | DType::U2 => Some(2),
        _ => None,
    }
}

/// A sub-byte tensor from its packed bytes (`raw_data`, external data, or one byte per
/// `int32_data` entry), unpacked to one element per byte.
fn from_packed(
    tp: &TensorProto,
    weights: &WeightSource,
    dims: &[usize],
    dtype: DType,
    numel: usize,
    bits: u32,
) -> Result<Tensor> {
    let name = tp.name();
    let per_byte = (8 / bits) as usize;
    let packed_len = numel.div_ceil(per_byte);
    let external;
    let typed;
    let packed: &[u8] = if tp.data_location == Some(DataLocation::External as i32) {
        let reference = external_ref(tp, name)?;
        let file = weights.external_file(name, &reference.relative_path)?;
        let length = reference.length.unwrap_or(packed_len);
        external = reference
            .offset
            .checked_add(length)
            .and_then(|end| file.bytes().get(reference.offset..end))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| {
                OnnxError::external(
                    name,
                    format!(
                        "'{}' has {} bytes; range {}..+{length} is outside it",
                        file.path().display(),
                        file.len(),
                        reference.offset
                    ),
                )
            })?;
        &external
    } else if let Some(raw) = tp.raw_data.as_ref().filter(|raw| !raw.is_empty()) {
        raw
    } else {
        typed = tp
            .int32_data
            .iter()
            .enumerate()
            .map(|(index, &v)| {
                u8::try_from(v).map_err(|_| {
                    OnnxError::invalid(
                        name,
                        format!("int32_data[{index}] = {v} is not a packed {dtype} byte"),
                    )
                })
            })
            .collect::<Result<Vec<u8>>>()?;
        &typed
    };
    if packed.len() != packed_len {
        return Err(OnnxError::invalid(
            name,
            format!(
                "packed data has {} bytes but dims {dims:?} of {dtype} need {packed_len}",
                packed.len()
            ),
        ));
    }
    let tensor = Tensor::empty(dims, dtype, Device::Cpu, MemoryKind::Persistent)?;
    {
        let mut write = tensor.write_bytes(OP)?;
        let out = exactly(write.bytes(), numel)?;
        let mask = (1u8 << bits) - 1;
        let signed = matches!(dtype, DType::I4 | DType::I2);
        for (index, slot) in out.iter_mut().enumerate() {
            let shift = (index % per_byte) as u32 * bits;
            let code = (packed[index / per_byte] >> shift) & mask;
            *slot = if signed {
                // Sign-extend: move the code's top bit to bit 7, then shift back arithmetically.
                (((code << (8 - bits)) as i8) >> (8 - bits)) as u8
            } else {
                code
            };
        }
    }
    Ok(tensor)
}

/// Packs one-element-per-byte values into ONNX's sub-byte layout, low bits first, the last byte
/// padded with zeros.
fn pack(unpacked: &[u8], bits: u32) -> Vec<u8> {
    let per_byte = (8 / bits) as usize;
    let mask = (1u8 << bits) - 1;
    unpacked
        .chunks(per_byte)
        .map(|chunk| {
            chunk.iter().enumerate().fold(0u8, |byte, (i, &v)| {
                byte | ((v & mask) << (i as u32 * bits))
            })
        })
        .collect()
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
            // Float8 bit patterns ride one per int32_data entry (sign-extended or not).
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0 => fill.put(out, "int32_data", &tp.int32_data, |v| {
                (-0x80..=0xFF).contains(&v).then_some([v as u8])
            })?,
            // ONNX data types never map to the block-quantized dtypes; the sub-byte types and
            // text are decoded by `from_packed` and `from_string_data` before reaching here.
            DType::String
            | DType::Q8_0
            | DType::Q4_0
            | DType::Q4_1
            | DType::Q5_0
            | DType::Q5_1
            | DType::Q4_K
            | DType::Q5_K
            | DType::Q6_K
            | DType::F4E2M1
            | DType::I4
            | DType::U4
            | DType::I2
            | DType::U2 => {
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

#[cfg(test)]
mod tests {
    use strata_core::{bf16, f16, CoreError, Element};

    use super::*;
    use crate::proto::tensor_proto::{DataType, Segment};

    fn proto(name: &str, data_type: DataType, dims: &[i64]) -> TensorProto {
        TensorProto {
            name: Some(name.into()),
            data_type: Some(data_type as i32),
            dims: dims.to_vec(),
            ..Default::default()
        }
    }

    fn convert(tp: &TensorProto) -> Result<Tensor> {
        tensor_from_proto(tp, &WeightSource::in_memory())
    }

    /// Round-trips `values` through `raw_data` (little-endian) and checks the tensor.
    fn check_raw<T: Element>(data_type: DataType, values: &[T], to_le: impl Fn(&T) -> Vec<u8>) {
        let mut tp = proto("raw", data_type, &[values.len() as i64]);
        tp.raw_data = Some(Bytes::from(
            values.iter().flat_map(&to_le).collect::<Vec<u8>>(),
        ));
        let t = convert(&tp).unwrap();
        assert_eq!(t.dtype(), T::DTYPE, "{data_type:?}");
        assert_eq!(t.dims(), &[values.len()]);
        assert_eq!(t.memory_kind(), MemoryKind::Persistent);
        assert_eq!(t.to_vec::<T>().unwrap(), values, "{data_type:?}");
    }

    #[test]
    fn every_dtype_through_raw_data() {
        check_raw(DataType::Float, &[1.5f32, -2.25, f32::MAX], |v| {
            v.to_le_bytes().to_vec()
        });
        check_raw(DataType::Double, &[1.5f64, -1e300], |v| {
            v.to_le_bytes().to_vec()
        });
        check_raw(
            DataType::Float16,
            &[f16::from_f32(1.5), f16::from_f32(-0.25)],
            |v| v.to_le_bytes().to_vec(),
        );
        check_raw(
            DataType::Bfloat16,
            &[bf16::from_f32(3.0), bf16::from_f32(-8.0)],
            |v| v.to_le_bytes().to_vec(),
        );
        check_raw(DataType::Int8, &[-128i8, 0, 127], |v| {
            v.to_le_bytes().to_vec()
        });
        check_raw(DataType::Int16, &[i16::MIN, 7, i16::MAX], |v| {
            v.to_le_bytes().to_vec()
        });
        check_raw(DataType::Int32, &[i32::MIN, -1, i32::MAX], |v| {
            v.to_le_bytes().to_vec()
        });
        check_raw(DataType::Int64, &[i64::MIN, 42, i64::MAX], |v| {
            v.to_le_bytes().to_vec()
        });
        check_raw(DataType::Uint8, &[0u8, 200, 255], |v| {
            v.to_le_bytes().to_vec()
        });
        check_raw(DataType::Uint16, &[0u16, 65535], |v| {
            v.to_le_bytes().to_vec()
        });
        check_raw(DataType::Uint32, &[0u32, u32::MAX], |v| {
            v.to_le_bytes().to_vec()
        });
        check_raw(DataType::Uint64, &[0u64, u64::MAX], |v| {
            v.to_le_bytes().to_vec()
        });
        let mut tp = proto("flags", DataType::Bool, &[3]);
        tp.raw_data = Some(Bytes::from_static(&[1, 0, 1]));
        let t = convert(&tp).unwrap();
        assert_eq!(t.dtype(), DType::Bool);
        assert_eq!(t.to_bools().unwrap(), [true, false, true]);
    }

    #[test]
    fn every_dtype_through_the_typed_fields() {
        let typed = |data_type, dims: &[i64], set: &dyn Fn(&mut TensorProto)| {
            let mut tp = proto("typed", data_type, dims);
            set(&mut tp);
            convert(&tp).unwrap()
        };
        let t = typed(DataType::Float, &[2, 2], &|tp| {
            tp.float_data = vec![1.0, 2.0, 3.0, -4.5]
        });
        assert_eq!(
            (t.dims(), t.to_vec::<f32>().unwrap()),
            (&[2usize, 2][..], vec![1.0, 2.0, 3.0, -4.5])
        );
        let t = typed(DataType::Double, &[2], &|tp| {
            tp.double_data = vec![0.5, -1e-300]
        });
        assert_eq!(t.to_vec::<f64>().unwrap(), [0.5, -1e-300]);
        let t = typed(DataType::Int32, &[2], &|tp| {
            tp.int32_data = vec![i32::MIN, i32::MAX]
        });
        assert_eq!(t.to_vec::<i32>().unwrap(), [i32::MIN, i32::MAX]);
        let t = typed(DataType::Int8, &[3], &|tp| {
            tp.int32_data = vec![-128, 0, 127]
        });
        assert_eq!(t.to_vec::<i8>().unwrap(), [-128, 0, 127]);
        let t = typed(DataType::Int16, &[2], &|tp| {
            tp.int32_data = vec![-32768, 32767]
        });
        assert_eq!(t.to_vec::<i16>().unwrap(), [i16::MIN, i16::MAX]);
        let t = typed(DataType::Uint8, &[2], &|tp| tp.int32_data = vec![0, 255]);
        assert_eq!(t.to_vec::<u8>().unwrap(), [0, 255]);
        let t = typed(DataType::Uint16, &[2], &|tp| tp.int32_data = vec![0, 65535]);
        assert_eq!(t.to_vec::<u16>().unwrap(), [0, 65535]);
        let t = typed(DataType::Bool, &[3], &|tp| tp.int32_data = vec![0, 1, 1]);
        assert_eq!(t.to_bools().unwrap(), [false, true, true]);
        let halves = [f16::from_f32(1.5), f16::from_f32(-2.0)];
        let t = typed(DataType::Float16, &[2], &|tp| {
            tp.int32_data = halves.iter().map(|h| i32::from(h.to_bits())).collect()
        });
        assert_eq!(t.to_vec::<f16>().unwrap(), halves);
        let brains = [bf16::from_f32(0.5), bf16::from_f32(-3.0)];
        let t = typed(DataType::Bfloat16, &[2], &|tp| {
            tp.int32_data = brains.iter().map(|h| i32::from(h.to_bits())).collect()
        });
        assert_eq!(t.to_vec::<bf16>().unwrap(), brains);
        // Sign-extended 16-bit patterns (as some writers store them) mean the same bits.
        let t = typed(DataType::Float16, &[1], &|tp| {
            tp.int32_data = vec![i32::from(f16::from_f32(-2.0).to_bits() as i16)]
        });
        assert_eq!(t.to_vec::<f16>().unwrap(), [f16::from_f32(-2.0)]);
        let t = typed(DataType::Int64, &[2], &|tp| {
            tp.int64_data = vec![i64::MIN, i64::MAX]
        });
        assert_eq!(t.to_vec::<i64>().unwrap(), [i64::MIN, i64::MAX]);
        let t = typed(DataType::Uint32, &[2], &|tp| {
            tp.uint64_data = vec![0, u64::from(u32::MAX)]
        });
        assert_eq!(t.to_vec::<u32>().unwrap(), [0, u32::MAX]);
        let t = typed(DataType::Uint64, &[1], &|tp| {
            tp.uint64_data = vec![u64::MAX]
        });
        assert_eq!(t.to_vec::<u64>().unwrap(), [u64::MAX]);
        let t = typed(DataType::Float, &[], &|tp| tp.float_data = vec![7.0]);
        assert_eq!((t.rank(), t.to_vec::<f32>().unwrap()), (0, vec![7.0]));
        let t = typed(DataType::Float, &[0, 3], &|_| {});
        assert_eq!((t.dims(), t.numel()), (&[0usize, 3][..], 0));
    }

    #[test]
    fn inconsistent_tensors_are_errors_naming_the_tensor() {
        let invalid = |tp: &TensorProto| match convert(tp) {
            Err(OnnxError::InvalidTensor { tensor, message }) => {
                assert_eq!(tensor, tp.name());
                message
            }
            other => panic!("expected InvalidTensor, got {other:?}"),
        };
        let mut tp = proto("short", DataType::Float, &[4]);
        tp.raw_data = Some(Bytes::from_static(&[0; 12]));
        assert!(invalid(&tp).contains("12 bytes"));
        let mut tp = proto("count", DataType::Float, &[4]);
        tp.float_data = vec![1.0; 3];
        assert!(invalid(&tp).contains("float_data holds 3"));
        // A value in the field that does not belong to the dtype is still "no data".
        let mut tp = proto("wrong_field", DataType::Float, &[1]);
        tp.int32_data = vec![1];
        invalid(&tp);
        for (data_type, value) in [
            (DataType::Int8, 128),
            (DataType::Uint8, -1),
            (DataType::Uint16, 65536),
            (DataType::Bool, 2),
            (DataType::Float16, 70000),
        ] {
            let mut tp = proto("range", data_type, &[1]);
            tp.int32_data = vec![value];
            assert!(
                invalid(&tp).contains("does not fit"),
                "{data_type:?} {value}"
            );
        }
        let mut tp = proto("u32", DataType::Uint32, &[1]);
        tp.uint64_data = vec![1 << 32];
        invalid(&tp);
        let mut tp = proto("bools", DataType::Bool, &[2]);
        tp.raw_data = Some(Bytes::from_static(&[1, 7]));
        assert!(invalid(&tp).contains("bool element 1 is 7"));
        invalid(&proto("negative", DataType::Float, &[2, -1]));
        invalid(&proto("huge", DataType::Float, &[i64::MAX, i64::MAX]));
        let mut tp = proto("location", DataType::Float, &[0]);
        tp.data_location = Some(7);
        invalid(&tp);
        let mut tp = proto("segmented", DataType::Float, &[0]);
        tp.segment = Some(Segment {
            begin: Some(0),
            end: Some(0),
        });
        invalid(&tp);
    }

    #[test]
    fn sub_byte_types_unpack_low_bits_first_and_pack_back() {
        // int4 [-8, 7, -1] packs to 0x78, 0x0F (low nibble first, last byte padded).
        let mut tp = proto("i4", DataType::Int4, &[3]);
        tp.raw_data = Some(Bytes::from_static(&[0x78, 0x0F]));
        let t = convert(&tp).unwrap();
        assert_eq!(t.dtype(), DType::I4);
        assert_eq!(t.to_vec::<i8>().unwrap(), [-8, 7, -1]);
        assert_eq!(
            tensor_to_proto("i4", &t)
                .unwrap()
                .raw_data
                .unwrap()
                .as_ref(),
            [0x78, 0x0F]
        );
        // uint2 [1, 2, 3, 0, 3] packs to 0b00_11_10_01, 0b11.
        let mut tp = proto("u2", DataType::Uint2, &[5]);
        tp.int32_data = vec![0b0011_1001, 0b11];
        let t = convert(&tp).unwrap();
        assert_eq!(t.to_vec::<u8>().unwrap(), [1, 2, 3, 0, 3]);
        let back = tensor_to_proto("u2", &t).unwrap();
        assert_eq!(back.raw_data.unwrap().as_ref(), [0b0011_1001, 0b11]);
        // int2 code 0b10 is -2.
        let mut tp = proto("i2", DataType::Int2, &[2]);
        tp.raw_data = Some(Bytes::from_static(&[0b0110]));
        assert_eq!(convert(&tp).unwrap().to_vec::<i8>().unwrap(), [-2, 1]);
        // float8 bit patterns, one per byte or per int32_data entry.
        let mut tp = proto("f8", DataType::Float8e5m2, &[2]);
        tp.int32_data = vec![0x3C, 0xFF];
        let t = convert(&tp).unwrap();
        assert_eq!(
            (t.dtype(), t.to_vec::<u8>().unwrap()),
            (DType::F8E5M2, vec![0x3C, 0xFF])
        );
    }

    #[test]
    fn packed_data_of_the_wrong_size_is_an_error() {
        let mut tp = proto("u4", DataType::Uint4, &[3]);
        tp.raw_data = Some(Bytes::from_static(&[0x12]));
        assert!(matches!(convert(&tp), Err(OnnxError::InvalidTensor { .. })));
        let mut tp = proto("u4", DataType::Uint4, &[2]);
        tp.int32_data = vec![300];
        assert!(matches!(convert(&tp), Err(OnnxError::InvalidTensor { .. })));
        let mut tp = proto("f8", DataType::Float8e4m3fn, &[1]);
        tp.int32_data = vec![256];
        assert!(matches!(convert(&tp), Err(OnnxError::InvalidTensor { .. })));
    }

    #[test]
    fn text_round_trips_and_bad_text_is_named() {
        let mut tp = proto("words", DataType::String, &[2]);
        tp.string_data = vec![Bytes::from_static(b"caf\xc3\xa9"), Bytes::new()];
        let t = convert(&tp).unwrap();
        assert_eq!(t.strings().unwrap(), ["café", ""]);
        let back = tensor_to_proto("words", &t).unwrap();
        assert_eq!(back.string_data, tp.string_data);
        assert_eq!(back.data_type, Some(DataType::String as i32));

        tp.string_data = vec![Bytes::from_static(b"\xff"), Bytes::new()];
        let err = convert(&tp).unwrap_err().to_string();
        assert!(
            err.contains("words") && err.contains("string_data[0]"),
            "{err}"
        );
        tp.string_data = vec![Bytes::new()];
        let err = convert(&tp).unwrap_err().to_string();
        assert!(
            err.contains("1 entries") && err.contains("2 elements"),
            "{err}"
        );
        tp.string_data = vec![Bytes::new(), Bytes::new()];
        tp.raw_data = Some(Bytes::from_static(b"ab"));
        assert!(matches!(convert(&tp), Err(OnnxError::InvalidTensor { .. })));
    }

    #[test]
    fn unsupported_types_are_named() {
        for data_type in [DataType::Complex64, DataType::Undefined] {
            let err = convert(&proto("odd", data_type, &[1])).unwrap_err();
            assert!(
                matches!(&err, OnnxError::UnsupportedDataType { tensor, data_type: d } if tensor == "odd" && *d == data_type as i32)
            );
            assert!(err.to_string().contains(data_type.as_str_name()), "{err}");
        }
    }

    #[test]
    fn aligned_raw_data_is_used_in_place_and_misaligned_is_copied() {
        let values = [1.0f32, 2.0, 3.0, 4.0];
        for misalign in [0, 1, 2] {
            let mut buffer = vec![0u8; 24];
            let base = buffer.as_ptr() as usize;
            let start = (0..4).find(|s| (base + s).is_multiple_of(4)).unwrap() + misalign;
            buffer[start..start + 16].copy_from_slice(
                &values
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect::<Vec<u8>>(),
            );
            let buffer = Bytes::from(buffer);
            assert_eq!(
                buffer.as_ptr() as usize,
                base,
                "Bytes keeps the Vec's allocation"
            );
            let mut tp = proto("w", DataType::Float, &[4]);
            tp.raw_data = Some(buffer.slice(start..start + 16));
            let raw_ptr = tp.raw_data.as_ref().unwrap().as_ptr();
            let t = convert(&tp).unwrap();
            let storage = t.storage().unwrap();
            assert_eq!(t.to_vec::<f32>().unwrap(), values);
            assert_eq!(t.memory_kind(), MemoryKind::Persistent);
            if misalign == 0 {
                assert!(is_zero_copy(&t));
                assert_eq!(storage.as_ptr(), raw_ptr, "no copy");
                assert!(storage.block().is_read_only());
                assert!(matches!(
                    t.write_bytes("test"),
                    Err(CoreError::ReadOnly { .. })
                ));
            } else {
                assert!(!is_zero_copy(&t));
                assert_ne!(storage.as_ptr(), raw_ptr);
            }
        }
    }

    #[test]
    fn zero_copy_tensors_keep_their_bytes_alive() {
        let mut tp = proto("w", DataType::Int64, &[2]);
        tp.raw_data = Some(Bytes::from(
            [5i64, -6]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        ));
        let t = convert(&tp).unwrap();
        drop(tp);
        assert_eq!(t.to_vec::<i64>().unwrap(), [5, -6]);
    }

    #[test]
    fn tensors_round_trip_through_protos_in_logical_order() {
        let t = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3])
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let tp = tensor_to_proto("t", &t).unwrap();
        assert_eq!(
            (tp.name(), tp.dims.as_slice(), tp.data_type()),
            ("t", &[3i64, 2][..], DataType::Int32 as i32)
        );
        let back = convert(&tp).unwrap();
        assert_eq!(back.to_vec::<i32>().unwrap(), [1, 4, 2, 5, 3, 6]);
        let bools = Tensor::from_bools(&[true, false], &[2]).unwrap();
        assert_eq!(
            convert(&tensor_to_proto("b", &bools).unwrap())
                .unwrap()
                .to_bools()
                .unwrap(),
            [true, false]
        );
        let quantized =
            Tensor::empty(&[32], DType::Q8_0, Device::Cpu, MemoryKind::Default).unwrap();
        assert!(matches!(
            tensor_to_proto("q", &quantized),
            Err(OnnxError::Builder { .. })
        ));
    }
}
