//! Im2col from a channels-last copy of the convolution input: the input of one image and group
//! is laid out once per convolution as padded `[H', W', C4]` bytes (already in the packed,
//! unsigned domain, the border and the channels past `C` at the zero point, `C4` = `C` rounded
//! up to 4), and A's depth is ordered `(ky, kx, c)`. Each tap of each output pixel is then
//! `C4 / 4` whole 4-byte groups copied to their slots — no bounds checks, no per-byte work —
//! and a row's sum (for the zero-point correction) is the sum of its taps' per-pixel channel
//! sums, kept alongside the copy. The weights must be packed in the same depth order:
//! [`tap_major_weights`].
//!
//! The extra channels cost nothing in the result: their A values equal the zero point, so
//! `(a - a_zero) (b - b_zero) = 0` whatever B holds there. Where rounding up to 4 would add
//! more than a quarter to the depth (3 channels, as in a network's first layer), the copy keeps
//! `C` bytes a pixel instead ("dense"), and each pixel's depth row is assembled from its
//! windows' contiguous runs (one of `kw * C` bytes per kernel row) before going to the slots.

use super::im2col::Im2colGeometry;
use super::pack::{IntSlice, PackA};
use crate::kernels::error::{KernelError, KernelResult};
use crate::parallel::{for_each_chunk_mut, threads};

const OP: &str = "IntegerGemm";

/// `channels` rounded up to whole groups of 4 (the channels-last copy's pixel stride).
pub fn padded_channels(channels: usize) -> Option<usize> {
    channels.checked_add(3).map(|c| c / 4 * 4)
}

/// The padded plane `(H', W')`: the rows and columns the windows reach (border included).
fn padded_plane(g: &Im2colGeometry) -> Option<(usize, usize)> {
    let reach = |out: usize, stride: usize, kernel: usize, dilation: usize| {
        if out == 0 {
            return Some(0);
        }
        let last = out.checked_sub(1)?.checked_mul(stride)?;
        last.checked_add(kernel.checked_sub(1)?.checked_mul(dilation)?)?
            .checked_add(1)
    };
    Some((
        reach(g.out_h, g.stride.0, g.kernel.0, g.dilation.0)?,
        reach(g.out_w, g.stride.1, g.kernel.1, g.dilation.1)?,
    ))
}

/// The dense path's depth row buffer (on the stack): its depth plus [`SLACK`] must fit.
const ROW_MAX: usize = 1024;
/// Bytes past the copy's end and the depth row's end that the dense path's 16-byte moves may
/// touch.
const SLACK: usize = 16;

/// Bytes a pixel of the channels-last copy of `g`'s input: its channels rounded up to 4, or
/// as they are (dense) when that would add more than a quarter and the depth fits the row
/// buffer.
pub fn pixel_bytes(g: &Im2colGeometry) -> Option<usize> {
    let c = g.channels;
    let c4 = padded_channels(c)?;
    let taps = g.kernel.0.checked_mul(g.kernel.1)?;
    let dense = c4 * 4 > c * 5 && taps.checked_mul(c)?.checked_add(SLACK)? <= ROW_MAX;
    Some(if dense { c } else { c4 })
}

/// `(bytes, pixels)`: the sizes of the channels-last copy and of its per-pixel sums
/// ([`Im2colNhwc::new`]'s `buf` and `pixel_sums`); `None` on overflow.
pub fn nhwc_scratch(g: &Im2colGeometry) -> Option<(usize, usize)> {
    let (h, w) = padded_plane(g)?;
    let pixels = h.checked_mul(w)?;
    let bytes = pixels.checked_mul(pixel_bytes(g)?)?.checked_add(SLACK)?;
    Some((bytes, pixels))
}

/// `w` (`[out][channels][taps]`, taps = `kh * kw` in row-major order) reordered as
/// `[out][taps][c4]` for [`Im2colNhwc`]'s depth order (`c4` = [`pixel_bytes`] >= channels),
/// zero in the added channels.
pub fn tap_major_weights<T: Copy + Default>(
    w: &[T],
    out: usize,
    channels: usize,
    taps: usize,
    c4: usize,
) -> Option<Vec<T>> {
    let k = c4.checked_mul(taps)?;
    if c4 < channels || Some(w.len()) != out.checked_mul(channels).and_then(|v| v.checked_mul(taps))
    {
        return None;
    }
    let mut r = vec![T::default(); out.checked_mul(k)?];
    for j in 0..out {
        for c in 0..channels {
            for t in 0..taps {
                r[j * k + t * c4 + c] = w[(j * channels + c) * taps + t];
            }
        }
    }
    Some(r)
}

