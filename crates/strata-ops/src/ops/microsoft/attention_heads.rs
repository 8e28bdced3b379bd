//! The per-head core shared by com.microsoft Attention, MultiHeadAttention and
//! GroupQueryAttention, in f32: for every (batch, query head) block, scores = scale · Q·Kᵀ
//! (one GEMM through strides, K never transposed in memory), the operator's additive bias per
//! score row (masks, causal, attention bias), a max-subtracted softmax (optionally with an
//! attention sink in its denominator), and context = P·V (one
//! GEMM) into a head-major buffer. Blocks run in parallel; query head `h` reads key/value head
//! `h / (q_heads / kv_heads)`.

use crate::kernels::gemm;
use crate::support::numeric::WideFloat;
use crate::{OpError, OpResult};

/// Where element `(b, h, s, d)` of Q, K or V lives: `offset + b·batch + h·head + s·seq + d`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadView<'a> {
    pub data: &'a [f32],
    pub offset: usize,
    pub batch: usize,
    pub head: usize,
    pub seq: usize,
}

impl<'a> HeadView<'a> {
    /// A contiguous `(B, heads, len, size)` buffer.
    pub(crate) fn head_major(data: &'a [f32], heads: usize, len: usize, size: usize) -> Self {
        HeadView {
            data,
            offset: 0,
            batch: heads * len * size,
            head: len * size,
            seq: size,
        }
    }

    /// Heads packed in rows of `row` elements (`(B, len, row)`), this operand's heads starting at
    /// column `offset` and `size` apart.
    pub(crate) fn packed(
        data: &'a [f32],
        offset: usize,
        len: usize,
        row: usize,
        size: usize,
    ) -> Self {
        HeadView {
            data,
            offset,
            batch: len * row,
            head: size,
            seq: row,
        }
    }

    fn start(&self, b: usize, h: usize) -> usize {
        self.offset + b * self.batch + h * self.head
    }
}

/// The sizes of one call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadShape {
    pub batch: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub q_len: usize,
    pub kv_len: usize,
    pub head_size: usize,
    pub v_head_size: usize,
}

impl HeadShape {
    /// Scratch elements for the scores.
    pub(crate) fn scores_len(&self) -> usize {
        self.batch * self.q_heads * self.q_len * self.kv_len
    }

    /// Elements of the head-major context `(B, q_heads, q_len, v_head_size)`.
    pub(crate) fn context_len(&self) -> usize {
        self.batch * self.q_heads * self.q_len * self.v_head_size
    }
}

/// Adds the bias of score row `(b, h, i)` (length `kv_len`) in place.
pub(crate) type RowBias<'a> = dyn Fn(usize, usize, usize, &mut [f32]) + Sync + 'a;

/// Checks that every element a view addresses lies inside its data.
fn check_view(
    what: &str,
    v: &HeadView<'_>,
    s: &HeadShape,
    heads: usize,
    len: usize,
    size: usize,
) -> OpResult<()> {
    if s.batch == 0 || heads == 0 || len == 0 || size == 0 {
        return Ok(());
    }
    let last = v.start(s.batch - 1, heads - 1) + (len - 1) * v.seq + size;
    if last > v.data.len() {
        return Err(OpError::kernel(
            "Attention",
            format!(
                "{what} addresses {last} elements, its buffer has {}",
                v.data.len()
            ),
        ));
    }
    Ok(())
}

/// Runs every block; `context` is `(B, q_heads, q_len, v_head_size)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend_heads(
    s: &HeadShape,
    q: HeadView<'_>,
    k: HeadView<'_>,
    v: HeadView<'_>,
    scale: f32,
    bias: &RowBias<'_>,
    scores: &mut [f32],
    context: &mut [f32],
    threads: usize,
) -> OpResult<()> {
    attend_heads_with_sink(s, q, k, v, scale, bias, None, scores, context, threads)
}

/// The logit of query head `h`'s extra softmax term ("attention sink"): each row's softmax
/// becomes `exp(x − max) / (Σ exp(x − max) + exp(sink(h) − max))`.
pub(crate) type Sink<'a> = dyn Fn(usize) -> f32 + Sync + 'a;

