//! Scaled-dot-product attention on per-head tiles, flash-attention style:
//! `out = softmax(steps(scale · Q·Kᵀ)) · V` for every (batch, head), where `steps` are additive
//! masks and boolean selects applied to the scores in order.
//!
//! The work is split into (batch, head, block of query rows) tasks. A task walks the keys in
//! blocks: one GEMM gives the block's scores (a tile of at most `QB x KB` floats, kept in the
//! participant's scratch slot, so in L1/L2), the steps and an online softmax update them, and a
//! second GEMM adds the block's probabilities times V to an accumulator of `QB x Dv` floats. The
//! full `[heads, q, k]` score tensor is never written. Q, K, V, masks and the output are read and
//! written through strides, so head split/merge transposes cost nothing.
//!
//! Short sequences ([`whole_head::fits`]) take one task per (batch, head) instead
//! ([`whole_head`]): the head's whole score matrix fits in the slot, so each of the two products
//! packs its operands once per head, and the softmax needs no rescaling.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::error::{KernelError, KernelResult};
use super::gemm::gemm;
use crate::parallel;
use crate::support::fast_math;

#[cfg(target_arch = "x86_64")]
mod rows_avx512;
mod whole_head;

const OP: &str = "FusedAttention";

/// Query rows per task.
const QB: usize = 64;
/// Keys per score tile.
const KB: usize = 256;

/// A strided 4-D operand: element `(i0, i1, i2, i3)` is `data[Σ i_j · strides[j]]`. A stride of
/// 0 broadcasts an axis.
#[derive(Clone, Copy, Debug)]
pub struct View4<'a, T> {
    pub data: &'a [T],
    pub dims: [usize; 4],
    pub strides: [usize; 4],
}

impl<T> View4<'_, T> {
    /// One past the largest offset the view reaches (0 when it is empty).
    fn extent(&self) -> Option<usize> {
        if self.dims.contains(&0) {
            return Some(0);
        }
        self.dims
            .iter()
            .zip(&self.strides)
            .try_fold(1usize, |acc, (&d, &s)| {
                acc.checked_add((d - 1).checked_mul(s)?)
            })
    }

    fn check(&self, operand: &'static str) -> KernelResult<()> {
        match self.extent() {
            Some(e) if e <= self.data.len() => Ok(()),
            _ => Err(KernelError::InvalidLayout {
                op: OP,
                operand,
                rows: self.dims[2],
                cols: self.dims[3],
                strides: (self.strides[2] as isize, self.strides[3] as isize),
                reason: format!(
                    "dims {:?} with strides {:?} reach outside its {} elements",
                    self.dims,
                    self.strides,
                    self.data.len()
                ),
            }),
        }
    }

    fn offset(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> usize {
        i0 * self.strides[0] + i1 * self.strides[1] + i2 * self.strides[2] + i3 * self.strides[3]
    }
}

/// One step applied to the scaled scores before the softmax, over `[batch, heads, q, k]`
/// (broadcast through zero strides).
#[derive(Clone, Copy, Debug)]
pub enum ScoreStep<'a> {
    /// `s += mask`.
    Add(View4<'a, f32>),
    /// `s = if (cond != 0) == keep_when { s } else { fill }` (GPT-2's causal `Where`).
    Select {
        cond: View4<'a, u8>,
        keep_when: bool,
        fill: f32,
    },
}

/// One attention problem: Q `[B, H, Sq, D]`, K `[B, H, Sk, D]`, V `[B, H, Sk, Dv]`.
#[derive(Clone, Copy, Debug)]
pub struct Sdpa<'a> {
    pub q: View4<'a, f32>,
    pub k: View4<'a, f32>,
    pub v: View4<'a, f32>,
    pub scale: f32,
    pub steps: &'a [ScoreStep<'a>],
    /// Masks out (−∞) keys after the query's own index.
    pub causal: bool,
    /// Rows that mask out every key give zeros instead of NaN.
    pub zero_empty_rows: bool,
}

/// Scratch floats one participant needs for `sq` query rows, `sk` keys and value width `dv`
/// (enough for either path: which one runs also depends on the thread count).
pub fn sdpa_slot_len(sq: usize, sk: usize, dv: usize) -> usize {
    let (qb, kb) = (QB.min(sq.max(1)), KB.min(sk.max(1)));
    let blocks = qb * kb + qb * dv + 2 * qb;
    if whole_head::fits(sq, sk) {
        blocks.max(whole_head::slot_len(sq, sk, dv))
    } else {
        blocks
    }
}

