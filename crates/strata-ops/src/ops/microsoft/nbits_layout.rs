//! The weight layout of MatMulNBits and its dequantization. B holds `N` rows (output features)
//! of `K` inputs as `n_blocks = ceil(K / block_size)` blocks of `block_size · bits / 8` bytes,
//! elements packed from the least significant bits up (4-bit: element `2i` in the low nibble).
//! Each block has a scale (`scales[n · n_blocks + b]`) and a zero point: packed like B in
//! `ceil(n_blocks · bits / 8)` bytes per row, or one float per block, or `2^(bits-1)` when
//! absent. Element value: `(q - zero_point) · scale`.

use crate::{OpError, OpResult};

const OP: &str = "MatMulNBits";

/// The validated sizes of one weight matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NBitsLayout {
    pub k: usize,
    pub n: usize,
    pub bits: usize,
    pub block_size: usize,
    pub n_blocks: usize,
    /// Bytes per block of B.
    pub blob: usize,
}

/// The zero points of a weight matrix.
#[derive(Clone, Copy)]
pub(crate) enum ZeroPoints<'a> {
    /// `2^(bits-1)` for every block.
    Default,
    /// Packed like B, `ceil(n_blocks · bits / 8)` bytes per row.
    Packed(&'a [u8]),
    /// One float per block.
    Float(&'a [f32]),
}

impl NBitsLayout {
    /// Checks the attributes: bits 2, 4 or 8; block size a power of two of at least 16; K and N
    /// positive and the byte sizes within `usize`.
    pub(crate) fn new(k: i64, n: i64, bits: i64, block_size: i64) -> OpResult<Self> {
        let attr = |name: &str, m: String| OpError::attribute(OP, name, m);
        if !matches!(bits, 2 | 4 | 8) {
            return Err(attr("bits", format!("{bits} is not supported (2, 4 or 8)")));
        }
        if block_size < 16 || !(block_size as u64).is_power_of_two() {
            return Err(attr(
                "block_size",
                format!("{block_size} must be a power of two of at least 16"),
            ));
        }
        let positive = |name: &str, v: i64| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| attr(name, format!("must be positive, got {v}")))
        };
        let (k, n) = (positive("K", k)?, positive("N", n)?);
        let (bits, block_size) = (bits as usize, block_size as usize);
        let n_blocks = k.div_ceil(block_size);
        let layout = NBitsLayout {
            k,
            n,
            bits,
            block_size,
            n_blocks,
            blob: block_size * bits / 8,
        };
        n.checked_mul(n_blocks)
            .and_then(|c| c.checked_mul(layout.blob.max(1)))
            .and_then(|_| k.checked_mul(n))
            .and_then(|c| c.checked_mul(4))
            .ok_or_else(|| attr("K", format!("K {k} × N {n} overflows")))?;
        Ok(layout)
    }

    /// Bytes of B.
    pub(crate) fn b_bytes(&self) -> usize {
        self.n * self.n_blocks * self.blob
    }

    /// Blocks (scales, float zero points).
    pub(crate) fn blocks(&self) -> usize {
        self.n * self.n_blocks
    }

    /// Bytes of packed zero points per row.
    pub(crate) fn zero_point_row_bytes(&self) -> usize {
        (self.n_blocks * self.bits).div_ceil(8)
    }

    /// Checks the lengths of B, the scales and the zero points.
    pub(crate) fn check(&self, b: usize, scales: usize, zp: &ZeroPoints<'_>) -> OpResult<()> {
        let bad = |what: &str, got: usize, want: usize| {
            Err(OpError::shape(
                OP,
                format!(
                    "{what} has {got} elements, K={} N={} bits={} block_size={} need {want}",
                    self.k, self.n, self.bits, self.block_size
                ),
            ))
        };
        if b != self.b_bytes() {
            return bad("B", b, self.b_bytes());
        }
        if scales != self.blocks() {
            return bad("scales", scales, self.blocks());
        }
        match *zp {
            ZeroPoints::Default => Ok(()),
            ZeroPoints::Packed(z) if z.len() != self.n * self.zero_point_row_bytes() => {
                bad("zero_points", z.len(), self.n * self.zero_point_row_bytes())
            }
            ZeroPoints::Float(z) if z.len() != self.blocks() => {
                bad("zero_points", z.len(), self.blocks())
            }
            _ => Ok(()),
        }
    }

    /// Element `i` of a packed byte run.
    #[inline(always)]
    fn element(&self, bytes: &[u8], i: usize) -> u8 {
        let per_byte = 8 / self.bits;
        let shift = (i % per_byte) * self.bits;
        let mask = ((1u16 << self.bits) - 1) as u8;
        (bytes[i / per_byte] >> shift) & mask
    }

    /// Dequantizes the whole matrix into `w`, `K × N` row-major (`w[k · N + n]`), the GEMM's B
    /// operand. Lengths must have passed [`NBitsLayout::check`].
    pub(crate) fn dequantize_transposed(
        &self,
        b: &[u8],
        scales: &[f32],
        zp: &ZeroPoints<'_>,
        w: &mut [f32],
    ) -> OpResult<()> {
        self.check(b.len(), scales.len(), zp)?;
        if w.len() != self.k * self.n {
            return Err(OpError::kernel(
                OP,
                format!(
                    "weight buffer has {} elements, need {}",
                    w.len(),
                    self.k * self.n
                ),
            ));
        }
        let default_zp = (1u32 << (self.bits - 1)) as f32;
        let zp_row = self.zero_point_row_bytes();
        for n in 0..self.n {
            for blk in 0..self.n_blocks {
                let at = n * self.n_blocks + blk;
                let scale = scales[at];
                let zero = match *zp {
                    ZeroPoints::Default => default_zp,
                    ZeroPoints::Packed(z) => f32::from(self.element(&z[n * zp_row..], blk)),
                    ZeroPoints::Float(z) => z[at],
                };
                let bytes = &b[at * self.blob..(at + 1) * self.blob];
                let k0 = blk * self.block_size;
                let count = self.block_size.min(self.k - k0);
                for i in 0..count {
                    let q = f32::from(self.element(bytes, i));
                    w[(k0 + i) * self.n + n] = (q - zero) * scale;
                }
            }
        }
        Ok(())
    }
}

