//! Block-quantized layouts (L1): GGML's block formats byte for byte, and their reference
//! dequantization to f32 (the portable path and what every quantized kernel is tested against).
//!
//! A block holds `block_size()` consecutive elements of one row in `size_in_bytes()` bytes. The
//! legacy formats hold 32 elements with one f16 scale (`d`) and, for the `_1` types, an f16 offset
//! (`m`); the k-quants hold a super-block of 256 elements in sub-blocks whose scales are
//! themselves quantized. All multi-byte fields are little-endian, blocks are packed back to back.
//!
//! | type | bytes | layout |
//! | --- | --- | --- |
//! | q4_0 | 18 | d, qs\[16\]: element j = (low nibble of qs\[j\] - 8)·d, element j+16 = (high nibble - 8)·d |
//! | q4_1 | 20 | d, m, qs\[16\]: as q4_0 without the -8, plus m |
//! | q5_0 | 22 | d, qh (u32: bit j is the 5th bit of element j), qs\[16\]; value - 16 |
//! | q5_1 | 24 | d, m, qh, qs\[16\]; plus m |
//! | q8_0 | 34 | d, qs\[32\] (i8) |
//! | q4_k | 144 | d, dmin, scales\[12\] (8 six-bit scale/min pairs), qs\[128\] |
//! | q5_k | 176 | d, dmin, scales\[12\], qh\[32\], qs\[128\] |
//! | q6_k | 210 | ql\[128\], qh\[64\], scales\[16\] (i8), d |

use half::f16;

pub use super::block_bytes::*;
use super::DType;
use crate::{CoreError, Result};

/// Every dtype GGUF language models store weights in: the floats and the block formats.
pub const GGUF_WEIGHT_TYPES: [DType; 11] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
];

/// Dequantizes one block (`size_in_bytes()` bytes) into `block_size()` f32 values.
pub type DequantizeBlock = fn(&[u8], &mut [f32]);

/// Quantizes `block_size()` f32 values into one block.
pub type QuantizeBlock = fn(&[f32], &mut [u8]);

