//! Products with block-quantized weights read in place (L2): `y = x · Wᵀ` for `W` of `n` rows
//! of `k` inputs in any GGUF weight type, and embedding lookup from quantized tables. Shared by
//! GGUF language models and the ONNX 2/4/8-bit weight-only operators (MatMulNBits: 2- and
//! 4-bit weights in the 4-bit group layout of `q4f`, 8-bit ones in `q8f`).
//!
//! Two strategies, both parallel over output rows on the current intra-op pool:
//! - [`Strategy::IntDot`] (legacy formats q4_0 … q8_0): the activations are quantized once to
//!   8-bit blocks of 32 ([`Q8Block`]), then every weight block meets its activation block in an
//!   integer dot product, as llama.cpp does. Reads 4.5–8.5 bits per weight and does no float
//!   work per element: the fast path for decode (one activation row).
//! - [`Strategy::Dequant`] (every type, including f32/f16/bf16 and the k-quants): each weight
//!   row is dequantized once into a thread-local f32 row and dotted with every activation row,
//!   exact up to f32 rounding; it amortizes the dequantization over many activation rows, so it
//!   wins for prefill.
//!
//! [`Strategy::best`] picks per type and row count from the measurements in `benches/quant.rs`.
//! The ISA is detected at run time: AVX-512 with VNNI for the integer dots of decode (four weight
//! rows against one activation row) and of prefill (one weight row against four activation
//! rows), two rows per 512-bit register and bit-equal to the AVX2 dots, and for the
//! dequantizing strategy's float dot (16-lane FMAs, equal up to f32 summation order) and the
//! activation quantizer (the same blocks as the scalar one); AVX2+FMA+F16C for the one-row
//! integer dots, or portable code.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod embedding;
mod portable;
mod q4_slivers;
#[cfg(target_arch = "x86_64")]
mod q4_slivers_avx2;
#[cfg(target_arch = "x86_64")]
mod q4_slivers_avx512;
mod q4_slivers_product;
#[cfg(test)]
mod q4_slivers_tests;
mod q4f;
#[cfg(target_arch = "x86_64")]
mod q4f_avx2;
mod q8;
mod q8f;
mod quantize;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::ops::Range;

use strata_core::dtype::block::{block_dequantizer, dequantize_row};
use strata_core::{DType, QUANT_BLOCK};

pub use embedding::embedding_lookup;
pub use portable::RowDot;
pub use q4_slivers::{pack_slivers, Q4Slivers};
pub use q4_slivers_product::{fill_block as q4s_fill_block, q4s_matmul_fused, q4s_matmul_with};
pub use q4f::{
    pack_group, q4_matmul, q4_matmul_fused, q4_matmul_with, Compute, Q4Weights, Q4Zeros,
    GROUP_BYTES,
};
pub use q8::Q8Block;
pub use q8f::{q8_matmul, q8_matmul_fused, Q8Weights, Q8Zeros};
pub use quantize::quantize_activations;

use super::error::{KernelError, KernelResult};

const OP: &str = "QuantMatMul";

/// Below this many weight elements a product runs on the calling thread (the pool's fork/join
/// costs more than it saves).
const PARALLEL_MIN_WEIGHTS: usize = 1 << 16;

/// The same for the matrix-vector products (decode): with the AVX-512 dots a 192 × 576 q4_1
/// matrix takes a few microseconds, about what a fork/join costs. SmolLM2 decode at 2 threads
/// measured 206–212 tok/s with 1 << 16 and 217–227 with this (noisy, same window); 1 << 20 gave
/// 152–185.
const DECODE_PARALLEL_MIN_WEIGHTS: usize = 1 << 18;

/// A weight matrix of `rows` output rows by `cols` inputs, its bytes in place (GGML order: each
/// row is `cols` elements in whole blocks).
#[derive(Clone, Copy, Debug)]
pub struct QuantMatrix<'a> {
    dtype: DType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    bytes: &'a [u8],
}

