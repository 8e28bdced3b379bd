//! The 3x3 depthwise kernel for the smallest planes (MobileNetV2's 7x7 outputs) on AVX-512:
//! sixteen consecutive outputs of the NCHW output *across plane boundaries* per vector, read
//! straight from the NCHW input, nothing transposed.
//!
//! On a 7x7 plane the blocked kernel ([`super::depthwise_blocked`]) spent most of its time on
//! the layout change (16x16 transposes into and out of channel vectors: 47 % of 960 channels at
//! 7x7, 62 % of 576 channels at 14x14 stride 2), and the per-plane kernels waste a quarter to
//! half of every vector (7 or 49 outputs in vectors of 16). Here the output planes of 16
//! consecutive channels, `16 * P` outputs for planes of `P = oh * ow`, are `P` whole vectors.
//! At stride 1 with input planes as large as the output's, tap `(ky, kx)` of flat output `q`
//! reads flat input `q + (ky - pad_top) * ow + kx - pad_left`, across plane boundaries too: one
//! masked load per tap and vector, the mask keeping the lanes whose tap lies inside their own
//! plane. The masks repeat every 16 planes (`P` vectors) and are made once per call. A vector
//! holds at most two channels, so a tap's weights are one broadcast, or two blended.
//!
//! At stride 2 (input planes exactly twice the output's across) the input of 16 channels is
//! first split into its four phases (even and odd rows and columns), each an `oh x ow` plane;
//! tap `(ky, kx)` then reads phase `((ky - pad_top) mod 2, (kx - pad_left) mod 2)` at a fixed
//! flat shift, as at stride 1.

use std::arch::x86_64::*;

use crate::kernels::activation::Activation;
use crate::kernels::gemm::with_pack_buffers;
use crate::kernels::spatial::WindowGeometry;

use super::few_channels_avx512::clamp;
use super::row_band::{Clamp, ClampKind};
use super::simd::Simd;

const LANES: usize = 16;
const TAPS: usize = 9;
/// Largest output plane taken (the masks are tabled per vector of 16 planes: `P` vectors).
const MAX_PLANE: usize = 64;
/// Smallest output plane taken: a vector then holds at most two channels.
const MIN_PLANE: usize = LANES;
/// Widest output rows taken at stride 2: a pair of input rows fits two registers.
const MAX_WIDTH_2: usize = 8;

/// Whether this kernel takes the depthwise convolution: f32 on AVX-512 (the caller checks the
/// type), 2-D, one output channel per input channel, 3x3 without dilation at stride 1 or 2
/// with input planes exactly `stride` times the output's across both axes, padding before at
/// most 2, output planes of [`MIN_PLANE`] to [`MAX_PLANE`] positions (rows at most
/// [`MAX_WIDTH_2`] wide at stride 2).
pub(crate) fn pays(w: &WindowGeometry, in_channels: usize, out_channels: usize) -> bool {
    Simd::detect().and_then(Simd::avx512).is_some()
        && w.in_dims.len() == 2
        && in_channels == out_channels
        && w.kernel[..] == [3, 3]
        && w.dilations[..] == [1, 1]
        && matches!(w.strides[..], [1, 1] | [2, 2])
        && (0..2).all(|i| w.in_dims[i] == w.strides[i] * w.out_dims[i] && w.pads_begin[i] <= 2)
        && (MIN_PLANE..=MAX_PLANE).contains(&w.out_len)
        && (w.strides[0] == 1 || w.out_dims[1] <= MAX_WIDTH_2)
}

