//! ONNX Conv, N-d with groups, strides, asymmetric pads, dilations, optional bias and a fused
//! activation: per (batch, group) one GEMM over the unfolded input (im2col; with prepacked
//! weights unfolded block by block straight into the GEMM's packed layout), or for 1x1 /
//! stride 1 / no pad kernels a GEMM straight on the input (the unfold would be a copy).

use crate::kernels::activation::Activation;
use crate::kernels::error::{KernelError, KernelResult};
use crate::kernels::gemm::{
    gemm, gemm_prepacked_produced_b, gemm_prepacked_split_depth, gemm_prepacked_with, BBlock,
    Epilogue, FusedAct, FusedEpilogue, GemmFloat, PackedOperand, Prepacked, ProduceB,
};
use crate::kernels::interleave::LANES;
use crate::kernels::spatial::{check_len, checked_product, WindowAttrs, WindowGeometry};
pub use crate::ops::convolution::conv_params::ConvParams;
use crate::ops::convolution::depthwise::{self, depthwise};
use crate::ops::convolution::depthwise_blocked::{self, depthwise_blocked};
use crate::ops::convolution::im2col::{im2col, unfold_packed, unfolded_depth_cut};
use crate::ops::convolution::transposed_output::write_transposed;
use strata_core::Element;

const OP: &str = "Conv";

/// Target size of one im2col tile (1 MiB of f32): small enough to stay in L2 between the unfold
/// and the GEMM, which is what makes tiling pay.
const TILE_ELEMENTS: usize = 1 << 18;
/// Narrower tiles would make the GEMM repack the weights too often for too little work.
const MIN_TILE_COLUMNS: usize = 256;

/// Output dims `[N, M, out spatial...]` for an input `[N, C, spatial...]` and a weight
/// `[M, C / groups, kernel...]`; errors name the mismatch.
pub fn conv_output_dims(
    input_dims: &[usize],
    weight_dims: &[usize],
    p: &ConvParams,
) -> KernelResult<Vec<usize>> {
    let g = ConvGeometry::new(input_dims, weight_dims, p)?;
    let mut dims = vec![g.batch, g.out_channels];
    dims.extend_from_slice(&g.window.out_dims);
    Ok(dims)
}

/// Elements of scratch [`conv_f32`] needs: one im2col tile (about 1 MiB of f32, at most one
/// group's whole unfolded input), or 0 on the direct 1x1 path. Returns 0 for invalid dims too
/// (the conv call then reports the error).
pub fn conv_scratch_len(input_dims: &[usize], weight_dims: &[usize], p: &ConvParams) -> usize {
    ConvGeometry::new(input_dims, weight_dims, p).map_or(0, |g| g.scratch_len)
}

/// ONNX Conv in `f32`. See [`conv`].
#[allow(clippy::too_many_arguments)]
pub fn conv_f32(
    input: &[f32],
    input_dims: &[usize],
    weight: &[f32],
    weight_dims: &[usize],
    bias: Option<&[f32]>,
    p: &ConvParams,
    out: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) -> KernelResult<()> {
    conv(
        input,
        input_dims,
        weight,
        weight_dims,
        bias,
        None,
        None,
        p,
        out,
        scratch,
        threads,
    )
}

