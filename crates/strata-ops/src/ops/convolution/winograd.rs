//! 3x3 stride-1 convolutions through Winograd's minimal filtering, F(2x2, 3x3) or F(4x4, 3x3)
//! (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016; the matrices are in
//! `winograd_transforms`).
//!
//! Every `TILE x TILE` output tile comes from an `ALPHA x ALPHA` input tile (`ALPHA = TILE + 2`):
//! `Y = Aᵀ [U ⊙ V] A` with `U = G g Gᵀ` the transformed 3x3 kernel (once, at plan time) and
//! `V = Bᵀ d B` the transformed input tile. Summed over input channels, the element-wise product
//! becomes `ALPHA²` independent products, one per position `e` of the transformed tile: `M[e]
//! (tiles x out channels) = V[e] (tiles x in channels) · U[e] (in x out channels)`. F(4x4) does
//! 36 multiply-adds per tile and channel pair where the direct path does 144 (16 outputs x 9
//! taps); F(2x2) does 16 where it does 36, with 4x more, smaller tiles, so small planes still
//! give the products enough rows. The tiles are the rows of the products, so the register
//! tile's columns run over output channels (multiples of its width in real networks) whatever
//! the image size, and `U[e]` is prepacked as the B operand.
//!
//! Tiles are processed a band of tile rows at a time, sized so the transformed band stays in
//! cache between the three steps. With threads, each takes its own run of bands through all
//! three steps and the epilogue (no step reads what another core wrote). The input transform
//! writes `V[e]` straight into the GEMM's packed-A layout (slivers of the microkernel's `MR`
//! tiles, each holding all input channels), so the products read it without packing it again;
//! the products are stored tile by tile (a tile's `ALPHA²` rows of out channels together), so
//! the output transform reads each tile's products from one contiguous run. Transforms gather
//! and scatter per tile with the arithmetic vectorized over a few slivers of tiles (input) or
//! [`LANES`] output channels (output). Which variant a layer runs is chosen at plan time
//! ([`variant`]).

use std::marker::PhantomData;

use crate::kernels::error::{KernelError, KernelResult};
use crate::kernels::gemm::{gemm_packed_a, packed_a_rows, Prepacked, MAX_TILE_ROWS};
use crate::kernels::simd::multiversion;
use crate::kernels::Activation;

use super::conv_kernel::ConvParams;
use super::winograd_transforms::{kernel_transform, F2x2, F4x4, Transforms, LANES};

const OP: &str = "Conv";
/// Positions of the largest variant's transformed tile.
const MAX_POSITIONS: usize = Variant::F4x4.positions();
/// About this many tiles per band.
const BAND_TILES: usize = 128;

/// Which minimal filtering algorithm a layer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// F(2x2, 3x3): 4x4 input tiles, 16 products.
    F2x2,
    /// F(4x4, 3x3): 6x6 input tiles, 36 products.
    F4x4,
}

impl Variant {
    /// Output tile edge.
    pub const fn tile(self) -> usize {
        match self {
            Variant::F2x2 => 2,
            Variant::F4x4 => 4,
        }
    }

    /// Input tile edge: output tile plus kernel minus one.
    const fn alpha(self) -> usize {
        self.tile() + 2
    }

    /// Positions of the transformed tile: one product each.
    const fn positions(self) -> usize {
        self.alpha() * self.alpha()
    }
}

/// The geometry this path computes: 2-D, 3x3 kernel, stride 1, dilation 1, one group.
pub(crate) fn capable(input_dims: &[usize], weight_dims: &[usize], p: &ConvParams) -> bool {
    let ones = |v: &[usize]| v.iter().all(|&s| s == 1);
    input_dims.len() == 4
        && weight_dims.len() == 4
        && weight_dims[2..] == [3, 3]
        && p.groups == 1
        && ones(&p.strides)
        && ones(&p.dilations)
}

/// The variant that pays for these dims, if one does. Measured per node inside ResNet-50 and
/// SqueezeNet (AVX-512, one thread and two, each variant forced on every layer), where weights
/// come from memory rather than cache: a layer run alone keeps its transformed weights cached
/// and flatters the larger ones. F(4x4)'s weights are four times the original and are streamed
/// once per band, so it needs many tiles to reuse them: it pays from 40 tiles (28x28 and up)
/// and lost at 14x14 (16 tiles: 256 channels 1.69 -> 1.86 ms) and 7x7. F(2x2) has weights 16/9
/// of the original and four times the tiles: at 14x14 (49 tiles, 256 channels) 1.69 -> 1.47 ms
/// at one thread, 1.03 -> 0.95 at two; at 13x13 64 -> 256 even at one thread and 0.23 -> 0.20
/// ms at two; at 7x7 (16 tiles, 512 channels) 2.1 -> 3.0 ms, too few tiles for its weights.
/// Thin layers (16 to 48 input channels) give either variant's products too little depth.
pub fn variant(input_dims: &[usize], weight_dims: &[usize], p: &ConvParams) -> Option<Variant> {
    if !capable(input_dims, weight_dims, p) {
        return None;
    }
    let f4 = Geometry::new(input_dims, weight_dims, p, Variant::F4x4)?;
    if f4.tiles_y * f4.tiles_x >= 40 && f4.in_channels >= 64 && f4.out_channels >= 32 {
        return Some(Variant::F4x4);
    }
    let f2 = Geometry::new(input_dims, weight_dims, p, Variant::F2x2)?;
    (f2.tiles_y * f2.tiles_x >= 36 && f2.in_channels >= 64 && f2.out_channels >= 32)
        .then_some(Variant::F2x2)
}