impl<'a> QuantMatrix<'a> {
    /// Checks that `bytes` holds `rows × cols` elements of `dtype` in whole blocks per row.
    pub fn new(dtype: DType, rows: usize, cols: usize, bytes: &'a [u8]) -> KernelResult<Self> {
        if block_dequantizer(dtype).is_none()
            && !matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
        {
            return Err(KernelError::InvalidParam {
                op: OP,
                param: "weight dtype",
                reason: format!("{dtype} is not a float or block-quantized weight type"),
            });
        }
        let row_bytes = dtype
            .bytes_for(cols)
            .map_err(|e| KernelError::InvalidParam {
                op: OP,
                param: "weight columns",
                reason: e.to_string(),
            })?;
        let total = row_bytes
            .checked_mul(rows)
            .ok_or(KernelError::SizeOverflow {
                op: OP,
                what: "weight bytes",
            })?;
        if bytes.len() != total {
            return Err(KernelError::BufferLength {
                op: OP,
                buffer: "weight bytes",
                expected: total,
                actual: bytes.len(),
            });
        }
        Ok(QuantMatrix {
            dtype,
            rows,
            cols,
            row_bytes,
            bytes,
        })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The bytes of row `j`.
    pub fn row(&self, j: usize) -> &'a [u8] {
        &self.bytes[j * self.row_bytes..(j + 1) * self.row_bytes]
    }
}

/// How a product is computed (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    IntDot,
    Dequant,
}

impl Strategy {
    /// Whether the strategy can compute products with `dtype` weights.
    pub fn supports(self, dtype: DType) -> bool {
        match self {
            Strategy::IntDot => int_dot_kernel(dtype, Isa::Portable).is_some(),
            Strategy::Dequant => true,
        }
    }

    /// The faster strategy for `dtype` weights and `m` activation rows, from `benches/quant.rs`
    /// (4096×4096 weights, AVX2): for one row the integer dot is 3× faster than dequantizing
    /// (q4_1: 9.6 ms vs 28.7 ms) and 9× faster than the f32 GEMM on pre-dequantized weights;
    /// for 32 rows dequantizing each weight row once wins by 1.7× (q4_1: 110 ms vs 188 ms).
    /// The costs (about 9.5 + 5.9·(m-1) ms against 26 + 2.6·m ms) cross near m = 7.
    pub fn best(dtype: DType, m: usize) -> Strategy {
        if m < INT_DOT_MAX_ROWS && Strategy::IntDot.supports(dtype) {
            Strategy::IntDot
        } else {
            Strategy::Dequant
        }
    }
}

/// Activation rows from which dequantizing each weight row once beats the integer dot.
const INT_DOT_MAX_ROWS: usize = 8;

/// The instruction set a product runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    Portable,
    /// AVX2, FMA and F16C.
    Avx2,
    /// [`Isa::Avx2`]'s set plus AVX-512 F, BW, VL and VNNI: the four-row integer dots (decode's
    /// and prefill's), the float dot and the activation quantizer use it, everything else runs its AVX2 form.
    Avx512,
}

impl Isa {
    /// The fastest instruction set this CPU has.
    pub fn detect() -> Isa {
        [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .find(|isa| isa.is_available())
            .unwrap_or(Isa::Portable)
    }

    pub fn is_available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_available()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2 | Isa::Avx512 => false,
        }
    }

    /// `self` when this CPU has it, else the portable kernels (a test may ask for any set).
    pub fn or_portable(self) -> Isa {
        if self.is_available() {
            self
        } else {
            Isa::Portable
        }
    }

    /// Whether the AVX2 kernels may run with `self` (every x86 set includes AVX2's).
    fn has_avx2(self) -> bool {
        self != Isa::Portable
    }
}

/// The dot of one weight row with four rows of quantized activations, each result equal to
/// the one-row [`RowDot`]'s.
type RowDot4 = unsafe fn(&[u8], [&[Q8Block]; 4]) -> [f32; 4];

