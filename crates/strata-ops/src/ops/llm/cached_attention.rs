//! CachedAttention: grouped-query causal self-attention over the context's KV cache. Inputs
//! `Q (1, seq, heads·head_dim)`, `K` and `V (1, seq, kv_heads·head_dim)` (RoPE already applied)
//! and `positions (1, seq)` int64, consecutive; output `(1, seq, heads·head_dim)`. The new keys
//! and values are appended to the cache at `positions` (a first position below the cache's
//! length rewinds it there); query `t` attends to every cached position up to its own. Query
//! head `h` reads KV head `h / (heads / kv_heads)`, as llama.cpp does.
//!
//! The numbers follow llama.cpp's attention without flash attention (its x86 AVX-512 build):
//! keys and values cached as f16, the query rounded to f16 before its dot with the keys, softmax
//! in f32 with a wide sum, and the probabilities rounded to f16 before they weight the values.
//! The summation order depends on the chunk, as in ggml's `mul_mat`: a chunk of several tokens
//! goes through tinyBLAS (one 16-lane accumulator per output), a single token (decode) through
//! `ggml_vec_dot_f16` (four 16-lane accumulators, see [`ggml_math::dot_f16_order`]).
//!
//! The cache is per-context state ([`crate::UsesContextState`]): each context gets its own
//! [`KvCache`] when it is created, so many conversations share one plan.

use strata_core::{DType, Device};

#[cfg(target_arch = "x86_64")]
use super::attention_avx2 as simd;
use super::ggml_math::{self, reduce16, v_expf, LANES};
use super::kv_cache::{KvCache, KV_BLOCK_TOKENS};
use super::positive_attr;
use crate::support::f16_bits::{f16_to_f32, f32_to_f16};
use crate::support::inputs::exact_inputs;
use crate::support::kernel_choice::cpu_only;
use crate::{
    ContextState, Dim, Fact, Kernel, KernelCapabilities, KernelIo, OpContext, OpError, OpResult,
    Operator, UsesContextState,
};

const OP: &str = "CachedAttention";

/// Below this many multiply-adds an attention call runs on the calling thread.
const PARALLEL_MIN_WORK: usize = 1 << 15;

#[derive(Clone, Copy, Debug)]
pub struct CachedAttention {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    /// The most positions a context holds.
    max_context: usize,
    block_tokens: usize,
}

impl CachedAttention {
    /// Scores (one per position), the query rounded to f16, and four accumulators of 16 lanes
    /// of value sums.
    fn scratch_per_head(&self) -> usize {
        self.max_context + self.head_dim + 4 * LANES * self.head_dim
    }

    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let heads = positive_attr(ctx, OP, "num_heads")?;
        let kv_heads = positive_attr(ctx, OP, "kv_heads")?;
        let head_dim = positive_attr(ctx, OP, "head_dim")?;
        let max_context = positive_attr(ctx, OP, "max_context")?;
        let block_tokens = match ctx.attrs.int("block_tokens")? {
            None => KV_BLOCK_TOKENS,
            Some(_) => positive_attr(ctx, OP, "block_tokens")?,
        };
        if !heads.is_multiple_of(kv_heads) {
            return Err(OpError::attribute(
                OP,
                "kv_heads",
                format!("{kv_heads} does not divide num_heads {heads}"),
            ));
        }
        heads
            .checked_mul(head_dim)
            .and_then(|q| q.checked_mul(max_context))
            .and_then(|n| n.checked_mul(4))
            .ok_or_else(|| OpError::attribute(OP, "max_context", "sizes overflow"))?;
        Ok(Box::new(CachedAttention {
            heads,
            kv_heads,
            head_dim,
            max_context,
            block_tokens,
        }))
    }
}

