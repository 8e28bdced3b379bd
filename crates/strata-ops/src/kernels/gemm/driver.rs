//! The blocked GEMM driver (after BLIS): loops over cache blocks of the operands, packs them and
//! calls a microkernel per register tile of C; with several threads, blocks of C are spread over
//! the current intra-op pool.
//!
//! Loop nest over one block of C (rows `rows`, columns `cols`):
//!
//! ```text
//! for jc in cols, step NC                    columns of C and B
//!   for pc in 0..k, step KC                  depth
//!     pack B[pc.., jc..] (KC x NC)           -> L2, reused by every row sliver
//!     for ir in rows, step MR
//!       pack A[ir.., pc..] (MR x KC)         -> L1, reused by every column sliver
//!       for jr in jc.., step NR
//!         microkernel: C[ir.., jr..] (MR x NR) = alpha * A B + (pc == 0 ? beta : 1) * C
//! ```
//!
//! When the columns span several `NC` blocks, A would be packed once per block; instead all of
//! this block's rows of A are packed once, up front (when that copy is small: [`WHOLE_A_MAX`]).
//! B may also come from a [`ProduceB`] (quantized weights dequantized straight into the packed
//! layout) instead of from memory.

use std::ops::Range;

use bytemuck::Pod;

use super::super::float::Float;
use super::microkernel::{FusedAct, Microkernel, Prefetch, Tile, TileEpilogue};
use super::pack::{with_pack_buffers, MatRef};
use crate::parallel;

/// Most elements of A packed whole, up front, per thread (2 MiB of f32): above it, A is packed
/// per block as it is needed.
const WHOLE_A_MAX: usize = 1 << 19;

/// Most register tiles per row sliver for which a column-major A is read in place (see
/// `reads_a_in_place`).
const DIRECT_A_MAX_TILES: usize = 4;

/// Below this many multiply-adds a product stays on the calling thread: handing blocks to the
/// pool costs more than it saves.
const PARALLEL_MIN_MULADDS: usize = 1 << 20;

/// The output of a product: element `(i, j)` at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy, Debug)]
pub struct MatMut<T> {
    pub ptr: *mut T,
    pub rs: isize,
    pub cs: isize,
}

impl<T> MatMut<T> {
    /// The matrix stored in `data` with strides `(rs, cs)` (only the pointer is kept: the
    /// caller keeps `data` borrowed while the view is used).
    pub fn of(data: &mut [T], (rs, cs): (isize, isize)) -> Self {
        MatMut {
            ptr: data.as_mut_ptr(),
            rs,
            cs,
        }
    }

    /// The same matrix from column `j` on: only the pointer moves (wrapping), nothing is read.
    pub fn shifted_to_column(self, j: usize) -> Self {
        MatMut {
            ptr: self.ptr.wrapping_offset(j as isize * self.cs),
            ..self
        }
    }
}

// SAFETY: a `MatMut` is shared between the threads of one product only, and each thread writes
// a disjoint block of C (`run` hands out non-overlapping row/column ranges, and the caller
// guarantees distinct (i, j) map to distinct elements). The pointee type is sendable.
unsafe impl<T: Send> Send for MatMut<T> {}
// SAFETY: as above: shared references to it are only used to write disjoint elements.
unsafe impl<T: Send> Sync for MatMut<T> {}

/// A validated product `C = alpha * A B + beta * C` (`A` is `m x k`, `B` `k x n`).
pub struct Problem<'a, T> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: MatRef<'a, T>,
    pub b: MatRef<'a, T>,
    pub c: MatMut<T>,
    pub alpha: T,
    pub beta: T,
    /// A packed once beforehand (in place of `a`): slivers of the microkernel's `MR` rows, each
    /// holding all `k` columns ([`super::prepacked`]).
    pub packed_a: Option<&'a [T]>,
    /// B packed once beforehand (in place of `b`): slivers of `NR` columns over all `k` rows.
    pub packed_b: Option<&'a [T]>,
    /// B made block by block on demand (in place of `b`, which is then empty).
    pub produce_b: Option<ProduceB<'a, T>>,
    /// Run on each finished piece of a row of C while it is still in cache (C's columns must be
    /// contiguous): `epilogue(i, j, row)` with `row` = C's elements `(i, j..j + row.len())`.
    pub epilogue: Option<&'a Epilogue<'a, T>>,
    /// The same steps as `epilogue` in the form the microkernels apply to their accumulators
    /// before the store: when set, the blocked driver uses it instead of calling `epilogue`
    /// (which the other paths, the skinny products, still run).
    pub fused: Option<FusedEpilogue<'a, T>>,
    /// The depth cut in two, each half into its own output: see [`DepthSplit`].
    pub depth_split: Option<DepthSplit<T>>,
}

