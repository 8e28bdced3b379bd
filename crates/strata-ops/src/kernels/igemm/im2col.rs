//! A convolution input read as the integer GEMM's A (im2col), packed a register tile at a time
//! without materializing the unfolded matrix.
//!
//! A tile is `mr` consecutive output pixels; its packed layout puts each group of 4 depths as
//! `mr` rows of 4 bytes. The tile is built one depth — one `(c, ky, kx)` tap — at a time: the
//! tile's pixels split into runs along output rows (usually one or two), and within a run the
//! tap reads input bytes `stride` apart in one input row, so an interior run of a stride-1
//! convolution is a single 8-byte load. Padding is decided per run (a whole row out of the
//! image) or, at the image's left and right edges only, per byte. Four depths' byte vectors
//! are then interleaved into the group's `mr × 4` slots (SSE2 for `mr = 8`), and each row's sum
//! (for the zero-point correction) is accumulated from the same vectors.

use super::pack::{IntSlice, PackA};
use crate::kernels::error::{KernelError, KernelResult};

const OP: &str = "IntegerGemm";

/// The tallest tile this packing builds (every microkernel's `MR` is at most this).
const MAX_MR: usize = 8;

/// A read from one image (and channel group) of a 2-D convolution input `[C, H, W]` as the
/// im2col matrix: row `p` is output pixel `(p / out_w, p % out_w)`, column `(c, ky, kx)` its
/// input under that kernel tap, the zero point where the tap falls in the padding.
#[derive(Clone, Copy, Debug)]
pub struct Im2colA<'a> {
    data: IntSlice<'a>,
    geometry: Im2colGeometry,
    /// The zero point in the packed (unsigned) domain.
    pad: u8,
}

/// Where an [`Im2colA`] reads: `channels` planes of `in_h x in_w` from `offset` on, a
/// `kernel_h x kernel_w` window moved by `stride`, spread by `dilation`, starting at `-pad`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Im2colGeometry {
    pub offset: usize,
    pub channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    pub pad: (usize, usize),
    pub out_h: usize,
    pub out_w: usize,
}

impl<'a> Im2colA<'a> {
    /// `zero_point` is the input's own zero point (of `data`'s signedness).
    pub fn new(
        data: IntSlice<'a>,
        geometry: Im2colGeometry,
        zero_point: i32,
    ) -> KernelResult<Self> {
        let g = &geometry;
        let plane = g.in_h.checked_mul(g.in_w);
        let end = plane
            .and_then(|p| p.checked_mul(g.channels))
            .and_then(|v| v.checked_add(g.offset));
        if end.is_none_or(|end| end > data.len()) {
            return Err(KernelError::BufferLength {
                op: OP,
                buffer: "convolution input",
                expected: end.unwrap_or(usize::MAX),
                actual: data.len(),
            });
        }
        let pad = (zero_point + data.a_shift()).clamp(0, 255) as u8;
        Ok(Im2colA {
            data,
            geometry,
            pad,
        })
    }
}

/// Output pixels of one tile that lie in one output row: tile rows `first..first + len` are
/// pixels `(oy, ox..ox + len)`.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    oy: usize,
    ox: usize,
    first: usize,
    len: usize,
}

impl Im2colA<'_> {
    /// The tile's pixels `i0..i0 + rows` split by output row (`rows <= MAX_MR`, so at most
    /// `MAX_MR` runs).
    fn runs(&self, i0: usize, rows: usize, out: &mut [Run; MAX_MR]) -> usize {
        let w = self.geometry.out_w;
        let (mut oy, mut ox) = (i0 / w, i0 % w);
        let (mut first, mut count) = (0, 0);
        while first < rows {
            let len = (w - ox).min(rows - first);
            out[count] = Run { oy, ox, first, len };
            count += 1;
            first += len;
            (oy, ox) = (oy + 1, 0);
        }
        count
    }

    /// Tap `(ky, kx)` of channel plane `plane` for every pixel of `runs`, as raw input bytes
    /// (the zero point, raw, where the tap falls in the padding) in `vec[run.first..]`.
    #[inline(always)]
    fn tap(
        &self,
        runs: &[Run],
        plane: usize,
        (ky, kx): (usize, usize),
        raw_pad: u8,
        vec: &mut [u8; MAX_MR],
    ) {
        let g = &self.geometry;
        let bytes = self.data.bytes();
        let (sy, sx) = g.stride;
        for run in runs {
            let out = &mut vec[run.first..run.first + run.len];
            let iy = (run.oy * sy + ky * g.dilation.0).wrapping_sub(g.pad.0);
            if iy >= g.in_h {
                out.fill(raw_pad);
                continue;
            }
            let row = &bytes[plane + iy * g.in_w..plane + (iy + 1) * g.in_w];
            // Input column of the run's first pixel; wraps below zero (then fails `< in_w`).
            let x0 = (run.ox * sx + kx * g.dilation.1).wrapping_sub(g.pad.1);
            let last = x0.wrapping_add((run.len - 1) * sx);
            if x0 < g.in_w && last < g.in_w {
                if sx == 1 {
                    if run.len == MAX_MR {
                        // The common interior case: one fixed-size (8-byte) copy.
                        *vec = row[x0..x0 + MAX_MR].try_into().expect("8 bytes");
                    } else {
                        out.copy_from_slice(&row[x0..x0 + run.len]);
                    }
                } else {
                    for (j, v) in out.iter_mut().enumerate() {
                        *v = row[x0 + j * sx];
                    }
                }
            } else {
                for (j, v) in out.iter_mut().enumerate() {
                    let x = x0.wrapping_add(j * sx);
                    *v = if x < g.in_w { row[x] } else { raw_pad };
                }
            }
        }
    }
}