/// Checks that `fact` is `(1, seq, width)` f32 (or int64 `(1, seq)` for positions).
fn check_input(fact: &Fact, index: usize, width: Option<usize>) -> OpResult<()> {
    let dtype = if width.is_some() {
        DType::F32
    } else {
        DType::I64
    };
    if fact.dtype != dtype {
        return Err(OpError::DType {
            op: OP.into(),
            index,
            expected: dtype.to_string(),
            actual: fact.dtype,
        });
    }
    let rank = if width.is_some() { 3 } else { 2 };
    let ok = fact.rank() == rank
        && fact.dims[0].known().is_none_or(|b| b == 1)
        && width.is_none_or(|w| fact.dims[2].known().is_none_or(|d| d == w));
    if !ok {
        return Err(OpError::shape(
            OP,
            format!(
                "input {index} must be (1, seq{}), got {:?}",
                width.map(|w| format!(", {w}")).unwrap_or_default(),
                fact.dims
            ),
        ));
    }
    Ok(())
}

impl Operator for CachedAttention {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [q, k, v, positions] = exact_inputs(OP, inputs)?;
        check_input(q, 0, Some(self.heads * self.head_dim))?;
        check_input(k, 1, Some(self.kv_heads * self.head_dim))?;
        check_input(v, 2, Some(self.kv_heads * self.head_dim))?;
        check_input(positions, 3, None)?;
        let seq: &Dim = &q.dims[1];
        Ok(vec![Fact::new(
            DType::F32,
            vec![
                Dim::Known(1),
                seq.clone(),
                Dim::Known(self.heads * self.head_dim),
            ],
        )])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, DType::F32, device)?;
        Ok(Box::new(CachedAttentionKernel(*self)))
    }

    /// Per head: a row of scores as long as the context, the query rounded to f16 and the
    /// lanes of the weighted sum of values.
    fn scratch_bytes(&self, _inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        Ok(self.heads * self.scratch_per_head() * std::mem::size_of::<f32>())
    }
}

#[derive(Debug)]
struct CachedAttentionKernel(CachedAttention);

impl Kernel for CachedAttentionKernel {
    fn run(&self, _io: &KernelIo<'_>) -> OpResult<()> {
        Err(OpError::kernel(
            OP,
            "needs its KV cache: run it in an execution context",
        ))
    }

    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            context_state: Some(self),
            ..Default::default()
        }
    }
}

impl UsesContextState for CachedAttentionKernel {
    fn new_state(&self) -> OpResult<Box<dyn ContextState>> {
        let a = &self.0;
        Ok(Box::new(KvCache::new(
            a.kv_heads * a.head_dim,
            a.block_tokens,
            a.max_context,
        )?))
    }

