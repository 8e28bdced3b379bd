//! com.microsoft GroupQueryAttention: causal attention with `kv_num_heads` key/value heads shared
//! by groups of the `num_heads` query heads, and a KV cache, in f32, as onnxruntime's CPU kernel
//! computes it:
//! - Q `(B, S, N·H)`, K and V `(B, S, KV·H)`, or all three packed in `query (B, S, (N + 2·KV)·H)`;
//! - `past_key`/`past_value (B, KV, P, H)`; `present_key`/`present_value (B, KV, max(P, T), H)`
//!   (T = `total_sequence_length`) hold the first `past_b` cached rows and the S new ones after
//!   them, zeros elsewhere;
//! - per batch entry `total_b = seqlens_k[b] + 1` keys; `past_b = 0` for a first prompt (`S == T`,
//!   right padding allowed), else `total_b − S`; query row `i` sees keys `< past_b + i + 1`
//!   (all `total_b` with `causal = 0`), and only the last `local_window_size` of them when set;
//! - `do_rotary`: Q and the new K rotated (half-split or `rotary_interleaved`) with rows of
//!   `cos_cache`/`sin_cache` at position `past_b + i`, before K is cached;
//! - `softcap` (`c · tanh(x / c)` on the scaled scores), `attention_bias (B or 1, N or 1, S, T)`
//!   added after it, and an attention sink per head (`head_sink`, or 0 with `smooth_softmax`).
//!
//! Refused: quantized caches, `sliding_window_cache`, `query_seqlens`, `position_ids`, the Q/K
//! norms and the `output_qk` output.

use strata_core::{DType, Device};

use super::access::{contiguous, contiguous_mut, optional_slice, read_optional, write_optional};
use super::attention_heads::{attend_heads_with_sink, context_to_rows, HeadShape, HeadView};
use super::multi_head_attention::bias_strides;
use crate::ops::attention::rotary_embedding::rotate_row;
use crate::support::inputs::{optional, required};
use crate::support::scratch::{carve, scratch_as};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "GroupQueryAttention";

#[derive(Debug, Clone)]
pub(crate) struct GroupQueryAttention {
    num_heads: usize,
    kv_heads: usize,
    scale: f32,
    softcap: f32,
    rotary: bool,
    interleaved: bool,
    /// Keys a query sees at most (its own included); 0 when unlimited.
    window: usize,
    smooth_softmax: bool,
    causal: bool,
}

pub(crate) fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    let a = ctx.attrs;
    let positive = |name: &str| {
        usize::try_from(a.int_or(name, 0)?)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| OpError::attribute(OP, name, "must be positive"))
    };
    let (num_heads, kv_heads) = (positive("num_heads")?, positive("kv_num_heads")?);
    if !num_heads.is_multiple_of(kv_heads) {
        return Err(OpError::attribute(
            OP,
            "kv_num_heads",
            format!("{kv_heads} does not divide num_heads {num_heads}"),
        ));
    }
    for (name, what) in [
        ("qk_output", "the output_qk output"),
        ("sliding_window_cache", "a window-sized cache"),
    ] {
        if a.int_or(name, 0)? != 0 {
            return Err(OpError::attribute(
                OP,
                name,
                format!("{what} is not supported"),
            ));
        }
    }
    for name in ["k_quant_type", "v_quant_type"] {
        let v = a.string_or(name, "NONE")?;
        if v != "NONE" {
            return Err(OpError::attribute(
                OP,
                name,
                format!("quantized KV cache ({v}) is not supported"),
            ));
        }
    }
    if ctx.num_outputs > 3 {
        return Err(OpError::attribute(
            OP,
            "output_qk",
            "the output_qk output is not supported",
        ));
    }
    let window = a.int_or("local_window_size", -1)?;
    Ok(Box::new(GroupQueryAttention {
        num_heads,
        kv_heads,
        scale: a.float_or("scale", 0.0)?,
        softcap: a.float_or("softcap", 0.0)?,
        rotary: a.int_or("do_rotary", 0)? != 0,
        interleaved: a.int_or("rotary_interleaved", 0)? != 0,
        window: usize::try_from(window).unwrap_or(0),
        smooth_softmax: a.int_or("smooth_softmax", 0)? == 1,
        causal: a.int_or("causal", 1)? != 0,
    }))
}

/// The sizes of one call.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    batch: usize,
    seq: usize,
    head: usize,
    packed: bool,
    /// Rows of each past head (0 without a past).
    past_rows: usize,
}

