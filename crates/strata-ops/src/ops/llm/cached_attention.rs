//! CachedAttention: grouped-query causal self-attention over the context's KV cache. Inputs
//! `Q (1, seq, heads·head_dim)`, `K` and `V (1, seq, kv_heads·head_dim)` (RoPE already applied)
//! and `positions (1, seq)` int64, consecutive; output `(1, seq, heads·head_dim)`. The new keys
//! and values are appended to the cache at `positions` (a first position below the cache's
//! length rewinds it there); query `t` attends to every cached position up to its own. Query
//! head `h` reads KV head `h / (heads / kv_heads)`, as llama.cpp does.
//!
//! The cache is per-context state ([`crate::UsesContextState`]): each context gets its own
//! [`KvCache`] when it is created, so many conversations share one plan.

use rayon::prelude::*;
use strata_core::{DType, Device};

use super::kv_cache::{KvCache, KV_BLOCK_TOKENS};
use super::positive_attr;
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
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let heads = positive_attr(ctx, OP, "num_heads")?;
        let kv_heads = positive_attr(ctx, OP, "kv_heads")?;
        let head_dim = positive_attr(ctx, OP, "head_dim")?;
        let max_context = positive_attr(ctx, OP, "max_context")?;
        let block_tokens = match ctx.attrs.int("block_tokens")? {
            None => KV_BLOCK_TOKENS,
            Some(_) => positive_attr(ctx, OP, "block_tokens")?,
        };
        if heads % kv_heads != 0 {
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
    let dtype = if width.is_some() { DType::F32 } else { DType::I64 };
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
            vec![Dim::Known(1), seq.clone(), Dim::Known(self.heads * self.head_dim)],
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

    /// One row of attention scores per head, as long as the context.
    fn scratch_bytes(&self, _inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        Ok(self.heads * self.max_context * std::mem::size_of::<f32>())
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
        if positions.iter().enumerate().any(|(t, &p)| p != first + t as i64) {
            return Err(OpError::kernel(OP, "positions must be consecutive"));
        }
        let (q_t, k_t, v_t, out_t) = (io.input(0), io.input(1), io.input(2), io.output(0));
        if q_t.numel() != seq * qw || k_t.numel() != seq * kvw || v_t.numel() != seq * kvw
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
        let scores = scratch_f32(scratch.bytes(), a.heads * a.max_context)?;
        let mut out_w = out_t.write::<f32>()?;
        let out = out_w.as_mut_slice().ok_or_else(contiguous)?;
        let out_ptr = OutPtr(out.as_mut_ptr());
        let cache = &*cache;
        let head = |(h, scores): (usize, &mut [f32])| {
            for t in 0..seq {
                let row = &q[t * qw + h * a.head_dim..t * qw + (h + 1) * a.head_dim];
                // SAFETY: head h of row t is written by this task only (tasks split heads), and
                // the range lies inside the output (seq × heads·head_dim, checked above).
                let dst = unsafe { out_ptr.slice(t * qw + h * a.head_dim, a.head_dim) };
                attend(a, cache, h, row, start + t, scores, dst);
            }
        };
        let work = seq * (start + seq) * qw;
        let parallel = io.threads > 1 && work >= PARALLEL_MIN_WORK;
        if parallel {
            scores.par_chunks_mut(a.max_context).enumerate().for_each(head);
        } else {
            scores.chunks_mut(a.max_context).enumerate().for_each(head);
        }
        Ok(())
    }
}

/// Softmax-weighted values for one query row of head `h` at position `pos` (attending to
/// positions `0..=pos`), written to `dst`.
fn attend(
    a: &CachedAttention,
    cache: &KvCache,
    h: usize,
    query: &[f32],
    pos: usize,
    scores: &mut [f32],
    dst: &mut [f32],
) {
    let group = a.heads / a.kv_heads;
    let g = h / group;
    let cols = g * a.head_dim..(g + 1) * a.head_dim;
    let scale = 1.0 / (a.head_dim as f32).sqrt();
    let scores = &mut scores[..=pos];
    let mut max = f32::NEG_INFINITY;
    for (j, s) in scores.iter_mut().enumerate() {
        *s = dot(query, &cache.key(j)[cols.clone()]) * scale;
        max = max.max(*s);
    }
    let mut sum = 0.0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    let inv = 1.0 / sum;
    dst.fill(0.0);
    for (j, &s) in scores.iter().enumerate() {
        let p = s * inv;
        for (d, &v) in dst.iter_mut().zip(&cache.value(j)[cols.clone()]) {
            *d += p * v;
        }
    }
}

/// A dot product in eight lanes, which the compiler vectorizes.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `count` f32 carved from the scratch bytes.
fn scratch_f32(bytes: &mut [u8], count: usize) -> OpResult<&mut [f32]> {
    let skip = bytes.as_ptr().align_offset(std::mem::align_of::<f32>());
    let size = count * std::mem::size_of::<f32>();
    if skip == usize::MAX || skip + size > bytes.len() {
        return Err(OpError::kernel(
            OP,
            format!("scratch of {} bytes holds fewer than {count} scores", bytes.len()),
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