    fn run_with_state(&self, io: &KernelIo<'_>, state: &mut dyn ContextState) -> OpResult<()> {
        let a = &self.0;
        let cache = state
            .as_any_mut()
            .downcast_mut::<KvCache>()
            .ok_or_else(|| OpError::kernel(OP, "the context state is not a KV cache"))?;
        let (qw, kvw) = (a.heads * a.head_dim, a.kv_heads * a.head_dim);
        let positions = io.input(3).read::<i64>()?;
        let positions = positions
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "positions are not contiguous"))?;
        let seq = positions.len();
        let first = positions.first().copied().unwrap_or(0);
        let start = usize::try_from(first)
            .ok()
            .filter(|&p| p <= cache.len())
            .ok_or_else(|| {
                OpError::kernel(
                    OP,
                    format!("first position {first} is past the {} cached", cache.len()),
                )
            })?;
        if positions
            .iter()
            .enumerate()
            .any(|(t, &p)| p != first + t as i64)
        {
            return Err(OpError::kernel(OP, "positions must be consecutive"));
        }
        let (q_t, k_t, v_t, out_t) = (io.input(0), io.input(1), io.input(2), io.output(0));
        if q_t.numel() != seq * qw
            || k_t.numel() != seq * kvw
            || v_t.numel() != seq * kvw
            || out_t.numel() != seq * qw
        {
            return Err(OpError::shape(
                OP,
                format!(
                    "Q {:?}, K {:?}, V {:?} and the output {:?} do not fit {seq} positions",
                    q_t.dims(),
                    k_t.dims(),
                    v_t.dims(),
                    out_t.dims()
                ),
            ));
        }
        let contiguous = || OpError::kernel(OP, "an input or the output is not contiguous");
        let (q, k, v) = (q_t.read::<f32>()?, k_t.read::<f32>()?, v_t.read::<f32>()?);
        let (q, k, v) = (
            q.as_slice().ok_or_else(contiguous)?,
            k.as_slice().ok_or_else(contiguous)?,
            v.as_slice().ok_or_else(contiguous)?,
        );
        cache.truncate(start);
        cache.grow(seq)?;
        for t in 0..seq {
            cache.push(&k[t * kvw..(t + 1) * kvw], &v[t * kvw..(t + 1) * kvw])?;
        }

        let scratch = io
            .scratch
            .ok_or_else(|| OpError::kernel(OP, "no scratch for the scores"))?;
        let mut scratch = scratch.write_bytes(OP)?;
        let per_head = a.scratch_per_head();
        let scores = scratch_f32(scratch.bytes(), a.heads * per_head)?;
        let mut out_w = out_t.write::<f32>()?;
        let out = out_w.as_mut_slice().ok_or_else(contiguous)?;
        let out_ptr = OutPtr(out.as_mut_ptr());
        let cache = &*cache;
        let isa = Isa::detect();
        // Polled before every query row of every head (a long prompt attends over thousands of
        // positions per row); taken here, as the pool's workers have no run control. Rows left
        // once the run should stop are skipped, and the run fails at its next check.
        let stop = crate::run_control::stop_token();
        let head = |(h, scores): (usize, &mut [f32])| {
            for t in 0..seq {
                if stop.should_stop_at(t) {
                    return;
                }
                let row = &q[t * qw + h * a.head_dim..t * qw + (h + 1) * a.head_dim];
                // SAFETY: head h of row t is written by this task only (tasks split heads), and
                // the range lies inside the output (seq × heads·head_dim, checked above).
                let dst = unsafe { out_ptr.slice(t * qw + h * a.head_dim, a.head_dim) };
                attend_on(isa, a, cache, h, row, start + t, seq == 1, scores, dst);
            }
        };
        let work = seq * (start + seq) * qw;
        let parallel = io.threads > 1 && work >= PARALLEL_MIN_WORK;
        if parallel {
            crate::parallel::for_each_chunk_mut(scores, per_head, 1, |h, s| head((h, s)));
        } else {
            scores.chunks_mut(per_head).enumerate().for_each(head);
        }
        Ok(())
    }
}

/// The instruction set the inner loops run with. Both give the same numbers: the vector forms
/// in `attention_avx2` follow the portable code's order exactly.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Isa {
    Avx2,
    Portable,
}

impl Isa {
    fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            return Isa::Avx2;
        }
        Isa::Portable
    }
}

/// [`attend`] on `isa`.
#[allow(clippy::too_many_arguments)]
fn attend_on(
    isa: Isa,
    a: &CachedAttention,
    cache: &KvCache,
    h: usize,
    query: &[f32],
    pos: usize,
    decode: bool,
    scratch: &mut [f32],
    dst: &mut [f32],
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only detected when the CPU has AVX2, FMA and F16C.
        Isa::Avx2 => unsafe { attend_avx2(a, cache, h, query, pos, decode, scratch, dst) },
        _ => attend(Isa::Portable, a, cache, h, query, pos, decode, scratch, dst),
    }
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_avx2(
    a: &CachedAttention,
    cache: &KvCache,
    h: usize,
    query: &[f32],
    pos: usize,
    decode: bool,
    scratch: &mut [f32],
    dst: &mut [f32],
) {
    attend(Isa::Avx2, a, cache, h, query, pos, decode, scratch, dst)
}

