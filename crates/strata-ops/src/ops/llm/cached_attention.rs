//! CachedAttention: grouped-query causal self-attention over the context's KV cache. Inputs
//! `Q (1, seq, heads·head_dim)`, `K` and `V (1, seq, kv_heads·head_dim)` (RoPE already applied)
//! and `positions (1, seq)` int64, consecutive; output `(1, seq, heads·head_dim)`. The new keys
//! and values are appended to the cache at `positions` (a first position below the cache's
//! length rewinds it there); query `t` attends to every cached position up to its own. Query
//! head `h` reads KV head `h / (heads / kv_heads)`, as llama.cpp does.
//!
//! The numbers follow llama.cpp's attention without flash attention: keys and values cached as
//! f16, the query rounded to f16 before its dot with the keys, softmax in f32 with a wide sum,
//! and the probabilities rounded to f16 before they weight the values (sums in f32).
//!
//! The cache is per-context state ([`crate::UsesContextState`]): each context gets its own
//! [`KvCache`] when it is created, so many conversations share one plan.

use strata_core::{DType, Device};

use super::kv_cache::{KvCache, KV_BLOCK_TOKENS};
use super::positive_attr;
use crate::support::f16_bits::{f16_to_f32, f32_to_f16};
use crate::support::inputs::exact_inputs;
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
    /// Scores (one per position), the query rounded to f16, and 16 lanes of value sums.
    fn scratch_per_head(&self) -> usize {
        self.max_context + self.head_dim + LANES * self.head_dim
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
        if device != Device::Cpu {
            return Err(OpError::no_kernel(OP, DType::F32, device));
        }
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
        let isa = Fma::detect();
        let head = |(h, scores): (usize, &mut [f32])| {
            for t in 0..seq {
                let row = &q[t * qw + h * a.head_dim..t * qw + (h + 1) * a.head_dim];
                // SAFETY: head h of row t is written by this task only (tasks split heads), and
                // the range lies inside the output (seq × heads·head_dim, checked above).
                let dst = unsafe { out_ptr.slice(t * qw + h * a.head_dim, a.head_dim) };
                attend_on(isa, a, cache, h, row, start + t, scores, dst);
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

/// Whether the CPU fuses multiply-adds: `f32::mul_add` is then one instruction instead of a
/// call to the C library's `fmaf` (the same result either way: both are exactly rounded).
#[derive(Clone, Copy)]
enum Fma {
    Native,
    Library,
}

impl Fma {
    fn detect() -> Fma {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2")
        {
            return Fma::Native;
        }
        Fma::Library
    }
}

/// [`attend`] compiled for the CPU's multiply-add.
#[allow(clippy::too_many_arguments)]
fn attend_on(
    isa: Fma,
    a: &CachedAttention,
    cache: &KvCache,
    h: usize,
    query: &[f32],
    pos: usize,
    scratch: &mut [f32],
    dst: &mut [f32],
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Fma::Native` is only detected when the CPU has AVX2 and FMA.
        Fma::Native => unsafe { attend_fma(a, cache, h, query, pos, scratch, dst) },
        _ => attend(a, cache, h, query, pos, scratch, dst),
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_fma(
    a: &CachedAttention,
    cache: &KvCache,
    h: usize,
    query: &[f32],
    pos: usize,
    scratch: &mut [f32],
    dst: &mut [f32],
) {
    attend(a, cache, h, query, pos, scratch, dst)
}

/// Softmax-weighted values for one query row of head `h` at position `pos` (attending to
/// positions `0..=pos`), written to `dst`. `scratch` holds the scores, the rounded query and the
/// value lanes.
#[inline(always)]
fn attend(
    a: &CachedAttention,
    cache: &KvCache,
    h: usize,
    query: &[f32],
    pos: usize,
    scratch: &mut [f32],
    dst: &mut [f32],
) {
    let hd = a.head_dim;
    let group = a.heads / a.kv_heads;
    let g = h / group;
    let cols = g * hd..(g + 1) * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let (scores, rest) = scratch.split_at_mut(a.max_context);
    let (q16, lanes) = rest.split_at_mut(hd);
    for (r, &x) in q16.iter_mut().zip(query) {
        *r = f16_to_f32(f32_to_f16(x));
    }
    let scores = &mut scores[..=pos];
    let mut max = f32::NEG_INFINITY;
    for (j, s) in scores.iter_mut().enumerate() {
        *s = dot_lanes(q16, &cache.key(j)[cols.clone()]) * scale;
        max = max.max(*s);
    }
    // exp and its sum as ggml's soft_max: the sum in f64, one 16-lane chunk at a time.
    let mut sum = 0.0f64;
    for chunk in scores.chunks_mut(LANES) {
        let mut part = [0.0f32; LANES];
        for (l, s) in part.iter_mut().zip(chunk.iter_mut()) {
            *s = expf(*s - max);
            *l = *s;
        }
        sum += f64::from(reduce(&part));
    }
    let inv = (1.0 / sum) as f32;
    // Σ p_j · v_j per feature: position j goes to lane j % 16 (tinyBLAS over positions), the
    // lanes of a feature summed at the end.
    lanes.fill(0.0);
    for (j, s) in scores.iter().enumerate() {
        let p = f16_to_f32(f32_to_f16(s * inv));
        let lane = &mut lanes[(j % LANES) * hd..(j % LANES + 1) * hd];
        for (acc, &v) in lane.iter_mut().zip(&cache.value(j)[cols.clone()]) {
            *acc = f16_to_f32(v).mul_add(p, *acc);
        }
    }
    for (d, out) in dst.iter_mut().enumerate() {
        let mut part = [0.0f32; LANES];
        for (l, v) in part.iter_mut().enumerate() {
            *v = lanes[l * hd + d];
        }
        *out = reduce(&part);
    }
}

/// The vector width of llama.cpp's x86 AVX-512 build, whose summation order the dot products and
/// sums here follow (so greedy tokens match it, not only within rounding).
const LANES: usize = 16;

/// `Σ q·k` as tinyBLAS computes it: lane `i % 16` accumulates with fused multiply-adds, then
/// the lanes are summed as `_mm512_reduce_add_ps` does.
#[inline(always)]
fn dot_lanes(q: &[f32], k: &[u16]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (qc, kc) = (q.chunks_exact(LANES), k.chunks_exact(LANES));
    let (qr, kr) = (qc.remainder(), kc.remainder());
    for (qs, ks) in qc.zip(kc) {
        for l in 0..LANES {
            acc[l] = qs[l].mul_add(f16_to_f32(ks[l]), acc[l]);
        }
    }
    for (l, (&x, &y)) in qr.iter().zip(kr).enumerate() {
        acc[l] = x.mul_add(f16_to_f32(y), acc[l]);
    }
    reduce(&acc)
}

/// The sum of 16 lanes in `_mm512_reduce_add_ps`'s order (halves, then quarters, then pairs).
#[inline(always)]
fn reduce(v: &[f32; LANES]) -> f32 {
    let mut h = [0.0f32; 8];
    for i in 0..8 {
        h[i] = v[i] + v[i + 8];
    }
    let q = [h[0] + h[4], h[1] + h[5], h[2] + h[6], h[3] + h[7]];
    (q[0] + q[2]) + (q[1] + q[3])
}

/// `e^x` as ggml's vectorized `ggml_v_expf` computes it (a degree-5 polynomial after range
/// reduction, from ARM's optimized routines), so softmax weights are llama.cpp's.
#[inline(always)]
fn expf(x: f32) -> f32 {
    if x == f32::NEG_INFINITY {
        return 0.0;
    }
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // log2(e)
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),                  // 0x1.7f7d1cp-20
        (-n).mul_add(f32::from_bits(0x3f31_7200), x), // 0x1.62e4p-1
    );
    let u = b * b;
    let j = f32::from_bits(0x3c07_2010) // 0x1.0e4020p-7
        .mul_add(b, f32::from_bits(0x3d2b_9f17)) // 0x1.573e2ep-5
        .mul_add(
            u,
            f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)),
        ) // 0x1.555e66p-3, 0x1.fffdb6p-2
        .mul_add(u, f32::from_bits(0x3f7f_fff6).mul_add(b, 1.0)); // 0x1.ffffecp-1
    if n.abs() > 126.0 {
        // Far outside the softmax range (scores minus their max are <= 0): plain exp.
        return x.exp();
    }
    j * 2f32.powi(n as i32)
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