impl GroupQueryAttention {
    fn sizes(
        &self,
        q: &[usize],
        k: Option<&[usize]>,
        v: Option<&[usize]>,
        past: Option<(&[usize], &[usize])>,
    ) -> OpResult<Sizes> {
        let (n, kv) = (self.num_heads, self.kv_heads);
        let err = |m: String| OpError::shape(OP, m);
        let &[batch, seq, width] = q else {
            return Err(err(format!("query {q:?} must be (batch, seq, hidden)")));
        };
        let (head, packed) = match (k, v) {
            (None, None) if width.is_multiple_of(n + 2 * kv) => (width / (n + 2 * kv), true),
            (Some(&[kb, ks, kw]), Some(&[vb, vs, vw]))
                if width.is_multiple_of(n)
                    && kb == batch
                    && vb == batch
                    && ks == seq
                    && vs == seq
                    && kw == kv * (width / n)
                    && vw == kw =>
            {
                (width / n, false)
            }
            _ => {
                return Err(err(format!(
                    "query {q:?}, key {k:?}, value {v:?}: need (B, S, {n}·H) and two (B, S, {kv}·H), or packed (B, S, {}·H)",
                    n + 2 * kv
                )))
            }
        };
        if head == 0 {
            return Err(err("head size is 0".into()));
        }
        let past_rows = match past {
            None => 0,
            Some((&[pb, ph, p, pd], &[vb, vh, vp, vd]))
                if pb == batch
                    && vb == batch
                    && ph == kv
                    && vh == kv
                    && vp == p
                    && pd == head
                    && vd == head =>
            {
                p
            }
            Some((pk, pv)) => {
                return Err(err(format!(
                    "past_key {pk:?} / past_value {pv:?} must be ({batch}, {kv}, P, {head})"
                )))
            }
        };
        Ok(Sizes {
            batch,
            seq,
            head,
            packed,
            past_rows,
        })
    }

    /// Rows of each present head: max(P, T).
    fn present_rows(s: &Sizes, total: usize) -> usize {
        s.past_rows.max(total)
    }
}

/// The scalar total_sequence_length from a constant fact, if known.
fn total_of(f: &Fact) -> OpResult<Option<usize>> {
    let Some(v) = &f.value else { return Ok(None) };
    let vals = crate::fact::int_values(OP, v)?;
    match vals.as_slice() {
        [t] => usize::try_from(*t)
            .map(Some)
            .map_err(|_| OpError::shape(OP, format!("total_sequence_length {t} is negative"))),
        _ => Err(OpError::shape(
            OP,
            "total_sequence_length must be one value",
        )),
    }
}