/// The four-row integer dot for `dtype` on `isa`, where there is one.
fn int_dot_kernel4(dtype: DType, isa: Isa) -> Option<RowDot4> {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        return Some(match dtype {
            DType::Q4_0 => avx512::q4_0_x4,
            DType::Q4_1 => avx512::q4_1_x4,
            DType::Q5_0 => avx512::q5_0_x4,
            DType::Q5_1 => avx512::q5_1_x4,
            DType::Q8_0 => avx512::q8_0_x4,
            _ => return None,
        });
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        return Some(match dtype {
            DType::Q4_0 => avx2::q4_0_x4,
            DType::Q4_1 => avx2::q4_1_x4,
            DType::Q5_0 => avx2::q5_0_x4,
            DType::Q5_1 => avx2::q5_1_x4,
            DType::Q8_0 => avx2::q8_0_x4,
            _ => return None,
        });
    }
    let _ = (dtype, isa);
    None
}

/// Four weight rows dotted with one activation row, each result equal to the one-row
/// [`RowDot`]'s.
type RowsDot4 = unsafe fn([&[u8]; 4], &[Q8Block]) -> [f32; 4];

/// The four-weight-row integer dot for `dtype` on `isa`, where there is one.
fn int_dot_rows4(dtype: DType, isa: Isa) -> Option<RowsDot4> {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        return Some(match dtype {
            DType::Q4_0 => avx512::q4_0_rows4,
            DType::Q4_1 => avx512::q4_1_rows4,
            DType::Q5_0 => avx512::q5_0_rows4,
            DType::Q5_1 => avx512::q5_1_rows4,
            DType::Q8_0 => avx512::q8_0_rows4,
            _ => return None,
        });
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        return Some(match dtype {
            DType::Q4_0 => avx2::q4_0_rows4,
            DType::Q4_1 => avx2::q4_1_rows4,
            DType::Q5_0 => avx2::q5_0_rows4,
            DType::Q5_1 => avx2::q5_1_rows4,
            DType::Q8_0 => avx2::q8_0_rows4,
            _ => return None,
        });
    }
    let _ = (dtype, isa);
    None
}

/// The integer row dot for `dtype` on `isa` (`None` for types without one).
fn int_dot_kernel(dtype: DType, isa: Isa) -> Option<RowDot> {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        return Some(match dtype {
            DType::Q4_0 => avx2::q4_0,
            DType::Q4_1 => avx2::q4_1,
            DType::Q5_0 => avx2::q5_0,
            DType::Q5_1 => avx2::q5_1,
            DType::Q8_0 => avx2::q8_0,
            _ => return None,
        });
    }
    let _ = isa;
    Some(match dtype {
        DType::Q4_0 => portable::q4_0,
        DType::Q4_1 => portable::q4_1,
        DType::Q5_0 => portable::q5_0,
        DType::Q5_1 => portable::q5_1,
        DType::Q8_0 => portable::q8_0,
        _ => return None,
    })
}

/// [`Q8Block`]s of scratch [`quant_matmul`] needs for `m` activation rows of `k` values.
pub fn quant_matmul_scratch_len(dtype: DType, m: usize, k: usize) -> usize {
    match Strategy::best(dtype, m) {
        Strategy::IntDot => m * (k / QUANT_BLOCK),
        Strategy::Dequant => 0,
    }
}

/// `y = x · Wᵀ`: `x` is `m × k` row-major, `y` is `m × n` row-major, `W` is `n × k`. Runs the
/// best strategy on the best ISA, on up to `threads` threads of the current intra-op pool.
/// `scratch` holds [`quant_matmul_scratch_len`] blocks; nothing is allocated in steady state.
pub fn quant_matmul(
    w: &QuantMatrix<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut [Q8Block],
    threads: usize,
) -> KernelResult<()> {
    quant_matmul_with(
        Strategy::best(w.dtype, m),
        Isa::detect(),
        w,
        x,
        m,
        y,
        scratch,
        threads,
    )
}