/// Elements of scratch one run needs (0 for a geometry the path does not compute): room for
/// either variant, as a kernel built for one runs it for whatever dims come.
pub(crate) fn scratch_len(input_dims: &[usize], weight_dims: &[usize], p: &ConvParams) -> usize {
    if !capable(input_dims, weight_dims, p) {
        return 0;
    }
    [Variant::F2x2, Variant::F4x4]
        .into_iter()
        .map(|v| Geometry::new(input_dims, weight_dims, p, v).map_or(0, |g| g.scratch_len()))
        .max()
        .unwrap_or(0)
}

/// Output and tile dims of one convolution under one variant.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    variant: Variant,
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    in_h: usize,
    in_w: usize,
    out_h: usize,
    out_w: usize,
    pad_top: usize,
    pad_left: usize,
    tiles_y: usize,
    tiles_x: usize,
}

impl Geometry {
    fn new(
        input_dims: &[usize],
        weight_dims: &[usize],
        p: &ConvParams,
        variant: Variant,
    ) -> Option<Geometry> {
        let pad = |v: &[usize], i: usize| v.get(i).copied().unwrap_or(0);
        let (in_h, in_w) = (input_dims[2], input_dims[3]);
        let out_h = (in_h + pad(&p.pads_begin, 0) + pad(&p.pads_end, 0)).checked_sub(2)?;
        let out_w = (in_w + pad(&p.pads_begin, 1) + pad(&p.pads_end, 1)).checked_sub(2)?;
        (weight_dims[1] == input_dims[1] && out_h > 0 && out_w > 0).then_some(Geometry {
            variant,
            batch: input_dims[0],
            in_channels: input_dims[1],
            out_channels: weight_dims[0],
            in_h,
            in_w,
            out_h,
            out_w,
            pad_top: pad(&p.pads_begin, 0),
            pad_left: pad(&p.pads_begin, 1),
            tiles_y: out_h.div_ceil(variant.tile()),
            tiles_x: out_w.div_ceil(variant.tile()),
        })
    }

    /// Tile rows per band.
    fn band_rows(&self) -> usize {
        (BAND_TILES / self.tiles_x).clamp(1, self.tiles_y)
    }

    /// Scratch elements of one tile row: its transformed inputs and its products.
    fn row_len(&self) -> usize {
        self.variant.positions() * self.tiles_x * (self.in_channels + self.out_channels)
    }

    /// Scratch elements a band needs beyond [`Geometry::row_len`] per tile row: its tiles
    /// rounded up to whole slivers of the packed input.
    fn sliver_slack(&self) -> usize {
        self.variant.positions() * (MAX_TILE_ROWS - 1) * self.in_channels
    }

    /// Scratch elements of a run: an even number of band rows (one more than the image has at
    /// most), so two threads each get half of a band's rows, and each half its slack.
    fn scratch_len(&self) -> usize {
        self.band_rows().next_multiple_of(2) * self.row_len() + 2 * self.sliver_slack()
    }
}

/// A 3x3 kernel transformed and packed for the products of its [`Variant`]: `U[e]` (in x out
/// channels) as the B operand of position `e`'s product. Held by the plan in Persistent memory.
#[derive(Debug)]
pub struct WinogradWeights {
    variant: Variant,
    positions: Vec<Prepacked<f32>>,
    in_channels: usize,
    out_channels: usize,
}

impl WinogradWeights {
    /// Transforms `weight` (`[out, in, 3, 3]`, contiguous) for `variant` in f64 and packs it.
    pub fn new(
        weight: &[f32],
        out_channels: usize,
        in_channels: usize,
        variant: Variant,
    ) -> KernelResult<Self> {
        let pairs = out_channels
            .checked_mul(in_channels)
            .filter(|&n| n > 0 && n.checked_mul(9) == Some(weight.len()))
            .ok_or_else(|| KernelError::InvalidParam {
                op: OP,
                param: "weight",
                reason: format!(
                    "{} values are not {out_channels} x {in_channels} 3x3 kernels",
                    weight.len()
                ),
            })?;
        // U[e] as out x in, row-major: element (c, m) of the B operand at m * in + c.
        let mut u = vec![0.0f32; variant.positions() * pairs];
        for (pair, g) in weight.chunks_exact(9).enumerate() {
            let mut put = |e: usize, v: f64| u[e * pairs + pair] = v as f32;
            match variant {
                Variant::F2x2 => {
                    let t = kernel_transform(&<F2x2 as Transforms<4, 2>>::G, g);
                    t.iter().flatten().enumerate().for_each(|(e, &v)| put(e, v));
                }
                Variant::F4x4 => {
                    let t = kernel_transform(&<F4x4 as Transforms<6, 4>>::G, g);
                    t.iter().flatten().enumerate().for_each(|(e, &v)| put(e, v));
                }
            }
        }
        let positions = u
            .chunks_exact(pairs)
            .map(|ue| Prepacked::b(in_channels, out_channels, ue, (1, in_channels as isize)))
            .collect::<KernelResult<Vec<_>>>()?;
        Ok(WinogradWeights {
            variant,
            positions,
            in_channels,
            out_channels,
        })
    }

    /// The variant the weights were transformed for.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Bytes of the packed transforms.
    pub fn bytes(&self) -> usize {
        self.positions.iter().map(Prepacked::bytes).sum()
    }
}