impl Operator for GroupQueryAttention {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let q = required(OP, inputs, 0)?;
        for index in [0, 1, 2, 3, 4, 7, 8, 10, 11] {
            if let Some(f) = optional(inputs, index).filter(|f| f.dtype != DType::F32) {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: "float32".into(),
                    actual: f.dtype,
                });
            }
        }
        for index in [5, 6] {
            let f = required(OP, inputs, index)?;
            if f.dtype != DType::I32 {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: "int32".into(),
                    actual: f.dtype,
                });
            }
        }
        for (index, what) in [
            (9, "position_ids"),
            (12, "k_scale"),
            (13, "v_scale"),
            (14, "q_norm_weight"),
            (15, "k_norm_weight"),
            (16, "query_seqlens"),
        ] {
            if optional(inputs, index).is_some() {
                return Err(OpError::shape(OP, format!("{what} is not supported")));
            }
        }
        if self.rotary && (optional(inputs, 7).is_none() || optional(inputs, 8).is_none()) {
            return Err(OpError::shape(
                OP,
                "do_rotary needs cos_cache and sin_cache",
            ));
        }
        let concrete = |i: usize| optional(inputs, i).map(|f| f.concrete());
        let (qd, kd, vd, pk, pv) = (
            q.concrete(),
            concrete(1),
            concrete(2),
            concrete(3),
            concrete(4),
        );
        let known = |x: &Option<Option<Vec<usize>>>| !matches!(x, Some(None));
        let total = total_of(required(OP, inputs, 6)?)?;
        let n = self.num_heads;
        if let (Some(qd), true) = (qd, [&kd, &vd, &pk, &pv].iter().all(|x| known(x))) {
            let flat = |x: Option<Option<Vec<usize>>>| x.flatten();
            let (kd, vd, pk, pv) = (flat(kd), flat(vd), flat(pk), flat(pv));
            let past = match (&pk, &pv) {
                (Some(a), Some(b)) => Some((a.as_slice(), b.as_slice())),
                (None, None) => None,
                _ => return Err(OpError::shape(OP, "past_key and past_value go together")),
            };
            let s = self.sizes(&qd, kd.as_deref(), vd.as_deref(), past)?;
            let rows = total.map_or(Dim::Unknown, |t| Dim::Known(Self::present_rows(&s, t)));
            let present = vec![
                Dim::Known(s.batch),
                Dim::Known(self.kv_heads),
                rows,
                Dim::Known(s.head),
            ];
            return Ok(vec![
                Fact::known(DType::F32, &[s.batch, s.seq, n * s.head]),
                Fact::new(DType::F32, present.clone()),
                Fact::new(DType::F32, present),
            ]);
        }
        let (b, s) = (
            q.dims.first().cloned().unwrap_or(Dim::Unknown),
            q.dims.get(1).cloned().unwrap_or(Dim::Unknown),
        );
        let present = vec![
            b.clone(),
            Dim::Known(self.kv_heads),
            Dim::Unknown,
            Dim::Unknown,
        ];
        Ok(vec![
            Fact::new(DType::F32, vec![b, s, Dim::Unknown]),
            Fact::new(DType::F32, present.clone()),
            Fact::new(DType::F32, present),
        ])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        // Sized from the inputs: present may be left out of the node.
        let out = self.infer(inputs)?;
        let (Some(q), Some(present)) = (inputs[0].concrete(), out[1].concrete()) else {
            return Ok(0);
        };
        let (n, kv) = (self.num_heads, self.kv_heads);
        let (batch, seq) = (q[0], q[1]);
        let (rows, head) = (present[2], present[3]);
        [
            batch * n * seq * head,
            2 * batch * kv * rows * head,
            n * seq * rows,
            batch * n * seq * head,
        ]
        .iter()
        .try_fold(0usize, |a, &x| a.checked_add(x))
        .and_then(|x| x.checked_mul(4))
        .ok_or_else(|| OpError::shape(OP, "scratch size overflows"))
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        crate::support::kernel_choice::cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(GqaKernel { op: self.clone() }))
    }
}

#[derive(Debug)]
struct GqaKernel {
    op: GroupQueryAttention,
}

/// The rotary tables and how to read them.
#[derive(Clone, Copy)]
struct Rotary<'a> {
    cos: &'a [f32],
    sin: &'a [f32],
    half: usize,
    interleaved: bool,
}

/// Writes rows `0..len` of heads `0..heads` of batch entry `b` from `src` to rows
/// `row0..row0 + len` of `dst` (`(heads, dst_rows, size)` for this entry), rotated at
/// positions `pos0 + i` when `rotary` is set.
#[allow(clippy::too_many_arguments)]
fn place_rows(
    src: &HeadView<'_>,
    b: usize,
    (heads, len, size): (usize, usize, usize),
    dst: &mut [f32],
    (dst_rows, row0): (usize, usize),
    rotary: Option<Rotary<'_>>,
    pos0: usize,
) -> OpResult<()> {
    for h in 0..heads {
        let base = src.offset + b * src.batch + h * src.head;
        for i in 0..len {
            let from = &src.data[base + i * src.seq..][..size];
            let to = &mut dst[(h * dst_rows + row0 + i) * size..][..size];
            match rotary {
                None => to.copy_from_slice(from),
                Some(r) => {
                    let p = pos0 + i;
                    let (cos, sin) = (
                        r.cos.get(p * r.half..(p + 1) * r.half),
                        r.sin.get(p * r.half..(p + 1) * r.half),
                    );
                    let (Some(cos), Some(sin)) = (cos, sin) else {
                        return Err(OpError::kernel(
                            OP,
                            format!("position {p} is past the cos/sin caches"),
                        ));
                    };
                    rotate_row(from, to, cos, sin, r.interleaved);
                }
            }
        }
    }
    Ok(())
}