/// A raw pointer shared by the pool's participants; each writes only its own elements.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: the pointer is only dereferenced at offsets that one task alone owns (its query rows
// of the output, its participant's scratch slot), while the caller's `&mut` borrow is held.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// The pointer (a method, so closures capture the whole `Shared`, not its raw field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// Defines an f32 row loop compiled three times, for AVX-512F, for AVX2+FMA and for the build
/// target, and picks the first this CPU runs (checked at run time; the check is cached by std).
macro_rules! row_kernel {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                /// # Safety
                /// Only called once AVX-512F was detected.
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: AVX-512F was detected on this CPU just now.
                    return unsafe { avx512($($arg),*) };
                }
                /// # Safety
                /// Only called once AVX2 and FMA were detected.
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: AVX2 and FMA were detected on this CPU just now.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

/// Runs `p`, writing `out` `[B, H, Sq, Dv]` through `out_strides`. `scratch` holds `slots`
/// slots of [`sdpa_slot_len`] floats; at most `min(threads, slots)` participants run.
pub fn sdpa_f32(
    p: &Sdpa<'_>,
    out: &mut [f32],
    out_strides: [usize; 4],
    scratch: &mut [f32],
    slots: usize,
    threads: usize,
) -> KernelResult<()> {
    let [b, h, sq, d] = p.q.dims;
    let [_, _, sk, dv] = p.v.dims;
    let mismatch = |what: &str, a: &[usize], bb: &[usize]| KernelError::ShapeMismatch {
        op: OP,
        a: a.to_vec(),
        b: bb.to_vec(),
        reason: what.to_string(),
    };
    if p.k.dims != [b, h, sk, d] {
        return Err(mismatch("Q and K", &p.q.dims, &p.k.dims));
    }
    if p.v.dims[..2] != [b, h] {
        return Err(mismatch("Q and V", &p.q.dims, &p.v.dims));
    }
    p.q.check("Q")?;
    p.k.check("K")?;
    p.v.check("V")?;
    for step in p.steps {
        match step {
            ScoreStep::Add(m) if m.dims == [b, h, sq, sk] => m.check("mask")?,
            ScoreStep::Select { cond, .. } if cond.dims == [b, h, sq, sk] => cond.check("cond")?,
            ScoreStep::Add(View4 { dims, .. })
            | ScoreStep::Select {
                cond: View4 { dims, .. },
                ..
            } => return Err(mismatch("scores and mask", &[b, h, sq, sk], dims)),
        }
    }
    let out_view = View4 {
        data: &*out,
        dims: [b, h, sq, dv],
        strides: out_strides,
    };
    out_view.check("output")?;
    if !disjoint(out_view.dims, out_strides) {
        return Err(KernelError::InvalidLayout {
            op: OP,
            operand: "output",
            rows: sq,
            cols: dv,
            strides: (out_strides[2] as isize, out_strides[3] as isize),
            reason: format!("strides {out_strides:?} make elements overlap"),
        });
    }
    if out_view.extent() == Some(0) {
        return Ok(());
    }
    let slot_len = sdpa_slot_len(sq, sk, dv);
    let slots = slots.min(scratch.len() / slot_len.max(1));
    if slots == 0 {
        return Err(KernelError::BufferLength {
            op: OP,
            buffer: "scratch",
            expected: slot_len,
            actual: scratch.len(),
        });
    }
    let workers = slots.min(threads.max(1)).min(parallel::threads());
    // Whole heads (or blocks of their query rows against all keys) where the scores fit;
    // else query blocks walking the keys.
    let whole_blocks = whole_head::fits(sq, sk)
        .then(|| whole_head::blocks_per_head(b * h, sq, workers))
        .flatten();
    let whole = whole_blocks.is_some();
    let qb = match whole_blocks {
        Some(n) => sq.div_ceil(n).max(1),
        None => QB.min(sq),
    };
    let blocks = sq.div_ceil(qb);
    let tasks = b * h * blocks;
    let participants = workers.min(tasks);
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<KernelError>> = Mutex::new(None);
    let out_ptr = Shared(out.as_mut_ptr());
    let scratch_ptr = Shared(scratch.as_mut_ptr());
    parallel::for_each_thread(participants.max(1), |slot| {
        // SAFETY: participant `slot` is the only user of scratch slot `slot` (for_each_thread
        // runs each index on one participant), and `slots * slot_len <= scratch.len()`.
        let work = unsafe {
            std::slice::from_raw_parts_mut(scratch_ptr.get().add(slot * slot_len), slot_len)
        };
        loop {
            let task = next.fetch_add(1, Ordering::Relaxed);
            if task >= tasks {
                break;
            }
            let (bh, block) = (task / blocks, task % blocks);
            let (bi, hi) = (bh / h, bh % h);
            let q0 = block * qb;
            let rows = qb.min(sq - q0);
            let done = if whole {
                whole_head::head(p, bi, hi, (q0, rows), work, out_ptr, out_strides)
            } else {
                tile(p, bi, hi, q0, rows, work, out_ptr, out_strides)
            };
            if let Err(e) = done {
                if let Ok(mut f) = failure.lock() {
                    f.get_or_insert(e);
                }
                break;
            }
        }
    });
    match failure.into_inner() {
        Ok(Some(e)) => Err(e),
        _ => Ok(()),
    }
}