/// Softmax-weighted values for one query row of head `h` at position `pos` (attending to
/// positions `0..=pos`), written to `dst`, in the summation order of a one-token chunk
/// (`decode`) or of a longer one. `scratch` holds the scores, the rounded query and the value
/// accumulators. `isa` must be available.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend(
    isa: Isa,
    a: &CachedAttention,
    cache: &KvCache,
    h: usize,
    query: &[f32],
    pos: usize,
    decode: bool,
    scratch: &mut [f32],
    dst: &mut [f32],
) {
    let avx2 = cfg!(target_arch = "x86_64") && isa == Isa::Avx2;
    let hd = a.head_dim;
    let group = a.heads / a.kv_heads;
    let g = h / group;
    let cols = g * hd..(g + 1) * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let (scores, rest) = scratch.split_at_mut(a.max_context);
    let (q16, lanes) = rest.split_at_mut(hd);
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: AVX2, FMA and F16C are available (`isa`).
        unsafe { simd::round_to_f16(query, q16) };
    }
    if !avx2 {
        for (r, &x) in q16.iter_mut().zip(query) {
            *r = f16_to_f32(f32_to_f16(x));
        }
    }
    // tinyBLAS takes a product only when its depth is a multiple of 16 and its rows of 4;
    // otherwise ggml falls back to `ggml_vec_dot_f16` even for several tokens.
    let kq_tiny = !decode && hd.is_multiple_of(LANES);
    let kqv_tiny = !decode && hd.is_multiple_of(4);
    let scores = &mut scores[..=pos];
    let mut max = f32::NEG_INFINITY;
    for (j, s) in scores.iter_mut().enumerate() {
        let key = &cache.key(j)[cols.clone()];
        let dot = match (avx2, kq_tiny) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above; the key row is as long as the query.
            (true, true) => unsafe { simd::dot_tiny(q16, key) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            (true, false) => unsafe { simd::dot_vec(q16, key) },
            (_, true) => dot_lanes(q16, key),
            (_, false) => ggml_math::dot_f16_order(hd, |i| q16[i], |i| f16_to_f32(key[i])),
        };
        *s = dot * scale;
        max = max.max(*s);
    }
    // exp and its sum as ggml's soft_max: the sum in f64, one 16-lane chunk at a time.
    let mut sum = 0.0f64;
    for chunk in scores.chunks_mut(LANES) {
        let mut part = [0.0f32; LANES];
        for (l, s) in part.iter_mut().zip(chunk.iter_mut()) {
            *s = v_expf(*s - max);
            *l = *s;
        }
        sum += f64::from(reduce16(&part));
    }
    let inv = (1.0 / sum) as f32;
    // Σ p_j · v_j per feature. Several tokens (tinyBLAS over positions): position j goes to
    // lane j % 16 of one accumulator. One token (`ggml_vec_dot_f16` over positions): to
    // accumulator j % 64 / 16, lane j % 16. ggml's key/value length is padded to a multiple of
    // 256 with zero weights, so no position is left for its f64 tail. Slot s of feature d is
    // `lanes[s·hd + d]`.
    let slots = if kqv_tiny { LANES } else { 4 * LANES };
    let lanes = &mut lanes[..slots * hd];
    lanes.fill(0.0);
    for (j, s) in scores.iter().enumerate() {
        let p = f16_to_f32(f32_to_f16(s * inv));
        let slot = (j % slots) * hd;
        let acc = &mut lanes[slot..slot + hd];
        let values = &cache.value(j)[cols.clone()];
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: as above.
            unsafe { simd::axpy_f16(acc, values, p) };
            continue;
        }
        for (acc, &v) in acc.iter_mut().zip(values) {
            *acc = f16_to_f32(v).mul_add(p, *acc);
        }
    }
    if !kqv_tiny {
        // Fold the four accumulators of each lane: (0 + 2) + (1 + 3), into slots 0..16.
        let (first, rest) = lanes.split_at_mut(LANES * hd);
        for (i, x) in first.iter_mut().enumerate() {
            *x = (*x + rest[LANES * hd + i]) + (rest[i] + rest[2 * LANES * hd + i]);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as above; `lanes` holds at least 16 slots of `hd`.
        unsafe { simd::fold_slots(lanes, dst) };
        return;
    }
    for (d, out) in dst.iter_mut().enumerate() {
        let part: [f32; LANES] = std::array::from_fn(|l| lanes[l * hd + d]);
        *out = reduce16(&part);
    }
}

/// `Σ q·k` as tinyBLAS computes it: lane `i % 16` accumulates with fused multiply-adds, then
/// the lanes are summed as `_mm512_reduce_add_ps` does. `q.len()` is a multiple of 16.
#[inline(always)]
fn dot_lanes(q: &[f32], k: &[u16]) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (qs, ks) in q.chunks_exact(LANES).zip(k.chunks_exact(LANES)) {
        for l in 0..LANES {
            acc[l] = qs[l].mul_add(f16_to_f32(ks[l]), acc[l]);
        }
    }
    reduce16(&acc)
}

