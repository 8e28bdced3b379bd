//! 4-bit weights with f32 block scales and optional zero points, in blocks of any power of two
//! from 16 up along `k` (what onnxruntime's MatMulNBits and GPTQ/AWQ-style quantizers write),
//! held in the same 32-element group layout as the GGUF formats so both share one set of block
//! kernels: `y = x · Wᵀ` for `W` of `n` rows (output features) of `k` inputs.
//!
//! Layout ([`Q4Weights`]), per row `j` of `W`: `groups = ceil(k / 32)` groups of 16 bytes, byte
//! `t` of group `g` holding element `32g + t` in its low nibble and `32g + 16 + t` in its high
//! nibble (the q4_0/q4_1 order, so one 128-bit load and a shift unpack a group), zero-padded past
//! `k`; then, apart, one f32 scale per block and per row and a zero point per block (an integer
//! 0..15, a float, or 8 for all). Element value: `(q - zero) · scale`. A group of 32 spans one
//! block, or two blocks of 16 (its low and high halves): each group half has exactly one scale.
//!
//! Two ways to compute, chosen by the caller ([`Compute`]):
//! - [`Compute::F32`]: weights dequantized to f32 on the fly and multiplied in f32, exact up to
//!   f32 rounding (onnxruntime's accuracy levels 0–3). Few activation rows: a fused
//!   dequantize-and-dot per weight row. Many rows: the f32 GEMM, with the weights dequantized
//!   block by block straight into its packed layout (once per block and thread), so
//!   dequantization is amortized and the product runs at GEMM speed.
//! - [`Compute::Int8`]: activations quantized to 8-bit blocks of 32 ([`Q8Block`]) and each group
//!   multiplied with integer dots, as the GGUF formats are (onnxruntime's accuracy level 4).
//!   Integer zero points only.
//!
//! Work is split over output rows `j` on the current intra-op pool.

use std::cell::RefCell;

use strata_core::QUANT_BLOCK;

use super::error_at;
use super::q8::Q8Block;
use super::quantize::quantize_activations;
use super::{Isa, OutPtr};
use crate::kernels::gemm;
use crate::kernels::KernelResult;

/// Bytes of one group of 32 elements.
pub const GROUP_BYTES: usize = QUANT_BLOCK / 2;

/// Activation rows from which the f32 product dequantizes blocks for the GEMM microkernels
/// instead of dotting each weight row with each activation row.
pub(super) const PANEL_MIN_ROWS: usize = 4;

/// Output rows a [`split_rows`] task computes between polls of the run's stop token.
const STOP_POLL_ROWS: usize = 256;

/// Below this many weight elements a product stays on the calling thread.
const PARALLEL_MIN_WEIGHTS: usize = 1 << 15;

/// How a product computes (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compute {
    F32,
    Int8,
}

/// The zero points of a [`Q4Weights`], one per block, row after row.
#[derive(Clone, Copy, Debug)]
pub enum Q4Zeros<'a> {
    /// 8 for every block (symmetric quantization).
    Default,
    /// Integers 0..=15.
    Int(&'a [u8]),
    /// Floats (only for [`Compute::F32`]).
    Float(&'a [f32]),
}

/// A repacked 4-bit weight matrix (see the module docs), borrowed.
#[derive(Clone, Copy, Debug)]
pub struct Q4Weights<'a> {
    n: usize,
    k: usize,
    block_size: usize,
    n_blocks: usize,
    groups: usize,
    qs: &'a [u8],
    scales: &'a [f32],
    zeros: Q4Zeros<'a>,
}

impl<'a> Q4Weights<'a> {
    /// Bytes of the packed nibbles of an `n × k` matrix.
    pub fn qs_len(n: usize, k: usize) -> usize {
        n * k.div_ceil(QUANT_BLOCK) * GROUP_BYTES
    }