/// A depthwise weight as this kernel reads it.
#[derive(Clone, Copy)]
pub(crate) enum AcrossWeights<'a> {
    /// `[channels, 9]`.
    Plain(&'a [f32]),
    /// Interleaved per block of 16 channels: block `b`'s tap `t` at `[b * 9 + t]`, one lane per
    /// channel.
    Interleaved(&'a [[f32; LANES]]),
}

/// The masks and shifts of one geometry.
struct Tables {
    /// Positions per output plane.
    p: usize,
    /// Per output vector of a block of 16 planes, per side (0: the plane of its first lane,
    /// 1: the next plane) and tap: that plane's lanes whose tap lies inside the plane.
    taps: [[[u16; TAPS]; 2]; MAX_PLANE],
    /// Per output vector and side: that plane's lanes.
    own: [[u16; 2]; MAX_PLANE],
    /// Per tap: the flat shift within a (phase) plane.
    shift: [isize; TAPS],
    /// Per tap: the source vector (from the output vector's) where its inputs start, `shift`
    /// rounded down to whole vectors.
    step: [isize; TAPS],
    /// Per tap: the input phase (0 at stride 1; `2 * row parity + column parity` at stride 2).
    phase: [usize; TAPS],
    /// Stride 2: lane `l` of a pair of input rows' evens (`l < 2 * ow`), odds one further.
    evens: [i32; LANES],
}

impl Tables {
    fn new(w: &WindowGeometry) -> Self {
        let (oh, ow) = (w.out_dims[0], w.out_dims[1]);
        let (s, pt, pl) = (w.strides[0] as isize, w.pads_begin[0], w.pads_begin[1]);
        let p = oh * ow;
        let mut t = Tables {
            p,
            taps: [[[0; TAPS]; 2]; MAX_PLANE],
            own: [[0; 2]; MAX_PLANE],
            shift: [0; TAPS],
            step: [0; TAPS],
            phase: [0; TAPS],
            evens: [0; LANES],
        };
        for (v, own) in t.own.iter_mut().enumerate().take(p) {
            // Lanes from `split` on belong to the next plane.
            let split = p - (v * LANES) % p;
            *own = match split {
                LANES.. => [0xffff, 0],
                _ => [(1 << split) - 1, !((1u16 << split) - 1)],
            };
        }
        for tap in 0..TAPS {
            let (ky, kx) = (
                (tap / 3) as isize - pt as isize,
                (tap % 3) as isize - pl as isize,
            );
            let (dy, dx) = (ky.div_euclid(s), kx.div_euclid(s));
            t.shift[tap] = dy * ow as isize + dx;
            t.step[tap] = t.shift[tap].div_euclid(LANES as isize);
            t.phase[tap] = (ky.rem_euclid(s) * s + kx.rem_euclid(s)) as usize;
            // Bit r: position r of a plane reads inside the plane; twice over, so that the 16
            // positions from any r0 < p are bits r0..r0 + 16.
            let mut valid = 0u128;
            for r in 0..p {
                let (oy, ox) = ((r / ow) as isize + dy, (r % ow) as isize + dx);
                if (0..oh as isize).contains(&oy) && (0..ow as isize).contains(&ox) {
                    valid |= 1 << r;
                }
            }
            valid |= valid << p;
            for v in 0..p {
                let lanes = (valid >> ((v * LANES) % p)) as u16;
                t.taps[v][0][tap] = lanes & t.own[v][0];
                t.taps[v][1][tap] = lanes & t.own[v][1];
            }
        }
        let iw = 2 * ow;
        for (l, e) in t.evens.iter_mut().enumerate().take(2 * ow.min(MAX_WIDTH_2)) {
            *e = ((l / ow) * iw + 2 * (l % ow)) as i32;
        }
        t
    }
}

impl Tables {
    /// Per tap: lane `l` takes element `shift mod 16 + l` of two consecutive source vectors.
    fn index(&self) -> [__m512i; TAPS] {
        let mut index = [[0i32; LANES]; TAPS];
        for (ix, &shift) in index.iter_mut().zip(&self.shift) {
            let first = shift.rem_euclid(LANES as isize) as i32;
            for (l, i) in ix.iter_mut().enumerate() {
                *i = first + l as i32;
            }
        }
        // SAFETY: `[i32; 16]` and `__m512i` have the same size, every bit pattern valid.
        unsafe { std::mem::transmute(index) }
    }
}

/// Depthwise convolution with one output channel per input channel, for a geometry [`pays`]
/// accepted, as [`super::depthwise_blocked::depthwise_blocked`] (lengths checked by the
/// caller: `input` holds whole planes of `w.in_len`, `out` and `residual` as many of
/// `w.out_len`, the weights and `bias` `channels`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise_across(
    input: &[f32],
    weights: AcrossWeights<'_>,
    bias: Option<&[f32]>,
    channels: usize,
    w: &WindowGeometry,
    post: Activation,
    residual: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
) {
    assert!(pays(w, channels, channels));
    if w.out_len == 0 || channels == 0 || out.is_empty() {
        return;
    }
    let tables = Tables::new(w);
    let (p, in_len) = (w.out_len, w.in_len);
    let planes = out.len() / p;
    assert!(input.len() >= planes * in_len && residual.is_none_or(|r| r.len() == out.len()));
    let clamp_to = Clamp::of(post, residual.is_some());
    let stride2 = w.strides[0] == 2;
    let stop = crate::run_control::stop_token();
    // Block `b`: planes 16b.. (fewer in the last), their outputs in `y`.
    let task = |b: usize, y: &mut [f32]| {
        if stop.should_stop_at(b) {
            return;
        }
        let first = b * LANES;
        let count = y.len() / p;
        // Weights and bias per lane (plane), a zero row past the last.
        let mut wk = [[0.0f32; TAPS]; LANES + 1];
        let mut start = [0.0f32; LANES + 1];
        let mut c = first % channels;
        for (wl, s) in wk.iter_mut().zip(&mut start).take(count) {
            match weights {
                AcrossWeights::Plain(k) => wl.copy_from_slice(&k[c * TAPS..][..TAPS]),
                AcrossWeights::Interleaved(all) => {
                    let taps = &all[(c / LANES) * TAPS..][..TAPS];
                    for (wt, tap) in wl.iter_mut().zip(taps) {
                        *wt = tap[c % LANES];
                    }
                }
            }
            *s = bias.map_or(0.0, |b| b[c]);
            c = if c + 1 == channels { 0 } else { c + 1 };
        }
        let x = &input[first * in_len..][..count * in_len];
        let kernel = Kernel {
            tables: &tables,
            wk: &wk,
            start: &start,
            clamp_to: clamp_to.unwrap_or(Clamp {
                lo: 0.0,
                hi: 0.0,
                kind: ClampKind::None,
            }),
            index: tables.index(),
            finite: wk.iter().flatten().all(|v| v.is_finite()),
        };
        if stride2 {
            with_pack_buffers::<f32, _>(4 * LANES * p, 0, |buf, _| {
                // SAFETY: AVX-512F (`pays`); `x` holds `count` input planes of `(2 oh) x
                // (2 ow)`, `buf` four phases of 16 planes of `p`, `y` `count` planes of `p`.
                unsafe {
                    split_phases(x, count, w, &tables, buf);
                    let phases = buf.as_ptr();
                    let phase = |i: usize| phases.wrapping_add(i * LANES * p);
                    kernel.block(([phase(0), phase(1), phase(2), phase(3)], LANES * p), y);
                }
            });
        } else {
            // SAFETY: AVX-512F (`pays`); `x` holds `count` input planes of `p` positions (stride
            // 1: input planes as large as the output's), `y` `count` output planes.
            unsafe { kernel.block(([x.as_ptr(); 4], x.len()), y) };
        }
        match (residual, clamp_to) {
            (Some(r), _) => {
                let r = &r[first * p..][..y.len()];
                post.add_residual_bias_and_apply(y, Some(r), 0.0)
            }
            (None, None) => post.apply_all(y),
            (None, Some(_)) => {}
        }
    };
    let block_len = LANES * p;
    let blocks = planes.div_ceil(LANES);
    if threads <= 1 || blocks < 2 || out.len() * TAPS < 2 * super::depthwise::TASK_MIN_MULADDS {
        for (b, y) in out.chunks_mut(block_len).enumerate() {
            task(b, y);
        }
    } else {
        // Each thread keeps the same channels on every run: the pointwise convolution before
        // a layer with more channels than positions splits its output channels the same way,
        // so each core reads the input planes it wrote.
        crate::parallel::for_each_chunk_mut_pinned(out, block_len, task);
    }
}