/// A product whose depth is cut at `at` (`0 < at < k`): `C = alpha * A[:, ..at] B[..at, :]`
/// and `partial = alpha * A[:, at..] B[at.., :]`, both overwritten (`beta` must be 0; no
/// epilogue, which needs their sum). With several threads the halves go to different ones,
/// the first half to the first half of the threads: a product whose depth rows were made by
/// two threads, half each (the input channels of a 1x1 convolution after a layer split by
/// channels), then reads only what its own core wrote. The caller adds `partial` to C.
#[derive(Clone, Copy, Debug)]
pub struct DepthSplit<T> {
    pub at: usize,
    /// `m x n`, element `(i, j)` at `ptr + i * rs + j * cs`, disjoint from C.
    pub partial: MatMut<T>,
}

/// A step applied to finished pieces of C's rows: bias, residual, activation.
pub type Epilogue<'a, T> = dyn Fn(usize, usize, &mut [T]) + Sync + 'a;

/// An epilogue the microkernel applies in registers: `C(i, j) = act(((alpha * AB + beta * C)
/// + residual(i, j)) + row_bias[i] + col_bias[j])`, with the parts that are given.
#[derive(Clone, Copy, Debug)]
pub struct FusedEpilogue<'a, T> {
    /// `m x n`, element `(i, j)` at `data[i * rs + j]`.
    pub residual: Option<(&'a [T], isize)>,
    /// One value per row of C (`m`).
    pub row_bias: Option<&'a [T]>,
    /// One value per column of C (`n`).
    pub col_bias: Option<&'a [T]>,
    pub act: FusedAct<T>,
}

impl<T> FusedEpilogue<'_, T> {
    /// The microkernel's view for the tile whose first element is C's `(i, j)`.
    fn at(&self, i: usize, j: usize) -> TileEpilogue<T>
    where
        T: Copy,
    {
        let null = std::ptr::null::<T>();
        TileEpilogue {
            residual: self.residual.map_or(null, |(data, rs)| {
                data.as_ptr().wrapping_offset(i as isize * rs + j as isize)
            }),
            residual_rs: self.residual.map_or(0, |(_, rs)| rs),
            row_bias: self.row_bias.map_or(null, |b| b.as_ptr().wrapping_add(i)),
            col_bias: self.col_bias.map_or(null, |b| b.as_ptr().wrapping_add(j)),
            act: self.act,
        }
    }
}

/// One block of B a [`ProduceB`] is asked for: rows `p0..p0 + kc`, columns `j0..j0 + cols`, as
/// `cols.div_ceil(nr)` slivers of `nr` columns (sliver `s` at `s * kc * nr`, row `p` of it at
/// `p * nr`), zero past the last column: the layout [`super::pack::pack_block`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BBlock {
    pub p0: usize,
    pub kc: usize,
    pub j0: usize,
    pub cols: usize,
    pub nr: usize,
}

impl BBlock {
    /// Elements the block occupies.
    pub fn elements(&self) -> usize {
        self.cols.div_ceil(self.nr) * self.kc * self.nr
    }
}

/// B that is computed rather than read: `fill(block, dst)` writes `block` into
/// `dst[..block.elements()]`. Every `p0` it is asked for is a multiple of `align` (a quantization
/// block's length, say), and so is every `kc` but the last one of the depth.
#[derive(Clone, Copy)]
pub struct ProduceB<'a, T> {
    pub align: usize,
    pub fill: &'a (dyn Fn(BBlock, &mut [T]) + Sync + 'a),
}

impl<T: Copy> Problem<'_, T> {
    /// The same product transposed: `C^T = alpha * B^T A^T + beta * C^T`. Only for products
    /// without prepacked operands (their sliver layouts are not each other's transposes) or an
    /// epilogue (it works on rows of C).
    pub fn transposed(&self) -> Self {
        debug_assert!(self.packed_a.is_none() && self.packed_b.is_none());
        debug_assert!(self.produce_b.is_none() && self.epilogue.is_none());
        debug_assert!(self.fused.is_none() && self.depth_split.is_none());
        Problem {
            m: self.n,
            n: self.m,
            k: self.k,
            a: self.b.t(),
            b: self.a.t(),
            c: MatMut {
                ptr: self.c.ptr,
                rs: self.c.cs,
                cs: self.c.rs,
            },
            alpha: self.alpha,
            beta: self.beta,
            packed_a: None,
            packed_b: None,
            produce_b: None,
            epilogue: None,
            fused: None,
            depth_split: None,
        }
    }
}

