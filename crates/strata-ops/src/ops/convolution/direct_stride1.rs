//! Direct stride-1 convolution for thin layers (SqueezeNet's 3x3 expands: 16 to 64 input
//! channels), where im2col + GEMM has a depth of only 144..576 and the unfold and packing cost
//! as much as the multiply-adds.
//!
//! A band of input rows of every channel is copied zero-padded into planes of row stride
//! `Wp = pad_left + W + pad_right`; an output at row `oy`, column `ox` is computed at the
//! flattened position `q = oy * Wp + ox`, so every tap's input for a vector of consecutive
//! positions is one contiguous load at `q + ky * dy * Wp + kx * dx`, whatever the width. Only the
//! `Wp - OW` padding columns of every row are computed for nothing (2 of 57 at 55x55, on AVX2
//! and where the window changes the width); their
//! lanes are dropped as the outputs are stored (the valid lanes of a vector are consecutive
//! outputs: one compress and one masked store on AVX-512, a masked store per row on AVX2). A
//! register block of output channels x vectors (`direct_stride1_block`) keeps its accumulators
//! over every input channel and tap (3x3: the nine taps unrolled in one loop over the input
//! channels, which keeps all of AVX-512's 24 in registers); bias, residual and Relu/Clip are
//! applied in registers as the block is stored.
//!
//! AVX-512 drops the padding columns wherever the 3x3 window keeps the width (compact rows,
//! [`Geometry::compact`]): rows of stride `W`, position `q = oy * W + ox`, the padding only the
//! band's zero rows; a column tap's lanes whose column is off the image (they hold the row
//! before's or after's ends) are left out of its multiply-adds by merge-masked FMAs (the middle
//! column's taps, always on the image, unmasked: six masks for three vectors, all in mask
//! registers), and a vector's outputs are consecutive, stored with one masked store. So 169
//! outputs take 11 vectors, not 13, and 55x55's rows no padding columns. Bands of output rows
//! are split over the threads, each thread taking the same bands on every run.
//!
//! f32 on AVX-512 or AVX2 + FMA (elsewhere the GEMM path stays); the weights are reordered once
//! at plan time ([`DirectWeights`], Persistent memory).

use strata_core::Tensor;

use super::band_output::OutPtr;
use super::conv_params::ConvParams;
#[cfg(target_arch = "x86_64")]
use super::direct_stride1_block::{self as kernel, Block, Edges, Store, AVX2_BLOCK, AVX512_BLOCK};
use super::few_channels::window;
use super::interleaved_weights::interleave_weight_rows;
use super::row_band::{Clamp, ClampKind, LANES};
#[cfg(target_arch = "x86_64")]
use super::simd::Simd;
use super::winograd;
use crate::kernels::error::{KernelError, KernelResult};
use crate::kernels::gemm::with_pack_buffers;
use crate::kernels::spatial::check_len;

const OP: &str = "Conv";
/// At most this many taps per window (7x7).
const MAX_TAPS: usize = 49;
/// The band's size target in elements (all its channels' padded rows). One thread, 64 <- 16 at
/// 55x55: 8K 293 us, 16K 284, 32K 287; 256 <- 64 at 13x13: 300, 289, 294.
const BAND_ELEMENTS: usize = 16 * 1024;