/// [`quant_matmul`] with a chosen strategy and ISA (an unavailable ISA falls back to the
/// portable one), for tests and benchmarks.
#[allow(clippy::too_many_arguments)]
pub fn quant_matmul_with(
    strategy: Strategy,
    isa: Isa,
    w: &QuantMatrix<'_>,
    x: &[f32],
    m: usize,
    y: &mut [f32],
    scratch: &mut [Q8Block],
    threads: usize,
) -> KernelResult<()> {
    let isa = isa.or_portable();
    let (n, k) = (w.rows, w.cols);
    check_len("x", m.saturating_mul(k), x.len())?;
    check_len("y", m.saturating_mul(n), y.len())?;
    let out = OutPtr(y.as_mut_ptr());
    match strategy {
        Strategy::IntDot => {
            let dot = int_dot_kernel(w.dtype, isa).ok_or_else(|| KernelError::InvalidParam {
                op: OP,
                param: "strategy",
                reason: format!("no integer dot for {} weights", w.dtype),
            })?;
            let blocks = k / QUANT_BLOCK;
            let need = m * blocks;
            if scratch.len() < need {
                return Err(KernelError::BufferLength {
                    op: OP,
                    buffer: "scratch",
                    expected: need,
                    actual: scratch.len(),
                });
            }
            let xq = &mut scratch[..need];
            quantize_activations(x, xq);
            let xq = &*xq;
            let dot4 = int_dot_kernel4(w.dtype, isa);
            let rows4 = int_dot_rows4(w.dtype, isa).filter(|_| m < 4);
            let row_products = |j: usize| {
                let row = w.row(j);
                let mut i = 0;
                if let Some(dot4) = dot4 {
                    while i + 4 <= m {
                        let ys =
                            std::array::from_fn(|r| &xq[(i + r) * blocks..(i + r + 1) * blocks]);
                        // SAFETY: `dot4` is the kernel for `isa`, which is available; the row
                        // and the activation rows are whole blocks of the same count.
                        let v = unsafe { dot4(row, ys) };
                        for (r, v) in v.into_iter().enumerate() {
                            // SAFETY: as below.
                            unsafe { out.write((i + r) * n + j, v) };
                        }
                        i += 4;
                    }
                }
                for i in i..m {
                    // SAFETY: `dot` is the kernel for `isa`, which is available (checked above);
                    // the row and the activation blocks are whole blocks of the same length.
                    let v = unsafe { dot(row, &xq[i * blocks..(i + 1) * blocks]) };
                    // SAFETY: (i, j) is inside y (checked lengths) and row j belongs to this
                    // task only.
                    unsafe { out.write(i * n + j, v) };
                }
            };
            let min_weights = if rows4.is_some() {
                DECODE_PARALLEL_MIN_WEIGHTS
            } else {
                PARALLEL_MIN_WEIGHTS
            };
            for_row_ranges_min(n, k, threads, min_weights, |range| {
                let mut j = range.start;
                // Fewer than four activation rows (decode): weight rows four at a time.
                if let Some(rows4) = rows4 {
                    #[cfg(target_arch = "x86_64")]
                    if !range.is_empty() {
                        let start = w.row(range.start).as_ptr();
                        // SAFETY: `rows4` exists only for an available x86 ISA (AVX2 or more).
                        unsafe { avx2::prefetch_start(start, range.len() * w.row_bytes) };
                    }
                    while j + 4 <= range.end {
                        let rows = std::array::from_fn(|r| w.row(j + r));
                        for i in 0..m {
                            // SAFETY: `rows4` is the kernel for `isa`, which is available; the
                            // rows and the activation row are whole blocks of the same count.
                            let v = unsafe { rows4(rows, &xq[i * blocks..(i + 1) * blocks]) };
                            for (r, v) in v.into_iter().enumerate() {
                                // SAFETY: (i, j + r) is inside y and rows j..j + 4 belong to
                                // this task only.
                                unsafe { out.write(i * n + j + r, v) };
                            }
                        }
                        j += 4;
                    }
                }
                for j in j..range.end {
                    row_products(j);
                }
            });
        }
        Strategy::Dequant => {
            for_rows(n, k, threads, |j| {
                ROW.with(|buffer| {
                    let mut buffer = buffer.borrow_mut();
                    if buffer.len() < k {
                        buffer.resize(k, 0.0);
                    }
                    let row = &mut buffer[..k];
                    dequantize_row(w.dtype, w.row(j), row).expect("validated by QuantMatrix");
                    for i in 0..m {
                        let v = dot_f32(isa, row, &x[i * k..(i + 1) * k]);
                        // SAFETY: as above.
                        unsafe { out.write(i * n + j, v) };
                    }
                });
            });
        }
    }
    Ok(())
}