/// Zero points repacked for [`crate::kernels::quant::Q4Weights`] and
/// [`crate::kernels::quant::Q8Weights`]: one per block, row after row (`Default`: the
/// kernels' own default, 8 for 4-bit and 128 for 8-bit weights).
pub(crate) enum RepackedZeros {
    Default,
    Int(Vec<u8>),
    Float(Vec<f32>),
}

impl NBitsLayout {
    /// Repacks 4-bit (or 2-bit: each value fits a nibble) B into the shared 32-element group
    /// layout of the block kernels (`kernels::quant::Q4Weights`): `qs` of
    /// `Q4Weights::qs_len(N, K)` bytes. The scales keep their layout (one per block, row after
    /// row); packed zero points are unpacked to one byte per block (2-bit without zero points:
    /// 2 for every block, the kernels' default being 4-bit's 8). Lengths must pass
    /// [`NBitsLayout::check`].
    pub(crate) fn repack_q4(
        &self,
        b: &[u8],
        scales: &[f32],
        zp: &ZeroPoints<'_>,
        qs: &mut [u8],
    ) -> OpResult<RepackedZeros> {
        use crate::kernels::quant::{pack_group, Q4Weights, GROUP_BYTES};
        self.check(b.len(), scales.len(), zp)?;
        if !matches!(self.bits, 2 | 4) || qs.len() != Q4Weights::qs_len(self.n, self.k) {
            return Err(OpError::kernel(
                OP,
                format!("cannot repack {}-bit B into {} bytes", self.bits, qs.len()),
            ));
        }
        let groups = self.k.div_ceil(32);
        let mut values = vec![0u8; groups * 32];
        for (n, out) in qs.chunks_exact_mut(groups * GROUP_BYTES).enumerate() {
            let row = &b[n * self.n_blocks * self.blob..(n + 1) * self.n_blocks * self.blob];
            for (i, v) in values.iter_mut().enumerate() {
                *v = if i < self.k {
                    let (blk, e) = (i / self.block_size, i % self.block_size);
                    self.element(&row[blk * self.blob..(blk + 1) * self.blob], e)
                } else {
                    0
                };
            }
            for (g, dst) in out.chunks_exact_mut(GROUP_BYTES).enumerate() {
                let group: &[u8; 32] = values[g * 32..(g + 1) * 32].try_into().expect("32 values");
                dst.copy_from_slice(&pack_group(group));
            }
        }
        Ok(self.repacked_zeros(zp))
    }
}

impl NBitsLayout {
    /// Repacks 4-bit (or 2-bit) B into the sliver order of the f32 GEMM
    /// (`kernels::quant::Q4Slivers`): `qs` of `Q4Slivers::qs_len(N, K)` bytes, `params` of
    /// `Q4Slivers::params_len(N, K, block_size)` values (per 32 output features and block, the
    /// scales and `-zero · scale`). Zero points default to `2^(bits-1)`. Lengths must pass
    /// [`NBitsLayout::check`].
    pub(crate) fn repack_q4_slivers(
        &self,
        b: &[u8],
        scales: &[f32],
        zp: &ZeroPoints<'_>,
        qs: &mut [u8],
        params: &mut [f32],
    ) -> OpResult<()> {
        use crate::kernels::quant::pack_slivers;
        self.check(b.len(), scales.len(), zp)?;
        if !matches!(self.bits, 2 | 4) {
            return Err(OpError::kernel(
                OP,
                format!("cannot repack {}-bit B into 4-bit slivers", self.bits),
            ));
        }
        let (bs, row_bytes, zp_row) = (
            self.block_size,
            self.n_blocks * self.blob,
            self.zero_point_row_bytes(),
        );
        let default_zp = (1u32 << (self.bits - 1)) as f32;
        let q = |j: usize, p: usize| {
            let block = &b[j * row_bytes + (p / bs) * self.blob..][..self.blob];
            self.element(block, p % bs)
        };
        let param = |j: usize, blk: usize| {
            let at = j * self.n_blocks + blk;
            let zero = match *zp {
                ZeroPoints::Default => default_zp,
                ZeroPoints::Packed(z) => f32::from(self.element(&z[j * zp_row..], blk)),
                ZeroPoints::Float(z) => z[at],
            };
            (scales[at], zero)
        };
        pack_slivers((self.n, self.k, bs), q, param, qs, params)?;
        Ok(())
    }
}

