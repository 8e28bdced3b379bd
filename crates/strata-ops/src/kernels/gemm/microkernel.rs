//! The microkernel contract and the portable microkernel.
//!
//! A microkernel computes one `MR x NR` tile of C from a packed sliver of A (`k` columns of `MR`
//! consecutive elements) and a packed sliver of B (`k` rows of `NR` consecutive elements),
//! accumulating in registers, then writes `C = alpha * AB + beta * C` for the tile's valid part
//! (on a product's last depth block, with a [`TileEpilogue`] applied before the store). It also
//! carries the cache-blocking sizes that suit its register tile.

use super::super::float::Float;
use super::pack::{pack_block, MatRef};

/// Where one microkernel tile of C lives: element `(i, j)` is at `ptr + i * rs + j * cs`, for
/// `i < m <= MR` and `j < n <= NR` (an edge tile is smaller than the register tile).
#[derive(Clone, Copy, Debug)]
pub struct Tile<T> {
    pub ptr: *mut T,
    pub rs: isize,
    pub cs: isize,
    pub m: usize,
    pub n: usize,
}

/// Memory a microkernel touches ahead of use while it computes a tile: `k` runs of `span`
/// elements, `step` elements apart from `ptr`, one per step of its own loop (the next sliver of
/// a prepacked operand, or of a B read in place, streamed from memory the first time it is
/// read). Prefetching never faults, so `ptr` needs no validity; [`Prefetch::none`] points it at
/// the tile's own A sliver.
#[derive(Clone, Copy, Debug)]
pub struct Prefetch<T> {
    pub ptr: *const T,
    pub step: usize,
    pub span: usize,
    /// Into L2 only: data for a later block, which must not evict the L1-resident slivers.
    pub to_l2: bool,
}

impl<T> Prefetch<T> {
    /// Contiguous runs: each step's `step` elements, back to back (a packed sliver).
    pub fn packed(ptr: *const T, step: usize) -> Self {
        Prefetch {
            ptr,
            step,
            span: step,
            to_l2: false,
        }
    }

    /// `len` contiguous elements from `ptr` fetched into L2, spread evenly over a tile's `k`
    /// steps.
    pub fn spread_to_l2(ptr: *const T, len: usize, k: usize) -> Self {
        let step = len.div_ceil(k.max(1));
        Prefetch {
            ptr,
            step,
            span: step,
            to_l2: true,
        }
    }

    /// Nothing ahead: re-touches the A sliver the kernel reads anyway (L1 hits).
    pub fn none(a: *const T, mr: usize) -> Self {
        Prefetch::packed(a, mr)
    }
}

/// An activation simple enough to apply to the accumulators in registers (a max, a min or a
/// blend per vector). Each has exactly the scalar semantics of its
/// [`crate::kernels::activation::Activation`] namesake, NaNs and signed zeros included, so the
/// vector kernels and the portable one agree with the separate pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FusedAct<T> {
    None,
    /// `x > 0 ? x : 0` (NaN gives 0).
    Relu,
    /// `min(max(x, lo), hi)` in the order `x < lo ? lo : x`, then `x > hi ? hi : x` (NaN stays).
    Clip {
        lo: T,
        hi: T,
    },
    /// `x >= 0 ? x : alpha * x`.
    LeakyRelu {
        alpha: T,
    },
}

impl<T: Float> FusedAct<T> {
    /// The in-register form of `act`, if it has one.
    pub fn of(act: crate::kernels::activation::Activation) -> Option<Self> {
        use crate::kernels::activation::Activation;
        match act {
            Activation::None => Some(FusedAct::None),
            Activation::Relu => Some(FusedAct::Relu),
            Activation::Clip { min, max } => Some(FusedAct::Clip {
                lo: T::from_f32(min),
                hi: T::from_f32(max),
            }),
            Activation::LeakyRelu { alpha } => Some(FusedAct::LeakyRelu {
                alpha: T::from_f32(alpha),
            }),
            _ => None,
        }
    }

    /// The activation of one value (the portable kernel's and every edge tile's).
    #[inline(always)]
    pub fn apply(self, x: T) -> T {
        match self {
            FusedAct::None => x,
            FusedAct::Relu => {
                if x > T::ZERO {
                    x
                } else {
                    T::ZERO
                }
            }
            FusedAct::Clip { lo, hi } => {
                let x = if x < lo { lo } else { x };
                if x > hi {
                    hi
                } else {
                    x
                }
            }
            FusedAct::LeakyRelu { alpha } => {
                if x >= T::ZERO {
                    x
                } else {
                    alpha * x
                }
            }
        }
    }
}

/// What a microkernel applies to a tile's results before storing them, on a product's last
/// depth block: `C(i, j) = act(((alpha * acc + beta * C) + residual(i, j)) + row_bias[i] +
/// col_bias[j])`, each addition in that order and only for the parts that are present (a null
/// pointer is an absent part). The pointers are at the tile's first row and column.
#[derive(Clone, Copy, Debug)]
pub struct TileEpilogue<T> {
    /// Element `(i, j)` of the residual at `residual + i * residual_rs + j`.
    pub residual: *const T,
    pub residual_rs: isize,
    /// One value per row of the tile (a convolution's bias per output channel).
    pub row_bias: *const T,
    /// One value per column of the tile (a Gemm's bias row).
    pub col_bias: *const T,
    pub act: FusedAct<T>,
}