/// What the vectors of a block share.
struct Kernel<'a> {
    tables: &'a Tables,
    wk: &'a [[f32; TAPS]; LANES + 1],
    start: &'a [f32; LANES + 1],
    clamp_to: Clamp,
    /// Per tap: `permutex2var` indices of its 16 inputs in two source vectors.
    index: [__m512i; TAPS],
    /// Every weight of the block is finite: a lane of another plane (its input zero) may
    /// take this plane's multiply-adds unmasked.
    finite: bool,
}

impl Kernel<'_> {
    /// The outputs of one block of `y.len() / p <= 16` planes, plane by plane with its
    /// weights in registers: plane `c` covers flat outputs `c p..(c + 1) p`, vectors `16 v..`
    /// from `v = c p / 16` on; tap `t` of vector `v` reads `src[phase[t]]` at flat `16 v +
    /// shift[t]` under its mask, and only the plane's lanes accumulate. A vector shared with
    /// the next plane is carried over to it in a register.
    ///
    /// # Safety
    /// AVX-512F is available; each `src.0[phase]` used by a tap points to the block's `y.len()
    /// / p` (phase) planes of `p` positions in order, `src.1 >= y.len()` elements readable.
    #[target_feature(enable = "avx512f")]
    unsafe fn block(&self, src: ([*const f32; 4], usize), y: &mut [f32]) {
        let p = self.tables.p;
        let count = y.len() / p;
        assert!(count <= LANES && count * p == y.len());
        let mut carry = _mm512_setzero_ps();
        for c in 0..count {
            let v0 = c * p / LANES;
            // SAFETY: forwarded; the plane's vectors v0..=((c + 1) p - 1) / 16 number at most
            // p / 16 + 2 <= 5 and lie below p (the block's vectors).
            unsafe {
                match (((c + 1) * p - 1) / LANES - v0, self.finite) {
                    (0, true) => self.plane::<1, true>(src, c, v0, &mut carry, y),
                    (1, true) => self.plane::<2, true>(src, c, v0, &mut carry, y),
                    (2, true) => self.plane::<3, true>(src, c, v0, &mut carry, y),
                    (3, true) => self.plane::<4, true>(src, c, v0, &mut carry, y),
                    (_, true) => self.plane::<5, true>(src, c, v0, &mut carry, y),
                    (0, false) => self.plane::<1, false>(src, c, v0, &mut carry, y),
                    (1, false) => self.plane::<2, false>(src, c, v0, &mut carry, y),
                    (2, false) => self.plane::<3, false>(src, c, v0, &mut carry, y),
                    (3, false) => self.plane::<4, false>(src, c, v0, &mut carry, y),
                    (_, false) => self.plane::<5, false>(src, c, v0, &mut carry, y),
                }
            }
        }
    }

    /// Plane `c` of [`Kernel::block`]: its `N` vectors from `v0`, the first continuing `carry`
    /// when the previous plane shares it; a last vector shared with the next plane is left in
    /// `carry` instead of stored.
    ///
    /// # Safety
    /// As [`Kernel::block`], with `v0 = c p / 16` and `N` the plane's vectors; `FINITE` only
    /// when every weight is finite.
    #[inline(always)]
    unsafe fn plane<const N: usize, const FINITE: bool>(
        &self,
        (src, src_len): ([*const f32; 4], usize),
        c: usize,
        v0: usize,
        carry: &mut __m512,
        y: &mut [f32],
    ) {
        let t = self.tables;
        let (p, total) = (t.p, y.len());
        let (begin, end) = (c * p, (c + 1) * p);
        // The plane's side of each of its vectors: 1 when the vector starts in the previous
        // plane.
        let side = |j: usize| usize::from((v0 + j) * LANES < begin);
        let mut w = [_mm512_setzero_ps(); TAPS];
        for (w, &k) in w.iter_mut().zip(&self.wk[c]) {
            *w = _mm512_set1_ps(k);
        }
        let mut acc = [_mm512_set1_ps(self.start[c]); N];
        if side(0) == 1 {
            acc[0] = _mm512_mask_mov_ps(*carry, t.own[v0][1], acc[0]);
        }
        // Per vector: its tap masks for this plane, the plane's lanes.
        let mut masks = [&t.taps[0][0]; N];
        let mut own = [0u16; N];
        for j in 0..N {
            let (v, s) = (v0 + j, side(j));
            (masks[j], own[j]) = (&t.taps[v][s], t.own[v][s]);
        }
        // Source vector `k` of a phase (16 elements from 16 k; zeros before the source and
        // past its end): every tap's inputs are two of them, permuted. Aligned, unlike a load
        // at the tap's shift, which splits a cache line 15 times in 16.
        let vector = |phase: usize, k: isize| {
            if k < 0 || k as usize * LANES >= src_len {
                return _mm512_setzero_ps();
            }
            let k = k as usize;
            // SAFETY: the lanes kept are source elements 16k.. < src_len (the caller's
            // contract: readable).
            unsafe {
                _mm512_maskz_loadu_ps(
                    first_lanes(src_len - k * LANES),
                    src[phase].wrapping_add(k * LANES),
                )
            }
        };
        for tap in 0..TAPS {
            let (phase, step, index) = (t.phase[tap], t.step[tap], self.index[tap]);
            for j in 0..N {
                let k = (v0 + j) as isize + step;
                let x = _mm512_maskz_permutex2var_ps(
                    masks[j][tap],
                    vector(phase, k),
                    index,
                    vector(phase, k + 1),
                );
                acc[j] = if FINITE {
                    // The other lanes' inputs are zeros and the weight finite: they add zero.
                    _mm512_fmadd_ps(x, w[tap], acc[j])
                } else {
                    _mm512_mask3_fmadd_ps(x, w[tap], acc[j], own[j])
                };
            }
        }
        let (lo, hi) = (
            _mm512_set1_ps(self.clamp_to.lo),
            _mm512_set1_ps(self.clamp_to.hi),
        );
        for (j, &a) in acc.iter().enumerate() {
            let o = (v0 + j) * LANES;
            if j == N - 1 && end % LANES != 0 && end < total {
                *carry = a;
                continue;
            }
            let keep = first_lanes(total - o);
            // SAFETY: the lanes kept are outputs o.. < total = y.len().
            unsafe {
                _mm512_mask_storeu_ps(
                    y.as_mut_ptr().wrapping_add(o),
                    keep,
                    clamp(self.clamp_to.kind, a, lo, hi),
                )
            };
        }
    }
}