    /// Checks the sizes: `block_size` a power of two of at least 16, `qs` of
    /// [`Q4Weights::qs_len`] bytes, a scale (and zero point) per block and row.
    pub fn new(
        n: usize,
        k: usize,
        block_size: usize,
        qs: &'a [u8],
        scales: &'a [f32],
        zeros: Q4Zeros<'a>,
    ) -> KernelResult<Self> {
        if block_size < 16 || !block_size.is_power_of_two() {
            return Err(error_at(
                "block size",
                format!("{block_size} is not a power of two of at least 16"),
            ));
        }
        let n_blocks = k.div_ceil(block_size);
        let blocks = n * n_blocks;
        let zero_len = match zeros {
            Q4Zeros::Default => blocks,
            Q4Zeros::Int(z) => z.len(),
            Q4Zeros::Float(z) => z.len(),
        };
        let lens = [
            ("nibbles", qs.len(), Self::qs_len(n, k)),
            ("scales", scales.len(), blocks),
            ("zero points", zero_len, blocks),
        ];
        for (what, got, want) in lens {
            if got != want {
                return Err(error_at(
                    what,
                    format!("{got} values for n {n} k {k} block {block_size}, need {want}"),
                ));
            }
        }
        Ok(Q4Weights {
            n,
            k,
            block_size,
            n_blocks,
            groups: k.div_ceil(QUANT_BLOCK),
            qs,
            scales,
            zeros,
        })
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.k
    }

    fn row_qs(&self, j: usize) -> &'a [u8] {
        &self.qs[j * self.groups * GROUP_BYTES..(j + 1) * self.groups * GROUP_BYTES]
    }

    /// Block index (within a row) of group `g`'s low and high halves.
    #[inline(always)]
    fn half_blocks(&self, g: usize) -> (usize, usize) {
        let k0 = g * QUANT_BLOCK;
        (k0 / self.block_size, (k0 + 16) / self.block_size)
    }

    /// The (scale, zero) of block `b` of row `j`, the zero as f32.
    #[inline(always)]
    fn block(&self, j: usize, b: usize) -> (f32, f32) {
        // A group's high half past k (k ≡ 1..16 mod 32) names a block past the row's last;
        // its nibbles are padding, so any finite parameters do.
        let b = j * self.n_blocks + b.min(self.n_blocks - 1);
        let zero = match self.zeros {
            Q4Zeros::Default => 8.0,
            Q4Zeros::Int(z) => f32::from(z[b]),
            Q4Zeros::Float(z) => z[b],
        };
        (self.scales[b], zero)
    }

    /// The (low, high) half parameters of group `g` of row `j`.
    #[inline(always)]
    fn group_params(&self, j: usize, g: usize) -> GroupParams {
        let (lo, hi) = self.half_blocks(g);
        let (s_lo, z_lo) = self.block(j, lo);
        let (s_hi, z_hi) = if hi == lo {
            (s_lo, z_lo)
        } else {
            self.block(j, hi)
        };
        GroupParams {
            s: [s_lo, s_hi],
            z: [z_lo, z_hi],
        }
    }

    /// Dequantizes row `j` into `out` (`k` values), for tests and the portable path.
    pub fn dequantize_row(&self, j: usize, out: &mut [f32]) {
        self.dequantize_range(j, 0, out)
    }

    /// Dequantizes elements `p0..p0 + out.len()` of row `j` into `out`; `p0` is a multiple
    /// of 32 (a group boundary). Elements past the row's groups are left alone.
    pub fn dequantize_range(&self, j: usize, p0: usize, out: &mut [f32]) {
        debug_assert_eq!(p0 % QUANT_BLOCK, 0);
        let qs = self.row_qs(j);
        let end = p0 + out.len();
        for g in p0 / QUANT_BLOCK..end.div_ceil(QUANT_BLOCK).min(self.groups) {
            let p = self.group_params(j, g);
            let bytes = &qs[g * GROUP_BYTES..(g + 1) * GROUP_BYTES];
            for (t, &b) in bytes.iter().enumerate() {
                let at = g * QUANT_BLOCK + t - p0;
                for (half, q) in [(0, b & 0x0F), (1, b >> 4)] {
                    if let Some(o) = out.get_mut(at + 16 * half) {
                        *o = (f32::from(q) - p.z[half]) * p.s[half];
                    }
                }
            }
        }
    }
}