impl PackA for Im2colA<'_> {
    fn rows(&self) -> usize {
        self.geometry.out_h * self.geometry.out_w
    }

    fn depth(&self) -> usize {
        self.geometry.channels * self.geometry.kernel.0 * self.geometry.kernel.1
    }

    fn shift(&self) -> i32 {
        self.data.a_shift()
    }

    fn pack_tile(&self, i0: usize, rows: usize, mr: usize, dst: &mut [u8], sums: &mut [i32]) {
        assert!(
            mr <= MAX_MR && rows <= mr,
            "im2col tiles hold at most {MAX_MR} rows"
        );
        let g = &self.geometry;
        let (kh, kw) = g.kernel;
        // Bytes are gathered raw and flipped into the unsigned domain per group; a filler of
        // `flip` becomes the zero that rows past `rows` and depths past K must hold.
        let flip = if self.data.is_signed() { 0x80 } else { 0 };
        let raw_pad = self.pad ^ flip;
        let mut runs = [Run::default(); MAX_MR];
        let count = self.runs(i0, rows, &mut runs);
        let runs = &runs[..count];
        let mut group = Group::new(mr, flip);
        let mut slot = 0;
        let mut at = 0;
        for c in 0..g.channels {
            let plane = g.offset + c * g.in_h * g.in_w;
            for ky in 0..kh {
                for kx in 0..kw {
                    self.tap(runs, plane, (ky, kx), raw_pad, &mut group.depths[slot]);
                    slot += 1;
                    if slot == 4 {
                        group.emit(&mut dst[at..at + 4 * mr]);
                        at += 4 * mr;
                        slot = 0;
                    }
                }
            }
        }
        if slot > 0 {
            for d in &mut group.depths[slot..] {
                *d = [flip; MAX_MR];
            }
            group.emit(&mut dst[at..at + 4 * mr]);
            at += 4 * mr;
        }
        dst[at..].fill(0);
        group.sums(rows, sums);
    }
}

/// Four depths of a tile being packed, and the running row sums.
struct Group {
    mr: usize,
    flip: u8,
    /// Each depth's byte per tile row, raw; rows past the tile's stay `flip`.
    depths: [[u8; MAX_MR]; 4],
    /// Per row and slot (`row * 4 + slot`), the sum of the packed bytes so far.
    acc: [u32; MAX_MR * 4],
}

impl Group {
    fn new(mr: usize, flip: u8) -> Group {
        Group {
            mr,
            flip,
            depths: [[flip; MAX_MR]; 4],
            acc: [0; MAX_MR * 4],
        }
    }

    /// Writes the four depths interleaved (row `i`'s depth `t` at `out[i * 4 + t]`) in the
    /// unsigned domain and adds them to the sums.
    #[inline(always)]
    fn emit(&mut self, out: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        if self.mr == MAX_MR {
            return self.emit_eight(out);
        }
        for (i, row) in out.chunks_exact_mut(4).enumerate().take(self.mr) {
            for (t, v) in row.iter_mut().enumerate() {
                *v = self.depths[t][i] ^ self.flip;
                self.acc[i * 4 + t] += u32::from(*v);
            }
        }
    }