/// Computes the product with microkernel `K`, on up to `threads` threads of the current pool.
///
/// # Safety
/// - every element of A, B (read) and C (read unless `beta == 0`, written) addressed by
///   `(i, j)` within the operand's extents is in bounds: A and B through their slices' bounds,
///   C through `c.ptr`, which must be valid for all of them, and so are the fused epilogue's
///   residual and biases (checked by `prepacked::check_fused`); a prepacked operand holds
///   `extent.div_ceil(tile) * k * tile` elements for `K`'s tile (`MR` for A, `NR` for B);
/// - distinct `(i, j)` of C address distinct elements, and nothing else accesses C meanwhile;
/// - the CPU supports the instructions of `K`.
pub unsafe fn run<T: Float + Pod, K: Microkernel<T>>(p: &Problem<'_, T>, threads: usize) {
    if p.m == 0 || p.n == 0 || p.k == 0 {
        return;
    }
    let work = p.m.saturating_mul(p.n).saturating_mul(p.k);
    let threads = if work < PARALLEL_MIN_MULADDS {
        1
    } else {
        threads.min(parallel::threads())
    };
    // Cancellation: blocks poll the run's token; the run fails at its next check (run_control).
    let stop = crate::run_control::stop_token();
    // Depth halves: the range of each and the matrix it goes to.
    let halves = match p.depth_split {
        Some(split) => [(0..split.at, p.c), (split.at..p.k, split.partial)],
        None => [(0..p.k, p.c), (p.k..p.k, p.c)],
    };
    let parts = if p.depth_split.is_some() { 2 } else { 1 };
    if threads <= 1 {
        for (depth, c) in halves.into_iter().take(parts) {
            // SAFETY: the whole of C (or of the partial output), per the caller's contract.
            unsafe { block::<T, K>(p, 0..p.m, 0..p.n, depth, c, 0, &stop) };
        }
        return;
    }
    // A produced B is made again by every block that needs it: split its columns when possible.
    let per_part = (threads / parts).max(1);
    let (row_blocks, col_blocks) = split(p.m, p.n, K::MR, K::NR, per_part, p.produce_b.is_some());
    let blocks = row_blocks * col_blocks;
    // About one block per thread, each on the same thread every call (its part of a prepacked
    // operand stays in that core's cache); depth half `h` on threads `h * blocks..`.
    parallel::for_each_thread(parts * blocks, |index| {
        if stop.should_stop() {
            return;
        }
        let (depth, c_out) = halves[index / blocks].clone();
        let index = index % blocks;
        let (r, c) = (index / col_blocks, index % col_blocks);
        let rows = bound(p.m, K::MR, row_blocks, r)..bound(p.m, K::MR, row_blocks, r + 1);
        let cols = bound(p.n, K::NR, col_blocks, c)..bound(p.n, K::NR, col_blocks, c + 1);
        if rows.is_empty() || cols.is_empty() {
            return;
        }
        // Neighbouring column blocks share the cache lines where C's rows cross from one
        // block to the other (every row, unless its length is a multiple of a line). Walking
        // their row slivers from different ends keeps the two cores from writing those lines
        // at the same moment. Two threads on SqueezeNet's 27x27 1x1 layers: 5 % faster per
        // node, SqueezeNet 2 %, MobileNetV2 and ResNet-50 1 %.
        let first_sliver = if c % 2 == 1 {
            rows.len().div_ceil(K::MR) / 2
        } else {
            0
        };
        // SAFETY: the blocks partition C (disjoint row or column ranges), so each task owns
        // its elements; the rest is the caller's contract.
        unsafe { block::<T, K>(p, rows, cols, depth, c_out, first_sliver, &stop) };
    });
}

/// Blocks of rows and of columns for `threads` threads: split the dimension with more register
/// tiles (so the blocks stay balanced) into about `threads` parts. Splitting columns repacks A
/// in every block and splitting rows repacks B, so on a tie the smaller operand is repacked;
/// `columns_first` (B is produced, which costs more than packing it) splits columns whenever
/// there are enough of them.
fn split(
    m: usize,
    n: usize,
    mr: usize,
    nr: usize,
    threads: usize,
    columns_first: bool,
) -> (usize, usize) {
    let (row_tiles, col_tiles) = (m.div_ceil(mr), n.div_ceil(nr));
    let by_columns = if row_tiles >= threads && col_tiles >= threads {
        m <= n || columns_first
    } else {
        col_tiles >= row_tiles
    };
    if by_columns {
        (1, threads.min(col_tiles).max(1))
    } else {
        (threads.min(row_tiles).max(1), 1)
    }
}