/// Splits `count <= 16` input planes of `(2 oh) x (2 ow)` into four phase planes of `oh x ow`
/// each: phase `2 (iy mod 2) + (ix mod 2)` of plane `c` at `buf[(phase * 16 + c) * p..]`.
///
/// # Safety
/// AVX-512F is available; `x` holds `count` planes of `w.in_len`, `buf` `4 * 16 * p`
/// elements, `2 * ow <= 16`.
#[target_feature(enable = "avx512f")]
unsafe fn split_phases(x: &[f32], count: usize, w: &WindowGeometry, t: &Tables, buf: &mut [f32]) {
    let (oh, ow) = (w.out_dims[0], w.out_dims[1]);
    let (iw, p) = (2 * ow, t.p);
    assert!(iw <= LANES && x.len() >= count * w.in_len && buf.len() >= 4 * LANES * p);
    let pair = 2 * iw;
    // SAFETY: `evens` holds 16 i32.
    let evens = unsafe { _mm512_loadu_si512(t.evens.as_ptr().cast()) };
    let odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
    let (first, second) = (
        first_lanes(pair.min(LANES)),
        first_lanes(pair.saturating_sub(LANES)),
    );
    let row = first_lanes(ow);
    let base = buf.as_mut_ptr();
    for c in 0..count {
        let plane = &x[c * w.in_len..][..w.in_len];
        for a in 0..oh {
            let rows = plane[2 * a * iw..].as_ptr();
            // SAFETY: input rows 2a and 2a + 1 (`pair` elements) lie in the plane.
            let (l, h) = unsafe {
                (
                    _mm512_maskz_loadu_ps(first, rows),
                    _mm512_maskz_loadu_ps(second, rows.wrapping_add(LANES)),
                )
            };
            // Row 2a's evens then row 2a + 1's evens; the same for the odds.
            let ev = _mm512_permutex2var_ps(l, evens, h);
            let od = _mm512_permutex2var_ps(l, odds, h);
            let at = |phase: usize| (phase * LANES + c) * p + a * ow;
            // SAFETY: each store writes `ow` elements of row `a` of one phase plane of plane
            // `c < 16`, inside `buf`; the second of each pair is the vector's lanes ow..2 ow
            // stored from `ow` positions before the row (those lanes are not written).
            unsafe {
                _mm512_mask_storeu_ps(base.add(at(0)), row, ev);
                _mm512_mask_storeu_ps(base.add(at(2)).wrapping_sub(ow), row << ow, ev);
                _mm512_mask_storeu_ps(base.add(at(1)), row, od);
                _mm512_mask_storeu_ps(base.add(at(3)).wrapping_sub(ow), row << ow, od);
            }
        }
    }
}

