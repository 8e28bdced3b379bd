//! The stride-1 direct convolution's multiply-adds, generic over the vector width: a register
//! block of `R` output channels x `C` vectors of consecutive flattened positions, its
//! accumulators kept over every input channel and tap, then stored to the valid lanes with the
//! epilogue. Thin `#[target_feature]` entry points per ISA choose `R` and the widest `C`.

use std::array::from_fn;
use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::{__m512, _mm512_mask3_fmadd_ps};

use super::row_band::Clamp;
use super::simd::{Avx2, Avx512, Isa};

/// AVX-512's register block: 8 x 3 = 24 of 32 registers accumulate, with room for the three
/// loads of a tap and a broadcast weight.
pub(super) const AVX512_BLOCK: (usize, usize) = (8, 3);
/// AVX2's: 6 x 2 = 12 of 16 registers accumulate, two hold a tap's loads, one a weight.
/// SqueezeNet's 3x3 expands alone, one thread, best of 60 (us; 64 <- 16 at 55x55, 128 <- 32
/// at 27x27, 192 <- 48 and 256 <- 64 at 13x13): 6 x 2 815, 964, 412, 715; 5 x 2 1143, 749,
/// 434, 755; 8 x 1 1331, 854, 721, 848; 4 x 3 (all 16 registers: spills) 1634, 1745, 845, 1501.
pub(super) const AVX2_BLOCK: (usize, usize) = (6, 2);

/// Where one vector of flattened positions goes: the lanes in `mask` (the others fall on the
/// padding columns or past the band) are the outputs `at..at + mask.count_ones()` of every
/// channel plane, in order.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Store {
    pub mask: u32,
    pub at: usize,
}

/// What every register block of one band shares.
pub(super) struct Block<'a> {
    /// The band: `cin` planes of `plane` elements, flattened positions of row stride `Wp`.
    pub src: &'a [f32],
    pub plane: usize,
    pub cin: usize,
    /// Positions of the band (from 0): its vectors cover `0..positions`.
    pub positions: usize,
    /// Per tap `(ky, kx)`, its offset from a position (`ky * dy * Wp + kx * dx`).
    pub taps: &'a [usize],
    /// The weights interleaved by blocks of `R` channels (see `DirectWeights`).
    pub weights: &'a [f32],
    pub bias: Option<&'a [f32]>,
    pub clamp: Clamp,
    /// The output (and residual) of this batch item: `channels` planes of `out_plane`.
    pub out: *mut f32,
    pub residual: Option<&'a [f32]>,
    pub out_plane: usize,
    pub channels: usize,
    /// Compact rows (AVX-512, 3x3 windows): the band's rows have the image's width, no padding
    /// columns, and a tap's lanes whose column is off the image are left out of its
    /// multiply-adds.
    pub edges: Option<Edges>,
}

/// Compact rows of `width` columns: output column `ox`'s tap `kx` reads input column `ox + kx *
/// dx - left`, on the image where that is in `0..width` (`dx` is the taps' column step).
#[derive(Clone, Copy, Debug)]
pub(super) struct Edges {
    pub width: usize,
    pub left: usize,
}

/// Channels `channels` (from a multiple of 8, below `block.channels`) of the band on AVX-512;
/// `store(q)` places the vector at position `q`.
///
/// # Safety
/// As [`Block::channels`].
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn channels_avx512(
    isa: Avx512,
    block: &Block,
    channels: Range<usize>,
    store: &dyn Fn(usize) -> Store,
) {
    const B: (usize, usize) = AVX512_BLOCK;
    // SAFETY: the caller's contract; the token proves AVX-512F.
    unsafe {
        if let Some(e) = block.edges {
            // The middle column tap reads the output's own column (`dx == left`): on the
            // image in every lane, its multiply-adds need no mask.
            if block.taps.get(1) == Some(&e.left) {
                block.channels::<Avx512, { B.0 }, { B.1 }, EdgeMasks<false>>(isa, channels, store)
            } else {
                block.channels::<Avx512, { B.0 }, { B.1 }, EdgeMasks<true>>(isa, channels, store)
            }
        } else {
            block.channels::<Avx512, { B.0 }, { B.1 }, Whole>(isa, channels, store)
        }
    }
}

