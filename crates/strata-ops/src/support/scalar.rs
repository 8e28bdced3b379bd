//! One element of any plain dtype held as its bytes (a pad value, a fill value, a one), and
//! filling byte buffers with it, so fill-style kernels need no per-dtype code.

use strata_core::{bf16, f16, DType, Tensor};

use crate::{OpError, OpResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScalarBytes {
    bytes: [u8; 8],
    len: usize,
}

impl ScalarBytes {
    /// `value` converted to `dtype` (saturating for integers, non-zero is true for bool).
    pub fn from_f64(op: &str, dtype: DType, value: f64) -> OpResult<Self> {
        let mut bytes = [0u8; 8];
        let len = dtype.size_in_bytes();
        let raw: u64 = match dtype {
            DType::F32 => (value as f32).to_bits() as u64,
            DType::F64 => value.to_bits(),
            DType::F16 => f16::from_f64(value).to_bits() as u64,
            DType::BF16 => bf16::from_f64(value).to_bits() as u64,
            DType::I8 => value as i8 as u8 as u64,
            DType::I16 => value as i16 as u16 as u64,
            DType::I32 => value as i32 as u32 as u64,
            DType::I64 => value as i64 as u64,
            DType::U8 => value as u8 as u64,
            DType::U16 => value as u16 as u64,
            DType::U32 => value as u32 as u64,
            DType::U64 => value as u64,
            DType::Bool => (value != 0.0) as u64,
            other => {
                return Err(OpError::kernel(
                    op,
                    format!("no scalar value of dtype {other}"),
                ))
            }
        };
        bytes[..len].copy_from_slice(&raw.to_le_bytes()[..len]);
        if cfg!(target_endian = "big") {
            bytes[..len].reverse();
        }
        Ok(ScalarBytes { bytes, len })
    }

    pub fn zero(dtype: DType) -> Self {
        ScalarBytes {
            bytes: [0; 8],
            len: dtype.size_in_bytes().min(8),
        }
    }

    /// The first element of `t` (a scalar or one-element tensor of a plain dtype).
    pub fn from_tensor(op: &'static str, t: &Tensor) -> OpResult<Self> {
        let len = t.dtype().size_in_bytes();
        if t.dtype().is_quantized() || len > 8 || t.numel() == 0 {
            return Err(OpError::kernel(
                op,
                format!("expected one {} value, got dims {:?}", t.dtype(), t.dims()),
            ));
        }
        let r = t.read_bytes(op)?;
        let start = t.storage_offset() * len;
        let mut bytes = [0u8; 8];
        bytes[..len].copy_from_slice(&r.bytes()[start..start + len]);
        Ok(ScalarBytes { bytes, len })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Fills `dst` (a whole number of elements) with this value.
    pub fn fill(&self, dst: &mut [u8]) {
        let pattern = self.as_bytes();
        if pattern.iter().all(|&b| b == pattern[0]) {
            dst.fill(pattern[0]);
            return;
        }
        match self.len {
            2 => fill_typed(dst, u16::from_ne_bytes([pattern[0], pattern[1]])),
            4 => fill_typed(
                dst,
                u32::from_ne_bytes(self.bytes[..4].try_into().unwrap_or([0; 4])),
            ),
            8 => fill_typed(dst, u64::from_ne_bytes(self.bytes)),
            _ => fill_chunks(dst, pattern),
        }
    }
}

fn fill_typed<T: bytemuck::Pod>(dst: &mut [u8], value: T) {
    match bytemuck::try_cast_slice_mut::<u8, T>(dst) {
        Ok(d) => d.fill(value),
        Err(_) => fill_chunks(dst, bytemuck::bytes_of(&value)),
    }
}

fn fill_chunks(dst: &mut [u8], pattern: &[u8]) {
    for c in dst.chunks_exact_mut(pattern.len()) {
        c.copy_from_slice(pattern);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_become_dtype_bytes() {
        let one = ScalarBytes::from_f64("t", DType::F32, 1.0).unwrap();
        assert_eq!(one.as_bytes(), &1.0f32.to_ne_bytes());
        let m = ScalarBytes::from_f64("t", DType::I16, -2.0).unwrap();
        assert_eq!(m.as_bytes(), &(-2i16).to_ne_bytes());
        let b = ScalarBytes::from_f64("t", DType::Bool, 3.0).unwrap();
        assert_eq!(b.as_bytes(), &[1]);
        let t = Tensor::from_slice(&[5u64, 9], &[2]).unwrap();
        let s = ScalarBytes::from_tensor("t", &t.narrow(0, 1, 1).unwrap()).unwrap();
        assert_eq!(s.as_bytes(), &9u64.to_ne_bytes());
        let mut buf = vec![0u8; 12];
        ScalarBytes::from_f64("t", DType::F32, 2.5)
            .unwrap()
            .fill(&mut buf);
        let floats: Vec<f32> = buf
            .chunks(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(floats, vec![2.5; 3]);
        assert!(ScalarBytes::from_f64("t", DType::Q8_0, 1.0).is_err());
    }
}