/// Whether distinct indices map to distinct offsets: sorted by stride, each axis steps over
/// everything the smaller ones reach.
fn disjoint(dims: [usize; 4], strides: [usize; 4]) -> bool {
    let mut axes: [(usize, usize); 4] = [0, 1, 2, 3].map(|i| (strides[i], dims[i]));
    axes.sort_unstable();
    let mut reach = 1usize;
    for (s, d) in axes {
        if d <= 1 {
            continue;
        }
        if s < reach {
            return false;
        }
        reach = s.saturating_mul(d);
    }
    true
}

/// Query rows `q0..q0 + rows` of head (`bi`, `hi`).
#[allow(clippy::too_many_arguments)]
fn tile(
    p: &Sdpa<'_>,
    bi: usize,
    hi: usize,
    q0: usize,
    rows: usize,
    work: &mut [f32],
    out: Shared,
    out_strides: [usize; 4],
) -> KernelResult<()> {
    let [_, _, _, d] = p.q.dims;
    let [_, _, sk, dv] = p.v.dims;
    let sq = p.q.dims[2];
    let qb = QB.min(sq);
    let kb = KB.min(sk.max(1));
    let (scores, rest) = work.split_at_mut(qb * kb);
    let (acc, rest) = rest.split_at_mut(qb * dv);
    let (max, sum) = rest.split_at_mut(qb);
    let (max, sum) = (&mut max[..rows], &mut sum[..rows]);
    max.fill(f32::NEG_INFINITY);
    sum.fill(0.0);
    let acc = &mut acc[..rows * dv];
    acc.fill(0.0);
    let (qs, ks, vs) = (p.q.strides, p.k.strides, p.v.strides);
    let q_at = p.q.offset(bi, hi, q0, 0);
    for k0 in (0..sk).step_by(kb) {
        if p.causal && k0 > q0 + rows - 1 {
            // Every key from here on is after every query row of the tile: exp(−∞) adds 0.
            break;
        }
        let cols = kb.min(sk - k0);
        let s = &mut scores[..rows * cols];
        // S = scale · Q_blk · K_blkᵀ: B(i, j) = K[k0 + j, i].
        gemm(
            rows,
            cols,
            d,
            &p.q.data[q_at..],
            (qs[2] as isize, qs[3] as isize),
            &p.k.data[p.k.offset(bi, hi, k0, 0)..],
            (ks[3] as isize, ks[2] as isize),
            s,
            (cols as isize, 1),
            p.scale,
            0.0,
            1,
        )?;
        for (i, row) in s.chunks_exact_mut(cols).enumerate() {
            for step in p.steps {
                apply_step(step, row, bi, hi, q0 + i, k0);
            }
            if p.causal {
                let keep = (q0 + i + 1).saturating_sub(k0).min(cols);
                row[keep..].fill(f32::NEG_INFINITY);
            }
            let block_max = row_max(row);
            let new_max = max[i].max(block_max);
            // A row that is -inf so far contributes nothing; shifting by 0 keeps exp(-inf) = 0
            // instead of NaN.
            let shift = if new_max == f32::NEG_INFINITY {
                0.0
            } else {
                new_max
            };
            let block_sum = exp_shifted(row, shift);
            if k0 > 0 {
                let correction = exp_flushed(max[i] - shift);
                sum[i] *= correction;
                acc[i * dv..(i + 1) * dv]
                    .iter_mut()
                    .for_each(|a| *a *= correction);
            }
            sum[i] += block_sum;
            max[i] = new_max;
        }
        // acc += P · V_blk.
        gemm(
            rows,
            dv,
            cols,
            s,
            (cols as isize, 1),
            &p.v.data[p.v.offset(bi, hi, k0, 0)..],
            (vs[2] as isize, vs[3] as isize),
            acc,
            (dv as isize, 1),
            1.0,
            1.0,
            1,
        )?;
    }
    write_rows(p, bi, hi, q0, acc, sum, out, out_strides);
    Ok(())
}