/// The f16 at `bytes[at..at + 2]`, as f32.
#[inline(always)]
pub fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// Dequantizes one q4_0 block into 32 values.
#[inline(always)]
pub fn dequantize_q4_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..Q4_0_BYTES];
    for j in 0..QUANT_BLOCK / 2 {
        out[j] = ((qs[j] & 0x0F) as i32 - 8) as f32 * d;
        out[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

/// Dequantizes one q4_1 block into 32 values.
#[inline(always)]
pub fn dequantize_q4_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let qs = &block[4..Q4_1_BYTES];
    for j in 0..QUANT_BLOCK / 2 {
        out[j] = (qs[j] & 0x0F) as f32 * d + m;
        out[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

/// The 5-bit values of a q5 block (before the -16 of q5_0), from its high-bit word and nibbles.
#[inline(always)]
fn q5_values(qh: u32, qs: &[u8], mut emit: impl FnMut(usize, u8)) {
    for (j, &q) in qs[..QUANT_BLOCK / 2].iter().enumerate() {
        let hi0 = (((qh >> j) << 4) & 0x10) as u8;
        let hi1 = ((qh >> (j + 12)) & 0x10) as u8;
        emit(j, (q & 0x0F) | hi0);
        emit(j + 16, (q >> 4) | hi1);
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Dequantizes one q5_0 block into 32 values.
#[inline(always)]
pub fn dequantize_q5_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    q5_values(u32_at(block, 2), &block[6..Q5_0_BYTES], |i, q| {
        out[i] = (q as i32 - 16) as f32 * d;
    });
}

/// Dequantizes one q5_1 block into 32 values.
#[inline(always)]
pub fn dequantize_q5_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    q5_values(u32_at(block, 4), &block[8..Q5_1_BYTES], |i, q| {
        out[i] = q as f32 * d + m;
    });
}

/// Dequantizes one q8_0 block into 32 values.
#[inline(always)]
pub fn dequantize_q8_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (o, &q) in out[..QUANT_BLOCK].iter_mut().zip(&block[2..Q8_0_BYTES]) {
        *o = q as i8 as f32 * d;
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a q4_k/q5_k super-block, unpacked from
/// its 12 packed scale bytes (GGML's `get_scale_min_k4`).
#[inline(always)]
pub fn k4_scale_min(j: usize, scales: &[u8]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// The (scale, min) of the two 32-element sub-blocks of 64-element chunk `chunk` of a
/// q4_k/q5_k super-block with super-scales `d` and `dmin`.
#[inline(always)]
fn k4_chunk_scales(chunk: usize, d: f32, dmin: f32, scales: &[u8]) -> [(f32, f32); 2] {
    [2 * chunk, 2 * chunk + 1].map(|j| {
        let (sc, m) = k4_scale_min(j, scales);
        (d * sc as f32, dmin * m as f32)
    })
}

/// Dequantizes one q4_k super-block into 256 values.
#[inline(always)]
pub fn dequantize_q4_k(block: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let scales = &block[4..16];
    let qs = &block[16..Q4_K_BYTES];
    for chunk in 0..QK_K / 64 {
        let [(d0, min0), (d1, min1)] = k4_chunk_scales(chunk, d, dmin, scales);
        let q = &qs[32 * chunk..32 * chunk + 32];
        let y = &mut out[64 * chunk..64 * chunk + 64];
        for l in 0..32 {
            y[l] = d0 * (q[l] & 0x0F) as f32 - min0;
            y[l + 32] = d1 * (q[l] >> 4) as f32 - min1;
        }
    }
}

/// Dequantizes one q5_k super-block into 256 values.
#[inline(always)]
pub fn dequantize_q5_k(block: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let scales = &block[4..16];
    let qh = &block[16..48];
    let qs = &block[48..Q5_K_BYTES];
    for chunk in 0..QK_K / 64 {
        let [(d0, min0), (d1, min1)] = k4_chunk_scales(chunk, d, dmin, scales);
        let (bit0, bit1) = (1u8 << (2 * chunk), 1u8 << (2 * chunk + 1));
        let q = &qs[32 * chunk..32 * chunk + 32];
        let y = &mut out[64 * chunk..64 * chunk + 64];
        for l in 0..32 {
            let h0 = if qh[l] & bit0 != 0 { 16 } else { 0 };
            let h1 = if qh[l] & bit1 != 0 { 16 } else { 0 };
            y[l] = d0 * ((q[l] & 0x0F) + h0) as f32 - min0;
            y[l + 32] = d1 * ((q[l] >> 4) + h1) as f32 - min1;
        }
    }
}

/// Dequantizes one q6_k super-block into 256 values.
#[inline(always)]
pub fn dequantize_q6_k(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, Q6_K_BYTES - 2);
    for half in 0..2 {
        let ql = &block[64 * half..64 * half + 64];
        let qh = &block[128 + 32 * half..128 + 32 * half + 32];
        let sc = &block[192 + 8 * half..192 + 8 * half + 8];
        let y = &mut out[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8 as f32) * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8 as f32) * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8 as f32) * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8 as f32) * q4 as f32;
        }
    }
}

/// The reference dequantizer of one block of a block-quantized dtype (`None` for plain types).
pub fn block_dequantizer(dtype: DType) -> Option<DequantizeBlock> {
    Some(match dtype {
        DType::Q4_0 => dequantize_q4_0,
        DType::Q4_1 => dequantize_q4_1,
        DType::Q5_0 => dequantize_q5_0,
        DType::Q5_1 => dequantize_q5_1,
        DType::Q8_0 => dequantize_q8_0,
        DType::Q4_K => dequantize_q4_k,
        DType::Q5_K => dequantize_q5_k,
        DType::Q6_K => dequantize_q6_k,
        _ => return None,
    })
}

/// Dequantizes whole blocks of `dtype` from `bytes` into `out` (f32, f16 and bf16 are widened
/// too, so a row of any GGUF weight type can be read as f32). `out.len()` elements are produced;
/// `bytes` must hold exactly those elements.
pub fn dequantize_row(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let need = dtype.bytes_for(out.len())?;
    if bytes.len() != need {
        return Err(CoreError::OutOfBounds {
            op: "dequantize_row",
            offset: 0,
            end: need,
            len: bytes.len(),
        });
    }
    match dtype {
        DType::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        DType::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        DType::BF16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = half::bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        _ => {
            let dequantize = block_dequantizer(dtype).ok_or(CoreError::UnsupportedDType {
                op: "dequantize_row",
                dtype,
                reason: "only f32, f16, bf16 and the block-quantized types dequantize to f32",
            })?;
            let (block, size) = (dtype.block_size(), dtype.size_in_bytes());
            for (o, b) in out.chunks_exact_mut(block).zip(bytes.chunks_exact(size)) {
                dequantize(b, o);
            }
        }
    }
    Ok(())
}

/// Quantizes 32 values to one q8_0 block (GGML's `quantize_row_q8_0_ref`: scale = absmax/127,
/// round to nearest).
pub fn quantize_q8_0(x: &[f32], block: &mut [u8]) {
    let amax = x[..QUANT_BLOCK].iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (q, &v) in block[2..Q8_0_BYTES].iter_mut().zip(x) {
        *q = (v * id).round() as i8 as u8;
    }
}

/// The value of largest magnitude, keeping its sign (how q4_0/q5_0 choose their scale).
fn signed_absmax(x: &[f32]) -> f32 {
    x.iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

/// Quantizes 32 values to one q4_0 block (GGML's reference rounding).
pub fn quantize_q4_0(x: &[f32], block: &mut [u8]) {
    let d = signed_absmax(&x[..QUANT_BLOCK]) / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
    for j in 0..16 {
        block[2 + j] = q(x[j]) | (q(x[j + 16]) << 4);
    }
}

/// Quantizes 32 values to one q4_1 block (GGML's reference rounding).
pub fn quantize_q4_1(x: &[f32], block: &mut [u8]) {
    let (min, max) = min_max(&x[..QUANT_BLOCK]);
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    block[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
    let q = |v: f32| (((v - min) * id + 0.5) as i32).clamp(0, 15) as u8;
    for j in 0..16 {
        block[4 + j] = q(x[j]) | (q(x[j + 16]) << 4);
    }
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// Packs 32 five-bit values into a q5 block's high-bit word and nibbles.
fn pack_q5(q: impl Fn(usize) -> u8, qh: &mut [u8], qs: &mut [u8]) {
    let mut high = 0u32;
    for (j, nibbles) in qs.iter_mut().enumerate().take(16) {
        let (a, b) = (q(j), q(j + 16));
        *nibbles = (a & 0x0F) | ((b & 0x0F) << 4);
        high |= (((a & 0x10) >> 4) as u32) << j;
        high |= (((b & 0x10) >> 4) as u32) << (j + 16);
    }
    qh.copy_from_slice(&high.to_le_bytes());
}

/// Quantizes 32 values to one q5_0 block (GGML's reference rounding).
pub fn quantize_q5_0(x: &[f32], block: &mut [u8]) {
    let d = signed_absmax(&x[..QUANT_BLOCK]) / -16.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    let (qh, qs) = block[2..Q5_0_BYTES].split_at_mut(4);
    pack_q5(|j| ((x[j] * id + 16.5) as i32).clamp(0, 31) as u8, qh, qs);
}

/// Quantizes 32 values to one q5_1 block (GGML's reference rounding).
pub fn quantize_q5_1(x: &[f32], block: &mut [u8]) {
    let (min, max) = min_max(&x[..QUANT_BLOCK]);
    let d = (max - min) / 31.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    block[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    block[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
    let (qh, qs) = block[4..Q5_1_BYTES].split_at_mut(4);
    pack_q5(
        |j| (((x[j] - min) * id + 0.5) as i32).clamp(0, 31) as u8,
        qh,
        qs,
    );
}

/// The reference quantizer of one block, for the formats that have a simple one (the legacy
/// 32-element formats). The k-quants' quantizers search for scales and are not needed to read
/// files; tests build k-quant blocks from random bytes.
pub fn block_quantizer(dtype: DType) -> Option<QuantizeBlock> {
    Some(match dtype {
        DType::Q4_0 => quantize_q4_0,
        DType::Q4_1 => quantize_q4_1,
        DType::Q5_0 => quantize_q5_0,
        DType::Q5_1 => quantize_q5_1,
        DType::Q8_0 => quantize_q8_0,
        _ => return None,
    })
}

/// Byte offsets of the f16 scale fields in one block of `dtype` (d, and dmin or m where present).
pub fn scale_offsets(dtype: DType) -> &'static [usize] {
    match dtype {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => &[0],
        DType::Q4_1 | DType::Q5_1 | DType::Q4_K | DType::Q5_K => &[0, 2],
        DType::Q6_K => &[Q6_K_BYTES - 2],
        _ => &[],
    }
}

/// `numel` elements of `dtype` as pseudo-random bytes from `seed`, valid and finite: block
/// scales are set to `scale`, plain floats kept to small exponents. For tests and benchmarks of
/// the k-quants, which have no reference quantizer here.
pub fn random_blocks(dtype: DType, numel: usize, seed: u64, scale: f32) -> Result<Vec<u8>> {
    let mut state = seed;
    let mut bytes: Vec<u8> = (0..dtype.bytes_for(numel)?)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u8
        })
        .collect();
    if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        // The top byte holds the sign and the high exponent bits; clearing bit 6 keeps |v| < 2.
        let step = dtype.size_in_bytes();
        for b in bytes.iter_mut().skip(step - 1).step_by(step) {
            *b &= 0xBF;
        }
    }
    let scale = f16::from_f32(scale).to_le_bytes();
    for block in bytes.chunks_mut(dtype.size_in_bytes()) {
        for &at in scale_offsets(dtype) {
            block[at..at + 2].copy_from_slice(&scale);
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_bytes(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_le_bytes()
    }

    #[test]
    fn block_sizes_match_ggml() {
        let expect = [
            (DType::Q4_0, 32, 18),
            (DType::Q4_1, 32, 20),
            (DType::Q5_0, 32, 22),
            (DType::Q5_1, 32, 24),
            (DType::Q8_0, 32, 34),
            (DType::Q4_K, 256, 144),
            (DType::Q5_K, 256, 176),
            (DType::Q6_K, 256, 210),
        ];
        for (dtype, block, bytes) in expect {
            assert_eq!((dtype.block_size(), dtype.size_in_bytes()), (block, bytes));
            assert!(dtype.is_quantized());
        }
        assert_eq!(DType::Q6_K.bytes_for(512).unwrap(), 420);
        assert!(DType::Q4_K.bytes_for(288).is_err());
    }

    #[test]
    fn q4_0_and_q4_1_hand_built_blocks() {
        let mut b = vec![0u8; 18];
        b[..2].copy_from_slice(&f16_bytes(0.5));
        b[2] = 0x1F; // element 0 = 15-8, element 16 = 1-8
        let mut out = [0.0f32; 32];
        dequantize_q4_0(&b, &mut out);
        assert_eq!((out[0], out[16], out[1]), (3.5, -3.5, -4.0));

        let mut b = vec![0u8; 20];
        b[..2].copy_from_slice(&f16_bytes(2.0));
        b[2..4].copy_from_slice(&f16_bytes(-1.0));
        b[4 + 15] = 0x3A; // element 15 = 10, element 31 = 3
        dequantize_q4_1(&b, &mut out);
        assert_eq!((out[15], out[31], out[0]), (19.0, 5.0, -1.0));
    }

    #[test]
    fn q5_high_bits_come_from_the_u32() {
        let mut b = vec![0u8; 22];
        b[..2].copy_from_slice(&f16_bytes(1.0));
        // Bit 3 → element 3's 5th bit; bit 20 → element 20's.
        b[2..6].copy_from_slice(&((1u32 << 3) | (1u32 << 20)).to_le_bytes());
        b[6 + 3] = 0x02; // element 3 low nibble 2; element 19 nibble 0
        b[6 + 4] = 0x50; // element 20 low nibble 5
        let mut out = [0.0f32; 32];
        dequantize_q5_0(&b, &mut out);
        assert_eq!(out[3], (16 + 2 - 16) as f32);
        assert_eq!(out[20], (16 + 5 - 16) as f32);
        assert_eq!(out[19], -16.0);
    }

    #[test]
    fn k4_scales_unpack_six_bits() {
        let mut s = [0u8; 12];
        s[0] = 0b11_000101; // sc0 = 5, top bits feed sc4's high bits
        s[4] = 0b01_000111; // m0 = 7, top bits feed m4
        s[8] = 0x9A; // sc4 low nibble 0xA, m4 low nibble 9
        assert_eq!(k4_scale_min(0, &s), (5, 7));
        assert_eq!(k4_scale_min(4, &s), (0xA | (3 << 4), 9 | (1 << 4)));
    }

    #[test]
    fn q4_k_reads_scales_and_mins() {
        let mut b = vec![0u8; Q4_K_BYTES];
        b[..2].copy_from_slice(&f16_bytes(0.5));
        b[2..4].copy_from_slice(&f16_bytes(0.25));
        b[4] = 3; // sub-block 0: scale 3
        b[8] = 4; // sub-block 0: min 4
        b[5] = 1; // sub-block 1: scale 1, min 0
        b[16] = 0x72; // element 0 nibble 2, element 32 nibble 7
        let mut out = [0.0f32; 256];
        dequantize_q4_k(&b, &mut out);
        assert_eq!(out[0], 0.5 * 3.0 * 2.0 - 0.25 * 4.0);
        assert_eq!(out[32], 0.5 * 7.0);
        assert_eq!(out[1], -1.0);
    }

    #[test]
    fn q6_k_scale_is_at_the_end() {
        let mut b = vec![0u8; Q6_K_BYTES];
        b[208..210].copy_from_slice(&f16_bytes(0.5));
        b[192] = (-2i8) as u8; // scale of elements 0..16
        b[0] = 0x05; // element 0 low 4 bits
        b[128] = 0x02; // element 0 high 2 bits = 2 → q = 5 | 32 = 37, minus 32 = 5
        let mut out = [0.0f32; 256];
        dequantize_q6_k(&b, &mut out);
        assert_eq!(out[0], 0.5 * -2.0 * 5.0);
        // Unset elements are -32 times their (zero) scale.
        assert_eq!(out[20], 0.0);
    }

    #[test]
    fn legacy_quantizers_round_trip_within_a_step() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 29) as f32 - 14.0) / 7.0)
            .collect();
        for dtype in [
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q5_1,
            DType::Q8_0,
        ] {
            let quantize = block_quantizer(dtype).unwrap();
            let mut bytes = vec![0u8; dtype.bytes_for(64).unwrap()];
            for (xs, b) in x.chunks(32).zip(bytes.chunks_mut(dtype.size_in_bytes())) {
                quantize(xs, b);
            }
            let mut back = vec![0.0f32; 64];
            dequantize_row(dtype, &bytes, &mut back).unwrap();
            // Values lie in [-2, 2]. The `_0` formats scale by the signed maximum, so the far
            // end is clamped: up to one step there; the others round to half a step. Scales
            // are f16, hence the small slack.
            let tolerance = match dtype {
                DType::Q4_0 => 2.0 / 8.0,
                DType::Q5_0 => 2.0 / 16.0,
                DType::Q4_1 => 4.0 / 15.0 / 2.0,
                DType::Q5_1 => 4.0 / 31.0 / 2.0,
                _ => 2.0 / 127.0 / 2.0,
            };
            for (a, b) in x.iter().zip(&back) {
                assert!(
                    (a - b).abs() <= tolerance * 1.01 + 1e-3,
                    "{dtype}: {a} vs {b}"
                );
            }
        }
    }

    /// Two blocks of each format from a fixed byte stream (scales patched to tame values),
    /// dequantized by the `gguf` Python package (llama.cpp's reference `gguf.quants.dequantize`):
    /// the sum and elements 0, 1, 17, 31, block-1, block+5 and 2·block-1.
    #[test]
    // The expected values are exact (dyadic), printed in full by the reference.
    #[allow(clippy::excessive_precision)]
    fn dequantization_matches_the_ggml_reference() {
        type Golden = (DType, &'static [(usize, f32)], f64, [f32; 7]);
        let golden: [Golden; 8] = [
            (
                DType::Q4_0,
                &[(0, 0.03125)],
                -2.65625,
                [
                    -0.21875, -0.21875, 0.03125, -0.03125, -0.03125, -0.25, -0.21875,
                ],
            ),
            (
                DType::Q4_1,
                &[(0, 0.0625), (2, -0.5)],
                -3.0625,
                [0.0625, -0.3125, -0.5, 0.0625, 0.0625, -0.5, -0.125],
            ),
            (
                DType::Q5_0,
                &[(0, 0.015625)],
                -1.703125,
                [
                    0.125, -0.1875, -0.234375, -0.09375, -0.09375, -0.078125, 0.03125,
                ],
            ),
            (
                DType::Q5_1,
                &[(0, 0.0625), (2, -1.0)],
                -8.625,
                [0.6875, -0.625, -0.5625, -0.8125, -0.8125, -0.3125, 0.625],
            ),
            (
                DType::Q8_0,
                &[(0, 0.0078125)],
                2.734375,
                [
                    0.3828125, -0.8671875, -0.7578125, 0.0859375, 0.0859375, -0.8203125, -0.6015625,
                ],
            ),
            (
                DType::Q4_K,
                &[(0, 0.001953125), (2, 0.0009765625)],
                176.982421875,
                [
                    1.0146484375,
                    0.2138671875,
                    0.8544921875,
                    -0.0263671875,
                    -0.001953125,
                    0.3291015625,
                    0.1923828125,
                ],
            ),
            (
                DType::Q5_K,
                &[(0, 0.001953125), (2, 0.0009765625)],
                351.439453125,
                [
                    1.4150390625,
                    2.0556640625,
                    1.9755859375,
                    0.4541015625,
                    0.064453125,
                    1.853515625,
                    -0.0244140625,
                ],
            ),
            (
                DType::Q6_K,
                &[(208, 0.0078125)],
                -493.859375,
                [-0.1875, -0.09375, 8.125, -8.125, -1.09375, 8.625, 8.25],
            ),
        ];
        for (dtype, scales, sum, picks) in golden {
            let (n, size) = (dtype.block_size(), dtype.size_in_bytes());
            let mut state = 7u64;
            let mut bytes: Vec<u8> = (0..2 * size)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (state >> 33) as u8
                })
                .collect();
            for block in bytes.chunks_mut(size) {
                for &(at, value) in scales {
                    block[at..at + 2].copy_from_slice(&f16_bytes(value));
                }
            }
            let mut out = vec![0.0f32; 2 * n];
            dequantize_row(dtype, &bytes, &mut out).unwrap();
            let total: f64 = out.iter().map(|&v| v as f64).sum();
            assert!(
                (total - sum).abs() < 1e-6 * sum.abs().max(1.0),
                "{dtype}: sum {total} vs {sum}"
            );
            for (at, expect) in [0, 1, 17, 31, n - 1, n + 5, 2 * n - 1]
                .into_iter()
                .zip(picks)
            {
                assert_eq!(out[at], expect, "{dtype}: element {at}");
            }
        }
    }

    #[test]
    fn dequantize_row_checks_sizes_and_types() {
        let mut out = [0.0f32; 32];
        assert!(dequantize_row(DType::Q8_0, &[0; 33], &mut out).is_err());
        assert!(dequantize_row(DType::I32, &[0; 128], &mut out).is_err());
        let mut bytes = Vec::new();
        for v in 0..32 {
            bytes.extend_from_slice(&f16_bytes(v as f32));
        }
        dequantize_row(DType::F16, &bytes, &mut out).unwrap();
        assert_eq!(out[31], 31.0);
    }
}