/// A convolution input as the im2col matrix with depth `(ky, kx, c)`, read from its padded
/// channels-last copy.
#[derive(Clone, Copy, Debug)]
pub struct Im2colNhwc<'a> {
    buf: &'a [u8],
    pixel_sums: &'a [i32],
    geometry: Im2colGeometry,
    /// Bytes a pixel ([`pixel_bytes`]): a multiple of 4, or the channels (dense).
    c4: usize,
    /// Padded plane width (W').
    width: usize,
    shift: i32,
    /// Whether 8-row tiles may use the AVX-512 transpose.
    avx512: bool,
}

impl<'a> Im2colNhwc<'a> {
    /// Lays out `geometry.channels` planes of `data` (from `geometry.offset`) channels-last
    /// into `buf` (at least [`nhwc_scratch`]'s bytes), padded with `zero_point` (of `data`'s
    /// signedness), and each pixel's channel sum into `pixel_sums`.
    pub fn new(
        data: IntSlice<'_>,
        geometry: Im2colGeometry,
        zero_point: i32,
        buf: &'a mut [u8],
        pixel_sums: &'a mut [i32],
    ) -> KernelResult<Self> {
        let g = &geometry;
        let end = g
            .in_h
            .checked_mul(g.in_w)
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
        let overflow = KernelError::SizeOverflow {
            op: OP,
            what: "channels-last input",
        };
        let (bytes, pixels) = nhwc_scratch(g).ok_or(overflow)?;
        let (hp, wp) = padded_plane(g).ok_or(KernelError::SizeOverflow {
            op: OP,
            what: "channels-last input",
        })?;
        let c4 = pixel_bytes(g).unwrap_or(0);
        if buf.len() < bytes || pixel_sums.len() < pixels {
            return Err(KernelError::BufferLength {
                op: OP,
                buffer: "channels-last input",
                expected: bytes,
                actual: buf.len(),
            });
        }
        let (buf, pixel_sums) = (&mut buf[..bytes], &mut pixel_sums[..pixels]);
        let (plane, slack) = buf.split_at_mut(bytes - SLACK);
        slack.fill(0);
        let shift = data.a_shift();
        let pad = (zero_point + shift).clamp(0, 255) as u8;
        let flip = if data.is_signed() { 0x80 } else { 0 };
        let src = data.bytes();
        // The input columns inside the padded plane (the rest no window reaches).
        let cols = wp.saturating_sub(g.pad.1).min(g.in_w);
        let line_bytes = (wp * c4).max(1);
        // Padded rows per task: big planes are spread over the pool.
        let per_task = if bytes >= 1 << 15 {
            hp.div_ceil(threads().max(1))
        } else {
            hp
        };
        #[cfg(target_arch = "x86_64")]
        let vbmi = (c4 < 4 || c4.is_multiple_of(4))
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vbmi");
        for_each_chunk_mut(plane, line_bytes, per_task, |yp, out| {
            out.fill(pad);
            // Rows (or, with `cols == 0`, whole planes) no window reaches stay padding.
            let Some(y) = yp.checked_sub(g.pad.0).filter(|&y| y < g.in_h && cols > 0) else {
                return;
            };
            #[cfg(target_arch = "x86_64")]
            if vbmi && g.channels > 0 && cols > 0 {
                let first = g.offset + y * g.in_w;
                let last = first + (g.channels - 1) * g.in_h * g.in_w + cols;
                let row = RowCopy {
                    channels: g.channels,
                    plane: g.in_h * g.in_w,
                    cols,
                    c4,
                    pad,
                    flip,
                };
                assert!(last <= src.len() && out.len() >= (g.pad.1 + cols) * c4);
                // SAFETY: AVX-512F/BW/VBMI were detected. Channel c's row, `cols` bytes
                // from first + c · plane, lies in `src` (asserted for the last channel);
                // the pixels written, pad.1 .. pad.1 + cols of c4 bytes each, lie in `out`
                // (asserted).
                unsafe {
                    copy_row_vbmi(
                        src.as_ptr().add(first),
                        &row,
                        out.as_mut_ptr().add(g.pad.1 * c4),
                    )
                };
                return;
            }
            for c in 0..g.channels {
                let at = g.offset + c * g.in_h * g.in_w + y * g.in_w;
                let line = &src[at..at + cols];
                let dst = out[g.pad.1 * c4 + c..].iter_mut().step_by(c4);
                for (d, &v) in dst.zip(line) {
                    *d = v ^ flip;
                }
            }
        });
        let buf = &*buf;
        for_each_chunk_mut(pixel_sums, wp.max(1), per_task, |yp, sums| {
            let line = &buf[yp * line_bytes..];
            for (sum, px) in sums.iter_mut().zip(line.chunks_exact(c4.max(1))) {
                *sum = px.iter().map(|&v| i32::from(v)).sum();
            }
        });
        #[cfg(target_arch = "x86_64")]
        let avx512 = std::arch::is_x86_feature_detected!("avx512f");
        #[cfg(not(target_arch = "x86_64"))]
        let avx512 = false;
        Ok(Im2colNhwc {
            buf,
            pixel_sums,
            geometry,
            c4,
            width: wp,
            shift,
            avx512,
        })
    }
}