/// Where block `b` of `blocks` starts along an extent cut in whole `tile`s: the even share
/// `b * extent / blocks` rounded to the nearest tile, so 196 columns in tiles of 32 split as
/// 96 + 100 (three tiles and a bit each), not 128 + 68. `bound(.., blocks)` is the extent;
/// consecutive bounds may meet (an empty block) when there are few tiles.
fn bound(extent: usize, tile: usize, blocks: usize, b: usize) -> usize {
    if b >= blocks {
        return extent;
    }
    let whole = blocks * tile;
    ((b * extent + whole / 2) / whole * tile).min(extent)
}

/// Computes rows `rows` x columns `cols` of the product over the steps `depth` into `c` (C, or
/// a depth split's partial output) on the calling thread, row slivers from the
/// `first_sliver`-th on (wrapping around). The epilogues run only when `depth` ends the product.
///
/// # Safety
/// As [`run`], restricted to this block of `c`, which no other thread may access meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn block<T: Float + Pod, K: Microkernel<T>>(
    p: &Problem<'_, T>,
    rows: Range<usize>,
    cols: Range<usize>,
    depth: Range<usize>,
    c: MatMut<T>,
    first_sliver: usize,
    stop: &crate::run_control::StopToken,
) {
    if depth.is_empty() {
        return;
    }
    // Depth blocks of equal size (784 = 4 x 196, not 3 x 256 + 16): a short last block would
    // pay a whole pass of C's loads and stores for a few steps of work. A producer of B gets
    // blocks that start on its alignment.
    let steps = depth.len();
    let mut kc_max = steps.div_ceil(steps.div_ceil(K::KC).max(1)).max(1);
    if let Some(produce) = p.produce_b {
        kc_max = kc_max.next_multiple_of(produce.align.max(1)).min(steps);
    }
    let nc_max = K::NC.min(cols.len().div_ceil(K::NR) * K::NR);
    let row_slivers = rows.len().div_ceil(K::MR);
    // A packed whole (all `k` steps of every row sliver, as a prepacked A) when the columns
    // take more than one block, so it is not packed again for each.
    let direct_a = reads_a_in_place(p, cols.len().div_ceil(K::NR));
    let whole_a = !direct_a
        && depth == (0..p.k)
        && p.packed_a.is_none()
        && cols.len() > K::NC
        && row_slivers * K::MR * p.k <= WHOLE_A_MAX;
    let a_buffer = match p.packed_a {
        Some(_) => 0,
        None if whole_a => row_slivers * K::MR * p.k,
        // In place, only a last, partial sliver is packed.
        None => K::MR * kc_max,
    };
    let direct_b = reads_b_in_place(p, K::DIRECT_B_MAX_ROWS);
    let b_buffer = if p.packed_b.is_some() {
        0
    } else if direct_b {
        // Only a last, partial sliver is packed.
        kc_max * K::NR
    } else {
        kc_max * nc_max
    };
    with_pack_buffers::<T, _>(a_buffer, b_buffer, |packed_a, packed_b| {
        if whole_a {
            for (s, sliver) in packed_a.chunks_exact_mut(K::MR * p.k).enumerate() {
                let ir = rows.start + s * K::MR;
                K::pack_a(sliver, p.a, ir, K::MR.min(rows.end - ir), 0, p.k);
            }
        }
        // A packed over all `k` steps with the index of its sliver for row `rows.start`, or
        // else the buffer each block of A is packed into.
        let (all_a, a_scratch): (Option<(&[T], usize)>, &mut [T]) = match p.packed_a {
            Some(all) => (Some((all, rows.start / K::MR)), packed_a),
            None if whole_a => (Some((&*packed_a, 0)), &mut []),
            None => (None, packed_a),
        };
        let sliver_count = |all: &[T]| all.len() / (p.k * K::MR);
        for jc in cols.clone().step_by(K::NC) {
            let nc = K::NC.min(cols.end - jc);
            for pc in depth.clone().step_by(kc_max) {
                if stop.should_stop() {
                    return;
                }
                let kc = kc_max.min(depth.end - pc);
                // Prepacked B: sliver `jr / NR` holds all k rows, its rows pc.. are contiguous.
                // In-place B: whole slivers are read where they are; the matrix's last sliver,
                // if partial, is packed (reading NR columns would run past B's last row).
                let partial_from = (p.n / K::NR) * K::NR;
                let b_len = match (p.packed_b, p.produce_b) {
                    (Some(_), _) => 0,
                    (None, Some(produce)) => {
                        let request = BBlock {
                            p0: pc,
                            kc,
                            j0: jc,
                            cols: nc,
                            nr: K::NR,
                        };
                        (produce.fill)(request, &mut packed_b[..request.elements()]);
                        request.elements()
                    }
                    _ if direct_b && jc + nc > partial_from => {
                        K::pack_b(packed_b, p.b, pc, kc, partial_from, p.n - partial_from)
                    }
                    _ if direct_b => 0,
                    _ => K::pack_b(packed_b, p.b, pc, kc, jc, nc),
                };
                let packed_b = &packed_b[..b_len];
                // Later depth blocks accumulate onto the first one's result.
                let beta = if pc == depth.start { p.beta } else { T::ONE };
                // The fused epilogue goes with the stores of the last depth block (single 1x1
                // convolutions at 1 thread: 96 <- 16 at 112x112 with Clip 0.83x, 256 <- 64 +
                // residual at 56x56 0.90x). Earlier blocks store plain partial sums.
                let fused = p.fused.filter(|_| pc + kc == p.k);
                let next_b = p.packed_b.and_then(|all| {
                    let block = (jc, nc, pc, kc);
                    NextBlock::of(all, p.k, &depth, kc_max, cols.end, K::NC, block, K::NR)
                });
                let tiles_of_block = row_slivers * nc.div_ceil(K::NR);
                for step in 0..row_slivers {
                    let ir = rows.start + (step + first_sliver) % row_slivers * K::MR;
                    let mr = K::MR.min(rows.end - ir);
                    let (sliver_a, a_step): (&[T], usize) = match all_a {
                        // Blocks start on whole register tiles, so `ir` is a multiple of MR.
                        Some((all, first)) => {
                            let s = first + (ir - rows.start) / K::MR;
                            (&all[s * p.k * K::MR + pc * K::MR..][..kc * K::MR], K::MR)
                        }
                        // Rows ir..ir + MR, columns pc..pc + kc of A, one column stride apart:
                        // the slice from the first to the last element read.
                        None if direct_a && mr == K::MR => {
                            let cs = p.a.cs as usize;
                            let first = pc * cs + ir;
                            (&p.a.data[first..first + (kc - 1) * cs + K::MR], cs)
                        }
                        None => {
                            let a_len = K::pack_a(a_scratch, p.a, ir, mr, pc, kc);
                            (&a_scratch[..a_len], K::MR)
                        }
                    };
                    for (index, jr) in (jc..jc + nc).step_by(K::NR).enumerate() {
                        let sliver_b = match p.packed_b {
                            Some(all) => (
                                &all[(jr / K::NR) * p.k * K::NR + pc * K::NR..][..kc * K::NR],
                                K::NR,
                            ),
                            None if direct_b && jr < partial_from => {
                                // Rows pc..pc + kc, columns jr..jr + NR of B, one row stride
                                // apart: the slice from the first to the last element read.
                                let rs = p.b.rs as usize;
                                let first = pc * rs + jr;
                                (&p.b.data[first..first + (kc - 1) * rs + K::NR], rs)
                            }
                            None if direct_b => (&packed_b[..kc * K::NR], K::NR),
                            None => (&packed_b[index * kc * K::NR..][..kc * K::NR], K::NR),
                        };
                        let tile = Tile {
                            ptr: c
                                .ptr
                                .wrapping_offset(ir as isize * c.rs + jr as isize * c.cs),
                            rs: c.rs,
                            cs: c.cs,
                            m: mr,
                            n: K::NR.min(jc + nc - jr),
                        };
                        // The first pass over a prepacked operand streams it from memory: while
                        // the first row sliver walks B's slivers, fetch the next B sliver; while
                        // each row sliver's first tile runs, fetch the next A sliver (the one
                        // the next step computes).
                        let next_a = all_a.and_then(|(all, first)| {
                            let s = first + (step + 1 + first_sliver) % row_slivers;
                            (step + 1 < row_slivers && s < sliver_count(all)).then_some((all, s))
                        });
                        let next_part = next_b.as_ref().filter(|_| step > 0).map(|next| {
                            let slivers = nc.div_ceil(K::NR);
                            next.part((step - 1) * slivers + index, tiles_of_block - slivers)
                        });
                        let prefetch = match (next_a, p.packed_b) {
                            (_, Some(all)) if step == 0 && jr + K::NR < jc + nc => {
                                Prefetch::packed(
                                    all.as_ptr()
                                        .wrapping_add((jr / K::NR + 1) * p.k * K::NR + pc * K::NR),
                                    K::NR,
                                )
                            }
                            // A read in place: on a row sliver's first tile, the next row
                            // sliver's part of this depth block, `kc` runs of MR elements a
                            // column stride apart, which the hardware prefetchers miss.
                            _ if direct_a && index == 0 && step + 1 < row_slivers => {
                                let next =
                                    rows.start + (step + 1 + first_sliver) % row_slivers * K::MR;
                                let cs = p.a.cs as usize;
                                Prefetch {
                                    ptr: p.a.data.as_ptr().wrapping_add(pc * cs + next),
                                    step: cs,
                                    span: K::MR,
                                    to_l2: false,
                                }
                            }
                            // Later passes over a prepacked B find this block in L2: fetch
                            // the next block into L2 meanwhile, a piece per tile, so that its
                            // first pass does not wait on memory (BERT's weights stream from
                            // DRAM: that pass ran at two thirds of the others' rate).
                            _ if next_part.is_some() => {
                                let (ptr, len) = next_part.unwrap_or((sliver_a.as_ptr(), 0));
                                Prefetch::spread_to_l2(ptr, len, kc)
                            }
                            (Some((all, s)), _) if index == 0 => Prefetch::packed(
                                all.as_ptr().wrapping_add(s * p.k * K::MR + pc * K::MR),
                                K::MR,
                            ),
                            // B read in place: its next sliver (the same rows, NR columns on),
                            // one row per step, on every row sliver: its rows lie a row stride
                            // apart, one stream each, which the hardware prefetchers miss.
                            _ if direct_b && jr + 2 * K::NR <= partial_from.min(jc + nc) => {
                                Prefetch {
                                    ptr: sliver_b.0.as_ptr().wrapping_add(K::NR),
                                    step: sliver_b.1,
                                    span: K::NR,
                                    to_l2: false,
                                }
                            }
                            _ => Prefetch::none(sliver_a.as_ptr(), K::MR),
                        };
                        // Whole rows of a tile only: a partial last tile is finished by the
                        // row closure, which is cheaper on a few columns than the row-by-row
                        // scalar store.
                        let tile_epilogue = fused
                            .filter(|_| tile.n == K::NR && tile.cs == 1)
                            .map(|f| f.at(ir, jr));
                        // SAFETY: `sliver_a` holds MR elements at every multiple of its step
                        // below kc (one packed sliver, since mr <= MR, or MR rows of A in place)
                        // and `sliver_b` NR elements at every multiple of its stride below kc
                        // (slicing checked both); the tile's
                        // elements are C's (ir + i, jr + j) for i < mr, j < its n, inside this
                        // block, so valid and exclusively ours by the caller's contract, which
                        // also covers K's CPU features and the fused epilogue's parts (valid
                        // for every element of C).
                        unsafe {
                            let (a, b) = (
                                (sliver_a.as_ptr(), a_step),
                                (sliver_b.0.as_ptr(), sliver_b.1),
                            );
                            if tile.n <= K::NR / 2 {
                                // A narrow last tile (no fused epilogue: it is not whole).
                                K::run_half(kc, a, b, &tile, p.alpha, beta, prefetch)
                            } else {
                                K::run(
                                    kc,
                                    a,
                                    b,
                                    &tile,
                                    p.alpha,
                                    beta,
                                    prefetch,
                                    tile_epilogue.as_ref(),
                                )
                            }
                        };
                    }
                    if pc + kc == p.k {
                        if let Some(epilogue) = p.epilogue {
                            // With a fused epilogue, only the columns of a partial last tile
                            // are left to finish.
                            let from = match fused {
                                Some(_) if c.cs == 1 => jc + nc / K::NR * K::NR,
                                _ => jc,
                            };
                            let sliver = Tile {
                                ptr: c
                                    .ptr
                                    .wrapping_offset(ir as isize * c.rs + from as isize * c.cs),
                                rs: c.rs,
                                cs: c.cs,
                                m: mr,
                                n: jc + nc - from,
                            };
                            if sliver.n > 0 {
                                // SAFETY: rows ir..ir + mr, columns from..jc + nc of C are
                                // finished (this was their last depth block), inside this
                                // block, so ours alone and in bounds, and contiguous along rows
                                // (`cs == 1` is part of the epilogue's contract). They are
                                // still in L1/L2.
                                unsafe { finish_tile(epilogue, &sliver, ir, from) };
                            }
                        }
                    }
                }
            }
        }
    });
}