/// Writes rows `acc` (`dv` wide, each over its softmax sum `sum[i]`) as output rows `q0..` of
/// head (`bi`, `hi`).
#[allow(clippy::too_many_arguments)]
fn write_rows(
    p: &Sdpa<'_>,
    bi: usize,
    hi: usize,
    q0: usize,
    acc: &[f32],
    sum: &[f32],
    out: Shared,
    out_strides: [usize; 4],
) {
    let dv = p.v.dims[3];
    for (i, row) in acc.chunks_exact(dv).enumerate() {
        let inv = if p.zero_empty_rows && sum[i] == 0.0 {
            0.0
        } else {
            1.0 / sum[i]
        };
        let base = bi * out_strides[0] + hi * out_strides[1] + (q0 + i) * out_strides[2];
        if out_strides[3] == 1 {
            // `sdpa_f32` checked every (b, h, q, d) offset lies inside `out` without overlaps.
            // SAFETY: with a unit last stride, output row q0 + i of this head is the `dv`
            // contiguous elements from `base`, inside `out` and this task's alone.
            let dst = unsafe { std::slice::from_raw_parts_mut(out.get().add(base), dv) };
            scale_into(dst, row, inv);
            continue;
        }
        for (j, &a) in row.iter().enumerate() {
            // SAFETY: as above, element by element.
            unsafe { out.get().add(base + j * out_strides[3]).write(a * inv) };
        }
    }
}

fn apply_step(step: &ScoreStep<'_>, row: &mut [f32], bi: usize, hi: usize, qi: usize, k0: usize) {
    match step {
        ScoreStep::Add(m) => {
            let at = m.offset(bi, hi, qi, k0);
            match m.strides[3] {
                1 => add_row(row, &m.data[at..at + row.len()]),
                st => row
                    .iter_mut()
                    .enumerate()
                    .for_each(|(j, s)| *s += m.data[at + j * st]),
            }
        }
        ScoreStep::Select {
            cond,
            keep_when,
            fill,
        } => {
            let at = cond.offset(bi, hi, qi, k0);
            match cond.strides[3] {
                1 => select_row(row, &cond.data[at..at + row.len()], *keep_when, *fill),
                st => {
                    for (j, s) in row.iter_mut().enumerate() {
                        if (cond.data[at + j * st] != 0) != *keep_when {
                            *s = *fill;
                        }
                    }
                }
            }
        }
    }
}

row_kernel! {
    /// `dst = src * factor`.
    fn scale_into(dst: &mut [f32], src: &[f32], factor: f32) {
        dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s * factor);
    }
}

row_kernel! {
    /// `row[j] = fill` where `(cond[j] != 0) != keep_when` (written as a select of every
    /// element, so it vectorizes).
    fn select_row(row: &mut [f32], cond: &[u8], keep_when: bool, fill: f32) {
        row.iter_mut()
            .zip(cond)
            .for_each(|(s, &c)| *s = if (c != 0) == keep_when { *s } else { fill });
    }
}

row_kernel! {
    /// `row += mask`.
    fn add_row(row: &mut [f32], mask: &[f32]) {
        row.iter_mut().zip(mask).for_each(|(s, m)| *s += m);
    }
}

/// The row's maximum (NaN if any element is NaN, as Softmax gives NaN then).
pub(crate) fn row_max(row: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected on this CPU just now.
        return unsafe { rows_avx512::row_max(row) };
    }
    row_max_lanes(row)
}

row_kernel! {
    /// [`row_max`] as a row loop the compiler vectorizes (AVX2 and portable builds).
    fn row_max_lanes(row: &[f32]) -> f32 {
        let mut lanes = [f32::NEG_INFINITY; 16];
        let mut nan = false;
        let chunks = row.chunks_exact(16);
        let tail = chunks.remainder();
        for c in chunks {
            for l in 0..16 {
                lanes[l] = if c[l] > lanes[l] { c[l] } else { lanes[l] };
                nan |= c[l].is_nan();
            }
        }
        let mut m = lanes.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
        for &x in tail {
            m = if x > m { x } else { m };
            nan |= x.is_nan();
        }
        if nan {
            f32::NAN
        } else {
            m
        }
    }
}

/// Below this, e^x is under the smallest normal f32 (e^-87.34 is 1.18e-38).
const EXP_FLUSH_BELOW: f32 = -87.3;

/// `exp(x)`, 0 where it would be below the smallest normal f32. Scores far below the row's
/// maximum (masked ones, or the wide spread of a model with random weights) would otherwise
/// make subnormals: both inside `exp` (its final scaling) and in the sums and the P·V product,
/// where each costs a microcode assist (about 100× a normal multiply). The argument is clamped
/// first, so `exp` itself never computes one. What is dropped is below 1.2e-38 of the row's
/// largest term. NaN passes through (both comparisons are false). Written as a bit mask, not a
/// branch, so the compiler computes `exp` for every lane and keeps the loops vectorized.
#[inline(always)]
fn exp_flushed(x: f32) -> f32 {
    let clamped = if x < EXP_FLUSH_BELOW {
        EXP_FLUSH_BELOW
    } else {
        x
    };
    let keep = if x < EXP_FLUSH_BELOW { 0 } else { u32::MAX };
    f32::from_bits(fast_math::exp(clamped).to_bits() & keep)
}