/// What [`copy_row_vbmi`] copies: `cols` pixels of `channels` rows `plane` bytes apart, as
/// `c4` bytes a pixel (channels past `channels` at `pad`), bytes xor `flip`.
#[cfg(target_arch = "x86_64")]
struct RowCopy {
    channels: usize,
    plane: usize,
    cols: usize,
    c4: usize,
    pad: u8,
    flip: u8,
}

/// One input row channels-last: 16 pixels at a time, 4 channels' 16-byte runs are loaded into
/// one vector and interleaved by one byte permute into 16 pixels of 4 bytes, then stored whole
/// (4 bytes a pixel), scattered 4 bytes a pixel (more), or — a dense copy of fewer than 4
/// channels — permuted straight to `c4` bytes a pixel.
///
/// # Safety
/// AVX-512F, BW and VBMI are available; `src + c * plane` is valid for reads of `cols` bytes
/// for every channel `c`; `out` for writes of `cols * c4` bytes; `c4 < 4` (then equal to the
/// channels) or a multiple of 4.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn copy_row_vbmi(src: *const u8, r: &RowCopy, out: *mut u8) {
    use std::arch::x86_64::*;
    let c4 = r.c4;
    // Byte k of the output (pixel k / w, channel k % w, w = min(c4, 4)) is lane 16 · channel +
    // pixel of the loaded vector.
    let w = c4.min(4);
    let mut idx = [0u8; 64];
    for (k, v) in idx.iter_mut().enumerate().take(16 * w) {
        *v = (16 * (k % w) + k / w) as u8;
    }
    // SAFETY: `idx` holds 64 bytes.
    let idx = unsafe { _mm512_loadu_si512(idx.as_ptr().cast()) };
    let f = _mm512_set1_epi8(r.flip as i8);
    let pad = _mm512_set1_epi8(r.pad as i8);
    let stride = c4 as i32;
    let offsets = _mm512_setr_epi32(
        0,
        stride,
        2 * stride,
        3 * stride,
        4 * stride,
        5 * stride,
        6 * stride,
        7 * stride,
        8 * stride,
        9 * stride,
        10 * stride,
        11 * stride,
        12 * stride,
        13 * stride,
        14 * stride,
        15 * stride,
    );
    for x0 in (0..r.cols).step_by(16) {
        let n = (r.cols - x0).min(16);
        let pixels = (1u64 << n) - 1;
        for q in 0..c4.div_ceil(4) {
            let mut v = pad;
            for j in 0..4.min(r.channels.saturating_sub(4 * q)) {
                let m = pixels << (16 * j);
                let at = src.wrapping_add((4 * q + j) * r.plane + x0);
                // SAFETY: lanes 16 j .. 16 j + n read bytes at .. at + n of channel 4q + j's
                // row (inside it: x0 + n <= cols); masked-off lanes are not read.
                let loaded = unsafe { _mm512_maskz_loadu_epi8(m, at.wrapping_sub(16 * j).cast()) };
                v = _mm512_mask_mov_epi8(v, m, _mm512_xor_si512(loaded, f));
            }
            let px = _mm512_permutexvar_epi8(idx, v);
            // SAFETY (all three stores): pixels x0 .. x0 + n of c4 bytes each, inside `out`.
            unsafe {
                if c4 <= 4 {
                    let bytes = n * c4;
                    let m = if bytes >= 64 {
                        u64::MAX
                    } else {
                        (1u64 << bytes) - 1
                    };
                    _mm512_mask_storeu_epi8(out.add(x0 * c4).cast(), m, px);
                } else {
                    let base = out.add(x0 * c4 + 4 * q).cast::<i32>();
                    _mm512_mask_i32scatter_epi32::<1>(base, pixels as u16, offsets, px);
                }
            }
        }
    }
}