/// The convolution `out = post(conv(input, weight) + bias + residual)` through the transforms,
/// for a [`capable`] geometry, `scratch` of at least [`scratch_len`] elements. Lengths were
/// checked by the caller except the scratch and the weights' channel counts.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    input: &[f32],
    input_dims: &[usize],
    weights: &WinogradWeights,
    p: &ConvParams,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) -> KernelResult<()> {
    let weight_dims = [weights.out_channels, weights.in_channels, 3, 3];
    let variant = weights.variant;
    let g = Geometry::new(input_dims, &weight_dims, p, variant).ok_or_else(|| {
        KernelError::InvalidParam {
            op: OP,
            param: "input",
            reason: format!(
                "dims {input_dims:?} do not fit the transformed {weight_dims:?} weight"
            ),
        }
    })?;
    let need = scratch_len(input_dims, &weight_dims, p);
    if scratch.len() < need {
        return Err(KernelError::BufferLength {
            op: OP,
            buffer: "scratch",
            expected: need,
            actual: scratch.len(),
        });
    }
    let (positions, tile) = (variant.positions(), variant.tile());
    let (c, m) = (g.in_channels, g.out_channels);
    let (in_plane, out_plane) = (g.in_h * g.in_w, g.out_h * g.out_w);
    let schedule = Schedule::new(&g, scratch.len(), threads);
    let part_len = scratch.len() / schedule.parts;
    let stop = crate::run_control::stop_token();
    let epilogue = bias.is_some() || residual.is_some() || p.post != Activation::None;
    for b in 0..g.batch {
        let x = &input[b * c * in_plane..][..c * in_plane];
        let y = &mut out[b * m * out_plane..][..m * out_plane];
        let residual = residual.map(|r| &r[b * m * out_plane..][..m * out_plane]);
        let y_len = y.len();
        let y = OutPtr(y.as_mut_ptr());
        // One thread per part of the scratch: it transforms, multiplies and writes back its
        // own bands (tile rows), so no stage reads what another core wrote.
        let part = |t: usize, scratch: &mut [f32]| -> KernelResult<()> {
            for band in schedule.bands_of(t) {
                if stop.should_stop() {
                    return Ok(());
                }
                let (ty0, rows) = schedule.band(band);
                let tiles = rows * g.tiles_x;
                // V[e] for every position e, each in the packed layout of its product's A.
                let mr = packed_a_rows(&weights.positions[0], tiles);
                let packed_len = tiles.div_ceil(mr) * mr * c;
                let (v, rest) = scratch.split_at_mut(positions * packed_len);
                let products = &mut rest[..positions * tiles * m];
                transform_input_packed(variant, mr, x, &g, ty0, rows, v)?;
                // M[e] (tiles x m) at row stride `positions * m`: a tile's products together.
                for (e, (ve, ue)) in v
                    .chunks_exact(packed_len)
                    .zip(&weights.positions)
                    .enumerate()
                {
                    gemm_packed_a(
                        ve,
                        tiles,
                        ue,
                        &mut products[e * m..],
                        ((positions * m) as isize, 1),
                        1,
                    )?;
                }
                // The band's output rows of every plane, then bias, residual and activation
                // on them while they are in cache.
                let oy0 = ty0 * tile;
                let oy1 = ((ty0 + rows) * tile).min(g.out_h);
                let run = (oy1 - oy0) * g.out_w;
                for m0 in (0..m).step_by(LANES) {
                    let lanes = LANES.min(m - m0);
                    let mut planes: [&mut [f32]; LANES] = Default::default();
                    for (l, plane) in planes[..lanes].iter_mut().enumerate() {
                        let at = (m0 + l) * out_plane + oy0 * g.out_w;
                        assert!(at + run <= y_len);
                        // SAFETY: `at..at + run` (asserted inside the batch item's output) is
                        // rows oy0..oy1 of plane m0 + l: this band's own rows, which no other
                        // band writes, and no other slice made here overlaps it.
                        *plane = unsafe { y.slice(at, run) };
                    }
                    let planes = &mut planes[..lanes];
                    match variant {
                        Variant::F2x2 => transform_output(
                            PhantomData::<F2x2>,
                            products,
                            &g,
                            ty0,
                            rows,
                            m0,
                            planes,
                        ),
                        Variant::F4x4 => transform_output(
                            PhantomData::<F4x4>,
                            products,
                            &g,
                            ty0,
                            rows,
                            m0,
                            planes,
                        ),
                    }
                    if epilogue {
                        for (l, plane) in planes.iter_mut().enumerate() {
                            let ch = m0 + l;
                            let at = ch * out_plane + oy0 * g.out_w;
                            let r = residual.map(|r| &r[at..][..run]);
                            let shift = bias.map_or(0.0, |b| b[ch]);
                            p.post.add_residual_bias_and_apply(plane, r, shift);
                        }
                    }
                }
            }
            Ok(())
        };
        if schedule.parts > 1 {
            let base = OutPtr(scratch.as_mut_ptr());
            crate::parallel::try_for_each_index(schedule.parts, |t| {
                // SAFETY: part t is scratch[t * part_len..][..part_len], inside the scratch
                // (parts * part_len <= len) and disjoint from every other part.
                part(t, unsafe { base.slice(t * part_len, part_len) })
            })?;
        } else {
            part(0, scratch)?;
        }
    }
    Ok(())
}

/// How the tile rows of one image are cut into bands and the bands dealt to the threads.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    /// Threads, each with its own part of the scratch and a run of consecutive bands.
    parts: usize,
    /// Bands (a multiple of `parts`).
    bands: usize,
    tiles_y: usize,
}