/// As [`channels_avx512`] on AVX2 + FMA, blocks of [`AVX2_BLOCK`].
///
/// # Safety
/// As [`Block::channels`].
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn channels_avx2(
    isa: Avx2,
    block: &Block,
    channels: Range<usize>,
    store: &dyn Fn(usize) -> Store,
) {
    const B: (usize, usize) = AVX2_BLOCK;
    // Compact rows are AVX-512's alone.
    assert!(block.edges.is_none());
    // SAFETY: the caller's contract; the token proves AVX2 and FMA.
    unsafe { block.channels::<Avx2, { B.0 }, { B.1 }, Whole>(isa, channels, store) }
}

impl Block<'_> {
    /// Every register block of channels `channels` (from a multiple of `R`) over the band's
    /// positions, in chunks of at most `C` vectors as even as possible.
    ///
    /// # Safety
    /// For every channel of `channels` below `self.channels` and every vector, `out + c *
    /// out_plane + store(q).at` is valid for `store(q).mask.count_ones()` writes, written by no
    /// other thread meanwhile.
    #[inline(always)]
    unsafe fn channels<I: Isa, const R: usize, const C: usize, L: TapLoads<I>>(
        &self,
        isa: I,
        channels: Range<usize>,
        store: &dyn Fn(usize) -> Store,
    ) {
        let lanes = I::LANES;
        let depth = self.cin * self.taps.len();
        let vectors = self.positions.div_ceil(lanes);
        let chunks = vectors.div_ceil(C);
        assert!(channels.start.is_multiple_of(R) && channels.end <= self.channels);
        let grid = Grid::of(self.taps);
        // Compact rows need the unrolled 3x3 taps, which apply the lane masks.
        assert!(self.edges.is_none() || grid.is_some());
        // Every vector's store, found once for all the register blocks (on the stack: no
        // allocation per run) where the band has at most `TABLE` vectors (16K-element bands of
        // 8 or more channels do).
        const TABLE: usize = 160;
        let mut table = [Store::default(); TABLE];
        let mut cols = [[0u16; 3]; TABLE];
        let tabled = vectors <= TABLE;
        let col_step = grid.map_or(0, |g| g.col);
        if tabled {
            for (v, s) in table[..vectors].iter_mut().enumerate() {
                *s = store(v * lanes);
            }
            if let Some(e) = self.edges {
                for (v, m) in cols[..vectors].iter_mut().enumerate() {
                    *m = e.masks(v * lanes, lanes, col_step);
                }
            }
        }
        let store_of = |v: usize| {
            if tabled {
                table[v]
            } else {
                store(v * lanes)
            }
        };
        let cols_of = |v: usize| match self.edges {
            Some(_) if tabled => cols[v],
            Some(e) => e.masks(v * lanes, lanes, col_step),
            None => [0; 3],
        };
        for oc0 in channels.step_by(R) {
            let valid = (self.channels - oc0).min(R);
            let mut start = [0.0f32; R];
            if let Some(bias) = self.bias {
                start[..valid].copy_from_slice(&bias[oc0..oc0 + valid]);
            }
            let w = &self.weights[oc0 / R * depth * R..][..depth * R];
            let mut v0 = 0;
            for c in 0..chunks {
                // The first `vectors % chunks` chunks get one more vector.
                let count = vectors / chunks + usize::from(c < vectors % chunks);
                let q0 = v0 * lanes;
                let at = |v: usize| store_of(v0 + v);
                let load = L::new(from_fn(
                    |v| if v < count { cols_of(v0 + v) } else { [0; 3] },
                ));
                // SAFETY: the caller's contract.
                unsafe {
                    match count {
                        1 => self.run::<I, R, 1, L>(isa, oc0, q0, w, &start, &[at(0)], grid, load),
                        2 => self.run::<I, R, 2, L>(
                            isa,
                            oc0,
                            q0,
                            w,
                            &start,
                            &from_fn(at),
                            grid,
                            load,
                        ),
                        3 => self.run::<I, R, 3, L>(
                            isa,
                            oc0,
                            q0,
                            w,
                            &start,
                            &from_fn(at),
                            grid,
                            load,
                        ),
                        _ => self.run::<I, R, 4, L>(
                            isa,
                            oc0,
                            q0,
                            w,
                            &start,
                            &from_fn(at),
                            grid,
                            load,
                        ),
                    }
                }
                v0 += count;
            }
        }
    }

    /// Channels `oc0..oc0 + R` (those below `channels`) at the `N` vectors of flattened
    /// positions starting at `q0`: `out[c][stores[v].at + j] = clamp(start[c] + sum over
    /// input channels i and taps t of weights[(i * taps + t) * R + c - oc0] * src[i * plane +
    /// q0 + LANES v + taps[t] + lane] (+ residual))` for the `j`-th lane set in
    /// `stores[v].mask`.
    ///
    /// # Safety
    /// As [`Block::channels`], for these vectors.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn run<I: Isa, const R: usize, const N: usize, L: TapLoads<I>>(
        &self,
        isa: I,
        oc0: usize,
        q0: usize,
        weights: &[f32],
        start: &[f32; R],
        stores: &[Store; N],
        grid: Option<Grid>,
        load: L,
    ) {
        let lanes = I::LANES;
        let reach = self.taps.iter().copied().max().unwrap_or(0);
        // Every load stays inside the band and every weight inside the block's.
        assert!(
            self.cin >= 1 && (self.cin - 1) * self.plane + q0 + N * lanes + reach <= self.src.len()
        );
        assert!(weights.len() >= self.cin * self.taps.len() * R);
        if let Some(r) = self.residual {
            assert!(r.len() >= self.channels * self.out_plane);
            for s in stores {
                assert!(s.at + s.mask.count_ones() as usize <= self.out_plane);
            }
        }
        let mut acc = [[isa.splat(0.0); N]; R];
        for (a, &s) in acc.iter_mut().zip(start) {
            *a = [isa.splat(s); N];
        }
        if let Some(grid) = grid {
            // SAFETY: the loads stay inside the band and the weights inside the block's
            // (asserted above); `grid` is the taps' layout.
            acc = unsafe {
                madd_3x3::<I, R, N, L>(
                    isa,
                    load,
                    self.src.as_ptr().add(q0),
                    self.plane,
                    grid,
                    self.cin,
                    weights.as_ptr(),
                    acc,
                )
            };
        } else {
            let mut w = weights.as_ptr();
            for i in 0..self.cin {
                let src = self.src[i * self.plane + q0..].as_ptr();
                for &off in self.taps {
                    let mut x = [isa.splat(0.0); N];
                    for (c, x) in x.iter_mut().enumerate() {
                        // SAFETY: inside the band (asserted above).
                        *x = unsafe { isa.load(src.add(off + c * lanes)) };
                    }
                    for (r, a) in acc.iter_mut().enumerate() {
                        // SAFETY: `cin * taps * R` weights (asserted above), R per tap.
                        let wv = isa.splat(unsafe { *w.add(r) });
                        for (a, &x) in a.iter_mut().zip(&x) {
                            *a = isa.fmadd(x, wv, *a);
                        }
                    }
                    w = w.wrapping_add(R);
                }
            }
        }
        let (lo, hi) = (isa.splat(self.clamp.lo), isa.splat(self.clamp.hi));
        let valid = self.channels.saturating_sub(oc0).min(R);
        for (r, a) in acc.iter().enumerate().take(valid) {
            let plane = (oc0 + r) * self.out_plane;
            for (&v, s) in a.iter().zip(stores) {
                if s.mask == 0 {
                    continue;
                }
                let at = plane + s.at;
                let mut v = v;
                let n = s.mask.count_ones() as usize;
                debug_assert!(!L::PREFIX || s.mask == (1 << n) - 1);
                if let Some(res) = self.residual {
                    // SAFETY: `at + count <= channels * out_plane` (asserted above).
                    v = isa.add(v, unsafe {
                        if L::PREFIX {
                            isa.load_first(res.as_ptr().add(at), n)
                        } else {
                            isa.load_lanes(res.as_ptr().add(at), s.mask)
                        }
                    });
                }
                let v = isa.clamp(self.clamp.kind, v, lo, hi);
                // SAFETY: the caller's contract (with `PREFIX`, the mask is the first `n`
                // lanes).
                unsafe {
                    if L::PREFIX {
                        isa.store_first(self.out.add(at), n, v)
                    } else {
                        isa.store_lanes(self.out.add(at), s.mask, v)
                    }
                };
            }
        }
    }
}