impl NBitsLayout {
    /// Copies 8-bit B into the layout of `kernels::quant::Q8Weights`: each row's `K` bytes
    /// (the padding of a partial last block dropped), `qs` of `N · K` bytes; zero points as
    /// [`NBitsLayout::repack_q4`] gives them. Lengths must pass [`NBitsLayout::check`].
    pub(crate) fn repack_q8(
        &self,
        b: &[u8],
        scales: &[f32],
        zp: &ZeroPoints<'_>,
        qs: &mut [u8],
    ) -> OpResult<RepackedZeros> {
        self.check(b.len(), scales.len(), zp)?;
        if self.bits != 8 || qs.len() != self.n * self.k {
            return Err(OpError::kernel(
                OP,
                format!("cannot repack {}-bit B into {} bytes", self.bits, qs.len()),
            ));
        }
        let row_bytes = self.n_blocks * self.blob;
        for (src, dst) in b.chunks_exact(row_bytes).zip(qs.chunks_exact_mut(self.k)) {
            dst.copy_from_slice(&src[..self.k]);
        }
        Ok(self.repacked_zeros(zp))
    }

    /// Zero points one per block, row after row (unpacked from B's layout when packed).
    fn repacked_zeros(&self, zp: &ZeroPoints<'_>) -> RepackedZeros {
        let zp_row = self.zero_point_row_bytes();
        match *zp {
            ZeroPoints::Default if self.bits == 2 => RepackedZeros::Int(vec![2; self.blocks()]),
            ZeroPoints::Default => RepackedZeros::Default,
            ZeroPoints::Float(z) => RepackedZeros::Float(z.to_vec()),
            ZeroPoints::Packed(z) => RepackedZeros::Int(
                (0..self.blocks())
                    .map(|at| {
                        let (n, blk) = (at / self.n_blocks, at % self.n_blocks);
                        self.element(&z[n * zp_row..], blk)
                    })
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bit_blocks_unpack_low_nibble_first_with_packed_zero_points() {
        // K = 20 with blocks of 16: two blocks, the second partial (4 of 16 used).
        let l = NBitsLayout::new(20, 1, 4, 16).unwrap();
        assert_eq!((l.n_blocks, l.blob, l.zero_point_row_bytes()), (2, 8, 1));
        let mut b = vec![0u8; 16];
        b[0] = 0x21; // elements 0 = 1, 1 = 2
        b[8] = 0xF0; // block 1: element 0 = 0, element 1 = 15
        let scales = [0.5f32, 2.0];
        let zp = [0x93u8]; // block 0: 3, block 1: 9
        let mut w = vec![0.0f32; 20];
        l.dequantize_transposed(&b, &scales, &ZeroPoints::Packed(&zp), &mut w)
            .unwrap();
        assert_eq!(&w[..3], &[(1.0 - 3.0) * 0.5, (2.0 - 3.0) * 0.5, -1.5]);
        assert_eq!(&w[16..18], &[-18.0, 12.0]);
        // Without zero points the default is 8.
        l.dequantize_transposed(&b, &scales, &ZeroPoints::Default, &mut w)
            .unwrap();
        assert_eq!(w[0], -3.5);
    }

    #[test]
    fn eight_bit_and_float_zero_points_and_layout_errors() {
        let l = NBitsLayout::new(16, 2, 8, 16).unwrap();
        let b: Vec<u8> = (0..32).map(|i| i as u8 * 8).collect();
        let mut w = vec![0.0f32; 32];
        l.dequantize_transposed(&b, &[1.0, 0.25], &ZeroPoints::Float(&[0.0, 128.0]), &mut w)
            .unwrap();
        // w[k][n]: row 0 is n = 0 of column k.
        assert_eq!(w[2], 8.0);
        assert_eq!(w[1], (128.0 - 128.0) * 0.25);
        assert!(l
            .dequantize_transposed(&b[1..], &[1.0, 1.0], &ZeroPoints::Default, &mut w)
            .is_err());
        assert!(NBitsLayout::new(16, 2, 3, 16).is_err());
        assert!(NBitsLayout::new(16, 2, 4, 24).is_err());
        assert!(NBitsLayout::new(16, 2, 4, 8).is_err());
        assert!(NBitsLayout::new(0, 2, 4, 16).is_err());
        assert!(NBitsLayout::new(i64::MAX, i64::MAX, 4, 16).is_err());
    }
}
