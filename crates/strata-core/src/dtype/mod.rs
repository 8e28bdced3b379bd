//! Element types (C1): every numeric ONNX type we store, plus block-quantized types.

use std::fmt;

use half::{bf16, f16};

mod byte_size;
pub mod low_float;

pub mod block;
pub mod block_bytes;

pub use block_bytes::{QK_K, QUANT_BLOCK};

/// The element type of a tensor.
///
/// Plain types store one element per `size_in_bytes()` bytes. Block-quantized types (GGML's
/// `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q8_0` of 32 elements and the k-quants `Q4_K`, `Q5_K`, `Q6_K`
/// of 256) store `block_size()` elements per block of `size_in_bytes()` bytes, in GGML's layouts
/// (see [`block`]).
///
/// Low-precision ONNX types (opset 19+ float8, opset 21+ int4/uint4, opset 23+ float4, opset 24+
/// float8e8m0, opset 25+ int2/uint2):
/// - the float8 types (`F8E4M3FN`, `F8E4M3FNUZ`, `F8E5M2`, `F8E5M2FNUZ`, `F8E8M0`) take one byte
///   per element, holding the element's bit pattern;
/// - the sub-byte types (`I4`, `U4`, `I2`, `U2`, `F4E2M1`) are held UNPACKED, one element per
///   byte: the sign-extended value for `I4`/`I2` (so the byte reads as an `i8`), the value for
///   `U4`/`U2`, and the 4-bit code (low nibble) for `F4E2M1`. Every shape and view operation then
///   works on them unchanged; packing (two or four elements per byte, low bits first) happens only
///   at the ONNX boundary, when TensorProtos are decoded and encoded.
///
/// The block-quantized types are packed weight formats, read by the quantized kernels.
///
/// `String` tensors (UTF-8 text, as ONNX's STRING) hold their elements apart from byte storage,
/// in a shared immutable [`StringBuffer`](crate::StringBuffer): they have no byte view, never live
/// in an arena, and `size_in_bytes` is the footprint of one element handle.
// The k-quant variants keep GGML's spelling (`Q4_K`), which rustc's camel-case lint rejects.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q4_K,
    Q5_K,
    Q6_K,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F8E8M0,
    F4E2M1,
    I4,
    U4,
    I2,
    U2,
    String,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 32] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::F8E8M0,
        DType::F4E2M1,
        DType::I4,
        DType::U4,
        DType::I2,
        DType::U2,
        DType::String,
    ];

    /// Bytes of one storage unit: an element, or a whole block for quantized types.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            // Float8 bit patterns, and sub-byte types held unpacked (one element per byte).
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0
            | DType::F4E2M1
            | DType::I4
            | DType::U4
            | DType::I2
            | DType::U2 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::Q8_0 => block_bytes::Q8_0_BYTES,
            DType::Q4_0 => block_bytes::Q4_0_BYTES,
            DType::Q4_1 => block_bytes::Q4_1_BYTES,
            DType::Q5_0 => block_bytes::Q5_0_BYTES,
            DType::Q5_1 => block_bytes::Q5_1_BYTES,
            DType::Q4_K => block_bytes::Q4_K_BYTES,
            DType::Q5_K => block_bytes::Q5_K_BYTES,
            DType::Q6_K => block_bytes::Q6_K_BYTES,
            DType::String => std::mem::size_of::<Box<str>>(),
        }
    }

    /// Elements per storage unit: 1 for plain types, 32 for the legacy GGML block formats, 256
    /// for the k-quants.
    pub const fn block_size(self) -> usize {
        match self {
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 => QUANT_BLOCK,
            DType::Q4_K | DType::Q5_K | DType::Q6_K => QK_K,
            _ => 1,
        }
    }

    /// True for the block-quantized types, which have no per-element addressing.
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// True for the 8-bit and 4-bit float formats, stored as bit patterns (see [`DType`]).
    pub const fn is_low_precision_float(self) -> bool {
        matches!(
            self,
            DType::F8E4M3FN
                | DType::F8E4M3FNUZ
                | DType::F8E5M2
                | DType::F8E5M2FNUZ
                | DType::F8E8M0
                | DType::F4E2M1
        )
    }

    /// True for the sub-byte integer types, held unpacked one element per byte.
    pub const fn is_sub_byte_int(self) -> bool {
        matches!(self, DType::I4 | DType::U4 | DType::I2 | DType::U2)
    }

    /// True for text, whose elements live in a [`StringBuffer`](crate::StringBuffer).
    pub const fn is_string(self) -> bool {
        matches!(self, DType::String)
    }

    pub const fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub const fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// The lower-case name used in display, parsing and file formats.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::Q8_0 => "q8_0",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q4_K => "q4_k",
            DType::Q5_K => "q5_k",
            DType::Q6_K => "q6_k",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
            DType::F8E8M0 => "f8e8m0",
            DType::F4E2M1 => "f4e2m1",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::I2 => "i2",
            DType::U2 => "u2",
            DType::String => "string",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be read from and written to tensor memory directly.