/// A 3x3 window's taps as offsets `ky * row + kx * col` from a position (`row = dy * Wp`,
/// `col = dx`): the layout [`madd_3x3`] unrolls.
#[derive(Clone, Copy, Debug)]
struct Grid {
    row: usize,
    col: usize,
}

impl Grid {
    /// The grid `taps` are, if they are one (nine, `ky * row + kx * col` in order).
    fn of(taps: &[usize]) -> Option<Grid> {
        let &[_, col, _, row, ..] = taps else {
            return None;
        };
        let grid = Grid { row, col };
        (taps.len() == 9 && (0..9).all(|t| taps[t] == t / 3 * row + t % 3 * col)).then_some(grid)
    }
}

/// `acc[r][c] += sum over input channels i and taps t of w[(i * 9 + t) * R + r] * src[i *
/// plane + tap(t) + LANES c + lane]` (with compact rows, in the lanes `load` leaves in), the
/// nine taps of `grid` unrolled: one loop over the input
/// channels, whose only state is the two pointers and the accumulators, so the register block
/// stays in registers (nested loops over channels and a tap table stored 12 of AVX-512's 24
/// accumulators to the stack after every channel, 14 % of the kernel's samples). Alternating
/// A/B against that, one thread, SqueezeNet's 3x3 expands: 64 <- 16 at 55x55 0.94x the time,
/// 128 <- 32 at 27x27 0.95x, 192 <- 48 and 256 <- 64 at 13x13 0.96x and 0.95x.
///
/// # Safety
/// For every input channel `i < cin`, `src + i * plane + 2 * (grid.row + grid.col) + N * LANES`
/// is within one allocation, and `w` is valid for `cin * 9 * R` reads.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn madd_3x3<I: Isa, const R: usize, const N: usize, L: TapLoads<I>>(
    isa: I,
    load: L,
    src: *const f32,
    plane: usize,
    grid: Grid,
    cin: usize,
    w: *const f32,
    mut acc: [[I::V; N]; R],
) -> [[I::V; N]; R] {
    let lanes = I::LANES;
    let (mut src, mut w) = (src, w);
    for _ in 0..cin {
        // A macro, not a closure: a closure borrowing the accumulators is not always inlined.
        macro_rules! tap {
            ($($t:literal)*) => {$({
                let at = src.wrapping_add($t / 3 * grid.row + $t % 3 * grid.col);
                // SAFETY: inside the band (the caller's contract).
                let x: [I::V; N] = from_fn(|c| unsafe { isa.load(at.add(c * lanes)) });
                for (r, a) in acc.iter_mut().enumerate() {
                    // SAFETY: `9 * R` weights per input channel (the caller's contract).
                    let wv = isa.splat(unsafe { *w.add($t * R + r) });
                    for (c, (a, &x)) in a.iter_mut().zip(&x).enumerate() {
                        *a = load.fmadd(isa, x, wv, *a, c, $t % 3);
                    }
                }
            })*};
        }
        tap!(0 1 2 3 4 5 6 7 8);
        src = src.wrapping_add(plane);
        w = w.wrapping_add(9 * R);
    }
    acc
}