/// `row = exp(row - shift)`, flushed as [`exp_flushed`]; returns the sum.
pub(crate) fn exp_shifted(row: &mut [f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected on this CPU just now.
        return unsafe { rows_avx512::exp_shifted(row, shift) };
    }
    exp_shifted_lanes(row, shift)
}

row_kernel! {
    /// [`exp_shifted`] as a row loop the compiler vectorizes (AVX2 and portable builds).
    fn exp_shifted_lanes(row: &mut [f32], shift: f32) -> f32 {
        let mut lanes = [0.0f32; 16];
        let mut chunks = row.chunks_exact_mut(16);
        for c in &mut chunks {
            for l in 0..16 {
                c[l] = exp_flushed(c[l] - shift);
                lanes[l] += c[l];
            }
        }
        let mut sum: f32 = lanes.iter().sum();
        for x in chunks.into_remainder() {
            *x = exp_flushed(*x - shift);
            sum += *x;
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        rng.vec(n)
    }

    fn contiguous(dims: [usize; 4]) -> [usize; 4] {
        [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1]
    }

    /// `data` as a row-major tensor of `dims`.
    fn contiguous_view(data: &[f32], dims: [usize; 4]) -> View4<'_, f32> {
        View4 {
            data,
            dims,
            strides: contiguous(dims),
        }
    }

    /// Plain softmax(scale · Q·Kᵀ + steps)·V in f64.
    fn reference(p: &Sdpa<'_>) -> Vec<f32> {
        let [b, h, sq, d] = p.q.dims;
        let [_, _, sk, dv] = p.v.dims;
        let mut out = vec![0.0f32; b * h * sq * dv];
        // (Rows skipped as empty stay zero.)
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..sq {
                    let mut s: Vec<f64> = (0..sk)
                        .map(|j| {
                            let dot: f64 = (0..d)
                                .map(|x| {
                                    f64::from(p.q.data[p.q.offset(bi, hi, i, x)])
                                        * f64::from(p.k.data[p.k.offset(bi, hi, j, x)])
                                })
                                .sum();
                            dot * f64::from(p.scale)
                        })
                        .collect();
                    for step in p.steps {
                        for (j, v) in s.iter_mut().enumerate() {
                            match step {
                                ScoreStep::Add(m) => {
                                    *v += f64::from(m.data[m.offset(bi, hi, i, j)])
                                }
                                ScoreStep::Select {
                                    cond,
                                    keep_when,
                                    fill,
                                } => {
                                    if (cond.data[cond.offset(bi, hi, i, j)] != 0) != *keep_when {
                                        *v = f64::from(*fill);
                                    }
                                }
                            }
                        }
                    }
                    if p.causal {
                        s.iter_mut()
                            .skip(i + 1)
                            .for_each(|v| *v = f64::NEG_INFINITY);
                    }
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    if p.zero_empty_rows && m == f64::NEG_INFINITY {
                        continue;
                    }
                    for x in 0..dv {
                        let y: f64 = (0..sk)
                            .map(|j| e[j] / z * f64::from(p.v.data[p.v.offset(bi, hi, j, x)]))
                            .sum();
                        out[((bi * h + hi) * sq + i) * dv + x] = y as f32;
                    }
                }
            }
        }
        out
    }

    fn close(a: &[f32], b: &[f32]) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 + 1e-4 * y.abs(),
                "element {i}: {x} vs {y}"
            );
        }
    }

    fn run(p: &Sdpa<'_>, slots: usize) -> Vec<f32> {
        let [b, h, sq, _] = p.q.dims;
        let dv = p.v.dims[3];
        let mut out = vec![f32::NAN; b * h * sq * dv];
        let mut scratch = vec![f32::NAN; slots * sdpa_slot_len(sq, p.k.dims[2], dv)];
        sdpa_f32(
            p,
            &mut out,
            contiguous([b, h, sq, dv]),
            &mut scratch,
            slots,
            slots,
        )
        .unwrap();
        out
    }

    #[test]
    fn matches_the_plain_formula_over_key_blocks_and_masks() {
        // Key lengths below, at and above one key block, odd head dims, query blocks with tails.
        for &(b, h, sq, sk, d, dv) in &[
            (1, 1, 1, 1, 1, 1),
            (2, 3, 5, 7, 4, 3),
            (1, 2, 70, 300, 16, 8),
            (1, 1, 130, 520, 9, 5),
        ] {
            let q = random(b * h * sq * d, 1);
            let k = random(b * h * sk * d, 2);
            let v = random(b * h * sk * dv, 3);
            let mask = random(b * sk, 4);
            let causal: Vec<u8> = (0..sq * sk).map(|x| u8::from(x % sk <= x / sk)).collect();
            let steps = [
                ScoreStep::Add(View4 {
                    data: &mask,
                    dims: [b, h, sq, sk],
                    strides: [sk, 0, 0, 1],
                }),
                ScoreStep::Select {
                    cond: View4 {
                        data: &causal,
                        dims: [b, h, sq, sk],
                        strides: [0, 0, sk, 1],
                    },
                    keep_when: true,
                    fill: -1e4,
                },
            ];
            let p = Sdpa {
                q: contiguous_view(&q, [b, h, sq, d]),
                k: contiguous_view(&k, [b, h, sk, d]),
                v: contiguous_view(&v, [b, h, sk, dv]),
                scale: 1.0 / (d as f32).sqrt(),
                steps: &steps,
                causal: false,
                zero_empty_rows: false,
            };
            let want = reference(&p);
            close(&run(&p, 1), &want);
            close(&run(&p, 3), &want);
            let plain = Sdpa { steps: &[], ..p };
            close(&run(&plain, 2), &reference(&plain));
        }
    }

    #[test]
    fn whole_heads_and_query_blocks_agree_around_the_size_rule() {
        // (b, h, sq, sk, d, dv, runs whole): at and just past each limit of the rule, odd head
        // dims; with 2 workers, 3 heads are too few for whole-head tasks and split in blocks.
        let cases = [
            (1, 3, 256, 256, 7, 5, true),
            (1, 3, 257, 255, 7, 5, false),
            (2, 1, 64, 1024, 9, 3, true),
            (2, 1, 64, 1025, 9, 3, false),
            (1, 4, 3, 1, 1, 2, true),
            // One head: with 2 or 3 workers, blocks of its query rows against all keys.
            (1, 1, 64, 64, 8, 8, true),
        ];
        for &(b, h, sq, sk, d, dv, whole) in &cases {
            assert_eq!(whole_head::fits(sq, sk), whole, "{sq} x {sk}");
            let q = random(b * h * sq * d, 31);
            let k = random(b * h * sk * d, 32);
            let v = random(b * h * sk * dv, 33);
            let mask = random(b * sk, 34);
            // Query row 1 masks out every key: zeros with the guard.
            let cond: Vec<u8> = (0..sq * sk).map(|x| u8::from(x / sk != 1)).collect();
            let steps = [
                ScoreStep::Add(View4 {
                    data: &mask,
                    dims: [b, h, sq, sk],
                    strides: [sk, 0, 0, 1],
                }),
                ScoreStep::Select {
                    cond: View4 {
                        data: &cond,
                        dims: [b, h, sq, sk],
                        strides: [0, 0, sk, 1],
                    },
                    keep_when: true,
                    fill: f32::NEG_INFINITY,
                },
            ];
            for causal in [false, true] {
                let p = Sdpa {
                    q: contiguous_view(&q, [b, h, sq, d]),
                    k: contiguous_view(&k, [b, h, sk, d]),
                    v: contiguous_view(&v, [b, h, sk, dv]),
                    scale: 0.7,
                    steps: &steps,
                    causal,
                    zero_empty_rows: true,
                };
                let want = reference(&p);
                for threads in 1..=3 {
                    let pool = parallel::ThreadPool::new(threads).unwrap();
                    let got = parallel::install(&pool, || run(&p, threads));
                    close(&got, &want);
                    if sq > 1 {
                        assert!(got[dv..2 * dv].iter().all(|&x| x == 0.0));
                    }
                }
            }
        }
    }

    #[test]
    fn few_heads_are_cut_into_query_blocks_for_the_workers() {
        assert_eq!(whole_head::blocks_per_head(12, 128, 2), Some(1));
        assert_eq!(whole_head::blocks_per_head(1, 64, 1), Some(1));
        assert_eq!(whole_head::blocks_per_head(1, 64, 2), Some(2));
        assert_eq!(whole_head::blocks_per_head(3, 256, 2), Some(2));
        // Blocks of at least 16 rows: 20 rows cannot make 3 workers' worth of tasks.
        assert_eq!(whole_head::blocks_per_head(1, 20, 3), None);
    }

    #[test]
    fn whole_head_tasks_need_enough_heads_for_the_workers() {
        assert!(whole_head::balanced(12, 2));
        assert!(whole_head::balanced(5, 2));
        assert!(whole_head::balanced(1, 1));
        assert!(whole_head::balanced(7, 0));
        assert!(!whole_head::balanced(3, 2));
        assert!(!whole_head::balanced(1, 2));
        assert!(!whole_head::balanced(4, 3));
    }

    #[test]
    fn exp_flushes_below_the_normal_range_and_keeps_nan() {
        // Just above the cut: a normal number close to e^x; below it (and far below): exactly 0,
        // never a subnormal.
        for x in [-87.29f32, -80.0, -20.0, 0.0] {
            let e = exp_flushed(x);
            assert!(e.is_normal(), "{x}: {e}");
            assert!(
                (f64::from(e) / f64::from(x).exp() - 1.0).abs() < 1e-5,
                "{x}: {e}"
            );
        }
        for x in [-87.31f32, -87.4, -100.0, -1e4, f32::MIN, f32::NEG_INFINITY] {
            assert_eq!(exp_flushed(x).to_bits(), 0, "{x}");
        }
        assert!(exp_flushed(f32::NAN).is_nan());
        // The vectorized row form agrees with the scalar one, lane by lane and in the tail.
        let mut row: Vec<f32> = (0..19).map(|i| -10.0 * i as f32).collect();
        let want: Vec<f32> = row.iter().map(|&x| exp_flushed(x - 5.0)).collect();
        let sum = exp_shifted_lanes(&mut row, 5.0);
        assert_eq!(row, want);
        assert!((sum - want.iter().sum::<f32>()).abs() <= 1e-6 * sum);
        assert_eq!(row[9..].iter().filter(|&&x| x == 0.0).count(), 10);
    }

    #[test]
    fn the_dispatched_row_max_matches_the_lane_loop_at_every_length() {
        let mut rng = Rng::new(22);
        for len in 0..50 {
            let row: Vec<f32> = rng.vec(len).iter().map(|x| x * 100.0).collect();
            assert_eq!(
                row_max(&row).to_bits(),
                row_max_lanes(&row).to_bits(),
                "{len}"
            );
            for at in [0, len / 2, len.saturating_sub(1)] {
                if len > 0 {
                    let mut r = row.clone();
                    r[at] = f32::NAN;
                    assert!(
                        row_max(&r).is_nan() && row_max_lanes(&r).is_nan(),
                        "{len} {at}"
                    );
                    r[at] = 1e30;
                    assert_eq!(row_max(&r), 1e30, "{len} {at}");
                }
            }
        }
        assert_eq!(row_max(&[]), f32::NEG_INFINITY);
        assert_eq!(row_max(&[f32::NEG_INFINITY; 20]), f32::NEG_INFINITY);
    }

    #[test]
    fn the_dispatched_exp_row_matches_the_scalar_one_at_every_length() {
        // Whole vectors and tails, values across the range, the flush cut and NaN: within two
        // ulps of `exp_flushed` (the AVX-512 form rounds through FMAs), exactly 0 below the cut,
        // never a subnormal, and only the row's own elements written.
        let mut rng = Rng::new(21);
        for len in 0..50 {
            let mut row: Vec<f32> = rng.vec(len).iter().map(|x| x * 60.0 - 40.0).collect();
            if len > 3 {
                row[1] = -87.25 + 3.0;
                row[2] = -87.35 + 3.0;
                row[3] = f32::NEG_INFINITY;
            }
            if len > 20 {
                row[20] = f32::NAN;
            }
            let want: Vec<f32> = row.iter().map(|&x| exp_flushed(x - 3.0)).collect();
            let mut padded = row.clone();
            padded.push(7.0);
            let sum = exp_shifted(&mut padded[..len], 3.0);
            assert_eq!(padded[len], 7.0, "wrote past the row");
            for (i, (&g, &w)) in padded[..len].iter().zip(&want).enumerate() {
                if w.is_nan() {
                    assert!(g.is_nan(), "{len} {i}");
                } else if w == 0.0 {
                    assert_eq!(g.to_bits(), 0, "{len} {i}: {g}");
                } else {
                    assert!(g.is_normal(), "{len} {i}: {g}");
                    assert!(
                        (g - w).abs() <= 2.0 * f32::EPSILON * w,
                        "{len} {i}: {g} vs {w}"
                    );
                }
            }
            let want_sum: f32 = want.iter().sum();
            if want_sum.is_nan() {
                assert!(sum.is_nan());
            } else {
                assert!(
                    (sum - want_sum).abs() <= 1e-5 * want_sum,
                    "{len}: {sum} vs {want_sum}"
                );
            }
        }
    }

    #[test]
    fn scores_far_apart_give_the_plain_result() {
        // Q and K large enough that many of each row's exps fall below the f32 normal range
        // (scores spread over hundreds; more would drown the check in f32 rounding of Q·K).
        let (b, h, s, d) = (1, 2, 40, 16);
        let dims = [b, h, s, d];
        let big = |seed| -> Vec<f32> {
            random(b * h * s * d, seed)
                .iter()
                .map(|x| x * 6.0)
                .collect()
        };
        let (q, k, v) = (big(11), big(12), random(b * h * s * d, 13));
        let dot = |i: usize, j: usize| -> f32 { (0..d).map(|x| q[i * d + x] * k[j * d + x]).sum() };
        let row: Vec<f32> = (0..s).map(|j| dot(0, j)).collect();
        let (lo, hi) = row
            .iter()
            .fold((f32::MAX, f32::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        assert!(hi - lo > -EXP_FLUSH_BELOW, "spread {lo}..{hi}");
        let view = |data| View4 {
            data,
            dims,
            strides: contiguous(dims),
        };
        let p = Sdpa {
            q: view(&q),
            k: view(&k),
            v: view(&v),
            scale: 1.0,
            steps: &[],
            causal: false,
            zero_empty_rows: false,
        };
        close(&run(&p, 2), &reference(&p));
    }

    #[test]
    fn causal_rows_skip_later_key_blocks_and_empty_rows_give_zeros() {
        // 300 keys: the first query block never reaches the second key block.
        let (b, h, s, d) = (1, 2, 300, 8);
        let dims = [b, h, s, d];
        let (q, k, v) = (
            random(b * h * s * d, 8),
            random(b * h * s * d, 9),
            random(b * h * s * d, 10),
        );
        // Row 3 masks out every key (−∞ through a Select).
        let cond: Vec<u8> = (0..s * s).map(|x| u8::from(x / s != 3)).collect();
        let steps = [ScoreStep::Select {
            cond: View4 {
                data: &cond,
                dims: [b, h, s, s],
                strides: [0, 0, s, 1],
            },
            keep_when: true,
            fill: f32::NEG_INFINITY,
        }];
        let view = |data| View4 {
            data,
            dims,
            strides: contiguous(dims),
        };
        let p = Sdpa {
            q: view(&q),
            k: view(&k),
            v: view(&v),
            scale: 0.3,
            steps: &steps,
            causal: true,
            zero_empty_rows: true,
        };
        let got = run(&p, 2);
        close(&got, &reference(&p));
        assert!(got[3 * d..4 * d].iter().all(|&x| x == 0.0));
        // Without the guard the empty row is NaN, as Softmax makes it.
        let nan = run(
            &Sdpa {
                zero_empty_rows: false,
                ..p
            },
            1,
        );
        assert!(nan[3 * d].is_nan() && !nan[4 * d].is_nan());
    }

    #[test]
    fn reads_head_split_layouts_through_strides() {
        // Q, K, V packed as [B, S, H·D] (the projections' output), K read as its transpose.
        let (b, h, s, d) = (2, 3, 9, 4);
        let hd = h * d;
        let q = random(b * s * hd, 5);
        let k = random(b * s * hd, 6);
        let v = random(b * s * hd, 7);
        let packed = [s * hd, d, hd, 1];
        let p = Sdpa {
            q: View4 {
                data: &q,
                dims: [b, h, s, d],
                strides: packed,
            },
            k: View4 {
                data: &k,
                dims: [b, h, s, d],
                strides: packed,
            },
            v: View4 {
                data: &v,
                dims: [b, h, s, d],
                strides: packed,
            },
            scale: 0.5,
            steps: &[],
            causal: false,
            zero_empty_rows: false,
        };
        let want = reference(&p);
        // Written merged: [B, S, H·D].
        let mut out = vec![0.0f32; b * s * hd];
        let mut scratch = vec![0.0f32; 2 * sdpa_slot_len(s, s, d)];
        sdpa_f32(&p, &mut out, packed, &mut scratch, 2, 2).unwrap();
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..s {
                    for x in 0..d {
                        let got = out[bi * s * hd + i * hd + hi * d + x];
                        let w = want[((bi * h + hi) * s + i) * d + x];
                        assert!((got - w).abs() < 1e-5, "{got} vs {w}");
                    }
                }
            }
        }
    }

    #[test]
    fn bad_layouts_are_errors() {
        let q = vec![0.0f32; 8];
        let view = View4 {
            data: &q,
            dims: [1, 1, 2, 4],
            strides: [8, 8, 4, 1],
        };
        let p = Sdpa {
            q: view,
            k: view,
            v: view,
            scale: 1.0,
            steps: &[],
            causal: false,
            zero_empty_rows: false,
        };
        let mut scratch = vec![0.0f32; sdpa_slot_len(2, 2, 4)];
        let mut out = vec![0.0f32; 8];
        assert!(sdpa_f32(&p, &mut out, [8, 8, 4, 1], &mut scratch, 1, 1).is_ok());
        // Overlapping output rows, an output too short, a view reaching past its data, no scratch.
        assert!(sdpa_f32(&p, &mut out, [8, 8, 1, 1], &mut scratch, 1, 1).is_err());
        assert!(sdpa_f32(&p, &mut out[..7], [8, 8, 4, 1], &mut scratch, 1, 1).is_err());
        let long = View4 {
            dims: [1, 1, 3, 4],
            ..view
        };
        assert!(sdpa_f32(
            &Sdpa {
                k: long,
                v: long,
                q: long,
                ..p
            },
            &mut out,
            [8, 8, 4, 1],
            &mut scratch,
            1,
            1
        )
        .is_err());
        assert!(sdpa_f32(&p, &mut out, [8, 8, 4, 1], &mut [], 1, 1).is_err());
    }
}