thread_local! {
    /// A dequantized weight row, grown to the widest row seen by this thread.
    static ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

fn dot_f32(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: AVX-512 F, BW, VL and VNNI, AVX2, FMA and F16C were detected at run time.
        return unsafe { avx512::dot_f32(a, b) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: AVX2, FMA and F16C were detected at run time.
        return unsafe { avx2::dot_f32(a, b) };
    }
    let _ = isa;
    portable::dot_f32(a, b)
}

/// Output rows run between two polls of the run's stop token: a decode product over a large
/// vocabulary takes milliseconds, so a cancelled or late run must not wait for all of it.
const POLL_ROWS: usize = 256;

/// Runs `row(j)` for every output row `j < n`, as [`for_row_ranges`] (threads, stop token).
fn for_rows(n: usize, k: usize, threads: usize, row: impl Fn(usize) + Sync) {
    for_row_ranges(n, k, threads, |range| range.for_each(&row));
}

/// Runs `rows(range)` over ranges of output rows covering `0..n` once, split over up to
/// `threads` pool threads when the matrix is large enough to pay for it. Ranges are at most
/// [`POLL_ROWS`] rows; before each (and each chunk) it polls the run's stop token and, once the
/// run should stop, skips the rows left: the run then ends with the cancelled or timed-out
/// error at its next check, so the partial output is never handed out.
fn for_row_ranges(n: usize, k: usize, threads: usize, rows: impl Fn(Range<usize>) + Sync) {
    for_row_ranges_min(n, k, threads, PARALLEL_MIN_WEIGHTS, rows)
}

/// [`for_row_ranges`] that splits only matrices of at least `min_weights` weights.
fn for_row_ranges_min(
    n: usize,
    k: usize,
    threads: usize,
    min_weights: usize,
    rows: impl Fn(Range<usize>) + Sync,
) {
    // Taken here: the pool's workers have no run control installed.
    let stop = crate::run_control::stop_token();
    let run = |j0: usize, j1: usize| {
        for (block, start) in (j0..j1).step_by(POLL_ROWS).enumerate() {
            if stop.should_stop_at(block) {
                return;
            }
            rows(start..(start + POLL_ROWS).min(j1));
        }
    };
    let tasks = threads.min(crate::parallel::threads()).max(1);
    if tasks == 1 || n * k < min_weights {
        run(0, n);
        return;
    }
    // A few chunks per thread, so a slow thread does not hold up the product; whole groups of
    // four rows, the matrix-vector kernels' step.
    let chunk = n.div_ceil(tasks * 4).next_multiple_of(4).max(4);
    crate::parallel::for_each_index(n.div_ceil(chunk), |c| {
        if !stop.should_stop_at(c) {
            run(c * chunk, ((c + 1) * chunk).min(n));
        }
    });
}

/// The output matrix, shared by the row tasks of one product.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: every task writes a disjoint set of elements (its own output rows j), and the
// product does not return before every task has finished.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `at` must be inside the output slice and written by no other task.
    unsafe fn write(self, at: usize, v: f32) {
        // SAFETY: guaranteed by the caller.
        unsafe { *self.0.add(at) = v };
    }
}

fn error_at(param: &'static str, reason: String) -> KernelError {
    KernelError::InvalidParam {
        op: OP,
        param,
        reason,
    }
}

fn check_len(buffer: &'static str, expected: usize, actual: usize) -> KernelResult<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(KernelError::BufferLength {
            op: OP,
            buffer,
            expected,
            actual,
        })
    }
}