impl Schedule {
    /// As many parts as threads (when each part of `scratch_len` holds a tile row), with bands
    /// as tall as a part holds, their count a multiple of the parts.
    fn new(g: &Geometry, scratch_len: usize, threads: usize) -> Self {
        // Tile rows a part of the scratch holds beside its slack.
        let fit = |parts: usize| {
            (scratch_len / parts).saturating_sub(g.sliver_slack()) / g.row_len().max(1)
        };
        let parts = (1..=threads.min(g.tiles_y).max(1))
            .rev()
            .find(|&parts| fit(parts) >= 1)
            .unwrap_or(1);
        let rows = fit(parts).clamp(1, g.tiles_y);
        let bands = g
            .tiles_y
            .div_ceil(rows)
            .next_multiple_of(parts)
            .min(g.tiles_y);
        Schedule {
            parts,
            bands: bands.max(parts),
            tiles_y: g.tiles_y,
        }
    }

    /// Bands of part `t`.
    fn bands_of(&self, t: usize) -> std::ops::Range<usize> {
        let per = self.bands.div_ceil(self.parts);
        (t * per).min(self.bands)..((t + 1) * per).min(self.bands)
    }

    /// First tile row and tile rows of band `i` (balanced: heights differ by at most one).
    fn band(&self, i: usize) -> (usize, usize) {
        let at = |i: usize| i * self.tiles_y / self.bands;
        (at(i), at(i + 1) - at(i))
    }
}

/// The output (or the scratch), shared by the part tasks of one call.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: every task touches a disjoint set of elements (its own bands' rows, its own part of
// the scratch), and the call does not return before every task has finished.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `at..at + len` must be inside the pointee and used by no other reference meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, at: usize, len: usize) -> &mut [f32] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(at), len) }
    }
}

/// A variant's band transforms, inlined into each target's copy of [`transform_input`] and
/// [`transform_output`].
trait BandTransforms {
    /// The input transform writing slivers of `MR` tiles, `GROUP` (whole slivers) at a time.
    fn input<const MR: usize, const GROUP: usize>(
        x: &[f32],
        g: &Geometry,
        ty0: usize,
        rows: usize,
        v: &mut [f32],
    );
    fn output(
        products: &[f32],
        g: &Geometry,
        ty0: usize,
        rows: usize,
        m0: usize,
        planes: &mut [&mut [f32]],
    );
}

/// [`BandTransforms`] for a variant of `ALPHA x ALPHA` input tiles and `TILE x TILE` outputs.
macro_rules! band_transforms {
    ($variant:ty, $alpha:literal, $tile:literal) => {
        impl BandTransforms for $variant {
            #[inline(always)]
            fn input<const MR: usize, const GROUP: usize>(
                x: &[f32],
                g: &Geometry,
                ty0: usize,
                rows: usize,
                v: &mut [f32],
            ) {
                input_band::<$alpha, $tile, $variant, MR, GROUP>(x, g, ty0, rows, v)
            }
            #[inline(always)]
            fn output(
                p: &[f32],
                g: &Geometry,
                ty0: usize,
                rows: usize,
                m0: usize,
                y: &mut [&mut [f32]],
            ) {
                output_band::<$alpha, $tile, $variant>(p, g, ty0, rows, m0, y)
            }
        }
    };
}

band_transforms!(F2x2, 4, 2);
band_transforms!(F4x4, 6, 4);

/// A variant's input transform for one sliver height, as the one type parameter
/// `multiversion!` takes.
struct Slivers<V, const MR: usize, const GROUP: usize>(PhantomData<V>);

/// The input transform of a [`Slivers`].
trait InputTransform {
    fn input(x: &[f32], g: &Geometry, ty0: usize, rows: usize, v: &mut [f32]);
}

impl<V: BandTransforms, const MR: usize, const GROUP: usize> InputTransform
    for Slivers<V, MR, GROUP>
{
    #[inline(always)]
    fn input(x: &[f32], g: &Geometry, ty0: usize, rows: usize, v: &mut [f32]) {
        V::input::<MR, GROUP>(x, g, ty0, rows, v)
    }
}

/// [`transform_input`] for the sliver height `mr` of the band's products: each microkernel's
/// `MR` a constant, so a sliver's run of tiles is stored with a few vector moves. The tiles go
/// through the arithmetic a few whole slivers at a time.
fn transform_input_packed(
    variant: Variant,
    mr: usize,
    x: &[f32],
    g: &Geometry,
    ty0: usize,
    rows: usize,
    v: &mut [f32],
) -> KernelResult<()> {
    macro_rules! heights {
        ($(($mr:literal, $group:literal)),*) => {
            match (variant, mr) {
                $(
                    (Variant::F2x2, $mr) => transform_input(
                        PhantomData::<Slivers<F2x2, $mr, $group>>,
                        x, g, ty0, rows, v,
                    ),
                    (Variant::F4x4, $mr) => transform_input(
                        PhantomData::<Slivers<F4x4, $mr, $group>>,
                        x, g, ty0, rows, v,
                    ),
                )*
                _ => {
                    return Err(KernelError::InvalidParam {
                        op: OP,
                        param: "input",
                        reason: format!("no input transform for register tiles of {mr} rows"),
                    })
                }
            }
        };
    }
    // The microkernels' heights (AVX-512 14, 13, 11, 8, and 16 for at most 16 output channels;
    // AVX2 6; portable 4), each with whole slivers of tiles per step: whole AVX2 vectors where
    // that takes at most four slivers (12 tiles for MR 6 were 8 lanes and 4 masked), else as
    // many as fit in 16.
    heights!(
        (4, 16),
        (6, 24),
        (8, 16),
        (11, 11),
        (13, 13),
        (14, 14),
        (16, 16)
    );
    Ok(())
}