    /// [`Group::emit`] for 8 rows with SSE2 (x86_64's baseline).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn emit_eight(&mut self, out: &mut [u8]) {
        use std::arch::x86_64::*;
        assert!(out.len() >= 32);
        // SAFETY: SSE2 is part of x86_64. Each load reads one 8-byte `depths` row, the stores
        // write 32 bytes of `out` (checked above) and 32 u32 of `acc` (its full length); all
        // unaligned.
        unsafe {
            let f = _mm_set1_epi8(self.flip as i8);
            let load = |t: usize| _mm_xor_si128(_mm_loadl_epi64(self.depths[t].as_ptr().cast()), f);
            let (d0, d1, d2, d3) = (load(0), load(1), load(2), load(3));
            let ab = _mm_unpacklo_epi8(d0, d1);
            let cd = _mm_unpacklo_epi8(d2, d3);
            let lo = _mm_unpacklo_epi16(ab, cd);
            let hi = _mm_unpackhi_epi16(ab, cd);
            _mm_storeu_si128(out.as_mut_ptr().cast(), lo);
            _mm_storeu_si128(out.as_mut_ptr().add(16).cast(), hi);
            // Widen the 32 packed bytes to u32 and add them to their slots' sums.
            let z = _mm_setzero_si128();
            let acc = self.acc.as_mut_ptr().cast::<__m128i>();
            for (q, v) in [lo, hi].into_iter().enumerate() {
                let (l16, h16) = (_mm_unpacklo_epi8(v, z), _mm_unpackhi_epi8(v, z));
                let parts = [
                    _mm_unpacklo_epi16(l16, z),
                    _mm_unpackhi_epi16(l16, z),
                    _mm_unpacklo_epi16(h16, z),
                    _mm_unpackhi_epi16(h16, z),
                ];
                for (r, part) in parts.into_iter().enumerate() {
                    let p = acc.add(q * 4 + r);
                    _mm_storeu_si128(p, _mm_add_epi32(_mm_loadu_si128(p), part));
                }
            }
        }
    }

    /// The first `rows` rows' sums; zero for the rest of `sums`.
    fn sums(&self, rows: usize, sums: &mut [i32]) {
        for (i, sum) in sums.iter_mut().enumerate() {
            *sum = if i < rows {
                self.acc[i * 4..i * 4 + 4].iter().sum::<u32>() as i32
            } else {
                0
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;

    /// The byte-at-a-time im2col packing this file replaced: the reference.
    fn reference_tile(a: &Im2colA<'_>, i0: usize, rows: usize, mr: usize) -> (Vec<u8>, Vec<i32>) {
        let g = &a.geometry;
        let (kh, kw) = g.kernel;
        let k = a.depth();
        let mut dst = vec![0u8; k.div_ceil(4) * 4 * mr];
        let mut sums = vec![0i32; mr];
        for (i, sum) in sums.iter_mut().enumerate().take(rows) {
            let p = i0 + i;
            let (oy, ox) = (p / g.out_w, p % g.out_w);
            let mut k = 0;
            for c in 0..g.channels {
                let plane = g.offset + c * g.in_h * g.in_w;
                for ky in 0..kh {
                    let iy = (oy * g.stride.0 + ky * g.dilation.0) as isize - g.pad.0 as isize;
                    for kx in 0..kw {
                        let ix = (ox * g.stride.1 + kx * g.dilation.1) as isize - g.pad.1 as isize;
                        let inside = (0..g.in_h as isize).contains(&iy)
                            && (0..g.in_w as isize).contains(&ix);
                        let v = if inside {
                            let at = plane + iy as usize * g.in_w + ix as usize;
                            match a.data {
                                IntSlice::U8(s) => s[at],
                                IntSlice::I8(s) => (s[at] as u8) ^ 0x80,
                            }
                        } else {
                            a.pad
                        };
                        dst[(k / 4) * mr * 4 + i * 4 + k % 4] = v;
                        *sum += i32::from(v);
                        k += 1;
                    }
                }
            }
        }
        (dst, sums)
    }

    #[test]
    fn packed_tiles_match_the_byte_gather_reference_on_random_geometry() {
        let mut rng = Rng::new(16);
        for case in 0..400 {
            let channels = rng.range(1, 6);
            let kernel = (rng.range(1, 4), rng.range(1, 6));
            let stride = (rng.range(1, 3), rng.range(1, 4));
            let dilation = (rng.range(1, 3), rng.range(1, 3));
            let pad = (rng.below(3), rng.below(4));
            let in_h = rng.range(1, 9);
            let in_w = rng.range(1, 30);
            let span = |k: usize, d: usize| (k - 1) * d + 1;
            let (eh, ew) = (span(kernel.0, dilation.0), span(kernel.1, dilation.1));
            if in_h + 2 * pad.0 < eh || in_w + 2 * pad.1 < ew {
                continue;
            }
            let out_h = (in_h + 2 * pad.0 - eh) / stride.0 + 1;
            let out_w = (in_w + 2 * pad.1 - ew) / stride.1 + 1;
            let offset = rng.below(5);
            let geometry = Im2colGeometry {
                offset,
                channels,
                in_h,
                in_w,
                kernel,
                stride,
                dilation,
                pad,
                out_h,
                out_w,
            };
            let len = offset + channels * in_h * in_w + rng.below(3);
            let raw: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            let signed = case % 2 == 1;
            let zero = rng.below(256) as i32 - if signed { 128 } else { 0 };
            let signed_raw: Vec<i8> = raw.iter().map(|&v| v as i8).collect();
            let data = if signed {
                IntSlice::I8(&signed_raw)
            } else {
                IntSlice::U8(&raw)
            };
            let a = Im2colA::new(data, geometry, zero).unwrap();
            let m = a.rows();
            let kp = a.depth().div_ceil(4) * 4;
            for mr in [1, 4, 8] {
                for i0 in (0..m).step_by(mr) {
                    let rows = mr.min(m - i0);
                    let (want, want_sums) = reference_tile(&a, i0, rows, mr);
                    // Garbage in the buffers: packing must overwrite every byte.
                    let mut dst = vec![0xA5u8; kp * mr];
                    let mut sums = vec![-7i32; mr];
                    a.pack_tile(i0, rows, mr, &mut dst, &mut sums);
                    assert_eq!(dst, want, "{geometry:?} mr {mr} i0 {i0} signed {signed}");
                    assert_eq!(sums, want_sums, "{geometry:?} mr {mr} i0 {i0}");
                }
            }
        }
    }
}