/// ONNX Conv: `out = post(conv(input, weight) + bias + residual)` on contiguous NC(spatial)
/// slices, with `out` (and `residual`, a fused Add's other operand) of [`conv_output_dims`] and
/// `scratch` of at least [`conv_scratch_len`] elements.
/// Every length is checked first; errors, never panics. `threads > 1` threads the GEMMs and the
/// unfold. `packed`, one per group from [`prepack_conv_weights`], replaces `weight` in the
/// products (which then never repack it).
#[allow(clippy::too_many_arguments)]
pub fn conv<T: GemmFloat + Element>(
    input: &[T],
    input_dims: &[usize],
    weight: &[T],
    weight_dims: &[usize],
    bias: Option<&[T]>,
    residual: Option<&[T]>,
    packed: Option<&[Prepacked<T>]>,
    p: &ConvParams,
    out: &mut [T],
    scratch: &mut [T],
    threads: usize,
) -> KernelResult<()> {
    let g = ConvGeometry::new(input_dims, weight_dims, p)?;
    check_len(OP, "input", input.len(), g.input_len)?;
    check_len(OP, "output", out.len(), g.output_len)?;
    if let Some(residual) = residual {
        check_len(OP, "residual", residual.len(), g.output_len)?;
    }
    let packed = match packed {
        Some(all) if g.uses_gemm() => {
            check_len(OP, "prepacked weight groups", all.len(), g.groups)?;
            let (mg, depth) = (g.out_per_group, g.in_per_group * g.window.kernel_len);
            if all.iter().any(|w| w.extent() != mg || w.depth() != depth) {
                return Err(KernelError::InvalidParam {
                    op: OP,
                    param: "prepacked weight",
                    reason: format!("not packed as {mg} x {depth} per group"),
                });
            }
            Some(all)
        }
        _ => None,
    };
    // With the weights packed the products never read `weight` (the plan may have freed it).
    if packed.is_none() {
        check_len(OP, "weight", weight.len(), g.weight_len)?;
    }
    if let Some(bias) = bias {
        check_len(OP, "bias", bias.len(), g.out_channels)?;
    }
    if scratch.len() < g.scratch_len {
        return Err(KernelError::BufferLength {
            op: OP,
            buffer: "scratch",
            expected: g.scratch_len,
            actual: scratch.len(),
        });
    }

    let w = &g.window;
    if g.depthwise && depthwise_blocked::pays(w, g.in_channels, g.out_channels) {
        depthwise_blocked(
            input,
            weight,
            bias,
            g.in_channels,
            w,
            p.post,
            residual,
            out,
            threads,
        );
        return Ok(());
    }
    if g.depthwise {
        depthwise(
            input,
            weight,
            bias,
            g.in_channels,
            g.out_channels,
            w,
            p.post,
            residual,
            out,
            threads,
        );
        return Ok(());
    }
    let (cg, mg) = (g.in_per_group, g.out_per_group);
    // Per group: weight is mg x depth, the unfolded input depth x out_len.
    let depth = cg * w.kernel_len;
    let row = |cols: usize| (cols as isize, 1isize);
    let needs_epilogue = bias.is_some() || residual.is_some() || p.post != Activation::None;
    // The depth cut in two on several threads (see `depth_split_at`).
    let split = g
        .depth_split
        .filter(|_| threads.min(crate::parallel::threads()) > 1);
    // Weights packed as B: `Y^T = X^T W^T` over `width` positions of `x` (channel rows
    // `x_rs` apart) into `yt` (row-major), then moved into the channel rows of `y` (from
    // column `start`, batch `b`) with the epilogue. With the depth `split`, the second half's
    // product goes to the scratch after `yt` and is added on the way.
    let transposed = |all: &Prepacked<T>,
                      x: &[T],
                      x_rs: usize,
                      yt: &mut [T],
                      y: &mut [T],
                      (b, start, width): (usize, usize, usize),
                      split: Option<usize>|
     -> KernelResult<()> {
        let (yt, rest) = yt.split_at_mut(width * mg);
        let partial = match split {
            Some(at) => {
                let partial = &mut rest[..width * mg];
                let outputs = (&mut *yt, &mut *partial);
                gemm_prepacked_split_depth(
                    all,
                    width,
                    x,
                    (1, x_rs as isize),
                    outputs,
                    row(mg),
                    at,
                    threads,
                )?;
                Some(&*partial)
            }
            None => {
                gemm_prepacked_with(
                    all,
                    width,
                    x,
                    (1, x_rs as isize),
                    yt,
                    row(mg),
                    (T::ONE, T::ZERO),
                    None,
                    None,
                    threads,
                )?;
                None
            }
        };
        let finish = |oc: usize, y_row: &mut [T]| {
            if needs_epilogue {
                let shift = bias.map_or(T::ZERO, |bias| bias[oc]);
                let at = (b * g.out_channels + oc) * w.out_len + start;
                let r = residual.map(|r| &r[at..][..y_row.len()]);
                p.post.add_residual_bias_and_apply(y_row, r, shift);
            }
        };
        let y = &mut y[start..];
        write_transposed((yt, partial), width, mg, y, w.out_len, threads, finish);
        Ok(())
    };
    // Bias, residual and activation while the tile just written is still in cache.
    let finish = |y: &mut [T], b: usize, grp: usize, columns: std::ops::Range<usize>| {
        if bias.is_some() || residual.is_some() || p.post != Activation::None {
            for oc in 0..mg {
                let channel = grp * mg + oc;
                let shift = bias.map_or(T::ZERO, |bias| bias[channel]);
                let plane = (b * g.out_channels + channel) * w.out_len;
                let r = residual.map(|r| &r[plane..][columns.clone()]);
                p.post.add_residual_bias_and_apply(
                    &mut y[oc * w.out_len..][columns.clone()],
                    r,
                    shift,
                );
            }
        }
    };
    // Cancellation: one poll per (batch, group); the run fails at its next check (run_control).
    let stop = crate::run_control::stop_token();
    // The same epilogue applied by the microkernel to its registers before the store, when the
    // activation is a simple one: for the products of batch `b`, group `grp`, from output
    // column `start` on.
    let fused_act = FusedAct::of(p.post).filter(|_| needs_epilogue);
    let fused = |b: usize, grp: usize, start: usize| {
        fused_act.map(|act| FusedEpilogue {
            residual: residual.map(|r| {
                let first = (b * g.out_channels + grp * mg) * w.out_len + start;
                (&r[first..], w.out_len as isize)
            }),
            row_bias: bias.map(|bias| &bias[grp * mg..][..mg]),
            col_bias: None,
            act,
        })
    };
    // Pointwise: the input plane already is the (cg x out_len) matrix of a group.
    let pointwise = |b: usize, grp: usize, y: &mut [T], threads: usize| -> KernelResult<()> {
        if stop.should_stop() {
            return Ok(());
        }
        let x = &input[(b * g.in_channels + grp * cg) * w.in_len..][..cg * w.in_len];
        let finish_row = |oc: usize, j: usize, y_row: &mut [T]| {
            let channel = grp * mg + oc;
            let shift = bias.map_or(T::ZERO, |bias| bias[channel]);
            let at = (b * g.out_channels + channel) * w.out_len + j;
            let r = residual.map(|r| &r[at..][..y_row.len()]);
            p.post.add_residual_bias_and_apply(y_row, r, shift);
        };
        match packed {
            // With prepacked weights the epilogue runs on each tile as the GEMM finishes it.
            Some(all) => gemm_prepacked_with(
                &all[grp],
                w.out_len,
                x,
                row(w.out_len),
                y,
                row(w.out_len),
                (T::ONE, T::ZERO),
                needs_epilogue.then_some(&finish_row as &Epilogue<'_, T>),
                fused(b, grp, 0),
                threads,
            ),
            None => {
                let wt = &weight[grp * mg * depth..][..mg * depth];
                gemm(
                    mg,
                    w.out_len,
                    cg,
                    wt,
                    row(cg),
                    x,
                    row(w.out_len),
                    y,
                    row(w.out_len),
                    T::ONE,
                    T::ZERO,
                    threads,
                )?;
                finish(y, b, grp, 0..w.out_len);
                Ok(())
            }
        }
    };
    let products = g.batch * g.groups;
    let group_len = mg * w.out_len;
    if group_len == 0 {
        return Ok(());
    }
    if g.tile_columns == 0 {
        if let Some(all) = packed.filter(|all| g.transposed && all[0].side() == PackedOperand::B) {
            // One group (`transposed`): a product per batch item.
            for (b, y) in out.chunks_mut(group_len).enumerate().take(g.batch) {
                if stop.should_stop() {
                    return Ok(());
                }
                let x = &input[b * g.in_channels * w.in_len..][..cg * w.in_len];
                let at = (b, 0, w.out_len);
                transposed(&all[0], x, w.in_len, scratch, y, at, split)?;
            }
            return Ok(());
        }
        if let (Some(at), Some(all)) = (split, packed) {
            // One group (`depth_split`), weights packed as A: `Y = W X` with the second
            // half of the depth into scratch, added in the epilogue pass.
            let partial = &mut scratch[..group_len];
            for (b, y) in out.chunks_mut(group_len).enumerate().take(g.batch) {
                if stop.should_stop() {
                    return Ok(());
                }
                let x = &input[b * g.in_channels * w.in_len..][..cg * w.in_len];
                let outputs = (&mut *y, &mut *partial);
                let (n, rows) = (w.out_len, row(w.out_len));
                gemm_prepacked_split_depth(&all[0], n, x, rows, outputs, rows, at, threads)?;
                let partial = &*partial;
                // Each thread adds and finishes the same half of the channels on every run.
                crate::parallel::for_each_chunk_mut_pinned(y, w.out_len, |oc, y_row| {
                    let part = &partial[oc * w.out_len..][..y_row.len()];
                    let shift = bias.map_or(T::ZERO, |bias| bias[oc]);
                    match residual {
                        Some(r) => {
                            y_row.iter_mut().zip(part).for_each(|(v, &q)| *v += q);
                            let r = &r[(b * g.out_channels + oc) * w.out_len..][..y_row.len()];
                            p.post.add_residual_bias_and_apply(y_row, Some(r), shift);
                        }
                        None => p.post.add_residual_bias_and_apply(y_row, Some(part), shift),
                    }
                });
            }
            return Ok(());
        }
        let per_product = group_len.saturating_mul(cg);
        // Several products each too small to split (ShuffleNet's grouped 1x1 layers): one
        // product per task instead.
        if threads > 1 && products > 1 && per_product < GROUP_TASK_MAX_MULADDS {
            return crate::parallel::try_for_each_chunk_mut(out, group_len, 1, |i, y| {
                pointwise(i / g.groups, i % g.groups, y, 1)
            });
        }
        for (i, y) in out.chunks_mut(group_len).enumerate().take(products) {
            pointwise(i / g.groups, i % g.groups, y, threads)?;
        }
        return Ok(());
    }
    for b in 0..g.batch {
        for grp in 0..g.groups {
            if stop.should_stop() {
                return Ok(());
            }
            let x = &input[(b * g.in_channels + grp * cg) * w.in_len..][..cg * w.in_len];
            let y = &mut out[(b * g.out_channels + grp * mg) * w.out_len..][..mg * w.out_len];
            // Weights packed as A: the GEMM asks for the unfolded input one cache block at a
            // time and it is written straight into the packed layout the microkernel reads
            // (`unfold_packed`), by the thread that computes those columns; no unfolded tile
            // in scratch that the GEMM would then pack again. The epilogue runs on each tile as
            // the GEMM finishes it: `epilogue(oc, j, row)` for output channel `oc` of the group
            // from column `j`.
            if let Some(all) = packed.filter(|all| all[grp].side() == PackedOperand::A) {
                let fill = |block: BBlock, dst: &mut [T]| unfold_packed(x, w, block, dst);
                let epilogue = |oc: usize, j: usize, y_row: &mut [T]| {
                    let channel = grp * mg + oc;
                    let shift = bias.map_or(T::ZERO, |bias| bias[channel]);
                    let at = (b * g.out_channels + channel) * w.out_len + j;
                    let r = residual.map(|r| &r[at..][..y_row.len()]);
                    p.post.add_residual_bias_and_apply(y_row, r, shift);
                };
                gemm_prepacked_produced_b(
                    &all[grp],
                    w.out_len,
                    ProduceB {
                        align: 1,
                        fill: &fill,
                    },
                    y,
                    row(w.out_len),
                    needs_epilogue.then_some(&epilogue as &Epilogue<'_, T>),
                    fused(b, grp, 0),
                    threads,
                )?;
                continue;
            }
            // Unfold a tile of output columns at a time, so the unfolded matrix stays in cache
            // between im2col writing it and the GEMM reading it.
            let mut start = 0;
            while start < w.out_len {
                let end = (start + g.tile_columns).min(w.out_len);
                let width = end - start;
                im2col(x, cg, w, start..end, scratch, threads);
                if let Some(all) =
                    packed.filter(|all| g.transposed && all[0].side() == PackedOperand::B)
                {
                    let (cols, yt) = scratch.split_at_mut(depth * g.tile_columns);
                    let cut = unfolded_depth_cut(depth, width, threads).filter(|_| g.tiled_split);
                    transposed(
                        &all[0],
                        &cols[..depth * width],
                        width,
                        yt,
                        y,
                        (b, start, width),
                        cut,
                    )?;
                    start = end;
                    continue;
                }
                let cols = &scratch[..depth * width];
                gemm(
                    mg,
                    width,
                    depth,
                    &weight[grp * mg * depth..][..mg * depth],
                    row(depth),
                    cols,
                    row(width),
                    &mut y[start..],
                    row(w.out_len),
                    T::ONE,
                    T::ZERO,
                    threads,
                )?;
                finish(y, b, grp, start..end);
                start = end;
            }
        }
    }
    Ok(())
}

/// Below this many multiply-adds, the products of a grouped or batched pointwise convolution
/// run one per task rather than each split over the threads.
const GROUP_TASK_MAX_MULADDS: usize = 1 << 20;
/// Most output positions for which products run transposed (see `transposing_pays`).
const TRANSPOSED_MAX_COLUMNS: usize = 196;

/// Whether a product over `columns` output positions and `depth` runs faster transposed. Its
/// gain is the padding of `Y = W X`'s last column tile, a share of the product that grows with
/// the depth; its cost, moving `Y^T` into `Y` and a separate epilogue pass, does not. Measured
/// on ResNet-50's 1x1 layers at one thread (Zen 4): 1024 <- 256 at 14x14 (28 padding columns x
/// depth 256) 1.0-1.08x the untransposed time, 1024 <- 512 at 14x14 0.92x, 512 <- 1024 at 14x14
/// 0.90x, 2048 <- 512 at 7x7 (15 x 512) 0.90x; hence padding x depth >= 64 x columns. At 28x28
/// (16 padding columns of 784) only the deepest layers would qualify, and the one GEMM
/// measured there gained nothing (512 <- 128, 91 against 96 GFLOP/s).
///
/// Transposed, the `channels` take the padding instead: it must waste less than the positions'
/// (SqueezeNet's classifier, 1000 <- 512 at 13x13: 24 padding channels of 1000 against 23
/// padding positions of 169).
fn transposing_pays(columns: usize, depth: usize, channels: usize) -> bool {
    let padding = columns.next_multiple_of(COLUMN_GRID) - columns;
    let channel_padding = channels.next_multiple_of(COLUMN_GRID) - channels;
    columns <= TRANSPOSED_MAX_COLUMNS
        && padding * depth >= 64 * columns
        && channel_padding * columns < padding * channels
}
/// Fewest input channels, and least ratio of input to output channels, for which a pointwise
/// product splits its depth over the threads (see `depth_split_at`). Ratio 3 measured the same
/// on MobileNetV2 at 2 threads, 6 worse (it drops 96 <- 384).
const DEPTH_SPLIT_MIN_CHANNELS: usize = 384;
const DEPTH_SPLIT_MIN_RATIO: usize = 4;

/// Where a 1x1 convolution from `channels` to `outputs` channels cuts its depth when it runs on
/// several threads, if it does: halfway, on a block of [`LANES`] channels. The layer before
/// (a depthwise convolution, a GEMM split by output rows) left the first half of the input
/// channels in the first thread's cache and the second half in the other's; split by output
/// columns, each thread read half its input from the other core, and the producer's next run
/// wrote lines the other core held. Cut in depth, each reads only its own channels, and the two
/// partial outputs (a quarter of the input's size or less) are added in the epilogue pass.
/// MobileNetV2 at 2 threads (Xeon, 4 MiB L2 per core): its projections 0.78-0.86x per node
/// (160 <- 960 at 7x7, 64 and 96 <- 384, 96 <- 576 at 14x14), the depthwise layers after them
/// 0.82x, the model 0.967x; ResNet-50's 256 <- 1024 at 14x14 and 512 <- 2048 at 7x7 0.91-0.95x,
/// the model 0.995x. SqueezeNet's squeeze layers read a Concat of two convolutions, each split
/// over both threads, so no half is local: the same time either way.
fn depth_split_at(channels: usize, outputs: usize) -> Option<usize> {
    let at = (channels / 2).next_multiple_of(LANES);
    (channels >= DEPTH_SPLIT_MIN_CHANNELS
        && channels >= DEPTH_SPLIT_MIN_RATIO * outputs
        && at < channels)
        .then_some(at)
}

/// Least unfolded depth for which a transposed product of im2col tiles cuts its depth on
/// several threads: each thread unfolds a contiguous part of the rows, and with the product
/// split by columns each thread read every row, half of them unfolded by the other core, and
/// packed all of them. Cut where the parts meet, each reads and packs only its own.
const TILED_SPLIT_MIN_DEPTH: usize = 1024;

/// The f32 microkernel's register tile width: im2col tiles and thread shares are multiples of
/// it, so only the last columns of a product fill a partial tile.
const COLUMN_GRID: usize = 32;

/// `columns` rounded down to whole register tiles, when it holds at least one.
fn on_grid(columns: usize) -> usize {
    if columns >= COLUMN_GRID {
        columns / COLUMN_GRID * COLUMN_GRID
    } else {
        columns
    }
}

/// The weights of a convolution packed once per group for its products, or `None` when its
/// geometry takes no GEMM (depthwise) or its outputs are too narrow to pay for the packed
/// microkernel path (at most four output positions stream the weights instead).
pub fn prepack_conv_weights<T: GemmFloat + Element>(
    input_dims: &[usize],
    weight: &[T],
    weight_dims: &[usize],
    p: &ConvParams,
) -> KernelResult<Option<Vec<Prepacked<T>>>> {
    let g = ConvGeometry::new(input_dims, weight_dims, p)?;
    check_len(OP, "weight", weight.len(), g.weight_len)?;
    if !g.uses_gemm() || g.window.out_len <= 4 {
        return Ok(None);
    }
    let (mg, depth) = (g.out_per_group, g.in_per_group * g.window.kernel_len);
    let transposed = g.transposed;
    (0..g.groups)
        .map(|grp| {
            let wt = &weight[grp * mg * depth..][..mg * depth];
            if transposed {
                Prepacked::b(depth, mg, wt, (1, depth as isize))
            } else {
                Prepacked::a(mg, depth, wt, (depth as isize, 1))
            }
        })
        .collect::<KernelResult<Vec<_>>>()
        .map(Some)
}

/// Validated Conv dims.
struct ConvGeometry {
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    groups: usize,
    in_per_group: usize,
    out_per_group: usize,
    window: WindowGeometry,
    input_len: usize,
    weight_len: usize,
    output_len: usize,
    /// One input channel per group, 1-D or 2-D: the direct depthwise kernel, no scratch.
    depthwise: bool,
    /// Output columns unfolded per im2col tile; 0 on the pointwise and depthwise paths.
    tile_columns: usize,
    /// Products run transposed into scratch, with the weights packed as B.
    transposed: bool,
    /// Where a pointwise product's depth (its input channels) is cut in two with several
    /// threads (see `depth_split_at`); the second half's partial output is in scratch.
    depth_split: Option<usize>,
    /// Transposed products of unfolded tiles cut their depth where the threads' parts of the
    /// unfold meet (see `TILED_SPLIT_MIN_DEPTH`); room for the partial output is in scratch.
    tiled_split: bool,
    scratch_len: usize,
}

impl ConvGeometry {
    /// Whether the products go through the GEMM (all but the direct depthwise kernel).
    fn uses_gemm(&self) -> bool {
        !self.depthwise
    }

    fn new(input_dims: &[usize], weight_dims: &[usize], p: &ConvParams) -> KernelResult<Self> {
        let rank = input_dims.len();
        if rank < 3 {
            return Err(KernelError::Rank {
                op: OP,
                operand: "input",
                rank,
                expected: "must be at least 3 (N, C, spatial...)".into(),
            });
        }
        if weight_dims.len() != rank {
            return Err(KernelError::Rank {
                op: OP,
                operand: "weight",
                rank: weight_dims.len(),
                expected: format!("must equal the input rank {rank} (M, C/groups, kernel...)"),
            });
        }
        let groups = p.groups;
        if groups == 0 {
            return Err(KernelError::InvalidParam {
                op: OP,
                param: "group",
                reason: "must be at least 1".into(),
            });
        }
        let (batch, in_channels) = (input_dims[0], input_dims[1]);
        let (out_channels, in_per_group) = (weight_dims[0], weight_dims[1]);
        let expected_channels =
            in_per_group
                .checked_mul(groups)
                .ok_or(KernelError::SizeOverflow {
                    op: OP,
                    what: "channels",
                })?;
        if expected_channels != in_channels {
            return Err(KernelError::ChannelMismatch {
                op: OP,
                input_channels: in_channels,
                expected_channels,
                groups,
            });
        }
        if out_channels % groups != 0 {
            return Err(KernelError::GroupsDivide {
                op: OP,
                what: "output channels (weight dim 0)",
                value: out_channels,
                groups,
            });
        }
        let kernel = &weight_dims[2..];
        if !p.kernel.is_empty() && p.kernel != kernel {
            return Err(KernelError::InvalidParam {
                op: OP,
                param: "kernel_shape",
                reason: format!(
                    "{:?} does not match the weight's spatial dims {kernel:?}",
                    p.kernel
                ),
            });
        }
        let attrs = WindowAttrs {
            kernel,
            strides: &p.strides,
            pads_begin: &p.pads_begin,
            pads_end: &p.pads_end,
            dilations: &p.dilations,
            ceil_mode: false,
        };
        let window = WindowGeometry::new(OP, &input_dims[2..], &attrs)?;
        let size = |what, dims: &[usize]| checked_product(OP, what, dims);
        let depth = size("im2col depth", &[in_per_group, window.kernel_len])?;
        let depthwise = in_per_group == 1 && groups > 1 && depthwise::supports(&window);
        let tile_columns = if window.is_pointwise() || depthwise {
            0
        } else {
            on_grid((TILE_ELEMENTS / depth.max(1)).max(MIN_TILE_COLUMNS)).min(window.out_len)
        };
        let out_per_group = out_channels / groups;
        // Products transposed, `Y^T = X^T W^T`, with the output channels as the register tile's
        // vector side: on few output positions (14x14, 7x7) the last column tile of `Y = W X`
        // is mostly padding (196 = 6 x 32 + 4, 49 = 32 + 17) while the channels fill whole
        // tiles. One group only (the scratch holds one product's `Y^T`).
        let transposed =
            !depthwise && groups == 1 && transposing_pays(window.out_len, depth, out_per_group);
        let yt_columns = if transposed {
            match tile_columns {
                0 => window.out_len,
                tile => tile,
            }
        } else {
            0
        };
        let depth_split = (tile_columns == 0 && !depthwise && groups == 1)
            .then(|| depth_split_at(in_per_group, out_per_group))
            .flatten();
        let tiled_split = transposed && tile_columns > 0 && depth >= TILED_SPLIT_MIN_DEPTH;
        let partial_columns = if depth_split.is_some() {
            window.out_len
        } else if tiled_split {
            tile_columns
        } else {
            0
        };
        let scratch_len = size("im2col scratch", &[depth, tile_columns])?
            .checked_add(size("transposed output", &[out_per_group, yt_columns])?)
            .and_then(|n| n.checked_add(out_per_group.checked_mul(partial_columns)?))
            .ok_or(KernelError::SizeOverflow {
                op: OP,
                what: "im2col scratch",
            })?;
        Ok(ConvGeometry {
            batch,
            in_channels,
            out_channels,
            groups,
            in_per_group,
            out_per_group,
            transposed,
            input_len: size("input size", input_dims)?,
            weight_len: size("weight size", weight_dims)?,
            output_len: size("output size", &[batch, out_channels, window.out_len])?,
            depthwise,
            tile_columns,
            depth_split,
            tiled_split,
            scratch_len,
            window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;
    use crate::support::test_util::assert_close_within;

    /// `relu(conv(input, weight) + bias + residual)` from the definition (`p.post` ignored).
    fn relu_reference(
        (input, in_dims, weight, w_dims): (&[f32], &[usize], &[f32], &[usize]),
        (bias, residual): (&[f32], Option<&[f32]>),
        p: &ConvParams,
    ) -> Vec<f32> {
        let linear = ConvParams {
            post: Activation::None,
            ..p.clone()
        };
        let out_dims = conv_output_dims(in_dims, w_dims, p).unwrap();
        let mut y = naive(
            input,
            in_dims,
            weight,
            w_dims,
            Some(bias),
            &linear,
            &out_dims,
        );
        if let Some(r) = residual {
            y.iter_mut().zip(r).for_each(|(y, r)| *y += r);
        }
        y.iter().map(|y| y.max(0.0)).collect()
    }

    /// `conv` with prepacked weights on a pool of `threads` threads: `(input, input dims,
    /// weight, weight dims)` and `(bias, residual)`.
    fn conv_on_pool(
        (input, in_dims, weight, w_dims): (&[f32], &[usize], &[f32], &[usize]),
        (bias, residual): (Option<&[f32]>, Option<&[f32]>),
        packed: &[Prepacked<f32>],
        p: &ConvParams,
        scratch: &mut [f32],
        threads: usize,
    ) -> Vec<f32> {
        let len = conv_output_dims(in_dims, w_dims, p)
            .unwrap()
            .iter()
            .product();
        let mut out = vec![f32::NAN; len];
        let pool = crate::parallel::ThreadPool::new(threads).unwrap();
        crate::parallel::install(&pool, || {
            conv(
                input,
                in_dims,
                weight,
                w_dims,
                bias,
                residual,
                Some(packed),
                p,
                &mut out,
                scratch,
                threads,
            )
        })
        .unwrap();
        out
    }

    /// Direct N-d convolution straight from the ONNX definition, accumulating in f64.
    fn naive(
        input: &[f32],
        in_dims: &[usize],
        weight: &[f32],
        w_dims: &[usize],
        bias: Option<&[f32]>,
        p: &ConvParams,
        out_dims: &[usize],
    ) -> Vec<f32> {
        let rank = in_dims.len() - 2;
        let (n, c, m) = (in_dims[0], in_dims[1], w_dims[0]);
        let (cg, mg) = (c / p.groups, m / p.groups);
        let attr = |v: &Vec<usize>, d: usize| {
            if v.is_empty() {
                vec![d; rank]
            } else {
                v.clone()
            }
        };
        let (strides, dil, pads) = (
            attr(&p.strides, 1),
            attr(&p.dilations, 1),
            attr(&p.pads_begin, 0),
        );
        let kernel = &w_dims[2..];
        let in_sp = &in_dims[2..];
        let out_sp = &out_dims[2..];
        let count = |d: &[usize]| d.iter().product::<usize>();
        let unravel = |mut i: usize, dims: &[usize]| {
            let mut v = vec![0; dims.len()];
            for a in (0..dims.len()).rev() {
                v[a] = i % dims[a];
                i /= dims[a];
            }
            v
        };
        let mut out = Vec::new();
        for b in 0..n {
            for oc in 0..m {
                let grp = oc / mg;
                for o in 0..count(out_sp) {
                    let oi = unravel(o, out_sp);
                    let mut acc = bias.map_or(0.0, |bias| bias[oc] as f64);
                    for ic in 0..cg {
                        for t in 0..count(kernel) {
                            let ki = unravel(t, kernel);
                            let mut off = 0usize;
                            let mut inside = true;
                            for a in 0..rank {
                                let i = (oi[a] * strides[a] + ki[a] * dil[a]) as isize
                                    - pads[a] as isize;
                                inside &= i >= 0 && (i as usize) < in_sp[a];
                                off = off * in_sp[a] + i.max(0) as usize;
                            }
                            if inside {
                                let x = input[(b * c + grp * cg + ic) * count(in_sp) + off];
                                let w = weight[(oc * cg + ic) * count(kernel) + t];
                                acc += x as f64 * w as f64;
                            }
                        }
                    }
                    out.push(p.post.apply(acc as f32));
                }
            }
        }
        out
    }

    fn run(
        input: &[f32],
        in_dims: &[usize],
        weight: &[f32],
        w_dims: &[usize],
        bias: Option<&[f32]>,
        p: &ConvParams,
        threads: usize,
    ) -> (Vec<usize>, Vec<f32>) {
        let out_dims = conv_output_dims(in_dims, w_dims, p).unwrap();
        let mut out = vec![f32::NAN; out_dims.iter().product()];
        let mut scratch = vec![f32::NAN; conv_scratch_len(in_dims, w_dims, p)];
        conv_f32(
            input,
            in_dims,
            weight,
            w_dims,
            bias,
            p,
            &mut out,
            &mut scratch,
            threads,
        )
        .unwrap();
        (out_dims, out)
    }

    /// Prepacked weights run bias, residual and activation as the GEMM's tile epilogue; the
    /// same convolution packed per call applies them in a pass after each product.
    #[test]
    fn tile_epilogues_equal_the_separate_pass() {
        let mut rng = Rng::new(0xe9);
        let posts = [
            Activation::None,
            Activation::Relu,
            Activation::Clip { min: 0.0, max: 6.0 },
            Activation::LeakyRelu { alpha: 0.1 },
        ];
        for case in 0..60 {
            let kernel = [1, 3][rng.below(2)];
            let groups = [1, 1, 2, 3][rng.below(4)];
            // Two or more channels per group: one is a depthwise layer (no GEMM).
            let (cg, mg, side) = (rng.range(2, 20), rng.range(1, 40), rng.range(3, 30));
            let (c, m) = (cg * groups, mg * groups);
            let in_dims = [rng.range(1, 3), c, side, side + rng.below(5)];
            let w_dims = [m, cg, kernel, kernel];
            let p = ConvParams {
                pads_begin: vec![kernel / 2; 2],
                pads_end: vec![kernel / 2; 2],
                groups,
                post: posts[rng.below(posts.len())],
                ..ConvParams::default()
            };
            let out_dims = conv_output_dims(&in_dims, &w_dims, &p).unwrap();
            let len = out_dims.iter().product();
            let input = rng.vec(in_dims.iter().product());
            let weight = rng.vec(w_dims.iter().product());
            let bias = rng.vec(m);
            let residual = (rng.below(2) == 0).then(|| rng.vec(len));
            let packed = prepack_conv_weights(&in_dims, &weight, &w_dims, &p).unwrap();
            assert!(packed.is_some(), "case {case}: {in_dims:?} packs");
            let mut scratch = vec![f32::NAN; conv_scratch_len(&in_dims, &w_dims, &p)];
            let mut results = Vec::new();
            for packed in [None, packed.as_deref()] {
                for threads in [1, 2] {
                    let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                    let mut out = vec![f32::NAN; len];
                    crate::parallel::install(&pool, || {
                        conv(
                            &input,
                            &in_dims,
                            &weight,
                            &w_dims,
                            Some(&bias),
                            residual.as_deref(),
                            packed,
                            &p,
                            &mut out,
                            &mut scratch,
                            threads,
                        )
                    })
                    .unwrap();
                    results.push(out);
                }
            }
            for (i, r) in results.iter().enumerate().skip(1) {
                assert_close_within(r, &results[0], 1e-5, &format!("case {case} run {i}"));
            }
        }
    }

    #[test]
    fn random_convolutions_match_reference() {
        let mut rng = Rng::new(0xc0_4e);
        for case in 0..400 {
            let rank = rng.range(1, 3);
            let groups = [1, 1, 2, 3][rng.below(4)];
            let cg = rng.range(1, 3);
            let depthwise = rng.below(4) == 0;
            let (cg, mg) = if depthwise {
                (1, rng.range(1, 2))
            } else {
                (cg, rng.range(1, 3))
            };
            let n = rng.range(1, 2);
            let kernel: Vec<usize> = (0..rank).map(|_| rng.range(1, 3)).collect();
            let mut p = ConvParams {
                strides: (0..rank).map(|_| rng.range(1, 3)).collect(),
                dilations: (0..rank).map(|_| rng.range(1, 2)).collect(),
                pads_begin: (0..rank).map(|_| rng.below(3)).collect(),
                pads_end: (0..rank).map(|_| rng.below(3)).collect(),
                groups,
                post: [Activation::None, Activation::Relu][rng.below(2)],
                ..ConvParams::default()
            };
            if rng.below(2) == 0 {
                p.kernel = kernel.clone();
            }
            let max_side = if rank == 3 { 6 } else { 9 };
            let spatial: Vec<usize> = kernel
                .iter()
                .zip(&p.dilations)
                .map(|(&k, &d)| rng.range((k - 1) * d + 1, max_side.max((k - 1) * d + 1)))
                .collect();
            let in_dims = [vec![n, cg * groups], spatial].concat();
            let w_dims = [vec![mg * groups, cg], kernel].concat();
            let input = rng.vec(in_dims.iter().product());
            let weight = rng.vec(w_dims.iter().product());
            let bias = rng.vec(mg * groups);
            let bias = (rng.below(2) == 0).then_some(&bias[..]);
            let threads = 1 + rng.below(2);
            let (out_dims, out) = run(&input, &in_dims, &weight, &w_dims, bias, &p, threads);
            let expected = naive(&input, &in_dims, &weight, &w_dims, bias, &p, &out_dims);
            assert_close_within(
                &out,
                &expected,
                1e-4,
                &format!("case {case}: {in_dims:?} * {w_dims:?} {p:?}"),
            );
        }
    }

    /// Strided 2-D layers wider than a vector (the vectorized unfold's gathers run whole and
    /// masked vectors, rows straddle the register tile's columns), weights prepacked (the GEMM
    /// asks for packed blocks; 24 -> 32 at 7x7 runs transposed) or not, one and two threads,
    /// against the definition.
    #[test]
    fn strided_2d_layers_match_reference() {
        // (channels in, out, height, width, kernel, stride, pads begin, pads end, dilation)
        type Case = (
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
            usize,
        );
        let cases: [Case; 6] = [
            (8, 16, 29, 57, 3, 2, 1, 1, 1),
            (24, 32, 14, 14, 3, 2, 1, 1, 1),
            (6, 33, 23, 41, 3, 2, 0, 1, 1),
            (4, 9, 19, 50, 3, 2, 2, 2, 2),
            (3, 20, 22, 37, 2, 3, 1, 0, 1),
            (7, 12, 30, 34, 5, 2, 2, 2, 1),
        ];
        let mut rng = Rng::new(0x5e2);
        for (c, m, h, w, k, s, pb, pe, d) in cases {
            let in_dims = [1, c, h, w];
            let w_dims = [m, c, k, k];
            let p = ConvParams {
                strides: vec![s; 2],
                dilations: vec![d; 2],
                pads_begin: vec![pb; 2],
                pads_end: vec![pe; 2],
                post: Activation::Relu,
                ..ConvParams::default()
            };
            let out_dims = conv_output_dims(&in_dims, &w_dims, &p).unwrap();
            let input = rng.vec(in_dims.iter().product());
            let weight = rng.vec(w_dims.iter().product());
            let bias = rng.vec(m);
            let expected = naive(
                &input,
                &in_dims,
                &weight,
                &w_dims,
                Some(&bias),
                &p,
                &out_dims,
            );
            let packed = prepack_conv_weights(&in_dims, &weight, &w_dims, &p).unwrap();
            assert!(packed.is_some(), "{in_dims:?} * {w_dims:?} packs");
            let mut scratch = vec![f32::NAN; conv_scratch_len(&in_dims, &w_dims, &p)];
            for packed in [None, packed.as_deref()] {
                for threads in [1, 2] {
                    let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                    let mut out = vec![f32::NAN; expected.len()];
                    crate::parallel::install(&pool, || {
                        conv(
                            &input,
                            &in_dims,
                            &weight,
                            &w_dims,
                            Some(&bias),
                            None,
                            packed,
                            &p,
                            &mut out,
                            &mut scratch,
                            threads,
                        )
                    })
                    .unwrap();
                    assert_close_within(
                        &out,
                        &expected,
                        1e-4,
                        &format!(
                            "{in_dims:?} * {w_dims:?} {p:?} packed {} threads {threads}",
                            packed.is_some()
                        ),
                    );
                }
            }
        }
    }

    #[test]
    fn pointwise_conv_skips_im2col() {
        let mut rng = Rng::new(11);
        let (in_dims, w_dims) = ([2, 6, 5, 7], [4, 3, 1, 1]);
        let p = ConvParams {
            groups: 2,
            ..ConvParams::default()
        };
        assert_eq!(conv_scratch_len(&in_dims, &w_dims, &p), 0);
        let input = rng.vec(2 * 6 * 35);
        let weight = rng.vec(12);
        let bias = rng.vec(4);
        let (out_dims, out) = run(&input, &in_dims, &weight, &w_dims, Some(&bias), &p, 1);
        assert_eq!(out_dims, [2, 4, 5, 7]);
        assert_close_within(
            &out,
            &naive(
                &input,
                &in_dims,
                &weight,
                &w_dims,
                Some(&bias),
                &p,
                &out_dims,
            ),
            1e-4,
            "1x1",
        );
        // A strided 1x1 conv is not pointwise and needs scratch.
        let strided = ConvParams {
            strides: vec![2, 2],
            ..p.clone()
        };
        assert_eq!(conv_scratch_len(&in_dims, &w_dims, &strided), 3 * 3 * 4);
    }

    /// Layers on few positions run transposed when their output channels waste less padding
    /// (weights packed as B): against the reference convolution plus the epilogue, computed
    /// here, pointwise and unfolded, strided, batched, at one and two threads.
    #[test]
    fn transposed_products_match_reference() {
        let mut rng = Rng::new(0x7a05);
        let posts = [
            Activation::None,
            Activation::Relu,
            Activation::Clip {
                min: -0.5,
                max: 0.5,
            },
        ];
        let mut ran = 0;
        for case in 0..24 {
            let kernel = [1, 3][case % 2];
            let stride = [1, 2][rng.below(2)];
            let m = [32, 64, 96, 250][rng.below(4)];
            // Above four output positions (fewer stream the weights unpacked).
            let side = rng.range(5, 13);
            let in_dims_of = |c| [1 + case % 2, c, side, side + case % 3];
            // Input channels enough for the transposed form to pay (at most 64 x 32 deep).
            let c = (1..=2048 / (kernel * kernel))
                .find(|&c| {
                    let p = ConvParams {
                        pads_begin: vec![kernel / 2; 2],
                        pads_end: vec![kernel / 2; 2],
                        strides: vec![stride; 2],
                        ..ConvParams::default()
                    };
                    let out: usize = conv_output_dims(&in_dims_of(c), &[m, c, kernel, kernel], &p)
                        .unwrap()[2..]
                        .iter()
                        .product();
                    transposing_pays(out, c * kernel * kernel, m)
                })
                .map(|c| c + rng.below(8));
            // Some position counts fill their tiles too well to pay below that depth
            // (156 = 5 x 32 - 4).
            let Some(c) = c else {
                continue;
            };
            ran += 1;
            let in_dims = in_dims_of(c);
            let w_dims = [m, c, kernel, kernel];
            let p = ConvParams {
                pads_begin: vec![kernel / 2; 2],
                pads_end: vec![kernel / 2; 2],
                strides: vec![stride; 2],
                post: posts[rng.below(posts.len())],
                ..ConvParams::default()
            };
            let out_dims = conv_output_dims(&in_dims, &w_dims, &p).unwrap();
            let len: usize = out_dims.iter().product();
            let input = rng.vec(in_dims.iter().product());
            let weight = rng.vec(w_dims.iter().product());
            let bias = rng.vec(m);
            let residual = (rng.below(2) == 0).then(|| rng.vec(len));
            let packed = prepack_conv_weights(&in_dims, &weight, &w_dims, &p)
                .unwrap()
                .unwrap();
            assert_eq!(
                packed[0].side(),
                PackedOperand::B,
                "case {case} runs transposed"
            );
            let plain = ConvParams {
                post: Activation::None,
                ..p.clone()
            };
            let mut expected = naive(
                &input,
                &in_dims,
                &weight,
                &w_dims,
                Some(&bias),
                &plain,
                &out_dims,
            );
            for (i, v) in expected.iter_mut().enumerate() {
                *v = p.post.apply(*v + residual.as_ref().map_or(0.0, |r| r[i]));
            }
            let mut scratch = vec![f32::NAN; conv_scratch_len(&in_dims, &w_dims, &p)];
            for threads in [1, 2] {
                let operands = (&input[..], &in_dims[..], &weight[..], &w_dims[..]);
                let epilogue = (Some(&bias[..]), residual.as_deref());
                let out = conv_on_pool(operands, epilogue, &packed, &p, &mut scratch, threads);
                let what = format!("case {case} {in_dims:?} {w_dims:?} threads {threads}");
                assert_close_within(&out, &expected, 1e-4, &what);
            }
        }
        assert!(ran >= 16, "only {ran} of 24 cases ran transposed");
    }

    #[test]
    fn larger_conv_multithreaded() {
        let mut rng = Rng::new(5);
        let (in_dims, w_dims) = ([1, 16, 30, 30], [24, 16, 3, 3]);
        let p = ConvParams {
            pads_begin: vec![1, 1],
            pads_end: vec![1, 1],
            post: Activation::Relu,
            ..ConvParams::default()
        };
        let input = rng.vec(16 * 900);
        let weight = rng.vec(24 * 16 * 9);
        let (out_dims, out) = run(&input, &in_dims, &weight, &w_dims, None, &p, 2);
        assert_close_within(
            &out,
            &naive(&input, &in_dims, &weight, &w_dims, None, &p, &out_dims),
            1e-4,
            "3x3 threads 2",
        );
    }

    /// With packed weights the GEMM asks for the unfolded input block by block, in its packed
    /// layout; with threads each produces the blocks of its own output columns (also where
    /// there are more output channels than positions).
    #[test]
    fn column_shares_on_threads_match_the_reference() {
        let mut rng = Rng::new(0x5ca7);
        // (input dims, weight dims, stride): several column blocks and depth blocks (depth 576),
        // odd widths, batch and groups, more output channels than positions.
        let cases: [([usize; 4], [usize; 4], usize); 5] = [
            ([1, 16, 30, 30], [24, 16, 3, 3], 1),
            ([1, 64, 40, 40], [16, 64, 3, 3], 1),
            ([2, 12, 37, 23], [20, 6, 3, 3], 2),
            ([1, 8, 61, 47], [40, 8, 5, 5], 1),
            ([1, 48, 13, 11], [197, 48, 3, 3], 1),
        ];
        for (in_dims, w_dims, stride) in cases {
            let p = ConvParams {
                pads_begin: vec![1, 2],
                pads_end: vec![1, 0],
                strides: vec![stride; 2],
                groups: in_dims[1] / w_dims[1],
                post: Activation::Relu,
                ..ConvParams::default()
            };
            let out_dims = conv_output_dims(&in_dims, &w_dims, &p).unwrap();
            let len = out_dims.iter().product();
            let input = rng.vec(in_dims.iter().product());
            let weight = rng.vec(w_dims.iter().product());
            let bias = rng.vec(w_dims[0]);
            let residual = rng.vec(len);
            let operands = (&input[..], &in_dims[..], &weight[..], &w_dims[..]);
            let expected = relu_reference(operands, (&bias, Some(&residual[..])), &p);
            let packed = prepack_conv_weights(&in_dims, &weight, &w_dims, &p)
                .unwrap()
                .unwrap();
            let mut scratch = vec![f32::NAN; conv_scratch_len(&in_dims, &w_dims, &p)];
            for threads in [1, 2, 3] {
                let operands = (&input[..], &in_dims[..], &weight[..], &w_dims[..]);
                let epilogue = (Some(&bias[..]), Some(&residual[..]));
                let out = conv_on_pool(operands, epilogue, &packed, &p, &mut scratch, threads);
                let what = format!("{in_dims:?} {w_dims:?} threads {threads}");
                assert_close_within(&out, &expected, 1e-4, &what);
            }
        }
    }

    /// 1x1 layers from many input channels to few cut their depth in two on several threads
    /// (each half into its own output, added in the epilogue pass), both as `Y = W X` and
    /// transposed, with and without a residual, batch 2, output channels off the vector width:
    /// equal to the definition on one to three threads. A layer just short of the channel
    /// count does not split.
    #[test]
    fn depth_split_pointwise_layers_match_the_reference() {
        let mut rng = Rng::new(0xd5);
        // (input dims, output channels, residual, transposed)
        let cases: [([usize; 4], usize, bool, bool); 5] = [
            ([1, 384, 14, 14], 64, true, false),
            ([2, 400, 7, 7], 96, false, true),
            ([1, 512, 13, 11], 100, true, false),
            ([1, 1024, 7, 7], 200, true, true),
            ([1, 384, 5, 9], 96, false, true),
        ];
        for (in_dims, m, with_residual, transposed) in cases {
            let w_dims = [m, in_dims[1], 1, 1];
            let p = ConvParams {
                post: Activation::Relu,
                ..ConvParams::default()
            };
            let g = ConvGeometry::new(&in_dims, &w_dims, &p).unwrap();
            assert!(
                g.depth_split.is_some() && g.transposed == transposed,
                "{in_dims:?} {m}"
            );
            let out_dims = conv_output_dims(&in_dims, &w_dims, &p).unwrap();
            let len = out_dims.iter().product();
            let input = rng.vec(in_dims.iter().product());
            let weight = rng.vec(w_dims.iter().product());
            let bias = rng.vec(m);
            let residual = with_residual.then(|| rng.vec(len));
            let operands = (&input[..], &in_dims[..], &weight[..], &w_dims[..]);
            let expected = relu_reference(operands, (&bias, residual.as_deref()), &p);
            let packed = prepack_conv_weights(&in_dims, &weight, &w_dims, &p)
                .unwrap()
                .unwrap();
            let mut scratch = vec![f32::NAN; conv_scratch_len(&in_dims, &w_dims, &p)];
            for threads in [1, 2, 3] {
                let operands = (&input[..], &in_dims[..], &weight[..], &w_dims[..]);
                let epilogue = (Some(&bias[..]), residual.as_deref());
                let out = conv_on_pool(operands, epilogue, &packed, &p, &mut scratch, threads);
                let what = format!("{in_dims:?} -> {m} threads {threads}");
                assert_close_within(&out, &expected, 1e-4, &what);
            }
        }
        // 3x3 stride 2 into 7x7, run transposed on unfolded tiles: the product cuts its depth
        // where the threads' parts of the unfold meet.
        for (in_dims, m) in [([1, 160, 13, 13], 96), ([2, 256, 14, 14], 64)] {
            let w_dims = [m, in_dims[1], 3, 3];
            let p = ConvParams {
                strides: vec![2, 2],
                pads_begin: vec![1, 1],
                pads_end: vec![1, 1],
                post: Activation::Relu,
                ..ConvParams::default()
            };
            let g = ConvGeometry::new(&in_dims, &w_dims, &p).unwrap();
            assert!(
                g.transposed && g.tiled_split && g.tile_columns > 0,
                "{in_dims:?}"
            );
            let depth = in_dims[1] * 9;
            let pool = crate::parallel::ThreadPool::new(2).unwrap();
            let cut = crate::parallel::install(&pool, || unfolded_depth_cut(depth, 49, 2));
            assert_eq!(cut, Some(depth / 2));
            let input = rng.vec(in_dims.iter().product());
            let weight = rng.vec(w_dims.iter().product());
            let bias = rng.vec(m);
            let operands = (&input[..], &in_dims[..], &weight[..], &w_dims[..]);
            let expected = relu_reference(operands, (&bias, None), &p);
            let packed = prepack_conv_weights(&in_dims, &weight, &w_dims, &p)
                .unwrap()
                .unwrap();
            let mut scratch = vec![f32::NAN; conv_scratch_len(&in_dims, &w_dims, &p)];
            for threads in [1, 2, 3] {
                let operands = (&input[..], &in_dims[..], &weight[..], &w_dims[..]);
                let epilogue = (Some(&bias[..]), None);
                let out = conv_on_pool(operands, epilogue, &packed, &p, &mut scratch, threads);
                let what = format!("3x3 s2 {in_dims:?} -> {m} threads {threads}");
                assert_close_within(&out, &expected, 1e-4, &what);
            }
        }
        let near_miss =
            ConvGeometry::new(&[1, 383, 14, 14], &[64, 383, 1, 1], &ConvParams::default());
        assert!(near_miss.unwrap().depth_split.is_none());
        let few_outputs =
            ConvGeometry::new(&[1, 384, 14, 14], &[97, 384, 1, 1], &ConvParams::default());
        assert!(few_outputs.unwrap().depth_split.is_none());
    }

    #[test]
    fn depthwise_layers_take_the_direct_kernel_on_threads() {
        let mut rng = Rng::new(21);
        // MobileNet-style 3x3 depthwise, stride 1 and 2, and a channel multiplier of 2.
        for (in_dims, w_dims, stride) in [
            ([1, 32, 28, 28], [32, 1, 3, 3], 1),
            ([2, 24, 29, 27], [24, 1, 3, 3], 2),
            ([1, 16, 20, 20], [32, 1, 5, 5], 1),
        ] {
            let p = ConvParams {
                strides: vec![stride, stride],
                pads_begin: vec![1, 2],
                pads_end: vec![1, 0],
                groups: in_dims[1],
                post: Activation::Clip { min: 0.0, max: 6.0 },
                ..ConvParams::default()
            };
            assert_eq!(conv_scratch_len(&in_dims, &w_dims, &p), 0, "no unfold");
            let input = rng.vec(in_dims.iter().product());
            let weight = rng.vec(w_dims.iter().product());
            let bias = rng.vec(w_dims[0]);
            let expected = {
                let (dims, _) = run(&input, &in_dims, &weight, &w_dims, None, &p, 1);
                naive(&input, &in_dims, &weight, &w_dims, Some(&bias), &p, &dims)
            };
            for threads in [1, 2] {
                let (_, out) = run(&input, &in_dims, &weight, &w_dims, Some(&bias), &p, threads);
                assert_close_within(
                    &out,
                    &expected,
                    1e-4,
                    &format!("{in_dims:?} {w_dims:?} {threads}t"),
                );
            }
        }
    }

    #[test]
    fn outputs_wider_than_one_im2col_tile() {
        let mut rng = Rng::new(9);
        // depth 64 * 9 = 576 -> tiles of 448 columns (455 down to whole register tiles) over
        // 40 * 39 outputs, splitting rows.
        let (in_dims, w_dims) = ([1, 64, 40, 40], [3, 64, 3, 3]);
        let p = ConvParams {
            pads_begin: vec![1, 0],
            pads_end: vec![1, 1],
            ..ConvParams::default()
        };
        assert_eq!(conv_scratch_len(&in_dims, &w_dims, &p), 576 * 448);
        let input = rng.vec(64 * 1600);
        let weight = rng.vec(3 * 576);
        let bias = rng.vec(3);
        let (out_dims, out) = run(&input, &in_dims, &weight, &w_dims, Some(&bias), &p, 1);
        assert_eq!(out_dims, [1, 3, 40, 39]);
        let expected = naive(
            &input,
            &in_dims,
            &weight,
            &w_dims,
            Some(&bias),
            &p,
            &out_dims,
        );
        assert_close_within(&out, &expected, 1e-4, "2-d tiles");
        // 1-D: depth 300 * 3 = 900 -> tiles of 288 columns over 999 outputs.
        let (in_dims, w_dims) = ([1, 300, 1000], [2, 300, 3]);
        let p = ConvParams {
            dilations: vec![2],
            pads_begin: vec![1],
            pads_end: vec![2],
            ..ConvParams::default()
        };
        let input = rng.vec(300 * 1000);
        let weight = rng.vec(2 * 900);
        let (out_dims, out) = run(&input, &in_dims, &weight, &w_dims, None, &p, 2);
        assert_close_within(
            &out,
            &naive(&input, &in_dims, &weight, &w_dims, None, &p, &out_dims),
            1e-4,
            "1-d tiles",
        );
    }

    #[test]
    fn known_values_1d() {
        // x = [1, 2, 3, 4], w = [1, 0, -1], pad 1 both sides -> [-2, -2, -2, 3].
        let p = ConvParams {
            pads_begin: vec![1],
            pads_end: vec![1],
            ..ConvParams::default()
        };
        let (dims, out) = run(
            &[1.0, 2.0, 3.0, 4.0],
            &[1, 1, 4],
            &[1.0, 0.0, -1.0],
            &[1, 1, 3],
            None,
            &p,
            1,
        );
        assert_eq!(dims, [1, 1, 4]);
        assert_eq!(out, [-2.0, -2.0, -2.0, 3.0]);
    }

    #[test]
    fn dimension_errors_say_what_and_why() {
        let p = ConvParams::default();
        let err = conv_output_dims(&[1, 3, 8, 8], &[2, 4, 3, 3], &p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: input has 3 channels but weight expects 4 (groups 1)"
        );
        let p2 = ConvParams {
            groups: 2,
            ..ConvParams::default()
        };
        let err = conv_output_dims(&[1, 4, 8, 8], &[3, 2, 3, 3], &p2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: output channels (weight dim 0) (3) is not divisible by groups (2)"
        );
        let err = conv_output_dims(&[1, 3, 8], &[2, 3, 3, 3], &p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: weight has rank 4 but must equal the input rank 3 (M, C/groups, kernel...)"
        );
        let err = conv_output_dims(&[3, 8], &[2, 3, 3], &p).unwrap_err();
        assert!(err.to_string().contains("input has rank 2"), "{err}");
        let err = conv_output_dims(&[1, 3, 2, 8], &[2, 3, 3, 3], &p).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: kernel extent 3 exceeds the padded input size 2 on spatial axis 0"
        );
        let bad_kernel = ConvParams {
            kernel: vec![5, 5],
            ..ConvParams::default()
        };
        assert!(conv_output_dims(&[1, 3, 8, 8], &[2, 3, 3, 3], &bad_kernel).is_err());
        assert_eq!(conv_scratch_len(&[1, 3, 8, 8], &[2, 4, 3, 3], &p), 0);
    }

    #[test]
    fn wrong_buffers_are_errors_not_panics() {
        let p = ConvParams::default();
        let (in_dims, w_dims) = ([1, 2, 4, 4], [3, 2, 3, 3]);
        let input = vec![0.0; 32];
        let weight = vec![0.0; 54];
        let mut out = vec![0.0; 12];
        let mut scratch = vec![0.0; conv_scratch_len(&in_dims, &w_dims, &p)];
        assert_eq!(scratch.len(), 2 * 9 * 4);
        let err = conv_f32(
            &input[..31],
            &in_dims,
            &weight,
            &w_dims,
            None,
            &p,
            &mut out,
            &mut scratch,
            1,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: input has 31 elements but 32 are required"
        );
        let err = conv_f32(
            &input,
            &in_dims,
            &weight,
            &w_dims,
            Some(&[0.0; 2]),
            &p,
            &mut out,
            &mut scratch,
            1,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: bias has 2 elements but 3 are required"
        );
        let err = conv_f32(
            &input,
            &in_dims,
            &weight,
            &w_dims,
            None,
            &p,
            &mut out,
            &mut scratch[..10],
            1,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Conv: scratch has 10 elements but 72 are required"
        );
        let err = conv_f32(
            &input,
            &in_dims,
            &weight,
            &w_dims,
            None,
            &p,
            &mut out[..11],
            &mut scratch,
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("output has 11"), "{err}");
    }

    #[test]
    fn empty_inputs() {
        let p = ConvParams::default();
        // Batch 0.
        let (dims, out) = run(&[], &[0, 2, 4, 4], &[0.0; 54], &[3, 2, 3, 3], None, &p, 1);
        assert_eq!((dims, out.len()), (vec![0, 3, 2, 2], 0));
        // No input channels: the output is the bias.
        let (dims, out) = run(&[], &[1, 0, 3], &[], &[2, 0, 1], Some(&[1.5, -2.0]), &p, 1);
        assert_eq!(dims, [1, 2, 3]);
        assert_eq!(out, [1.5, 1.5, 1.5, -2.0, -2.0, -2.0]);
        // Empty spatial axis.
        let (dims, out) = run(&[], &[1, 1, 0, 5], &[0.0; 9], &[1, 1, 3, 3], None, &p, 1);
        assert_eq!((dims, out.len()), (vec![1, 1, 0, 3], 0));
    }
}