/// The scales and zero points of a group's two halves (equal unless blocks are 16 long).
#[derive(Clone, Copy, Debug)]
pub(super) struct GroupParams {
    pub s: [f32; 2],
    pub z: [f32; 2],
}

/// Packs 32 unsigned 4-bit values (element order) into a group's 16 bytes.
pub fn pack_group(values: &[u8; QUANT_BLOCK]) -> [u8; GROUP_BYTES] {
    std::array::from_fn(|t| (values[t] & 0x0F) | ((values[t + 16] & 0x0F) << 4))
}

thread_local! {
    /// Per-thread f32 scratch: dequantized weight rows of a GEMM block, or a padded activation
    /// row.
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The quantized activations of an Int8 product.
    static Q8: RefCell<Vec<Q8Block>> = const { RefCell::new(Vec::new()) };
}

/// `y = x · Wᵀ`: `x` is `m × k` row-major, `y` `m × n` row-major. Runs on up to `threads`
/// threads of the current intra-op pool; after the first products of a size on a thread it
/// allocates nothing.
pub fn q4_matmul(
    w: &Q4Weights<'_>,
    compute: Compute,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    threads: usize,
) -> KernelResult<()> {
    q4_matmul_fused(w, compute, x, m, y, threads, None)
}

/// [`q4_matmul`], then `epilogue(i, j, row)` on every piece of Y's rows (`row` = Y's elements
/// `(i, j..j + row.len())`): bias, residual, activation. On the GEMM path it runs while the
/// piece is still in cache.
pub fn q4_matmul_fused(
    w: &Q4Weights<'_>,
    compute: Compute,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    threads: usize,
    epilogue: Option<&gemm::Epilogue<'_, f32>>,
) -> KernelResult<()> {
    q4_matmul_with(Isa::detect(), w, compute, x, m, y, threads, epilogue)
}

/// [`q4_matmul_fused`] on a chosen ISA (the portable one when it is not available), for tests.
#[allow(clippy::too_many_arguments)]
pub fn q4_matmul_with(
    isa: Isa,
    w: &Q4Weights<'_>,
    compute: Compute,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    threads: usize,
    epilogue: Option<&gemm::Epilogue<'_, f32>>,
) -> KernelResult<()> {
    let isa = isa.or_portable();
    let (n, k) = (w.n, w.k);
    super::check_len("x", m.saturating_mul(k), x.len())?;
    super::check_len("y", m.saturating_mul(n), y.len())?;
    if m == 0 {
        return Ok(());
    }
    match compute {
        Compute::Int8 => {
            if matches!(w.zeros, Q4Zeros::Float(_)) {
                return Err(error_at(
                    "compute",
                    "integer dots need integer zero points".into(),
                ));
            }
            int8_product(isa, w, x, m, y, threads);
            finish_rows(y, n, epilogue);
        }
        Compute::F32 if m >= PANEL_MIN_ROWS => panel_product(isa, w, x, m, y, threads, epilogue)?,
        Compute::F32 => {
            let out = OutPtr(y.as_mut_ptr());
            split_rows(n, k, threads, (1, 3), |j0, j1| {
                for j in j0..j1 {
                    for i in 0..m {
                        let v = dot_row_f32(isa, w, j, &x[i * k..(i + 1) * k]);
                        // SAFETY: (i, j) is inside y (lengths checked) and row j belongs to
                        // this task only.
                        unsafe { out.write(i * n + j, v) };
                    }
                }
            });
            finish_rows(y, n, epilogue);
        }
    }
    Ok(())
}

/// Runs `epilogue` on each whole row of `y` (`n` wide), for the paths that compute Y first.
pub(super) fn finish_rows(y: &mut [f32], n: usize, epilogue: Option<&gemm::Epilogue<'_, f32>>) {
    if let (Some(epilogue), true) = (epilogue, n > 0) {
        for (i, row) in y.chunks_exact_mut(n).enumerate() {
            epilogue(i, 0, row);
        }
    }
}