impl PackA for Im2colNhwc<'_> {
    fn rows(&self) -> usize {
        self.geometry.out_h * self.geometry.out_w
    }

    fn depth(&self) -> usize {
        self.c4 * self.geometry.kernel.0 * self.geometry.kernel.1
    }

    fn shift(&self) -> i32 {
        self.shift
    }

    fn pack_tile(&self, i0: usize, rows: usize, mr: usize, dst: &mut [u8], sums: &mut [i32]) {
        let g = &self.geometry;
        let (kh, kw) = g.kernel;
        let (c4, wp) = (self.c4, self.width);
        let per_tap = c4 / 4;
        #[cfg(target_arch = "x86_64")]
        if self.avx512
            && rows == 8
            && mr == 8
            && c4.is_multiple_of(4)
            && c4 >= 16
            && kh > 0
            && kw > 0
        {
            return self.pack_eight_avx512(i0, dst, sums);
        }
        if rows < mr {
            dst.fill(0);
        }
        if !c4.is_multiple_of(4) {
            return self.pack_dense(i0, rows, mr, dst, sums);
        }
        let (mut oy, mut ox) = (i0 / g.out_w, i0 % g.out_w);
        for (i, sum) in sums.iter_mut().enumerate().take(rows) {
            // The window's top-left pixel in the padded plane.
            let (y0, x0) = (oy * g.stride.0, ox * g.stride.1);
            let mut s = 0;
            let mut group = 0;
            for ky in 0..kh {
                let line = (y0 + ky * g.dilation.0) * wp + x0;
                for kx in 0..kw {
                    let px = line + kx * g.dilation.1;
                    let src = &self.buf[px * c4..(px + 1) * c4];
                    for (q, four) in src.chunks_exact(4).enumerate() {
                        let at = (group + q) * mr * 4 + i * 4;
                        dst[at..at + 4].copy_from_slice(four);
                    }
                    group += per_tap;
                    s += self.pixel_sums[px];
                }
            }
            *sum = s;
            ox += 1;
            if ox == g.out_w {
                (oy, ox) = (oy + 1, 0);
            }
        }
        sums[rows..].fill(0);
    }
}