impl Edges {
    /// Per column tap `kx`, the lanes `l` of the vector at position `q` (of `lanes`) whose
    /// input column `(q + l) % width + kx * dx - left` is on the image.
    fn masks(self, q: usize, lanes: usize, dx: usize) -> [u16; 3] {
        let width = self.width.max(1);
        let lanes = lanes.min(16);
        let mut masks = [0u16; 3];
        // Run by run of the vector's lanes on one row (columns `column..column + run`), tap
        // `kx` reads columns `column + kx * dx - left`: on the image from column `left - kx *
        // dx` to `width + left - kx * dx`.
        let (mut lane, mut column) = (0, q % width);
        while lane < lanes {
            let run = (width - column).min(lanes - lane);
            for (kx, m) in masks.iter_mut().enumerate() {
                let lo = self.left.saturating_sub(kx * dx).max(column);
                let hi = (width + self.left)
                    .saturating_sub(kx * dx)
                    .min(column + run);
                if lo < hi {
                    *m |= (((1u32 << (hi - lo)) - 1) << (lo - column + lane)) as u16;
                }
            }
            lane += run;
            column = 0;
        }
        masks
    }
}

/// How [`madd_3x3`] multiplies and adds a tap's vectors: in every lane, or (compact rows) only
/// in the lanes on the image.
trait TapLoads<I: Isa>: Copy {
    /// Whether every vector's valid lanes are its first ones, stored to consecutive outputs
    /// (compact rows: a vector's positions are consecutive outputs), so stores need no
    /// compress.
    const PREFIX: bool = false;
    /// From the lane masks of each of (up to) 4 vectors' column taps ([`Edges::masks`]).
    fn new(masks: [[u16; 3]; 4]) -> Self;
    /// `x * w + acc` for vector `c`'s column tap `kx`: in every lane, or only those on the image.
    fn fmadd(self, isa: I, x: I::V, w: I::V, acc: I::V, c: usize, kx: usize) -> I::V;
}