/// The mask of the first `n <= 16` lanes.
fn first_lanes(n: usize) -> __mmask16 {
    if n >= LANES {
        0xffff
    } else {
        (1u16 << n) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::interleave::LANES as BLOCK;
    use crate::kernels::spatial::WindowAttrs;
    use crate::ops::convolution::depthwise::depthwise;
    use crate::support::rng::Rng;

    fn geometry(hw: [usize; 2], s: usize, pb: [usize; 2], pe: [usize; 2]) -> WindowGeometry {
        let attrs = WindowAttrs {
            kernel: &[3, 3],
            strides: &[s, s],
            pads_begin: &pb,
            pads_end: &pe,
            dilations: &[1, 1],
            ceil_mode: false,
        };
        WindowGeometry::new("test", &hw, &attrs).unwrap()
    }

    /// Padding (before, after) of one axis for which the output is `input / stride` long.
    fn pads(rng: &mut Rng, s: usize) -> (usize, usize) {
        let options: &[(usize, usize)] = match s {
            1 => &[(1, 1), (0, 2), (2, 0)],
            _ => &[(1, 1), (0, 1), (1, 0), (2, 0), (0, 2)],
        };
        options[rng.below(options.len())]
    }

    /// The kernel equals the plane kernel on random geometries it takes (strides 1 and 2,
    /// planes of 16 to 64 outputs, rows 1 to 64 wide, every padding that keeps the planes'
    /// ratio), channel counts around and between blocks, batch 1 and 2, with or without bias,
    /// every epilogue (in-register clamps, other activations, a residual), weights plain and
    /// interleaved, at 1, 2 and 3 threads.
    #[test]
    fn across_equals_the_plane_kernel() {
        if Simd::detect().and_then(Simd::avx512).is_none() {
            eprintln!("skipped: the kernel needs AVX-512");
            return;
        }
        let mut rng = Rng::new(41);
        let posts = [
            Activation::Clip { min: 0.0, max: 6.0 },
            Activation::None,
            Activation::Relu,
            Activation::HardSwish,
        ];
        let mut checked = 0;
        for case in 0..300 {
            let s = 1 + case % 2;
            let ow = match s {
                1 => rng.range(1, 64),
                _ => rng.range(1, MAX_WIDTH_2),
            };
            let oh = rng.range(MIN_PLANE.div_ceil(ow), MAX_PLANE / ow);
            if oh == 0 || !(MIN_PLANE..=MAX_PLANE).contains(&(oh * ow)) {
                continue;
            }
            let ((pt, pb), (pl, pr)) = (pads(&mut rng, s), pads(&mut rng, s));
            let w = geometry([s * oh, s * ow], s, [pt, pl], [pb, pr]);
            assert_eq!(w.out_dims[..], [oh, ow], "case {case}");
            let channels = [1, 5, 16, 17, 33, 40, 64][rng.below(7)];
            assert!(pays(&w, channels, channels), "case {case}: {w:?}");
            let batch = rng.range(1, 2);
            let x = rng.vec(batch * channels * w.in_len);
            let k = rng.vec(channels * 9);
            let bias = (case % 5 != 4).then(|| rng.vec(channels));
            let res = (case % 3 == 1).then(|| rng.vec(batch * channels * w.out_len));
            let post = posts[case % posts.len()];
            let mut want = vec![0.0f32; batch * channels * w.out_len];
            let (b, r) = (bias.as_deref(), res.as_deref());
            depthwise(&x, &k, b, channels, channels, &w, post, r, &mut want, 1);
            // The interleaved layout: per block of 16 channels, one vector per tap.
            let mut packed = vec![[0.0f32; BLOCK]; channels.div_ceil(BLOCK) * 9];
            for c in 0..channels {
                for t in 0..9 {
                    packed[(c / BLOCK) * 9 + t][c % BLOCK] = k[c * 9 + t];
                }
            }
            for threads in [1, 2, 3] {
                for weights in [
                    AcrossWeights::Plain(&k),
                    AcrossWeights::Interleaved(&packed),
                ] {
                    let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                    let mut got = vec![f32::NAN; want.len()];
                    crate::parallel::install(&pool, || {
                        depthwise_across(&x, weights, b, channels, &w, post, r, &mut got, threads)
                    });
                    for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "case {case} {oh}x{ow} stride {s} pads {pt},{pl} {pb},{pr} \
                             channels {channels} batch {batch} {post:?} threads {threads}: \
                             element {j}: {a} vs {e}"
                        );
                    }
                }
            }
            checked += 1;
        }
        assert!(checked >= 100, "only {checked} geometries");
    }

    #[test]
    fn takes_small_planes_of_exact_ratio_only() {
        if Simd::detect().and_then(Simd::avx512).is_none() {
            return;
        }
        assert!(pays(&geometry([7, 7], 1, [1, 1], [1, 1]), 960, 960));
        assert!(pays(&geometry([14, 14], 2, [1, 1], [1, 1]), 576, 576));
        assert!(pays(&geometry([14, 14], 2, [0, 0], [1, 1]), 576, 576));
        assert!(
            !pays(&geometry([14, 14], 1, [1, 1], [1, 1]), 96, 96),
            "196 outputs"
        );
        assert!(
            !pays(&geometry([3, 3], 1, [1, 1], [1, 1]), 96, 96),
            "9 outputs"
        );
        assert!(
            !pays(&geometry([15, 15], 2, [1, 1], [1, 1]), 96, 96),
            "15 -> 8"
        );
        assert!(
            !pays(&geometry([7, 7], 1, [0, 0], [0, 0]), 96, 96),
            "7 -> 5"
        );
        assert!(
            !pays(&geometry([7, 7], 1, [1, 1], [1, 1]), 96, 192),
            "multiplier 2"
        );
    }
}