impl Kernel for GqaKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = &self.op;
        let (n, kv) = (op.num_heads, op.kv_heads);
        let defined = |i: usize| io.input(i).is_defined().then(|| io.input(i).dims());
        let past_dims = match (defined(3), defined(4)) {
            (Some(a), Some(b)) => Some((a, b)),
            (None, None) => None,
            _ => return Err(OpError::shape(OP, "past_key and past_value go together")),
        };
        let s = op.sizes(io.input(0).dims(), defined(1), defined(2), past_dims)?;
        let (batch, seq, h) = (s.batch, s.seq, s.head);
        let total = {
            let t = io.input(6).read::<i32>()?;
            let v = t.elements()?;
            match v.as_ref() {
                [t] if *t >= 0 => *t as usize,
                _ => {
                    return Err(OpError::kernel(
                        OP,
                        "total_sequence_length must be one value >= 0",
                    ))
                }
            }
        };
        let rows = GroupQueryAttention::present_rows(&s, total);
        let is_prompt = seq == total;

        let qr = io.input(0).read::<f32>()?;
        let q_in = contiguous(OP, "query", &qr)?;
        let kr = read_optional::<f32>(io.input(1))?;
        let k_in = optional_slice(OP, "key", &kr)?;
        let vr = read_optional::<f32>(io.input(2))?;
        let v_in = optional_slice(OP, "value", &vr)?;
        let pkr = read_optional::<f32>(io.input(3))?;
        let past_k = optional_slice(OP, "past_key", &pkr)?;
        let pvr = read_optional::<f32>(io.input(4))?;
        let past_v = optional_slice(OP, "past_value", &pvr)?;
        let slr = io.input(5).read::<i32>()?;
        let seqlens = contiguous(OP, "seqlens_k", &slr)?;
        if seqlens.len() != batch {
            return Err(OpError::shape(
                OP,
                format!("seqlens_k must hold {batch} values"),
            ));
        }
        // Keys and past rows per batch entry.
        let entry = |b: usize| -> OpResult<(usize, usize)> {
            let t = usize::try_from(seqlens[b]).ok().map(|v| v + 1);
            let bad = || {
                OpError::kernel(
                    OP,
                    format!(
                        "seqlens_k[{b}] = {} does not fit S = {seq}, T = {total}, cache {rows}",
                        seqlens[b]
                    ),
                )
            };
            let t = t.filter(|&t| t <= rows).ok_or_else(bad)?;
            let past = if is_prompt {
                0
            } else {
                t.checked_sub(seq).ok_or_else(bad)?
            };
            if past > s.past_rows || past + seq > rows {
                return Err(bad());
            }
            Ok((t, past))
        };
        let cr = read_optional::<f32>(io.input(7))?;
        let sr = read_optional::<f32>(io.input(8))?;
        let rotary = if op.rotary {
            let (cos, sin) = (
                optional_slice(OP, "cos_cache", &cr)?,
                optional_slice(OP, "sin_cache", &sr)?,
            );
            let half = match defined(7) {
                Some(&[_, half]) if 2 * half <= h && half > 0 && defined(8) == defined(7) => half,
                d => {
                    return Err(OpError::shape(
                        OP,
                        format!(
                            "cos_cache {d:?} must be (max_seq, rotary_dim / 2 <= {})",
                            h / 2
                        ),
                    ))
                }
            };
            Some(Rotary {
                cos,
                sin,
                half,
                interleaved: op.interleaved,
            })
        } else {
            None
        };

        let mut guard = io
            .scratch
            .map(|t| t.write_bytes(OP))
            .transpose()?
            .ok_or_else(|| OpError::kernel(OP, "needs scratch"))?;
        let mut rest = scratch_as::<f32>(OP, guard.bytes())?;
        let q_buf = carve(OP, &mut rest, batch * n * seq * h)?;
        let k_scratch = carve(OP, &mut rest, batch * kv * rows * h)?;
        let v_scratch = carve(OP, &mut rest, batch * kv * rows * h)?;
        let scores = carve(OP, &mut rest, n * seq * rows)?;
        let context = carve(OP, &mut rest, batch * n * seq * h)?;

        let mut pk_w = write_optional::<f32>(io.output(1))?;
        let mut pv_w = write_optional::<f32>(io.output(2))?;
        let k_all: &mut [f32] = match pk_w.as_mut() {
            Some(w) => contiguous_mut(OP, "present_key", w)?,
            None => k_scratch,
        };
        let v_all: &mut [f32] = match pv_w.as_mut() {
            Some(w) => contiguous_mut(OP, "present_value", w)?,
            None => v_scratch,
        };
        if k_all.len() != batch * kv * rows * h || v_all.len() != k_all.len() {
            return Err(OpError::kernel(OP, "present has the wrong size"));
        }
        k_all.fill(0.0);
        v_all.fill(0.0);

        let (q_src, k_src, v_src) = if s.packed {
            let row = (n + 2 * kv) * h;
            (
                HeadView::packed(q_in, 0, seq, row, h),
                HeadView::packed(q_in, n * h, seq, row, h),
                HeadView::packed(q_in, (n + kv) * h, seq, row, h),
            )
        } else {
            (
                HeadView::packed(q_in, 0, seq, n * h, h),
                HeadView::packed(k_in, 0, seq, kv * h, h),
                HeadView::packed(v_in, 0, seq, kv * h, h),
            )
        };
        let fits = |v: &HeadView<'_>, heads: usize| {
            batch == 0
                || seq == 0
                || v.offset + (batch - 1) * v.batch + (heads - 1) * v.head + (seq - 1) * v.seq + h
                    <= v.data.len()
        };
        if !fits(&q_src, n) || !fits(&k_src, kv) || !fits(&v_src, kv) {
            return Err(OpError::kernel(OP, "an input is smaller than its dims"));
        }
        let per_q = n * seq * h;
        let per_kv = kv * rows * h;
        for b in 0..batch {
            let (_, past) = entry(b)?;
            place_rows(
                &q_src,
                b,
                (n, seq, h),
                &mut q_buf[b * per_q..][..per_q],
                (seq, 0),
                rotary,
                past,
            )?;
            let (kb, vb) = (
                &mut k_all[b * per_kv..][..per_kv],
                &mut v_all[b * per_kv..][..per_kv],
            );
            if past > 0 {
                let p = s.past_rows;
                for hd in 0..kv {
                    let src = ((b * kv + hd) * p) * h;
                    kb[hd * rows * h..][..past * h].copy_from_slice(&past_k[src..][..past * h]);
                    vb[hd * rows * h..][..past * h].copy_from_slice(&past_v[src..][..past * h]);
                }
            }
            place_rows(&k_src, b, (kv, seq, h), kb, (rows, past), rotary, past)?;
            place_rows(&v_src, b, (kv, seq, h), vb, (rows, past), None, past)?;
        }

        let abr = read_optional::<f32>(io.input(10))?;
        let attn_bias = optional_slice(OP, "attention_bias", &abr)?;
        let ab = bias_strides(OP, defined(10), (batch, n, seq, total))?;
        let hsr = read_optional::<f32>(io.input(11))?;
        let head_sink = optional_slice(OP, "head_sink", &hsr)?;
        if !head_sink.is_empty() && head_sink.len() != n {
            return Err(OpError::shape(
                OP,
                format!("head_sink must hold {n} values"),
            ));
        }
        let sink_of = |hd: usize| {
            if head_sink.is_empty() {
                0.0
            } else {
                head_sink[hd]
            }
        };
        let sink: Option<&super::attention_heads::Sink<'_>> =
            (!head_sink.is_empty() || op.smooth_softmax).then_some(&sink_of);
        let scale = if op.scale == 0.0 {
            1.0 / (h as f32).sqrt()
        } else {
            op.scale
        };
        let (k_all, v_all): (&[f32], &[f32]) = (k_all, v_all);
        let per_ctx = n * seq * h;
        for b in 0..batch {
            let (keys, past) = entry(b)?;
            let shape = HeadShape {
                batch: 1,
                q_heads: n,
                kv_heads: kv,
                q_len: seq,
                kv_len: keys,
                head_size: h,
                v_head_size: h,
            };
            let (softcap, window, causal) = (op.softcap, op.window, op.causal);
            let row_bias = |_: usize, hd: usize, i: usize, row: &mut [f32]| {
                if softcap > 0.0 {
                    row.iter_mut()
                        .for_each(|x| *x = softcap * (*x / softcap).tanh());
                }
                if let Some([sb, sh]) = ab {
                    let at = b * sb + hd * sh + i * total;
                    row.iter_mut()
                        .zip(&attn_bias[at..at + keys])
                        .for_each(|(x, &a)| *x += a);
                }
                let end = if causal {
                    (past + i + 1).min(keys)
                } else {
                    keys
                };
                let start = if window > 0 {
                    end.saturating_sub(window)
                } else {
                    0
                };
                row[..start].fill(f32::NEG_INFINITY);
                row[end..].fill(f32::NEG_INFINITY);
            };
            attend_heads_with_sink(
                &shape,
                HeadView::head_major(&q_buf[b * per_q..][..per_q], n, seq, h),
                HeadView::head_major(&k_all[b * per_kv..][..per_kv], kv, rows, h),
                HeadView::head_major(&v_all[b * per_kv..][..per_kv], kv, rows, h),
                scale,
                &row_bias,
                sink,
                scores,
                &mut context[b * per_ctx..][..per_ctx],
                io.threads,
            )?;
        }
        let mut yw = io.output(0).write::<f32>()?;
        let y = contiguous_mut(OP, "output", &mut yw)?;
        if y.len() != batch * seq * n * h {
            return Err(OpError::kernel(OP, "output has the wrong size"));
        }
        context_to_rows(context, y, n, seq, h);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use crate::support::test_util::{assert_close, OpRun};
    use crate::{Attr, OpError};

    fn t<T: strata_core::Element>(v: &[T], dims: &[usize]) -> Tensor {
        Tensor::from_slice(v, dims).unwrap()
    }

    fn ramp(len: usize, step: f32) -> Vec<f32> {
        (0..len).map(|i| (i as f32 * step).sin()).collect()
    }

    fn gqa(inputs: &[Tensor], attrs: &[(&str, Attr)]) -> Result<Vec<Tensor>, OpError> {
        OpRun::new("GroupQueryAttention", 1)
            .domain("com.microsoft")
            .attrs(&[("num_heads", Attr::Int(2)), ("kv_num_heads", Attr::Int(1))])
            .attrs(attrs)
            .outputs(3)
            // total_sequence_length's value sizes present.
            .constant_inputs()
            .checked_writes()
            .run(inputs)
    }

    #[test]
    fn a_prompt_equals_causal_multi_head_attention_with_shared_kv() {
        let (s, h) = (4, 4);
        let (q, k, v) = (ramp(s * 2 * h, 0.3), ramp(s * h, 0.7), ramp(s * h, 1.3));
        let u = Tensor::undefined();
        let inputs = [
            t(&q, &[1, s, 2 * h]),
            t(&k, &[1, s, h]),
            t(&v, &[1, s, h]),
            u.clone(),
            u,
            t(&[s as i32 - 1], &[1]),
            t(&[s as i32], &[]),
        ];
        let y = gqa(&inputs, &[]).unwrap();
        // The one K/V head, repeated for both query heads.
        let twice = |x: &[f32]| -> Vec<f32> {
            x.chunks(h)
                .flat_map(|r| r.iter().chain(r).copied())
                .collect()
        };
        let mha = OpRun::new("MultiHeadAttention", 1)
            .domain("com.microsoft")
            .attrs(&[
                ("num_heads", Attr::Int(2)),
                ("unidirectional", Attr::Int(1)),
            ])
            .run(&[
                t(&q, &[1, s, 2 * h]),
                t(&twice(&k), &[1, s, 2 * h]),
                t(&twice(&v), &[1, s, 2 * h]),
            ])
            .unwrap();
        assert_close(
            &y[0].to_vec::<f32>().unwrap(),
            &mha[0].to_vec::<f32>().unwrap(),
            "GQA vs MHA",
        );
        assert_eq!(y[1].to_vec::<f32>().unwrap(), k);
        // Without the present outputs K and V go to scratch: same result.
        let alone = OpRun::new("GroupQueryAttention", 1)
            .domain("com.microsoft")
            .attrs(&[("num_heads", Attr::Int(2)), ("kv_num_heads", Attr::Int(1))])
            .constant_inputs()
            .run(&inputs)
            .unwrap();
        assert_eq!(alone.len(), 1);
        assert_eq!(
            alone[0].to_vec::<f32>().unwrap(),
            y[0].to_vec::<f32>().unwrap()
        );
    }

    #[test]
    fn seqlens_past_the_cache_and_quantized_caches_are_errors() {
        let u = Tensor::undefined();
        let inputs = [
            t(&ramp(8, 0.1), &[1, 1, 8]),
            t(&ramp(4, 0.1), &[1, 1, 4]),
            t(&ramp(4, 0.1), &[1, 1, 4]),
            u.clone(),
            u,
            t(&[5i32], &[1]),
            t(&[2i32], &[]),
        ];
        let err = gqa(&inputs, &[]).unwrap_err();
        assert!(matches!(err, OpError::Kernel { .. }), "{err}");
        let err = gqa(
            &inputs,
            &[("k_quant_type", Attr::String("PER_TENSOR".into()))],
        )
        .unwrap_err();
        assert!(matches!(err, OpError::Attribute { .. }), "{err}");
    }
}