multiversion! {
    /// Every input channel's tiles of the band (tile rows `ty0..ty0 + rows`), `Bᵀ d B` of each
    /// with the padding read as zeros, as the packed A of each position's product: position
    /// `e`, channel `p` of tile `t` at `v[e * len + (t / MR * c + p) * MR + t % MR]` (`len` =
    /// one position's slivers, zeros past the last tile).
    fn transform_input<P: InputTransform>(
        _slivers: PhantomData<P>,
        x: &[f32],
        g: &Geometry,
        ty0: usize,
        rows: usize,
        v: &mut [f32],
    ) {
        P::input(x, g, ty0, rows, v)
    }
}

multiversion! {
    /// Output channels `m0..m0 + planes.len()` (at most [`LANES`]) of the band's tiles: `Aᵀ M
    /// A` of each tile's products, clipped at the image's edge. `planes[l]` holds the band's
    /// output rows (from `ty0 * TILE`) of channel `m0 + l`.
    fn transform_output<V: BandTransforms>(
        _variant: PhantomData<V>,
        products: &[f32],
        g: &Geometry,
        ty0: usize,
        rows: usize,
        m0: usize,
        planes: &mut [&mut [f32]],
    ) {
        V::output(products, g, ty0, rows, m0, planes)
    }
}

/// [`transform_input`] for tiles of `ALPHA x ALPHA` inputs and `TILE x TILE` outputs, written
/// in slivers of `MR` tiles, `GROUP` tiles (whole slivers) per vector step. Sliver by sliver,
/// then channel by channel, so each position's packed A is written front to back.
#[inline(always)]
fn input_band<
    const ALPHA: usize,
    const TILE: usize,
    V: Transforms<ALPHA, TILE>,
    const MR: usize,
    const GROUP: usize,
>(
    x: &[f32],
    g: &Geometry,
    ty0: usize,
    rows: usize,
    v: &mut [f32],
) {
    let c = g.in_channels;
    let in_plane = g.in_h * g.in_w;
    let tiles = rows * g.tiles_x;
    let slivers = tiles.div_ceil(MR);
    let len = slivers * MR * c;
    for first in (0..slivers).step_by(GROUP / MR) {
        let t0 = first * MR;
        let lanes = GROUP.min(tiles - t0);
        let group_slivers = (GROUP / MR).min(slivers - first);
        // Each lane's tile: its first input element and whether the tile lies inside the
        // image (whole rows, no edge tests).
        let mut origin = [(0isize, 0isize, false); GROUP];
        for (lane, o) in origin[..lanes].iter_mut().enumerate() {
            let t = t0 + lane;
            let (ty, tx) = (ty0 + t / g.tiles_x, t % g.tiles_x);
            let iy0 = (ty * TILE) as isize - g.pad_top as isize;
            let ix0 = (tx * TILE) as isize - g.pad_left as isize;
            let inside = iy0 >= 0
                && ix0 >= 0
                && iy0 as usize + ALPHA <= g.in_h
                && ix0 as usize + ALPHA <= g.in_w;
            *o = (iy0, ix0, inside);
        }
        // d[r][k][lane]: the input tile of each lane's tile. Every channel writes all of each
        // of the group's tiles, so the lanes past the last tile stay zero.
        let mut d = [[[0.0f32; GROUP]; ALPHA]; ALPHA];
        let mut w = [[[0.0f32; GROUP]; ALPHA]; ALPHA];
        let mut column = [[0.0f32; GROUP]; ALPHA];
        for (ch, x) in x.chunks_exact(in_plane).take(c).enumerate() {
            let at = |iy: isize, ix: isize| -> f32 {
                if iy >= 0 && ix >= 0 && (iy as usize) < g.in_h && (ix as usize) < g.in_w {
                    x[iy as usize * g.in_w + ix as usize]
                } else {
                    0.0
                }
            };
            for (lane, &(iy0, ix0, inside)) in origin[..lanes].iter().enumerate() {
                if inside {
                    let first = iy0 as usize * g.in_w + ix0 as usize;
                    for (r, row) in d.iter_mut().enumerate() {
                        let src: &[f32; ALPHA] = x[first + r * g.in_w..][..ALPHA]
                            .try_into()
                            .expect("ALPHA columns");
                        for (col, &value) in row.iter_mut().zip(src) {
                            col[lane] = value;
                        }
                    }
                    continue;
                }
                for (r, row) in d.iter_mut().enumerate() {
                    for (k, col) in row.iter_mut().enumerate() {
                        col[lane] = at(iy0 + r as isize, ix0 + k as isize);
                    }
                }
            }
            // Rows, then columns: w[r] = Bᵀ d[r] (along k), V[.][j] = Bᵀ w[.][j] (along r).
            for (row, out) in d.iter().zip(&mut w) {
                V::bt(row.each_ref(), out);
            }
            for j in 0..ALPHA {
                V::bt(lanes_of_column(&w, j), &mut column);
                for (i, values) in column.iter().enumerate() {
                    let e = i * ALPHA + j;
                    for q in 0..group_slivers {
                        let at = e * len + ((first + q) * c + ch) * MR;
                        let run: &[f32; MR] = values[q * MR..][..MR].try_into().expect("MR tiles");
                        v[at..][..MR].copy_from_slice(run);
                    }
                }
            }
        }
    }
}