impl<T> TileEpilogue<T> {
    /// No part at all (the form a kernel without an epilogue is handed).
    pub const NONE: Self = TileEpilogue {
        residual: std::ptr::null(),
        residual_rs: 0,
        row_bias: std::ptr::null(),
        col_bias: std::ptr::null(),
        act: FusedAct::None,
    };
}

impl<T: Float> TileEpilogue<T> {
    /// Finishes row `i` of the tile in place: `values` holds `alpha * acc + beta * C` for its
    /// first `values.len()` columns. One pass per part, so each loop vectorizes.
    ///
    /// # Safety
    /// Row `i` and those columns are inside the tile, whose residual and bias elements are
    /// readable.
    #[inline(always)]
    pub unsafe fn finish_row(&self, i: usize, values: &mut [T]) {
        let n = values.len();
        if !self.residual.is_null() {
            // SAFETY: row i, columns 0..n of the tile's residual, readable (caller).
            let r = unsafe {
                std::slice::from_raw_parts(self.residual.offset(i as isize * self.residual_rs), n)
            };
            values.iter_mut().zip(r).for_each(|(v, &r)| *v += r);
        }
        if !self.row_bias.is_null() {
            // SAFETY: row i of the tile, readable (caller).
            let b = unsafe { *self.row_bias.add(i) };
            values.iter_mut().for_each(|v| *v += b);
        }
        if !self.col_bias.is_null() {
            // SAFETY: columns 0..n of the tile, readable (caller).
            let b = unsafe { std::slice::from_raw_parts(self.col_bias, n) };
            values.iter_mut().zip(b).for_each(|(v, &b)| *v += b);
        }
        match self.act {
            FusedAct::None => {}
            act => values.iter_mut().for_each(|v| *v = act.apply(*v)),
        }
    }
}

/// A register-blocked microkernel plus its blocking sizes. Implementors are zero-sized markers.
pub trait Microkernel<T: Float>: Copy + Send + Sync + 'static {
    /// Rows of the register tile (the packed A sliver's width).
    const MR: usize;
    /// Columns of the register tile (the packed B sliver's width).
    const NR: usize;
    /// Depth of one packed block: an `MR x KC` sliver of A should sit in L1.
    const KC: usize;
    /// Columns of B packed at once (a multiple of `NR`): the `KC x NC` block should sit in L2.
    const NC: usize;
    /// Rows of A up to which a row-major B is read in place rather than packed (see
    /// `driver::reads_b_in_place`): packing B costs a copy of it per product, reading it in
    /// place costs every row tile a walk down B's rows, a row stride apart. The default was
    /// measured with AVX-512 on Zen 4 (MobileNetV2's 1x1 convolutions, one thread): in place
    /// was 5-20% faster up to 96 output channels and 1-7% slower from 144.
    const DIRECT_B_MAX_ROWS: usize = 128;

    /// Packs rows `i0..i0 + rows` (at most `MR`) by columns `p0..p0 + kc` of A as one sliver;
    /// returns its length, `kc * MR`.
    fn pack_a(
        dst: &mut [T],
        a: MatRef<'_, T>,
        i0: usize,
        rows: usize,
        p0: usize,
        kc: usize,
    ) -> usize;

    /// Packs rows `p0..p0 + kc` by columns `j0..j0 + cols` of B as slivers of `NR` columns;
    /// returns the packed length.
    fn pack_b(
        dst: &mut [T],
        b: MatRef<'_, T>,
        p0: usize,
        kc: usize,
        j0: usize,
        cols: usize,
    ) -> usize;

    /// Computes the tile `c` from `k` steps of A at `a` and B at `b`: step `p` reads A's `MR`
    /// elements at `a + p * a_step` (`MR` for a packed sliver; A's column stride when the sliver
    /// is read in place from a column-major A) and B's `NR` elements at `b + p * b_stride` (`NR`
    /// for a packed sliver; B's row stride when the sliver is read in place from a row-major B).
    ///
    /// # Safety
    /// - for every `p < k`, `a + p * a_step` is valid for reads of `MR` elements and
    ///   `b + p * b_stride` for reads of `NR` elements;
    /// - every element `(i, j)` of `c` (`i < c.m <= MR`, `j < c.n <= NR`) is valid for writes,
    ///   and for reads unless `beta == 0`, and no other thread accesses it during the call;
    /// - the CPU supports the instructions the kernel uses (checked by whoever picked it).
    ///
    /// `prefetch` may be anything: kernels that prefetch only hint the cache with it. With
    /// `epilogue`, its residual and biases are readable for every element of the tile and the
    /// kernel stores the values [`TileEpilogue::finish_row`] makes of its results.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run(
        k: usize,
        a: (*const T, usize),
        b: (*const T, usize),
        c: &Tile<T>,
        alpha: T,
        beta: T,
        prefetch: Prefetch<T>,
        epilogue: Option<&TileEpilogue<T>>,
    );

    /// Computes a tile of at most `NR / 2` columns, without an epilogue, reading B's first
    /// `NR / 2` elements per step: a product's narrow last column tile (196 positions are six
    /// tiles of 32 and one of 4). Kernels with a register tile half as wide compute it at half
    /// the cost; the default is [`Microkernel::run`].
    ///
    /// # Safety
    /// As [`Microkernel::run`], with `c.n <= NR / 2`.
    #[inline]
    unsafe fn run_half(
        k: usize,
        a: (*const T, usize),
        b: (*const T, usize),
        c: &Tile<T>,
        alpha: T,
        beta: T,
        prefetch: Prefetch<T>,
    ) {
        // SAFETY: the caller upholds `run`'s contract.
        unsafe { Self::run(k, a, b, c, alpha, beta, prefetch, None) }
    }
}