/// The depth block after `(jc, nc, pc, kc)` of a prepacked B (`all`: slivers of `nr` columns
/// over all `k` rows) in the driver's order (depth blocks, then column blocks up to
/// `cols_end`): per sliver, `kc * nr` contiguous elements, `k * nr` apart.
struct NextBlock<T> {
    first: *const T,
    slivers: usize,
    piece: usize,
    stride: usize,
}

impl<T> NextBlock<T> {
    #[allow(clippy::too_many_arguments)]
    fn of(
        all: &[T],
        k: usize,
        depth: &Range<usize>,
        kc_max: usize,
        cols_end: usize,
        nc_max: usize,
        (jc, nc, pc, kc): (usize, usize, usize, usize),
        nr: usize,
    ) -> Option<Self> {
        let (jc, nc, pc) = if pc + kc < depth.end {
            (jc, nc, pc + kc)
        } else if jc + nc < cols_end {
            (jc + nc, nc_max.min(cols_end - jc - nc), depth.start)
        } else {
            return None;
        };
        let slivers = nc.div_ceil(nr);
        let first = (jc / nr) * k * nr + pc * nr;
        let piece = kc_max.min(depth.end - pc) * nr;
        let end = first + (slivers - 1) * k * nr + piece;
        (slivers > 0 && end <= all.len()).then(|| NextBlock {
            first: all[first..].as_ptr(),
            slivers,
            piece,
            stride: k * nr,
        })
    }