/// `count` f32 carved from the scratch bytes.
fn scratch_f32(bytes: &mut [u8], count: usize) -> OpResult<&mut [f32]> {
    let skip = bytes.as_ptr().align_offset(std::mem::align_of::<f32>());
    let size = count * std::mem::size_of::<f32>();
    if skip == usize::MAX || skip + size > bytes.len() {
        return Err(OpError::kernel(
            OP,
            format!(
                "scratch of {} bytes holds fewer than {count} scores",
                bytes.len()
            ),
        ));
    }
    let bytes = &mut bytes[skip..skip + size];
    // SAFETY: aligned for f32, exactly `count` of them, any bit pattern is a valid f32, and the
    // mutable borrow of the bytes passes to the returned slice.
    Ok(unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<f32>(), count) })
}

/// The output, shared by the head tasks of one call.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: every task writes a disjoint set of elements (its own heads), and the call does not
// return before every task has finished.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `at..at + len` must be inside the output and written by no other task meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, at: usize, len: usize) -> &mut [f32] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(at), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0) * 2.0)
            .collect()
    }

    /// Softmax attention in f64 on the cache's f16 values, for one head and position.
    fn reference(
        a: &CachedAttention,
        cache: &KvCache,
        h: usize,
        q: &[f32],
        pos: usize,
    ) -> Vec<f64> {
        let hd = a.head_dim;
        let g = h / (a.heads / a.kv_heads);
        let cols = g * hd..(g + 1) * hd;
        let scale = 1.0 / (hd as f64).sqrt();
        let scores: Vec<f64> = (0..=pos)
            .map(|j| {
                let k = &cache.key(j)[cols.clone()];
                q.iter()
                    .zip(k)
                    .map(|(&q, &k)| f64::from(q) * f64::from(f16_to_f32(k)))
                    .sum::<f64>()
                    * scale
            })
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        (0..hd)
            .map(|d| {
                (0..=pos)
                    .map(|j| e[j] / sum * f64::from(f16_to_f32(cache.value(j)[cols.start + d])))
                    .sum()
            })
            .collect()
    }

    /// Head sizes that are and are not multiples of the vector widths (8, 16, 64), one-token
    /// (decode) and several-token orders: the AVX2 loops give the portable code's bits, and both
    /// are softmax attention within f16 rounding.
    #[test]
    fn vector_and_portable_attention_agree_bit_for_bit_and_with_a_plain_reference() {
        for hd in [4, 8, 20, 40, 64, 72, 80] {
            let a = CachedAttention {
                heads: 4,
                kv_heads: 2,
                head_dim: hd,
                max_context: 96,
                block_tokens: 16,
            };
            let kvw = a.kv_heads * hd;
            let mut cache = KvCache::new(kvw, a.block_tokens, a.max_context).unwrap();
            let len = 70;
            cache.grow(len).unwrap();
            for t in 0..len {
                cache.push(&values(kvw, t), &values(kvw, t + 500)).unwrap();
            }
            let mut scratch = vec![0.0f32; a.scratch_per_head()];
            for h in 0..a.heads {
                let q = values(hd, 1000 + h);
                for (pos, decode) in [(0, true), (len - 1, true), (17, false), (len - 1, false)] {
                    let mut portable = vec![0.0f32; hd];
                    attend(
                        Isa::Portable,
                        &a,
                        &cache,
                        h,
                        &q,
                        pos,
                        decode,
                        &mut scratch,
                        &mut portable,
                    );
                    let want = reference(&a, &cache, h, &q, pos);
                    for (d, (&got, &want)) in portable.iter().zip(&want).enumerate() {
                        assert!(
                            (f64::from(got) - want).abs() <= 2e-3 * (1.0 + want.abs()),
                            "hd {hd} head {h} pos {pos} decode {decode} feature {d}: {got} vs {want}"
                        );
                    }
                    if Isa::detect() == Isa::Avx2 {
                        let mut vector = vec![0.0f32; hd];
                        attend_on(
                            Isa::Avx2,
                            &a,
                            &cache,
                            h,
                            &q,
                            pos,
                            decode,
                            &mut scratch,
                            &mut vector,
                        );
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&vector),
                            bits(&portable),
                            "hd {hd} pos {pos} decode {decode}"
                        );
                    }
                }
            }
        }
    }
}