///
/// Implemented only for types whose every bit pattern is a valid value (`bytemuck::Pod`), so
/// reinterpreting initialized tensor bytes as `&[T]` is always sound. `bool` is deliberately absent:
/// bool tensors are accessed as `u8` (see [`Element::accepts`]) and validated at the boundaries.
pub trait Element: bytemuck::Pod + Send + Sync + PartialEq + fmt::Debug + 'static {
    const DTYPE: DType;

    /// Whether memory of `dtype` may be viewed as `Self`. `u8` also accepts `Bool`.
    fn accepts(dtype: DType) -> bool {
        dtype == Self::DTYPE
    }
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}

element!(f32 => F32, f16 => F16, bf16 => BF16, f64 => F64, i16 => I16, i32 => I32,
    i64 => I64, u16 => U16, u32 => U32, u64 => U64);

/// `u8` also views the one-byte storage of bool, the unsigned sub-byte types and the float8 and
/// float4 bit patterns.
impl Element for u8 {
    const DTYPE: DType = DType::U8;

    fn accepts(dtype: DType) -> bool {
        matches!(
            dtype,
            DType::U8
                | DType::Bool
                | DType::U4
                | DType::U2
                | DType::F8E4M3FN
                | DType::F8E4M3FNUZ
                | DType::F8E5M2
                | DType::F8E5M2FNUZ
                | DType::F8E8M0
                | DType::F4E2M1
        )
    }
}

/// `i8` also views the signed sub-byte types, held sign-extended one per byte.
impl Element for i8 {
    const DTYPE: DType = DType::I8;

    fn accepts(dtype: DType) -> bool {
        matches!(dtype, DType::I8 | DType::I4 | DType::I2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_blocks() {
        assert_eq!(DType::F32.size_in_bytes(), 4);
        assert_eq!(DType::BF16.size_in_bytes(), 2);
        assert_eq!(DType::Bool.size_in_bytes(), 1);
        assert_eq!(DType::U64.size_in_bytes(), 8);
        assert_eq!(DType::Q8_0.block_size(), 32);
        assert_eq!(DType::Q8_0.size_in_bytes(), 34);
        assert_eq!(DType::Q4_0.size_in_bytes(), 18);
        assert_eq!(DType::Q4_0.bytes_for(64).unwrap(), 36);
        assert_eq!(DType::Q8_0.bytes_for(0).unwrap(), 0);
        assert_eq!(DType::F16.bytes_for(3).unwrap(), 6);
        // Low-precision types: one byte per element, sub-byte types unpacked.
        assert_eq!(DType::F8E5M2.size_in_bytes(), 1);
        assert_eq!(DType::I4.bytes_for(5).unwrap(), 5);
        assert_eq!(DType::U2.block_size(), 1);
        assert!(DType::F4E2M1.is_low_precision_float() && !DType::F4E2M1.is_float());
        assert!(DType::I2.is_sub_byte_int() && !DType::I2.is_signed_int());
    }

    #[test]
    fn element_acceptance() {
        assert!(u8::accepts(DType::Bool));
        assert!(!i8::accepts(DType::U8));
        assert!(i8::accepts(DType::I4) && !i8::accepts(DType::U4));
        assert!(u8::accepts(DType::F8E4M3FN) && !u8::accepts(DType::I2));
        assert!(f16::accepts(DType::F16));
        assert!(!f32::accepts(DType::F64));
    }
}