/// Whether the direct kernel takes this convolution: f32 on AVX-512 or AVX2, 2-D, one group, stride 1,
/// a 3x3 window, 8 to 64 input channels (im2col + GEMM's depth of 72..576 is where unfolding
/// and packing cost as much as the products), at least a register block's output channels and output
/// rows at least 8 wide; not where Winograd runs. F(4x4): 64 <- 64 at 28x28, one thread, 270
/// us there against 385 here; at 56x56 1.10 against 1.64 ms. F(2x2) (256 <- 64 at 13x13, the
/// only thin layer it takes): alternating A/B on Intel against this kernel with compact rows,
/// the layer alone 0.90x the time at one thread and 0.97x at two, SqueezeNet 0.99x and 1.00x
/// (against the kernel before compact rows everywhere: the layer 0.80x and 0.88x, SqueezeNet
/// 0.99x at both). On Zen 4 (SqueezeNet, one thread, in the model, an older version of this
/// kernel) F(2x2) ran 474-875 us against a steady 590-620 here, slower as often as faster.
/// Thinner layers measured F(2x2) slower in the model: 192 <- 48 at 13x13 1.00x and 1.01x
/// SqueezeNet, 128 <- 32 at 27x27 slower at two threads, 64 <- 16 at 55x55 1.7x the layer.
pub(crate) fn pays(input_dims: &[usize], weight_dims: &[usize], p: &ConvParams) -> bool {
    let Some(block) = oc_block() else {
        return false;
    };
    if input_dims.len() != 4 || weight_dims.len() != 4 || p.groups != 1 {
        return false;
    }
    let (cin, cout) = (input_dims[1], weight_dims[0]);
    let Ok(w) = window(input_dims, weight_dims, p) else {
        return false;
    };
    weight_dims[1] == cin
        && weight_dims[2..] == [3, 3]
        && w.strides.iter().all(|&s| s == 1)
        && (8..=64).contains(&cin)
        && cout >= block
        && w.out_dims[1] >= 8
        && winograd::variant(input_dims, weight_dims, p).is_none()
}

/// Output channels of the register block on this CPU (one broadcast weight each per tap), or
/// `None` where the kernel does not run (no AVX-512 nor AVX2 + FMA).
fn oc_block() -> Option<usize> {
    detected().as_ref().and_then(block_of)
}

/// The ISA token the kernel runs with (`()` where there is none).
#[cfg(target_arch = "x86_64")]
type Token = Simd;
#[cfg(not(target_arch = "x86_64"))]
type Token = ();