    /// Where part `call` of `calls` starts and how many elements it holds: each sliver's run
    /// cut into `calls / slivers` equal parts (none left over for the last `calls % slivers`
    /// calls), so a part is contiguous and together they cover the block exactly. With fewer
    /// calls than slivers, only the first `calls` slivers' runs are covered.
    fn part(&self, call: usize, calls: usize) -> (*const T, usize) {
        let per_sliver = (calls / self.slivers).max(1);
        let (sliver, index) = (call / per_sliver, call % per_sliver);
        let len = self.piece.div_ceil(per_sliver);
        let offset = (index * len).min(self.piece);
        let len = if sliver < self.slivers {
            len.min(self.piece - offset)
        } else {
            0
        };
        (
            self.first
                .wrapping_add(sliver.min(self.slivers) * self.stride + offset),
            len,
        )
    }
}

/// Whether A is read in place rather than packed: a column-major A (a transposed operand, such
/// as the input positions of a 1x1 convolution run as `Y^T = X^T W^T`) whose row slivers each
/// feed at most [`DIRECT_A_MAX_TILES`] register tiles, too few to pay for packing them. Each
/// step of the microkernel then reads its `MR` elements from a column of A, a column stride
/// from the last.
fn reads_a_in_place<T>(p: &Problem<'_, T>, col_tiles: usize) -> bool {
    p.packed_a.is_none() && p.a.rs == 1 && p.a.cs >= p.m as isize && col_tiles <= DIRECT_A_MAX_TILES
}