/// Splits output rows `0..n` into contiguous ranges, `per_thread` per thread and each a
/// multiple of `align` rows (except the last), and runs `task(j0, j1)` for each on the pool.
/// With one range per thread each thread always gets the same rows.
pub(super) fn split_rows(
    n: usize,
    k: usize,
    threads: usize,
    (align, per_thread): (usize, usize),
    task: impl Fn(usize, usize) + Sync,
) {
    // Each range runs in pieces of `step` rows, polling the run's stop token
    // before each and skipping the rest once the run should stop (it then fails at its next
    // check). Taken here: the pool's workers have no run control installed.
    let stop = crate::run_control::stop_token();
    let step = STOP_POLL_ROWS.next_multiple_of(align);
    let task = |j0: usize, j1: usize| {
        for (block, start) in (j0..j1).step_by(step).enumerate() {
            if stop.should_stop_at(block) {
                return;
            }
            task(start, (start + step).min(j1));
        }
    };
    let tasks = threads.min(crate::parallel::threads()).max(1);
    if tasks == 1 || n * k < PARALLEL_MIN_WEIGHTS {
        task(0, n);
        return;
    }
    let chunk = n
        .div_ceil(tasks * per_thread)
        .next_multiple_of(align)
        .max(align);
    let count = n.div_ceil(chunk);
    let run = |c: usize| task(c * chunk, ((c + 1) * chunk).min(n));
    if per_thread == 1 && count <= tasks {
        crate::parallel::for_each_thread(count, run);
    } else {
        crate::parallel::for_each_index(count, run);
    }
}

/// One weight row dotted with one activation row in f32.
fn dot_row_f32(isa: Isa, w: &Q4Weights<'_>, j: usize, x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: AVX2, FMA and F16C were detected at run time.
        return unsafe { super::q4f_avx2::dot_row_f32(w, j, x) };
    }
    let _ = isa;
    PANEL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < w.k {
            p.resize(w.k, 0.0);
        }
        w.dequantize_row(j, &mut p[..w.k]);
        super::portable::dot_f32(&p[..w.k], x)
    })
}

/// The f32 product for many activation rows: the f32 GEMM, with B (`Wᵀ`) dequantized block by
/// block straight into its packed layout ([`gemm::ProduceB`]), each block once per thread.
fn panel_product(
    isa: Isa,
    w: &Q4Weights<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    threads: usize,
    epilogue: Option<&gemm::Epilogue<'_, f32>>,
) -> KernelResult<()> {
    panel_product_with(w.n, w.k, x, m, y, threads, epilogue, |j, p0, out| {
        dequantize_range(isa, w, j, p0, out)
    })
}

/// [`panel_product`] for any weights `n × k` of which `dequantize(j, p0, out)` writes elements
/// `p0..p0 + out.len()` of row `j` into `out` (`p0` a multiple of 32), with an epilogue on
/// Y's finished rows.
#[allow(clippy::too_many_arguments)]
pub(super) fn panel_product_with(
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    threads: usize,
    epilogue: Option<&gemm::Epilogue<'_, f32>>,
    dequantize: impl Fn(usize, usize, &mut [f32]) + Sync,
) -> KernelResult<()> {
    // Each sliver's weight rows are dequantized side by side, then transposed into the
    // sliver (row `p` of a sliver holds element `p` of each of its weight rows).
    let fill = |block: gemm::BBlock, dst: &mut [f32]| {
        let (kc, nr) = (block.kc, block.nr);
        with_panel(kc * nr, |rows| {
            for (s, sliver) in dst.chunks_mut(kc * nr).enumerate() {
                let j = block.j0 + s * nr;
                let cols = (block.j0 + block.cols - j).min(nr);
                for (l, row) in rows.chunks_exact_mut(kc).take(cols).enumerate() {
                    dequantize(j + l, block.p0, row);
                }
                gemm::pack_transposed_sliver(sliver, nr, &rows[..cols * kc], kc, kc, cols);
            }
        })
    };
    gemm::gemm_produced_b(
        m,
        n,
        k,
        x,
        (k as isize, 1),
        y,
        (n as isize, 1),
        gemm::ProduceB {
            align: QUANT_BLOCK,
            fill: &fill,
        },
        epilogue,
        threads,
    )
}