impl Im2colNhwc<'_> {
    /// [`PackA::pack_tile`] for a dense copy (`c4` = the channels, not a multiple of 4): each
    /// pixel's depth row is assembled from its windows' runs (a kernel row's `kw * c4` bytes
    /// when columns are not dilated, else a tap's `c4`) with 16-byte moves, then written to
    /// the slots 4 bytes at a time. `dst` was zeroed past `rows` by the caller.
    fn pack_dense(&self, i0: usize, rows: usize, mr: usize, dst: &mut [u8], sums: &mut [i32]) {
        let g = &self.geometry;
        let (kh, kw) = g.kernel;
        let (c4, wp) = (self.c4, self.width);
        let k = self.depth();
        let kp = k.div_ceil(4) * 4;
        let (runs_per_row, run_len) = if g.dilation.1 == 1 {
            (1, kw * c4)
        } else {
            (kw, c4)
        };
        let mut row = [0u8; ROW_MAX];
        assert!(kp + SLACK <= ROW_MAX, "dense depth beyond the row buffer");
        let (mut oy, mut ox) = (i0 / g.out_w, i0 % g.out_w);
        for (i, sum) in sums.iter_mut().enumerate().take(rows) {
            let (y0, x0) = (oy * g.stride.0, ox * g.stride.1);
            let mut at = 0;
            let mut s = 0;
            for ky in 0..kh {
                let line = (y0 + ky * g.dilation.0) * wp + x0;
                for kx in 0..kw {
                    s += self.pixel_sums[line + kx * g.dilation.1];
                }
                for r in 0..runs_per_row {
                    let from = (line + r * g.dilation.1) * c4;
                    // Whole 16-byte moves: the last may read into the next pixels (or the
                    // copy's slack) and write past the run, overwritten by the next one.
                    for off in (0..run_len).step_by(SLACK) {
                        row[at + off..at + off + SLACK]
                            .copy_from_slice(&self.buf[from + off..from + off + SLACK]);
                    }
                    at += run_len;
                }
            }
            row[k..kp].fill(0);
            for (q, four) in row[..kp].chunks_exact(4).enumerate() {
                let to = q * mr * 4 + i * 4;
                dst[to..to + 4].copy_from_slice(four);
            }
            *sum = s;
            ox += 1;
            if ox == g.out_w {
                (oy, ox) = (oy + 1, 0);
            }
        }
        sums[rows..].fill(0);
    }

    /// [`PackA::pack_tile`] for a full tile of 8 rows with AVX-512 ([`pack_taps_avx512`]); the
    /// row sums from the per-pixel sums.
    #[cfg(target_arch = "x86_64")]
    fn pack_eight_avx512(&self, i0: usize, dst: &mut [u8], sums: &mut [i32]) {
        let g = &self.geometry;
        let (kh, kw) = g.kernel;
        let (c4, wp) = (self.c4, self.width);
        // Each pixel's window origin in the padded plane, and its row sum.
        let mut origin = [0usize; 8];
        let (mut oy, mut ox) = (i0 / g.out_w, i0 % g.out_w);
        for o in &mut origin {
            *o = oy * g.stride.0 * wp + ox * g.stride.1;
            ox += 1;
            if ox == g.out_w {
                (oy, ox) = (oy + 1, 0);
            }
        }
        let last_tap = (kh - 1) * g.dilation.0 * wp + (kw - 1) * g.dilation.1;
        let reach = origin.iter().max().map_or(0, |&o| o + last_tap);
        assert!(
            reach < self.pixel_sums.len()
                && self.buf.len() >= self.pixel_sums.len() * c4
                && dst.len() >= kh * kw * c4 * 8
                && sums.len() >= 8,
            "tile outside the channels-last input"
        );
        for (sum, &o) in sums.iter_mut().zip(&origin) {
            let mut s = 0;
            for ky in 0..kh {
                for kx in 0..kw {
                    s += self.pixel_sums[o + ky * g.dilation.0 * wp + kx * g.dilation.1];
                }
            }
            *sum = s;
        }
        let taps = Taps {
            kernel: (kh, kw),
            step: (g.dilation.0 * wp, g.dilation.1),
            c4,
        };
        // SAFETY: AVX-512F was detected (`avx512`). The pixels read, origin + tap for every
        // tap, are at most `reach` < the plane's pixels, whose c4 bytes each `buf` holds; `dst`
        // holds the kh · kw · c4 · 8 bytes written (all asserted above).
        unsafe { pack_taps_avx512(self.buf.as_ptr(), &origin, &taps, dst.as_mut_ptr()) };
    }
}

/// The kernel taps of a channels-last tile: `kernel` taps, tap `(ky, kx)` at pixel offset
/// `ky * step.0 + kx * step.1`, `c4` bytes a pixel.
struct Taps {
    kernel: (usize, usize),
    step: (usize, usize),
    c4: usize,
}