/// Column `j` of per-lane rows: `rows[r][j]` for every `r`, by reference.
#[inline(always)]
fn lanes_of_column<const N: usize, const R: usize, const C: usize>(
    rows: &[[[f32; N]; C]; R],
    j: usize,
) -> [&[f32; N]; R] {
    std::array::from_fn(|r| &rows[r][j])
}

/// [`transform_output`] for tiles of `ALPHA x ALPHA` products and `TILE x TILE` outputs. Tile
/// `t`'s product at position `e` for channel `o` is `products[(t * ALPHA² + e) * m + o]`.
#[inline(always)]
fn output_band<const ALPHA: usize, const TILE: usize, V: Transforms<ALPHA, TILE>>(
    products: &[f32],
    g: &Geometry,
    ty0: usize,
    rows: usize,
    m0: usize,
    planes: &mut [&mut [f32]],
) {
    let m = g.out_channels;
    let positions = ALPHA * ALPHA;
    let tiles = rows * g.tiles_x;
    let lanes = planes.len();
    // The last channels of a layer whose count is not a multiple of LANES, zero-padded.
    let mut part = [[0.0f32; LANES]; MAX_POSITIONS];
    let mut s = [[[0.0f32; LANES]; TILE]; ALPHA];
    let mut y = [[0.0f32; LANES]; TILE];
    for (t, tile) in products.chunks_exact(positions * m).take(tiles).enumerate() {
        let (ty, tx) = (ty0 + t / g.tiles_x, t % g.tiles_x);
        if lanes < LANES {
            for (e, values) in part[..positions].iter_mut().enumerate() {
                values[..lanes].copy_from_slice(&tile[e * m + m0..][..lanes]);
            }
        }
        // z(i, j): position (i, j) of this tile's products for each channel.
        let z = |i: usize, j: usize| -> &[f32; LANES] {
            let e = i * ALPHA + j;
            if lanes < LANES {
                &part[e]
            } else {
                tile[e * m + m0..][..LANES]
                    .try_into()
                    .expect("LANES channels")
            }
        };
        // Rows: s[i] = Aᵀ z[i] (along j); then columns: Y[.][q] = Aᵀ s[.][q] (along i).
        for (i, out) in s.iter_mut().enumerate() {
            V::at(std::array::from_fn(|j| z(i, j)), out);
        }
        for q in 0..TILE {
            let ox = tx * TILE + q;
            if ox >= g.out_w {
                break;
            }
            V::at(lanes_of_column(&s, q), &mut y);
            for (p, values) in y.iter().enumerate() {
                let oy = ty * TILE + p;
                if oy >= g.out_h {
                    break;
                }
                let at = (oy - ty0 * TILE) * g.out_w + ox;
                for (plane, &value) in planes.iter_mut().zip(&values[..lanes]) {
                    plane[at] = value;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::convolution::conv_kernel::{self, conv_output_dims, conv_scratch_len};

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.731 + seed).sin()).collect()
    }

    /// The epilogue a check applies.
    #[derive(Clone, Copy)]
    struct Epilogue {
        bias: bool,
        residual: bool,
        post: Activation,
    }

    const FULL: Epilogue = Epilogue {
        bias: true,
        residual: true,
        post: Activation::Relu,
    };

    const VARIANTS: [Variant; 2] = [Variant::F2x2, Variant::F4x4];

    /// Both variants against the direct path on one geometry, on a pool of `threads`.
    fn check(n: usize, c: usize, m: usize, h: usize, w: usize, pads: [usize; 4], threads: usize) {
        for variant in VARIANTS {
            check_with(variant, n, c, m, (h, w), pads, threads, FULL);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn check_with(
        variant: Variant,
        n: usize,
        c: usize,
        m: usize,
        (h, w): (usize, usize),
        pads: [usize; 4],
        threads: usize,
        epilogue: Epilogue,
    ) {
        let p = ConvParams {
            pads_begin: vec![pads[0], pads[1]],
            pads_end: vec![pads[2], pads[3]],
            post: epilogue.post,
            ..ConvParams::default()
        };
        let (x_dims, w_dims) = ([n, c, h, w], [m, c, 3, 3]);
        let x = values(n * c * h * w, 0.3);
        let weight = values(m * c * 9, 1.1);
        let bias = epilogue.bias.then(|| values(m, 2.0));
        let out_dims = conv_output_dims(&x_dims, &w_dims, &p).unwrap();
        let len: usize = out_dims.iter().product();
        let residual = epilogue.residual.then(|| values(len, 0.7));
        let mut expected = vec![0.0; len];
        let mut unfold = vec![0.0; conv_scratch_len(&x_dims, &w_dims, &p)];
        conv_kernel::conv(
            &x,
            &x_dims,
            &weight,
            &w_dims,
            bias.as_deref(),
            residual.as_deref(),
            None,
            &p,
            &mut expected,
            &mut unfold,
            1,
        )
        .unwrap();
        let packed = WinogradWeights::new(&weight, m, c, variant).unwrap();
        let mut scratch = vec![0.0; scratch_len(&x_dims, &w_dims, &p)];
        let mut got = vec![f32::NAN; len];
        let pool = crate::parallel::ThreadPool::new(threads).unwrap();
        crate::parallel::install(&pool, || {
            conv(
                &x,
                &x_dims,
                &packed,
                &p,
                bias.as_deref(),
                residual.as_deref(),
                &mut got,
                &mut scratch,
                threads,
            )
        })
        .unwrap();
        let scale = expected.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * scale.max(1.0) * (c as f32).sqrt(),
                "{variant:?} {n}x{c}x{h}x{w} -> {m}, pads {pads:?}, {threads} threads: \
                 element {i}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn equals_the_direct_convolution() {
        // Tile-aligned and ragged edges, asymmetric and no padding, several bands, channel
        // counts that are not multiples of the vector width, batches, one to three threads.
        for threads in [1, 2, 3] {
            check(1, 16, 16, 8, 8, [1, 1, 1, 1], threads);
            check(1, 17, 33, 13, 11, [1, 1, 1, 1], threads);
            check(2, 8, 20, 7, 9, [0, 0, 0, 0], threads);
            check(1, 5, 3, 10, 6, [2, 0, 1, 2], threads);
            check(1, 24, 40, 61, 70, [1, 1, 1, 1], threads);
            // One tile row (more threads than rows), and a plane wider than a band.
            check(1, 7, 9, 3, 19, [0, 1, 0, 1], threads);
            check(2, 6, 18, 9, 530, [1, 1, 1, 1], threads);
        }
    }

    #[test]
    fn every_epilogue_equals_the_direct_convolution() {
        for (bias, residual, post) in [
            (false, false, Activation::None),
            (true, false, Activation::None),
            (false, true, Activation::None),
            (
                true,
                false,
                Activation::Clip {
                    min: -0.5,
                    max: 0.5,
                },
            ),
            (true, true, Activation::LeakyRelu { alpha: 0.1 }),
        ] {
            let epilogue = Epilogue {
                bias,
                residual,
                post,
            };
            for (variant, threads) in VARIANTS.into_iter().flat_map(|v| [(v, 1), (v, 2), (v, 3)]) {
                check_with(
                    variant,
                    1,
                    19,
                    21,
                    (23, 17),
                    [1, 1, 1, 1],
                    threads,
                    epilogue,
                );
                check_with(
                    variant,
                    2,
                    24,
                    32,
                    (20, 26),
                    [1, 1, 1, 1],
                    threads,
                    epilogue,
                );
            }
        }
    }

    /// Bands whose tile counts are not whole slivers (of 6 rows with AVX2, 14/13/11/8 with
    /// AVX-512, 4 portable), bands of unequal heights, padding on some sides, bias, residual and
    /// Relu, one and two threads.
    #[test]
    fn partial_slivers_equal_the_direct_convolution() {
        for threads in [1, 2] {
            for variant in VARIANTS {
                // F(4x4): 10 rows of 7 tiles (70, or 35 + 35 on two threads).
                check_with(variant, 1, 64, 40, (37, 27), [1, 1, 1, 1], threads, FULL);
                // F(4x4): 13 rows of 4 tiles (52, or 24 + 28 on two threads); one row of 3.
                check_with(variant, 1, 33, 17, (50, 13), [1, 0, 1, 2], threads, FULL);
                check_with(variant, 2, 20, 16, (6, 10), [0, 1, 0, 1], threads, FULL);
                // F(4x4): 29 rows of 3 tiles (87, or 45 + 42).
                check_with(variant, 1, 9, 35, (113, 9), [1, 1, 1, 1], threads, FULL);
            }
        }
    }

    /// The input transform for every microkernel's sliver height (AVX-512's too, which this
    /// CPU may not run) against `Bᵀ d B` of each tile one at a time: the packed layout, the
    /// padding read as zeros, zeros past the last tile.
    #[test]
    fn packed_inputs_match_each_tile_for_every_sliver_height() {
        fn reference<const ALPHA: usize, const TILE: usize, V: Transforms<ALPHA, TILE>>(
            x: &[f32],
            g: &Geometry,
            ty0: usize,
            rows: usize,
            mr: usize,
            v: &[f32],
        ) {
            let c = g.in_channels;
            let tiles = rows * g.tiles_x;
            let len = tiles.div_ceil(mr) * mr * c;
            for t in 0..tiles.div_ceil(mr) * mr {
                for ch in 0..c {
                    let d = |r: usize, k: usize| -> f32 {
                        let (ty, tx) = (ty0 + t / g.tiles_x, t % g.tiles_x);
                        let iy = (ty * TILE + r) as isize - g.pad_top as isize;
                        let ix = (tx * TILE + k) as isize - g.pad_left as isize;
                        let inside = t < tiles
                            && (0..g.in_h as isize).contains(&iy)
                            && (0..g.in_w as isize).contains(&ix);
                        if inside {
                            x[ch * g.in_h * g.in_w + iy as usize * g.in_w + ix as usize]
                        } else {
                            0.0
                        }
                    };
                    let mut w = [[[0.0f32; 1]; ALPHA]; ALPHA];
                    for (r, out) in w.iter_mut().enumerate() {
                        let row: [[f32; 1]; ALPHA] = std::array::from_fn(|k| [d(r, k)]);
                        V::bt(row.each_ref(), out);
                    }
                    for j in 0..ALPHA {
                        let mut column = [[0.0f32; 1]; ALPHA];
                        V::bt(lanes_of_column(&w, j), &mut column);
                        for (i, want) in column.iter().enumerate() {
                            let e = i * ALPHA + j;
                            let got = v[e * len + (t / mr * c + ch) * mr + t % mr];
                            assert!(
                                (got - want[0]).abs() <= 1e-5 * (1.0 + want[0].abs()),
                                "MR {mr}: tile {t} channel {ch} position {e}: {got} vs {}",
                                want[0]
                            );
                        }
                    }
                }
            }
        }
        let p = ConvParams {
            pads_begin: vec![1, 2],
            pads_end: vec![1, 0],
            ..ConvParams::default()
        };
        let (c, h, w) = (5, 23, 17);
        let x = values(c * h * w, 0.4);
        for variant in VARIANTS {
            let g = Geometry::new(&[1, c, h, w], &[8, c, 3, 3], &p, variant).unwrap();
            // A band from the second tile row on, with a partial last sliver for each height.
            let (ty0, rows) = (1, g.tiles_y - 2);
            for mr in [4, 6, 8, 11, 13, 14] {
                let tiles = rows * g.tiles_x;
                let mut v = vec![f32::NAN; variant.positions() * tiles.div_ceil(mr) * mr * c];
                transform_input_packed(variant, mr, &x, &g, ty0, rows, &mut v).unwrap();
                match variant {
                    Variant::F2x2 => reference::<4, 2, F2x2>(&x, &g, ty0, rows, mr, &v),
                    Variant::F4x4 => reference::<6, 4, F4x4>(&x, &g, ty0, rows, mr, &v),
                }
            }
            let mut v = vec![0.0; 10_000];
            assert!(transform_input_packed(variant, 5, &x, &g, ty0, rows, &mut v).is_err());
        }
    }

    /// Bands cover every tile row once, in order, and each part's bands fit its scratch.
    #[test]
    fn schedules_cover_every_tile_row() {
        for (h, w, c, m) in [
            (56, 56, 64, 64),
            (28, 28, 128, 128),
            (13, 11, 17, 33),
            (5, 530, 4, 4),
        ] {
            let (x_dims, w_dims) = ([1, c, h, w], [m, c, 3, 3]);
            let p = ConvParams {
                pads_begin: vec![1, 1],
                pads_end: vec![1, 1],
                ..ConvParams::default()
            };
            for variant in VARIANTS {
                let g = Geometry::new(&x_dims, &w_dims, &p, variant).unwrap();
                let len = scratch_len(&x_dims, &w_dims, &p);
                for threads in 1..=4 {
                    let s = Schedule::new(&g, len, threads);
                    assert!(s.parts >= 1 && s.parts <= threads);
                    let mut next = 0;
                    for t in 0..s.parts {
                        for band in s.bands_of(t) {
                            let (ty0, rows) = s.band(band);
                            assert_eq!(ty0, next);
                            assert!(rows >= 1);
                            let need =
                                variant.positions() * rows * g.tiles_x * (c + m) + g.sliver_slack();
                            assert!(need <= len / s.parts, "{h}x{w}: band {band} needs {need}");
                            next += rows;
                        }
                    }
                    assert_eq!(next, g.tiles_y);
                }
                // Two threads split the rows in two when a part holds half of them.
                let s = Schedule::new(&g, len, 2);
                if g.tiles_y >= 2 && g.band_rows() >= g.tiles_y && len == g.scratch_len() {
                    assert_eq!((s.parts, s.bands), (2, 2));
                }
            }
        }
    }

    #[test]
    fn mismatched_inputs_are_errors() {
        for variant in VARIANTS {
            let packed = WinogradWeights::new(&values(4 * 3 * 9, 0.0), 4, 3, variant).unwrap();
            let p = ConvParams {
                pads_begin: vec![1, 1],
                pads_end: vec![1, 1],
                ..ConvParams::default()
            };
            let mut out = vec![0.0; 4 * 64];
            let err = conv(
                &values(5 * 64, 0.0),
                &[1, 5, 8, 8],
                &packed,
                &p,
                None,
                None,
                &mut out,
                &mut [],
                1,
            );
            assert!(err.is_err());
            let err = conv(
                &values(3 * 64, 0.0),
                &[1, 3, 8, 8],
                &packed,
                &p,
                None,
                None,
                &mut out,
                &mut [],
                1,
            );
            assert!(matches!(err, Err(KernelError::BufferLength { .. })));
            assert!(WinogradWeights::new(&[0.0; 10], 4, 3, variant).is_err());
            assert!(WinogradWeights::new(&[], 0, 3, variant).is_err());
        }
    }

    /// The plan-time choice: F(4x4) on large planes, F(2x2) on the 13x13 and 14x14 ones, neither
    /// where the layer is too thin or the geometry is not 3x3 stride 1.
    #[test]
    fn variants_are_chosen_by_plane_and_depth() {
        let p = ConvParams {
            pads_begin: vec![1, 1],
            pads_end: vec![1, 1],
            ..ConvParams::default()
        };
        let pick = |c: usize, m: usize, hw: usize| variant(&[1, c, hw, hw], &[m, c, 3, 3], &p);
        assert_eq!(pick(64, 64, 56), Some(Variant::F4x4));
        assert_eq!(pick(128, 128, 28), Some(Variant::F4x4));
        assert_eq!(pick(256, 256, 14), Some(Variant::F2x2));
        assert_eq!(pick(64, 256, 13), Some(Variant::F2x2));
        assert_eq!(pick(512, 512, 7), None);
        assert_eq!(pick(48, 192, 13), None);
        assert_eq!(pick(16, 64, 55), None);
        let strided = ConvParams {
            strides: vec![2, 2],
            ..p.clone()
        };
        assert_eq!(
            variant(&[1, 256, 14, 14], &[256, 256, 3, 3], &strided),
            None
        );
    }
}