/// [`attend_heads`] with an optional attention sink per query head (GroupQueryAttention's
/// `head_sink` and `smooth_softmax`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attend_heads_with_sink(
    s: &HeadShape,
    q: HeadView<'_>,
    k: HeadView<'_>,
    v: HeadView<'_>,
    scale: f32,
    bias: &RowBias<'_>,
    sink: Option<&Sink<'_>>,
    scores: &mut [f32],
    context: &mut [f32],
    threads: usize,
) -> OpResult<()> {
    if s.kv_heads == 0 || !s.q_heads.is_multiple_of(s.kv_heads) {
        return Err(OpError::shape(
            "Attention",
            format!(
                "{} query heads do not group over {} key/value heads",
                s.q_heads, s.kv_heads
            ),
        ));
    }
    check_view("Q", &q, s, s.q_heads, s.q_len, s.head_size)?;
    check_view("K", &k, s, s.kv_heads, s.kv_len, s.head_size)?;
    check_view("V", &v, s, s.kv_heads, s.kv_len, s.v_head_size)?;
    let (score_len, ctx_len) = (s.q_len * s.kv_len, s.q_len * s.v_head_size);
    if scores.len() < s.scores_len() || context.len() != s.context_len() {
        return Err(OpError::kernel(
            "Attention",
            "scratch or context buffer too small",
        ));
    }
    if ctx_len == 0 {
        return Ok(());
    }
    if score_len == 0 {
        context.fill(0.0);
        return Ok(());
    }
    let group = s.q_heads / s.kv_heads;
    let blocks = s.batch * s.q_heads;
    let min_len = blocks.div_ceil(threads.max(1));
    crate::parallel::try_for_each_chunk_pair_mut(
        (&mut scores[..s.scores_len()], score_len),
        (context, ctx_len),
        min_len,
        |block, p, ctx| -> OpResult<()> {
            let (b, h) = (block / s.q_heads, block % s.q_heads);
            let kvh = h / group;
            let (qs, ks, vs) = (q.start(b, h), k.start(b, kvh), v.start(b, kvh));
            // scores (q_len × kv_len) = scale · Q (q_len × d) · Kᵀ, Kᵀ through strides.
            gemm(
                s.q_len,
                s.kv_len,
                s.head_size,
                &q.data[qs..],
                (q.seq as isize, 1),
                &k.data[ks..],
                (1, k.seq as isize),
                p,
                (s.kv_len as isize, 1),
                scale,
                0.0,
                1,
            )?;
            for (i, row) in p.chunks_exact_mut(s.kv_len).enumerate() {
                bias(b, h, i, row);
                softmax(row, sink.map(|f| f(h)));
            }
            gemm(
                s.q_len,
                s.v_head_size,
                s.kv_len,
                p,
                (s.kv_len as isize, 1),
                &v.data[vs..],
                (v.seq as isize, 1),
                ctx,
                (s.v_head_size as isize, 1),
                1.0,
                0.0,
                1,
            )?;
            Ok(())
        },
    )
}

/// Softmax of a row in place, with an optional sink logit in the denominator; a row that is
/// all -inf becomes zeros.
fn softmax(row: &mut [f32], sink: Option<f32>) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    if max == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let mut sum = 0.0f32;
    for x in row.iter_mut() {
        let d = *x - max;
        // Terms below e^-87 (masked keys: -inf or the -10000 filter) are 0, not the subnormals
        // `exp` would give: those would slow `exp` itself and every later multiply (P·V) many
        // times over. The clamp keeps `exp` in the normal range; the select drops the term.
        let e = d.max(-87.0).exp_v();
        let e = if d < -87.0 { 0.0 } else { e };
        *x = e;
        sum += e;
    }
    if let Some(logit) = sink {
        sum += (logit - max).exp_v();
    }
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|x| *x *= inv);
}

/// Copies a head-major context `(B, heads, len, size)` into `(B, len, heads · size)`.
pub(crate) fn context_to_rows(
    context: &[f32],
    out: &mut [f32],
    heads: usize,
    len: usize,
    size: usize,
) {
    let row = heads * size;
    for (b_out, b_ctx) in out
        .chunks_exact_mut(len * row)
        .zip(context.chunks_exact(heads * len * size))
    {
        for h in 0..heads {
            for i in 0..len {
                let src = &b_ctx[(h * len + i) * size..][..size];
                b_out[i * row + h * size..][..size].copy_from_slice(src);
            }
        }
    }
}