/// Every lane loaded.
#[derive(Clone, Copy)]
struct Whole;

impl<I: Isa> TapLoads<I> for Whole {
    #[inline(always)]
    fn new(_: [[u16; 3]; 4]) -> Self {
        Whole
    }
    #[inline(always)]
    fn fmadd(self, isa: I, x: I::V, w: I::V, acc: I::V, _: usize, _: usize) -> I::V {
        isa.fmadd(x, w, acc)
    }
}

/// Only the lanes of [`Edges::masks`] multiplied and added (AVX-512's merge-masked FMAs);
/// `MID`: the middle column tap's too (without, its lanes are all on the image and its
/// multiply-adds unmasked, which leaves six masks for three vectors: all in mask registers).
#[derive(Clone, Copy)]
struct EdgeMasks<const MID: bool>([[u16; 3]; 4]);

impl<const MID: bool> TapLoads<Avx512> for EdgeMasks<MID> {
    const PREFIX: bool = true;
    #[inline(always)]
    fn new(masks: [[u16; 3]; 4]) -> Self {
        EdgeMasks(masks)
    }
    #[inline(always)]
    fn fmadd(self, isa: Avx512, x: __m512, w: __m512, acc: __m512, c: usize, kx: usize) -> __m512 {
        if !MID && kx == 1 {
            return isa.fmadd(x, w, acc);
        }
        // SAFETY: the token proves AVX-512F.
        unsafe { _mm512_mask3_fmadd_ps(x, w, acc, self.0[c][kx]) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;

    /// The run-by-run masks equal the lane-by-lane definition: widths below, at and past a
    /// vector, column pads 0 to 2, dilation 1 and 2, vectors starting anywhere in a row, short
    /// vectors.
    #[test]
    fn edge_masks_equal_their_definition() {
        let mut rng = Rng::new(5);
        for _ in 0..2000 {
            let e = Edges {
                width: rng.range(1, 40),
                left: rng.below(3),
            };
            let (q, lanes, dx) = (
                rng.below(200),
                [8, 16, rng.range(1, 16)][rng.below(3)],
                rng.range(1, 2),
            );
            let want: [u16; 3] = from_fn(|kx| {
                (0..lanes).fold(0u16, |m, l| {
                    let col = ((q + l) % e.width + kx * dx).wrapping_sub(e.left);
                    m | (u16::from(col < e.width) << l)
                })
            });
            assert_eq!(
                e.masks(q, lanes, dx),
                want,
                "{e:?} q {q} lanes {lanes} dx {dx}"
            );
        }
    }
}