/// Writes `alpha * acc + beta * C` (then the epilogue, if any) over the valid part of a tile,
/// row by row (edge tiles and C with a non-unit column stride). `beta == 0` never
/// reads C.
///
/// # Safety
/// Every element `(i, j)` of `c` is valid for writes (and reads unless `beta == 0`) and no other
/// thread accesses it; `c.m <= MR` and `c.n <= NR`; the epilogue's parts are readable for them.
#[inline(always)]
pub(super) unsafe fn store_tile<T: Float, const MR: usize, const NR: usize>(
    acc: &[[T; NR]; MR],
    c: &Tile<T>,
    alpha: T,
    beta: T,
    epilogue: Option<&TileEpilogue<T>>,
) {
    for (i, row) in acc.iter().enumerate().take(c.m) {
        let mut values = [T::ZERO; NR];
        let values = &mut values[..c.n];
        for (j, (v, &x)) in values.iter_mut().zip(row).enumerate() {
            // SAFETY: i < c.m and j < c.n, so this is an element of the tile, which the caller
            // guarantees is valid; C is read only when beta != 0.
            *v = if beta == T::ZERO {
                alpha * x
            } else {
                alpha * x + beta * unsafe { *c.ptr.offset(i as isize * c.rs + j as isize * c.cs) }
            };
        }
        if let Some(e) = epilogue {
            // SAFETY: row i < c.m, columns < c.n: in the tile, whose epilogue parts the caller
            // guarantees readable.
            unsafe { e.finish_row(i, values) };
        }
        for (j, &v) in values.iter().enumerate() {
            // SAFETY: as above; written by this call only (caller).
            unsafe { *c.ptr.offset(i as isize * c.rs + j as isize * c.cs) = v };
        }
    }
}

/// Plain-Rust microkernel over fixed-size arrays, written so that the compiler vectorizes the
/// `NR`-wide rows with whatever SIMD the target has (SSE2 on baseline x86_64, NEON on aarch64).
#[derive(Clone, Copy, Debug)]
pub struct Portable<const MR: usize, const NR: usize>;

impl<T: Float + bytemuck::Pod, const MR: usize, const NR: usize> Microkernel<T>
    for Portable<MR, NR>
{
    const MR: usize = MR;
    const NR: usize = NR;
    const KC: usize = 256;
    const NC: usize = NR * (512 / NR);

    fn pack_a(
        dst: &mut [T],
        a: MatRef<'_, T>,
        i0: usize,
        rows: usize,
        p0: usize,
        kc: usize,
    ) -> usize {
        pack_block::<T, MR>(dst, a.t(), p0, kc, i0, rows)
    }

    fn pack_b(
        dst: &mut [T],
        b: MatRef<'_, T>,
        p0: usize,
        kc: usize,
        j0: usize,
        cols: usize,
    ) -> usize {
        pack_block::<T, NR>(dst, b, p0, kc, j0, cols)
    }

    #[inline]
    unsafe fn run(
        k: usize,
        (a, a_step): (*const T, usize),
        (b, b_stride): (*const T, usize),
        c: &Tile<T>,
        alpha: T,
        beta: T,
        _prefetch: Prefetch<T>,
        epilogue: Option<&TileEpilogue<T>>,
    ) {
        let mut acc = [[T::ZERO; NR]; MR];
        for p in 0..k {
            // SAFETY: the caller guarantees MR readable elements at a + p * a_step, p < k;
            // packed buffers are initialized (the packers write every element, padding
            // included).
            let a_col = unsafe { std::slice::from_raw_parts(a.wrapping_add(p * a_step), MR) };
            // SAFETY: the caller guarantees NR readable elements at b + p * b_stride, p < k.
            let b_row = unsafe { std::slice::from_raw_parts(b.wrapping_add(p * b_stride), NR) };
            for (acc_row, &x) in acc.iter_mut().zip(a_col) {
                for (y, &w) in acc_row.iter_mut().zip(b_row) {
                    *y += x * w;
                }
            }
        }
        // SAFETY: forwarded from the caller's contract: the tile's elements are valid and
        // ours, and the epilogue's parts readable for every one of them.
        unsafe { store_tile(&acc, c, alpha, beta, epilogue) };
    }
}