/// Writes the packed tile of the 8 pixels whose window origins are `origin`: for each tap, 16
/// channel bytes of every pixel at a time as two vectors of 4 pixels, transposed into 4
/// groups of 8 rows by two two-source permutes; channels past the last whole 16 one group of
/// 4 at a time.
///
/// # Safety
/// AVX-512F is available; `buf` is valid for reads of `(o + tap + 1) * c4` bytes for every
/// origin `o` and tap; `out` for writes of `kh * kw * c4 * 8` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_taps_avx512(buf: *const u8, origin: &[usize; 8], taps: &Taps, out: *mut u8) {
    use std::arch::x86_64::*;
    let c4 = taps.c4;
    // Lane (q, i) of a two-group output (q * 8 + i) takes pixel i's group q: lane i * 4 + q of
    // the pixel pair [0..4 | 4..8].
    let first = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    let second = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    let mut at = out;
    for ky in 0..taps.kernel.0 {
        for kx in 0..taps.kernel.1 {
            let tap = ky * taps.step.0 + kx * taps.step.1;
            let px = origin.map(|o| (o + tap) * c4);
            let mut done = 0;
            while done + 16 <= c4 {
                // SAFETY: each 16-byte read is within pixel o + tap's c4 bytes; the two
                // 64-byte stores within the `out` range (caller's contract).
                unsafe {
                    let load = |i: usize| _mm_loadu_si128(buf.add(px[i] + done).cast());
                    let four = |i: usize| {
                        let v = _mm512_castsi128_si512(load(i));
                        let v = _mm512_inserti32x4::<1>(v, load(i + 1));
                        let v = _mm512_inserti32x4::<2>(v, load(i + 2));
                        _mm512_inserti32x4::<3>(v, load(i + 3))
                    };
                    let (lo, hi) = (four(0), four(4));
                    _mm512_storeu_si512(at.cast(), _mm512_permutex2var_epi32(lo, first, hi));
                    _mm512_storeu_si512(
                        at.add(64).cast(),
                        _mm512_permutex2var_epi32(lo, second, hi),
                    );
                    at = at.add(128);
                }
                done += 16;
            }
            while done < c4 {
                for (i, &p) in px.iter().enumerate() {
                    // SAFETY: 4 bytes within pixel o + tap's c4; 4 bytes within `out`.
                    unsafe {
                        let v = buf.add(p + done).cast::<u32>().read_unaligned();
                        at.add(i * 4).cast::<u32>().write_unaligned(v);
                    }
                }
                // SAFETY: stays within (or one past) the `out` range.
                at = unsafe { at.add(32) };
                done += 4;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::im2col::Im2colA;
    use super::*;
    use crate::support::rng::Rng;

    /// The channels-last tiles hold the same values as [`Im2colA`]'s, depth reordered from
    /// `(c, ky, kx)` to `(ky, kx, c)` with the zero point in the added channels.
    #[test]
    fn tiles_are_the_reordered_im2col_tiles_with_zero_point_channels() {
        let mut rng = Rng::new(61);
        for case in 0..300 {
            // Past 16 channels the AVX-512 transpose packs whole 8-row tiles.
            let channels = if case % 3 == 0 {
                rng.range(16, 41)
            } else {
                rng.range(1, 10)
            };
            let kernel = (rng.range(1, 4), rng.range(1, 4));
            let stride = (rng.range(1, 3), rng.range(1, 3));
            let dilation = (rng.range(1, 3), rng.range(1, 3));
            let pad = (rng.below(3), rng.below(3));
            // Some rows wider than one 16-pixel step of the channels-last copy.
            let wide = if case % 4 == 1 { 40 } else { 14 };
            let (in_h, in_w) = (rng.range(1, 9), rng.range(1, wide));
            let span = |k: usize, d: usize| (k - 1) * d + 1;
            let (eh, ew) = (span(kernel.0, dilation.0), span(kernel.1, dilation.1));
            // Up to one extra padding row/column at the end (asymmetric pads).
            let (end_h, end_w) = (pad.0 + rng.below(2), pad.1 + rng.below(2));
            if in_h + pad.0 + end_h < eh || in_w + pad.1 + end_w < ew {
                continue;
            }
            let out_h = (in_h + pad.0 + end_h - eh) / stride.0 + 1;
            let out_w = (in_w + pad.1 + end_w - ew) / stride.1 + 1;
            let offset = rng.below(4);
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
            let raw: Vec<u8> = (0..offset + channels * in_h * in_w)
                .map(|_| rng.below(256) as u8)
                .collect();
            let signed_raw: Vec<i8> = raw.iter().map(|&v| v as i8).collect();
            let signed = case % 2 == 0;
            let data = if signed {
                IntSlice::I8(&signed_raw)
            } else {
                IntSlice::U8(&raw)
            };
            let zero = rng.below(256) as i32 - if signed { 128 } else { 0 };
            let packed_zero = (zero + data.a_shift()) as u8;
            let c4 = pixel_bytes(&geometry).unwrap();
            assert!(c4 == padded_channels(channels).unwrap() || c4 == channels);
            let (bytes, pixels) = nhwc_scratch(&geometry).unwrap();
            let (mut buf, mut pixel_sums) = (vec![0x5Au8; bytes + 3], vec![9i32; pixels]);
            let a = Im2colNhwc::new(data, geometry, zero, &mut buf, &mut pixel_sums).unwrap();
            let reference = Im2colA::new(data, geometry, zero).unwrap();
            let taps = kernel.0 * kernel.1;
            assert_eq!(a.depth(), taps * c4);
            let got_kp = a.depth().div_ceil(4) * 4;
            assert_eq!(a.rows(), out_h * out_w);
            let kp = reference.depth().div_ceil(4) * 4;
            for mr in [1, 4, 8] {
                for i0 in (0..a.rows()).step_by(mr) {
                    let rows = mr.min(a.rows() - i0);
                    let (mut want, mut want_sums) = (vec![0u8; kp * mr], vec![0i32; mr]);
                    reference.pack_tile(i0, rows, mr, &mut want, &mut want_sums);
                    let (mut got, mut got_sums) = (vec![0xC3u8; got_kp * mr], vec![-1; mr]);
                    a.pack_tile(i0, rows, mr, &mut got, &mut got_sums);
                    let at = |d: usize, i: usize| (d / 4) * mr * 4 + i * 4 + d % 4;
                    for i in 0..mr {
                        for t in 0..taps {
                            for c in 0..c4 {
                                let v = got[at(t * c4 + c, i)];
                                let expected = match (i < rows, c < channels) {
                                    (false, _) => 0,
                                    (true, true) => want[at(c * taps + t, i)],
                                    (true, false) => packed_zero,
                                };
                                assert_eq!(v, expected, "{geometry:?} mr {mr} i0 {i0} row {i}");
                            }
                        }
                        for d in a.depth()..got_kp {
                            assert_eq!(got[at(d, i)], 0, "{geometry:?} depth padding");
                        }
                    }
                    // Row sums: the reference's plus the added channels' zero points.
                    let extra = (c4 - channels) * taps * usize::from(packed_zero);
                    for i in 0..mr {
                        let expected = if i < rows {
                            want_sums[i] + extra as i32
                        } else {
                            0
                        };
                        assert_eq!(got_sums[i], expected, "{geometry:?} sums");
                    }
                }
            }
        }
    }

    #[test]
    fn weights_reorder_to_tap_major_with_zero_channels() {
        // 2 outputs, 3 channels, 2 taps: w[j][c][t] = 100 j + 10 c + t.
        let w: Vec<i8> = (0..2)
            .flat_map(|j| {
                (0..3).flat_map(move |c| (0..2).map(move |t| (100 * j + 10 * c + t) as i8))
            })
            .collect();
        let r = tap_major_weights(&w, 2, 3, 2, 4).unwrap();
        assert_eq!(r.len(), 2 * 2 * 4);
        assert_eq!(&r[..8], &[0, 10, 20, 0, 1, 11, 21, 0]);
        assert_eq!(&r[8..], &[100, 110, 120, 0, 101, 111, 121, 0]);
        assert!(tap_major_weights(&w, 2, 3, 3, 4).is_none());
        assert!(tap_major_weights(&w, 2, 3, 2, 2).is_none());
        // Dense: no added channels.
        let r = tap_major_weights(&w, 2, 3, 2, 3).unwrap();
        assert_eq!(&r[..6], &[0, 10, 20, 1, 11, 21]);
    }
}