/// Whether B's slivers are read in place instead of packed: B row-major with unit column
/// stride, so a sliver's step is `NR` contiguous elements, one row stride after the previous.
/// Packing B reads and writes all of it once per product; in place costs nothing when the
/// product has few rows of A to reuse each sliver for (a 1x1 convolution with few output
/// channels, over many pixels).
fn reads_b_in_place<T>(p: &Problem<'_, T>, max_rows: usize) -> bool {
    p.packed_b.is_none()
        && p.produce_b.is_none()
        && p.b.cs == 1
        && p.b.rs >= p.n as isize
        && p.m <= max_rows
}

/// Runs the epilogue on each row of a finished tile whose top-left element is C's `(i, j)`.
///
/// # Safety
/// The tile's elements are valid, not accessed by anyone else meanwhile, and contiguous along
/// each row (`tile.cs == 1`).
unsafe fn finish_tile<T>(epilogue: &Epilogue<'_, T>, tile: &Tile<T>, i: usize, j: usize) {
    debug_assert!(tile.cs == 1 || tile.n <= 1);
    for r in 0..tile.m {
        // SAFETY: row r of the tile is `n` contiguous valid elements, exclusively ours (caller).
        let row = unsafe {
            std::slice::from_raw_parts_mut(tile.ptr.wrapping_offset(r as isize * tile.rs), tile.n)
        };
        epilogue(i + r, j, row);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefetch of a prepacked B's next block, cut into one part per tile of the current
    /// block, reaches every element of that block and nothing else.
    #[test]
    fn next_block_parts_cover_the_next_depth_or_column_block_exactly() {
        let (k, nr, kc_max, nc_max) = (70, 4, 32, 12);
        for n in [4usize, 9, 12, 13, 30] {
            let all = vec![0f32; n.div_ceil(nr) * k * nr];
            let base = all.as_ptr();
            // Walk the driver's order of blocks; each must announce its successor.
            let mut blocks = vec![];
            for jc in (0..n).step_by(nc_max) {
                for pc in (0..k).step_by(kc_max) {
                    blocks.push((jc, nc_max.min(n - jc), pc, kc_max.min(k - pc)));
                }
            }
            for (b, &block) in blocks.iter().enumerate() {
                let next = NextBlock::of(&all, k, &(0..k), kc_max, n, nc_max, block, nr);
                let Some(&(jc, nc, pc, kc)) = blocks.get(b + 1) else {
                    assert!(next.is_none());
                    continue;
                };
                let next = next.expect("a next block");
                let mut expected = vec![];
                for s in jc / nr..(jc + nc).div_ceil(nr) {
                    expected.extend(
                        (pc..pc + kc).flat_map(|r| (0..nr).map(move |c| (s * k + r) * nr + c)),
                    );
                }
                for calls in [
                    next.slivers,
                    next.slivers + 1,
                    3 * next.slivers,
                    7 * next.slivers + 2,
                ] {
                    let mut seen = vec![];
                    for call in 0..calls {
                        let (ptr, len) = next.part(call, calls);
                        let at = (ptr as usize - base as usize) / std::mem::size_of::<f32>();
                        seen.extend(at..at + len);
                    }
                    seen.sort_unstable();
                    assert_eq!(seen, expected, "n {n} block {b} calls {calls}");
                }
            }
        }
    }

    /// B is read in place only when it is row-major and A has few rows; the products through
    /// both paths are checked against the reference in `gemm::tests`.
    #[test]
    fn b_is_read_in_place_only_row_major_with_few_rows() {
        let (a, b) = (vec![0.0f32; 200 * 64], vec![0.0f32; 64 * 50]);
        let problem = |m: usize, b: MatRef<'_, f32>| -> bool {
            let p = Problem {
                m,
                n: 50,
                k: 64,
                a: MatRef {
                    data: &a,
                    rs: 64,
                    cs: 1,
                },
                b,
                c: MatMut {
                    ptr: std::ptr::null_mut::<f32>(),
                    rs: 50,
                    cs: 1,
                },
                alpha: 1.0,
                beta: 0.0,
                packed_a: None,
                packed_b: None,
                produce_b: None,
                epilogue: None,
                fused: None,
                depth_split: None,
            };
            reads_b_in_place(&p, 128)
        };
        let row_major = MatRef {
            data: &b,
            rs: 50,
            cs: 1,
        };
        let col_major = MatRef {
            data: &b,
            rs: 1,
            cs: 64,
        };
        assert!(problem(24, row_major));
        assert!(!problem(200, row_major), "many rows: packed");
        assert!(!problem(24, col_major), "columns not contiguous");
    }

    #[test]
    fn split_balances_whole_tiles() {
        let cuts = |extent: usize, tile: usize, blocks: usize| -> Vec<usize> {
            (0..=blocks)
                .map(|b| bound(extent, tile, blocks, b))
                .collect()
        };
        // Wide C: columns split, at the whole tile nearest the even share.
        assert_eq!(split(64, 455, 14, 32, 2, false), (1, 2));
        assert_eq!(cuts(455, 32, 2), [0, 224, 455]);
        // 14x14 outputs: three tiles and a bit each, not four and two.
        assert_eq!(cuts(196, 32, 2), [0, 96, 196]);
        // Tall C: rows split.
        assert_eq!(split(1000, 40, 14, 32, 2, false), (2, 1));
        // ... unless B is produced: then its columns, as long as each thread gets one.
        assert_eq!(split(1000, 40, 14, 32, 2, true), (1, 2));
        assert_eq!(split(300, 20, 14, 32, 4, true), (4, 1));
        assert_eq!(cuts(1000, 14, 2), [0, 504, 1000]);
        // Square: the smaller operand gets repacked; here A (m <= n), so columns split.
        assert_eq!(split(256, 256, 14, 32, 2, false), (1, 2));
        // Too few column tiles for the threads: rows split instead.
        assert_eq!(split(300, 20, 14, 32, 4, false), (4, 1));
        assert_eq!(cuts(300, 14, 4), [0, 70, 154, 224, 300]);
        // Fewer tiles than threads: no more blocks than tiles.
        assert_eq!(split(10, 40, 14, 32, 4, false), (1, 2));
        // Bounds never decrease and always cover the extent, in whole tiles but the last.
        for extent in 1..300 {
            for blocks in 1..6 {
                let c = cuts(extent, 13, blocks);
                assert!(
                    c.windows(2).all(|w| w[0] <= w[1]),
                    "{extent} {blocks}: {c:?}"
                );
                assert_eq!((c[0], c[blocks]), (0, extent));
                assert!(c[..blocks].iter().all(|&x| x % 13 == 0 || x == extent));
            }
        }
    }
}
