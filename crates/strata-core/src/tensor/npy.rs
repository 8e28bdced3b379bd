//! `.npy` files (T7): read and write every numeric dtype, NumPy format versions 1–3.
//!
//! bf16 has no NumPy type code; it is written as the 2-byte void type `|V2`, which is what
//! NumPy itself writes for ml_dtypes' bfloat16, and `|V2` is read back as bf16.

use std::path::Path;

use super::Tensor;
use crate::{CoreError, DType, Device, MemoryKind, Result, Shape};

const MAGIC: &[u8] = b"\x93NUMPY";

fn npy_err(path: &str, message: impl Into<String>) -> CoreError {
    CoreError::Npy {
        path: path.to_string(),
        message: message.into(),
    }
}

/// The NumPy type string of `dtype` (little-endian).
fn descr(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::BF16 => "|V2",
        DType::F64 => "<f8",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        // No NumPy equivalent: block formats and the ONNX low-precision types; text (NumPy's
        // fixed-width unicode arrays are not read here).
        DType::String
        | DType::Q8_0
        | DType::Q4_0
        | DType::Q4_1
        | DType::Q5_0
        | DType::Q5_1
        | DType::Q4_K
        | DType::Q5_K
        | DType::Q6_K
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1
        | DType::I4
        | DType::U4
        | DType::I2
        | DType::U2 => return None,
    })
}

/// Parses a NumPy type string into (dtype, big-endian?).
fn parse_descr(text: &str) -> Option<(DType, bool)> {
    // `get` rather than `split_at`: the first character of a corrupt file may span several bytes.
    let (big, code) = match (text.get(..1)?, text.get(1..)?) {
        ("<" | "|" | "=", code) => (false, code),
        (">", code) => (true, code),
        _ => return None,
    };
    let dtype = match code {
        "f4" => DType::F32,
        "f2" => DType::F16,
        "V2" => DType::BF16,
        "f8" => DType::F64,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        _ => return None,
    };
    Some((dtype, big))
}

/// The value text following `'key':` in a header dict.
fn header_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[at + key.len() + 2..];
    Some(rest.trim_start().strip_prefix(':')?.trim_start())
}

struct Header {
    dtype: DType,
    big_endian: bool,
    fortran: bool,
    dims: Vec<usize>,
}

fn parse_header(header: &str, path: &str) -> Result<Header> {
    let descr_text =
        header_value(header, "descr").ok_or_else(|| npy_err(path, "header has no 'descr'"))?;
    let quote = descr_text
        .chars()
        .next()
        .filter(|c| *c == '\'' || *c == '"')
        .ok_or_else(|| npy_err(path, "'descr' is not a string"))?;
    let descr_str = descr_text[1..].split(quote).next().unwrap_or("");
    let (dtype, big_endian) = parse_descr(descr_str)
        .ok_or_else(|| npy_err(path, format!("unsupported dtype descriptor {descr_str:?}")))?;
    let fortran_text = header_value(header, "fortran_order")
        .ok_or_else(|| npy_err(path, "header has no 'fortran_order'"))?;
    let fortran = if fortran_text.starts_with("True") {
        true
    } else if fortran_text.starts_with("False") {
        false
    } else {
        return Err(npy_err(path, "'fortran_order' is neither True nor False"));
    };
    let shape_text =
        header_value(header, "shape").ok_or_else(|| npy_err(path, "header has no 'shape'"))?;
    let inner = shape_text
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| npy_err(path, "'shape' is not a tuple"))?;
    let dims = inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| npy_err(path, format!("bad dimension {s:?} in shape")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Header {
        dtype,
        big_endian,
        fortran,
        dims,
    })
}

impl Tensor {
    /// Reads a `.npy` file into a host tensor of `Default` kind.
    pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| CoreError::Io {
            path: name.clone(),
            message: e.to_string(),
        })?;
        Tensor::from_npy_bytes(&bytes, &name)
    }

    /// Parses `.npy` bytes; `source` names them in errors.
    pub fn from_npy_bytes(bytes: &[u8], source: &str) -> Result<Tensor> {
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            return Err(npy_err(source, "missing the \\x93NUMPY magic"));
        }
        let (header_len, start) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
            2 | 3 if bytes.len() >= 12 => (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            ),
            v => return Err(npy_err(source, format!("unsupported format version {v}"))),
        };
        let header_end = start
            .checked_add(header_len)
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| npy_err(source, "header is truncated"))?;
        let header = std::str::from_utf8(&bytes[start..header_end])
            .map_err(|_| npy_err(source, "header is not text"))?;
        let header = parse_header(header, source)?;
        let data = &bytes[header_end..];
        // Fortran order stores the transposed shape in row-major order.
        let stored_dims: Vec<usize> = if header.fortran {
            header.dims.iter().rev().copied().collect()
        } else {
            header.dims.clone()
        };
        // Check the data length before allocating: a corrupt header must not make us reserve
        // memory for a shape the file cannot hold.
        let need = Shape::new(&stored_dims)?.size_in_bytes(header.dtype)?;
        if data.len() < need {
            return Err(npy_err(
                source,
                format!(
                    "data is truncated: {} bytes for {need} needed by shape {:?}",
                    data.len(),
                    header.dims
                ),
            ));
        }
        let t = Tensor::empty(&stored_dims, header.dtype, Device::Cpu, MemoryKind::Default)?;
        {
            let mut out = t.write_bytes("read_npy")?;
            let out = &mut out.bytes()[..need];
            out.copy_from_slice(&data[..need]);
            let elem = header.dtype.size_in_bytes();
            if header.big_endian && elem > 1 {
                out.chunks_exact_mut(elem).for_each(<[u8]>::reverse);
            }
            if header.dtype == DType::Bool {
                if let Some(index) = out.iter().position(|&b| b > 1) {
                    return Err(npy_err(
                        source,
                        format!("bool element {index} holds {}, not 0 or 1", out[index]),
                    ));
                }
            }
        }
        if header.fortran {
            let perm: Vec<usize> = (0..stored_dims.len()).rev().collect();
            return t.permute(&perm)?.contiguous();
        }
        Ok(t)
    }

    /// Writes this tensor as a version-1 `.npy` file (C order, little-endian).
    pub fn write_npy(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let bytes = self.to_npy_bytes()?;
        std::fs::write(path, bytes).map_err(|e| CoreError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// The `.npy` encoding of this tensor.
    pub fn to_npy_bytes(&self) -> Result<Vec<u8>> {
        let descr = descr(self.dtype).ok_or(CoreError::UnsupportedDType {
            op: "write_npy",
            dtype: self.dtype,
            reason: "NumPy has no block-quantized types",
        })?;
        let dense = self.contiguous()?;
        let shape = match dense.dims() {
            [d] => format!("({d},)"),
            dims => format!(
                "({})",
                dims.iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        // Pad so that the data starts on a 64-byte boundary, ending the header with a newline.
        let unpadded = MAGIC.len() + 4 + header.len() + 1;
        header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
        header.push('\n');
        let header_len =
            u16::try_from(header.len()).map_err(|_| CoreError::overflow("npy header length"))?;
        let data_len = dense.size_in_bytes()?;
        let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + data_len);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&header_len.to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        let start = dense.storage_offset() * dense.dtype.size_in_bytes();
        out.extend_from_slice(&dense.read_bytes("write_npy")?.bytes()[start..start + data_len]);
        Ok(out)
    }
}