/// Runs `f` with `len` values of this thread's f32 scratch ([`PANEL`]); should it be in use
/// already, with a fresh buffer (correct, only not allocation-free).
fn with_panel<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    PANEL.with(|panel| match panel.try_borrow_mut() {
        Ok(mut panel) => {
            if panel.len() < len {
                panel.resize(len, 0.0);
            }
            f(&mut panel[..len])
        }
        Err(_) => f(&mut vec![0.0; len]),
    })
}

fn dequantize_range(isa: Isa, w: &Q4Weights<'_>, j: usize, p0: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: AVX2, FMA and F16C were detected at run time.
        return unsafe { super::q4f_avx2::dequantize_range(w, j, p0, out) };
    }
    let _ = isa;
    w.dequantize_range(j, p0, out)
}

/// The integer-dot product: activations quantized to [`Q8Block`]s (rows zero-padded to whole
/// groups), then one integer dot per (weight row, activation row).
fn int8_product(isa: Isa, w: &Q4Weights<'_>, x: &[f32], m: usize, y: &mut [f32], threads: usize) {
    let (n, k, groups) = (w.n, w.k, w.groups);
    Q8.with(|q8| {
        let mut q8 = q8.borrow_mut();
        if q8.len() < m * groups {
            q8.resize(m * groups, Q8Block::default());
        }
        let xq = &mut q8[..m * groups];
        if k % QUANT_BLOCK == 0 {
            quantize_activations(x, xq);
        } else {
            PANEL.with(|p| {
                let mut p = p.borrow_mut();
                let padded = groups * QUANT_BLOCK;
                if p.len() < padded {
                    p.resize(padded, 0.0);
                }
                for i in 0..m {
                    p[..k].copy_from_slice(&x[i * k..(i + 1) * k]);
                    p[k..padded].fill(0.0);
                    quantize_activations(&p[..padded], &mut xq[i * groups..(i + 1) * groups]);
                }
            });
        }
        let xq = &*xq;
        let out = OutPtr(y.as_mut_ptr());
        split_rows(n, k, threads, (1, 3), |j0, j1| {
            for j in j0..j1 {
                for i in 0..m {
                    let v = dot_row_q8(isa, w, j, &xq[i * groups..(i + 1) * groups]);
                    // SAFETY: (i, j) is inside y and row j belongs to this task only.
                    unsafe { out.write(i * n + j, v) };
                }
            }
        });
    });
}

fn dot_row_q8(isa: Isa, w: &Q4Weights<'_>, j: usize, ys: &[Q8Block]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: AVX2, FMA and F16C were detected at run time; `ys` has a block per group.
        return unsafe { super::q4f_avx2::dot_row_q8(w, j, ys) };
    }
    let _ = isa;
    let qs = w.row_qs(j);
    let mut sum = 0.0f32;
    for (g, y) in ys.iter().enumerate().take(w.groups) {
        let p = w.group_params(j, g);
        let mut half = [0i32; 2];
        for t in 0..16 {
            let b = qs[g * GROUP_BYTES + t];
            half[0] += (i32::from(b & 0x0F) - p.z[0] as i32) * i32::from(y.qs[t]);
            half[1] += (i32::from(b >> 4) - p.z[1] as i32) * i32::from(y.qs[t + 16]);
        }
        sum += y.d * (p.s[0] * half[0] as f32 + p.s[1] * half[1] as f32);
    }
    sum
}

impl Q4Weights<'_> {
    pub(super) fn groups(&self) -> usize {
        self.groups
    }

    pub(super) fn qs_of(&self, j: usize) -> &[u8] {
        self.row_qs(j)
    }

    pub(super) fn params(&self, j: usize, g: usize) -> GroupParams {
        self.group_params(j, g)
    }
}