/// The widest ISA detected.
fn detected() -> Option<Token> {
    #[cfg(target_arch = "x86_64")]
    {
        Simd::detect()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Output channels of `isa`'s register block.
fn block_of(isa: &Token) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        Some(match isa {
            Simd::Avx512(_) => AVX512_BLOCK.0,
            Simd::Avx2(_) => AVX2_BLOCK.0,
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let () = isa;
        None
    }
}

/// A weight `[out, in, kh, kw]` reordered for the kernel: per block of `block` output
/// channels, per input channel and tap, the block's `block` weights (zero past the last
/// channel). Held by the plan in Persistent memory; the original is freed.
#[derive(Debug)]
pub struct DirectWeights {
    data: Tensor,
    /// Output channels per block of `data`: the register block's.
    block: usize,
    /// `[out, in, kh, kw]`.
    dims: [usize; 4],
}

impl DirectWeights {
    pub fn new(weight: &[f32], weight_dims: &[usize]) -> KernelResult<Self> {
        Self::with_block(weight, weight_dims, oc_block())
    }

    /// For register blocks of `block` output channels (`None`: no kernel on this CPU).
    fn with_block(
        weight: &[f32],
        weight_dims: &[usize],
        block: Option<usize>,
    ) -> KernelResult<Self> {
        let invalid = |reason: String| KernelError::InvalidParam {
            op: OP,
            param: "weight",
            reason,
        };
        let &[cout, cin, kh, kw] = weight_dims else {
            return Err(invalid(format!("{weight_dims:?} is not a 2-D kernel")));
        };
        let taps = kh * kw;
        let depth = cin * taps;
        if depth == 0 || taps > MAX_TAPS || cout.checked_mul(depth) != Some(weight.len()) {
            return Err(invalid(format!(
                "{} values do not make a {weight_dims:?} kernel of at most {MAX_TAPS} taps",
                weight.len()
            )));
        }
        let block = block.ok_or_else(|| invalid("no kernel on this CPU".into()))?;
        let data = interleave_weight_rows(weight, depth, block).map_err(invalid)?;
        Ok(DirectWeights {
            data,
            block,
            dims: [cout, cin, kh, kw],
        })
    }
}

/// The padded planes of one convolution: input `h x wd` at offset `(pad_top, pad_left)` in rows
/// of `wp`, outputs `oh x ow`, and the taps' offsets in a plane.
#[derive(Debug)]
struct Geometry {
    /// Compact rows (AVX-512, 3x3 windows as wide as their input): `wp = wd`, no padding
    /// columns, input row `r` from `pad_left + r * wd` of a plane; a tap's lanes whose column
    /// is off the image are left out of its multiply-adds (merge-masked FMAs), so a 13x13
    /// image's 169 outputs take 11 vectors, not the 13 of its 193 padded positions. Alternating
    /// A/B against padded rows, one thread: at first only on 13x13 (192 <- 48 and 256 <- 64
    /// 0.91x the time; zero-masked loads instead 0.98x), 27x27 1.01x and 55x55 1.07x with
    /// those loads, 0.99x and 1.03x with masked FMAs of all three column taps (nine masks for
    /// three vectors: seven mask registers, reloads in the loop); with the middle column
    /// unmasked and stores without a compress, 128 <- 32 at 27x27 0.91x, 64 <- 16 at 55x55
    /// 0.96x (and 192 <- 48 at 13x13 0.91x against the nine masks).
    compact: bool,
    kw: usize,
    dx: usize,
    h: usize,
    wd: usize,
    pad_top: usize,
    pad_left: usize,
    wp: usize,
    oh: usize,
    ow: usize,
    /// Input rows a band needs beyond its output rows: `(kh - 1) * dy`.
    halo: usize,
    taps: [usize; MAX_TAPS],
    tap_count: usize,
}

impl Geometry {
    /// `masked`: whether the ISA loads with lane masks (AVX-512), for compact rows.
    fn new(
        input_dims: &[usize],
        weight_dims: &[usize; 4],
        p: &ConvParams,
        masked: bool,
    ) -> KernelResult<Self> {
        let w = window(input_dims, weight_dims, p)?;
        let [_, _, kh, kw] = *weight_dims;
        if w.strides.iter().any(|&s| s != 1) || kh * kw > MAX_TAPS {
            return Err(KernelError::InvalidParam {
                op: OP,
                param: "strides",
                reason: format!("the direct kernel runs stride 1 only, got {:?}", w.strides),
            });
        }
        let (dy, dx) = (w.dilations[0], w.dilations[1]);
        let compact = masked && (kh, kw) == (3, 3) && w.out_dims[1] == w.in_dims[1];
        let wp = if compact {
            w.in_dims[1]
        } else {
            w.pads_begin[1] + w.in_dims[1] + w.pads_end[1]
        };
        let mut taps = [0; MAX_TAPS];
        for (t, at) in taps[..kh * kw].iter_mut().enumerate() {
            *at = t / kw * dy * wp + t % kw * dx;
        }
        Ok(Geometry {
            compact,
            kw,
            dx,
            h: w.in_dims[0],
            wd: w.in_dims[1],
            pad_top: w.pads_begin[0],
            pad_left: w.pads_begin[1],
            wp,
            oh: w.out_dims[0],
            ow: w.out_dims[1],
            halo: (kh - 1) * dy,
            taps,
            tap_count: kh * kw,
        })
    }

    /// Elements of one channel's plane in a band of `rows` output rows: its padded input rows,
    /// then room for the last vector's overreach (at most 15 positions past them).
    fn plane_len(&self, rows: usize) -> usize {
        (rows + self.halo) * self.wp + LANES + self.lead() + self.compact_reach()
    }

    /// Elements before a compact plane's first row (its column taps read from `-pad_left`).
    fn lead(&self) -> usize {
        if self.compact {
            self.pad_left
        } else {
            0
        }
    }

    /// How far a compact row's column taps reach past its end.
    fn compact_reach(&self) -> usize {
        if self.compact {
            (self.kw - 1) * self.dx
        } else {
            0
        }
    }

    /// How the work is cut: into bands of output rows of about [`BAND_ELEMENTS`] of input each,
    /// and with more than one thread into a count of tasks the threads share evenly; an image
    /// that fits one band is split over groups of output channels instead (both threads copy
    /// it, but every vector of its rows stays a full register block).
    /// Returns `(bands, channel groups)`.
    fn split(&self, cin: usize, blocks: usize, batch: usize, threads: usize) -> (usize, usize) {
        let per_row = cin * self.wp;
        let rows = (BAND_ELEMENTS / per_row.max(1))
            .saturating_sub(self.halo)
            .clamp(1, self.oh.max(1));
        let mut bands = self.oh.div_ceil(rows);
        if bands == 1 && batch < threads {
            return (1, threads.min(blocks));
        }
        while threads > 1 && !(batch * bands).is_multiple_of(threads) && bands < self.oh {
            bands += 1;
        }
        (bands, 1)
    }

    /// Output rows of band `k` of `bands`: the rows as evenly split as they can be.
    fn band(&self, k: usize, bands: usize) -> std::ops::Range<usize> {
        k * self.oh / bands..(k + 1) * self.oh / bands
    }

    /// Copies the input rows under output rows `oy0..oy0 + rows` of `x` (`cin` planes) into
    /// `buf`, zero-padded: channel `c`'s padded row `r` at `c * plane_len(rows) + r * wp`.
    fn fill(&self, x: &[f32], cin: usize, oy0: usize, rows: usize, buf: &mut [f32]) {
        let plane = self.plane_len(rows);
        let (pl, wd) = (self.pad_left, self.wd);
        if self.compact {
            for (c, dst) in buf[..cin * plane].chunks_exact_mut(plane).enumerate() {
                // Zero rows above and below the image, its rows side by side between.
                let first = self.pad_top.saturating_sub(oy0).min(rows + self.halo);
                let end = (self.h + self.pad_top)
                    .saturating_sub(oy0)
                    .clamp(first, rows + self.halo);
                let (head, rest) = dst.split_at_mut(pl + first * wd);
                head.fill(0.0);
                let (body, tail) = rest.split_at_mut((end - first) * wd);
                if end > first {
                    let iy0 = oy0 + first - self.pad_top;
                    body.copy_from_slice(&x[(c * self.h + iy0) * wd..][..body.len()]);
                }
                tail.fill(0.0);
            }
            return;
        }
        for (c, dst) in buf[..cin * plane].chunks_exact_mut(plane).enumerate() {
            let (padded, slack) = dst.split_at_mut((rows + self.halo) * self.wp);
            slack.fill(0.0);
            for (r, row) in padded.chunks_exact_mut(self.wp).enumerate() {
                let iy = (oy0 + r).wrapping_sub(self.pad_top);
                if iy >= self.h {
                    row.fill(0.0);
                    continue;
                }
                row[..pl].fill(0.0);
                row[pl..pl + wd].copy_from_slice(&x[(c * self.h + iy) * wd..][..wd]);
                row[pl + wd..].fill(0.0);
            }
        }
    }

    /// The valid lanes of the vector of `lanes` at flattened position `q` of a band starting at output row
    /// `oy0` with `positions` positions, and the output they start at.
    #[cfg(target_arch = "x86_64")]
    fn store(&self, lanes: usize, oy0: usize, positions: usize, q: usize) -> Store {
        let end = (q + lanes).min(positions);
        let mut store = Store::default();
        let mut first = true;
        let mut row = q / self.wp;
        while row * self.wp < end {
            let s = (row * self.wp).max(q);
            let e = (row * self.wp + self.ow).min(end);
            if s < e {
                store.mask |= ((1u32 << (e - s)) - 1) << (s - q);
                if first {
                    store.at = (oy0 + row) * self.ow + s - row * self.wp;
                    first = false;
                }
            }
            row += 1;
        }
        store
    }
}

/// `out = post(conv(input, weight) + bias + residual)` for an NCHW `input` of `input_dims` and
/// the weight in `weights`, stride 1; `out` (and `residual`) hold `[N, out, OH, OW]`. Lengths
/// are checked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv(
    input: &[f32],
    input_dims: &[usize],
    weights: &DirectWeights,
    p: &ConvParams,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
) -> KernelResult<()> {
    conv_on(
        detected(),
        input,
        input_dims,
        weights,
        p,
        bias,
        residual,
        out,
        threads,
    )
}

/// [`conv`] on `simd` (the weights' block must be its own).
#[allow(clippy::too_many_arguments)]
fn conv_on(
    simd: Option<Token>,
    input: &[f32],
    input_dims: &[usize],
    weights: &DirectWeights,
    p: &ConvParams,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    out: &mut [f32],
    threads: usize,
) -> KernelResult<()> {
    let [cout, cin, _, _] = weights.dims;
    let Some(simd) = simd.filter(|s| {
        input_dims.len() == 4
            && input_dims[1] == cin
            && p.groups == 1
            && block_of(s) == Some(weights.block)
    }) else {
        return Err(KernelError::InvalidParam {
            op: OP,
            param: "input",
            reason: format!(
                "{input_dims:?} does not fit the {:?} direct kernel (AVX-512 or AVX2 only)",
                weights.dims
            ),
        });
    };
    #[cfg(target_arch = "x86_64")]
    let masked = matches!(simd, Simd::Avx512(_));
    #[cfg(not(target_arch = "x86_64"))]
    let masked = false;
    let g = Geometry::new(input_dims, &weights.dims, p, masked)?;
    let batch = input_dims[0];
    let (in_len, out_plane) = (g.h * g.wd, g.oh * g.ow);
    let out_len = cout * out_plane;
    check_len(OP, "input", input.len(), batch * cin * in_len)?;
    check_len(OP, "output", out.len(), batch * out_len)?;
    if let Some(r) = residual {
        check_len(OP, "residual", r.len(), out.len())?;
    }
    if let Some(b) = bias {
        check_len(OP, "bias", b.len(), cout)?;
    }
    if out.is_empty() {
        return Ok(());
    }
    let read = weights
        .data
        .read::<f32>()
        .map_err(|e| KernelError::InvalidParam {
            op: OP,
            param: "weight",
            reason: e.to_string(),
        })?;
    let packed = read.as_slice().ok_or_else(|| KernelError::InvalidParam {
        op: OP,
        param: "weight",
        reason: "packed weight is not contiguous".into(),
    })?;
    // Relu and Clip are applied in registers; another activation as a pass after each block.
    let (clamp, after) = match Clamp::of(p.post, false) {
        Some(c) => (c, false),
        None => (
            Clamp {
                lo: 0.0,
                hi: 0.0,
                kind: ClampKind::None,
            },
            true,
        ),
    };
    let muladds = out.len().saturating_mul(g.tap_count * cin);
    let threads = if muladds < 1 << 16 { 1 } else { threads.max(1) };
    let oc_block = weights.block;
    let blocks = cout.div_ceil(oc_block);
    let (bands, groups) = g.split(cin, blocks, batch, threads);
    let tasks = batch * bands * groups;
    let per_part = tasks.div_ceil(threads.min(tasks));
    let parts = tasks.div_ceil(per_part);
    let stop = crate::run_control::stop_token();
    let shared = OutPtr(out.as_mut_ptr());
    let task = |i: usize| {
        let (b, k, group) = (i / (bands * groups), i / groups % bands, i % groups);
        let first = group * blocks / groups * oc_block;
        let last = ((group + 1) * blocks / groups * oc_block).min(cout);
        let rows = g.band(k, bands);
        let (oy0, n) = (rows.start, rows.len());
        if n == 0 {
            return;
        }
        let plane = g.plane_len(n);
        let x = &input[b * cin * in_len..][..cin * in_len];
        with_pack_buffers::<f32, _>(cin * plane, 0, |buf, _| {
            let buf = &mut buf[..cin * plane];
            g.fill(x, cin, oy0, n, buf);
            #[cfg(target_arch = "x86_64")]
            {
                let block = Block {
                    src: buf,
                    plane,
                    cin,
                    positions: (n - 1) * g.wp + g.ow,
                    taps: &g.taps[..g.tap_count],
                    weights: packed,
                    bias,
                    clamp,
                    out: shared.at(b * out_len),
                    residual: residual.map(|r| &r[b * out_len..][..out_len]),
                    out_plane,
                    channels: cout,
                    edges: g.compact.then_some(Edges {
                        width: g.wd,
                        left: g.pad_left,
                    }),
                };
                // SAFETY: the token was detected; the stores go to output rows `oy0..oy0 + n`
                // of batch item `b`, this task's alone.
                unsafe {
                    match simd {
                        Simd::Avx512(isa) => {
                            let at = |q| g.store(16, oy0, block.positions, q);
                            kernel::channels_avx512(isa, &block, first..last, &at)
                        }
                        Simd::Avx2(isa) => {
                            let at = |q| g.store(8, oy0, block.positions, q);
                            kernel::channels_avx2(isa, &block, first..last, &at)
                        }
                    }
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = simd;
            if after {
                for c in first..last {
                    let at = b * out_len + c * out_plane + oy0 * g.ow;
                    // SAFETY: rows `oy0..oy0 + n` of plane `c`, this task's alone.
                    p.post.apply_all(unsafe { shared.slice(at, n * g.ow) });
                }
            }
        });
    };
    let part = |t: usize| {
        for i in t * per_part..((t + 1) * per_part).min(tasks) {
            if stop.should_stop_at(i) {
                return;
            }
            task(i);
        }
    };
    if parts <= 1 {
        part(0);
    } else {
        crate::parallel::for_each_thread(parts, part);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::activation::Activation;
    use crate::ops::convolution::few_channels::tests::reference;
    use crate::support::rng::Rng;

    /// Every ISA this CPU has (AVX2 too on AVX-512), for the kernel.
    fn isas() -> Vec<Token> {
        #[cfg(target_arch = "x86_64")]
        {
            Simd::all()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Vec::new()
        }
    }

    /// One convolution through the kernel on every ISA at 1 to 3 threads, checked against the
    /// f64 reference.
    fn check(case: &str, x_dims: [usize; 4], w_dims: [usize; 4], p: &ConvParams, rng: &mut Rng) {
        let geometry = window(&x_dims, &w_dims, p).unwrap();
        let [oh, ow] = [geometry.out_dims[0], geometry.out_dims[1]];
        let x = rng.vec(x_dims.iter().product());
        let wt = rng.vec(w_dims.iter().product());
        let bias = rng.vec(w_dims[0]);
        let len = x_dims[0] * w_dims[0] * oh * ow;
        let residual = (rng.below(3) == 1).then(|| rng.vec(len));
        let want = reference(
            &x,
            &x_dims,
            &wt,
            &w_dims,
            p,
            &bias,
            residual.as_deref(),
            [oh, ow],
        );
        for (isa, threads) in isas()
            .into_iter()
            .flat_map(|s| (1..=3).map(move |t| (s, t)))
        {
            let weights = DirectWeights::with_block(&wt, &w_dims, block_of(&isa)).unwrap();
            let pool = crate::parallel::ThreadPool::new(threads).unwrap();
            let mut got = vec![f32::NAN; len];
            crate::parallel::install(&pool, || {
                conv_on(
                    Some(isa),
                    &x,
                    &x_dims,
                    &weights,
                    p,
                    Some(&bias),
                    residual.as_deref(),
                    &mut got,
                    threads,
                )
            })
            .unwrap();
            for (j, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{case} {x_dims:?} {w_dims:?} {p:?} {isa:?} threads {threads}: element {j}: {a} vs {b}"
                );
            }
        }
    }

    fn params(
        k: [usize; 2],
        pads: [usize; 4],
        dilations: [usize; 2],
        post: Activation,
    ) -> ConvParams {
        ConvParams {
            kernel: k.to_vec(),
            strides: vec![1, 1],
            pads_begin: pads[..2].to_vec(),
            pads_end: pads[2..].to_vec(),
            dilations: dilations.to_vec(),
            groups: 1,
            post,
        }
    }

    /// The epilogues the tests cycle through: the fused ones, then one that runs as a pass.
    const POSTS: [Activation; 4] = [
        Activation::None,
        Activation::Relu,
        Activation::Clip {
            min: -0.5,
            max: 0.75,
        },
        Activation::Sigmoid,
    ];

    /// Whether this CPU runs the kernel (tests skip, saying so, where it does not).
    fn kernel_runs() -> bool {
        let runs = oc_block().is_some();
        if !runs {
            eprintln!("skipped: the direct kernel needs AVX-512 or AVX2");
        }
        runs
    }

    /// Random shapes (batch up to 3, odd widths from 1 to 70 with rows narrower than a vector,
    /// asymmetric pads, kernels 1-5 with dilation, channel counts off the block) with every
    /// epilogue, at 1 to 3 threads, against the reference.
    #[test]
    fn equals_the_reference_convolution() {
        if !kernel_runs() {
            return;
        }
        let mut rng = Rng::new(11);
        for case in 0..50 {
            let (kh, kw) = (rng.range(1, 5), rng.range(1, 5));
            let (dy, dx) = if rng.below(4) == 0 {
                (2, rng.range(1, 2))
            } else {
                (1, 1)
            };
            let pads = [rng.below(kh), rng.below(kw), rng.below(kh), rng.below(kw)];
            let (h, wd) = (
                rng.range((kh - 1) * dy + 1, 30),
                rng.range((kw - 1) * dx + 1, 70),
            );
            let (n, cin, cout) = (rng.range(1, 3), rng.range(1, 20), rng.range(1, 27));
            let p = params([kh, kw], pads, [dy, dx], POSTS[case % POSTS.len()]);
            check(
                &format!("case {case}"),
                [n, cin, h, wd],
                [cout, cin, kh, kw],
                &p,
                &mut rng,
            );
        }
    }

    /// The shapes the kernel is chosen for: SqueezeNet's 3x3 expands (pad 1) and ResNet's
    /// 64 <- 64, each with Relu.
    #[test]
    fn equals_the_reference_on_network_shapes() {
        if !kernel_runs() {
            return;
        }
        let mut rng = Rng::new(3);
        let p = params([3, 3], [1; 4], [1, 1], Activation::Relu);
        for (cout, cin, hw) in [(64, 16, 55), (128, 32, 27), (192, 48, 13), (64, 64, 28)] {
            check("network", [1, cin, hw, hw], [cout, cin, 3, 3], &p, &mut rng);
        }
    }

    /// Compact rows (AVX-512, 3x3 windows as wide as their input): widths 1 to 60 (below, at
    /// and past a vector; rows split across vectors, vectors across rows), dilation 1 and 2,
    /// column pads even or all on one side (the middle column tap masked too), channel counts
    /// off the block, every epilogue with or without a residual, against the reference; and
    /// where they are chosen.
    #[test]
    fn compact_rows_equal_the_reference() {
        if !kernel_runs() {
            return;
        }
        let mut rng = Rng::new(29);
        let posts = &POSTS[..3];
        for case in 0..30 {
            let d = if case % 4 == 3 { 2 } else { 1 };
            let (h, wd) = (rng.range(2 * d + 1, 20), rng.range(1, 60));
            let (n, cin, cout) = (rng.range(1, 2), rng.range(1, 20), rng.range(1, 27));
            let left = [d, d, 0, 2 * d][rng.below(4)];
            let pads = [d, left, rng.below(2 * d + 1), 2 * d - left];
            let p = params([3, 3], pads, [d, d], posts[case % posts.len()]);
            let dims = [n, cin, h, wd];
            let weight_dims = [cout, cin, 3, 3];
            let g = Geometry::new(&dims, &weight_dims, &p, true).unwrap();
            assert!(g.compact, "{dims:?} {p:?}");
            check(&format!("compact {case}"), dims, weight_dims, &p, &mut rng);
        }
        let p = params([3, 3], [1; 4], [1, 1], Activation::Relu);
        let chosen = |hw: usize, masked: bool| {
            Geometry::new(&[1, 48, hw, hw], &[192, 48, 3, 3], &p, masked)
                .unwrap()
                .compact
        };
        assert!(chosen(13, true), "13x13");
        assert!(!chosen(13, false), "AVX2");
        assert!(chosen(55, true), "55x55");
        let valid = params([3, 3], [0; 4], [1, 1], Activation::Relu);
        assert!(
            !Geometry::new(&[1, 48, 13, 13], &[192, 48, 3, 3], &valid, true)
                .unwrap()
                .compact,
            "no padding"
        );
    }

    #[test]
    fn takes_thin_3x3_stride_1_layers_only() {
        let p = |s: usize, groups: usize| ConvParams {
            kernel: vec![3, 3],
            strides: vec![s, s],
            pads_begin: vec![1, 1],
            pads_end: vec![1, 1],
            dilations: vec![1, 1],
            groups,
            post: Activation::None,
        };
        if oc_block().is_some() {
            assert!(pays(&[1, 16, 55, 55], &[64, 16, 3, 3], &p(1, 1)));
            assert!(pays(&[1, 48, 13, 13], &[192, 48, 3, 3], &p(1, 1)));
            assert!(
                pays(&[1, 8, 13, 13], &[8, 8, 3, 3], &p(1, 1)),
                "the smallest"
            );
            assert!(
                pays(&[1, 48, 13, 13], &[256, 48, 3, 3], &p(1, 1)),
                "48 channels"
            );
        }
        let winograd = &[1, 64, 28, 28];
        assert!(!pays(winograd, &[64, 64, 3, 3], &p(1, 1)), "F(4x4)");
        assert!(
            !pays(&[1, 64, 13, 13], &[256, 64, 3, 3], &p(1, 1)),
            "F(2x2)"
        );
        assert!(
            !pays(&[1, 72, 13, 13], &[64, 72, 3, 3], &p(1, 1)),
            "72 channels"
        );
        assert!(
            !pays(&[1, 7, 13, 13], &[64, 7, 3, 3], &p(1, 1)),
            "7 channels"
        );
        assert!(
            !pays(&[1, 16, 56, 56], &[64, 16, 3, 3], &p(2, 1)),
            "stride 2"
        );
        assert!(
            !pays(&[1, 4, 56, 56], &[64, 4, 3, 3], &p(1, 1)),
            "4 channels"
        );
        assert!(!pays(&[1, 16, 56, 56], &[16, 4, 3, 3], &p(1, 4)), "grouped");
        assert!(
            !pays(&[1, 16, 5, 5], &[64, 16, 3, 3], &p(1, 1)),
            "5 columns"
        );
        assert!(
            !pays(&[1, 16, 56, 56], &[3, 16, 3, 3], &p(1, 1)),
            "3 outputs"
        );
        assert!(!pays(&[1, 16, 64], &[32, 16, 3], &p(1, 1)), "1-D");
    }

    #[test]
    fn bad_input_is_an_error() {
        let wt = vec![0.5f32; 8 * 16 * 9];
        assert!(DirectWeights::new(&wt[1..], &[8, 16, 3, 3]).is_err());
        assert!(DirectWeights::new(&wt, &[8, 16, 9]).is_err());
        assert!(
            DirectWeights::new(&[0.5; 8 * 64], &[8, 1, 8, 8]).is_err(),
            "64 taps"
        );
        let weights = DirectWeights::new(&wt, &[8, 16, 3, 3]).unwrap();
        let p = params([3, 3], [1; 4], [1, 1], Activation::None);
        let x = vec![1.0f32; 16 * 16 * 16];
        let mut out = vec![0.0f32; 8 * 16 * 16];
        let run =
            |x: &[f32],
             dims: &[usize],
             p: &ConvParams,
             bias: Option<&[f32]>,
             res: Option<&[f32]>,
             out: &mut [f32]| { conv(x, dims, &weights, p, bias, res, out, 1) };
        let dims = [1, 16, 16, 16];
        assert!(
            run(&x, &dims, &p, None, None, &mut out[1..]).is_err(),
            "output"
        );
        assert!(
            run(&x[1..], &dims, &p, None, None, &mut out).is_err(),
            "input"
        );
        assert!(
            run(&x, &[1, 8, 32, 16], &p, None, None, &mut out).is_err(),
            "channels"
        );
        assert!(
            run(&x, &dims, &p, Some(&[0.0; 7]), None, &mut out).is_err(),
            "bias"
        );
        assert!(
            run(&x, &dims, &p, None, Some(&x[..5]), &mut out).is_err(),
            "residual"
        );
        let strided = ConvParams {
            strides: vec![2, 2],
            ..p.clone()
        };
        assert!(
            run(&x, &dims, &strided, None, None, &mut out[..8 * 64]).is_err(),
            "stride 2"
        );
    }
}
