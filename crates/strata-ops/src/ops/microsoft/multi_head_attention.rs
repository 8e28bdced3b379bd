//! com.microsoft MultiHeadAttention: self or cross attention over already-projected Q, K and V,
//! in f32, on the shared head core (`attention_heads`). Input layouts:
//! - separate `query (B, S, D)`, `key (B, L, D)`, `value (B, L, Dv)`;
//! - packed QKV `query (B, S, N, 3, H)` (key and value absent);
//! - packed KV `key (B, L, N, 2, H)` (value absent);
//! - a cross-attention cache `key (B, N, L, H)`, `value (B, N, L, Hv)`, used as it is.
//!
//! `bias (D + D + Dv)` is added to Q, K and V (to Q only for the cache layout, as onnxruntime
//! does). `past_key`/`past_value (B, N, P, H)` go in front of the new K/V and
//! `present_key`/`present_value (B, N, P + L, H)` are returned. `key_padding_mask` is `(B)` key
//! lengths, `(B, T)` or `(B, S, T)` 0/1; masked scores get `mask_filter_value` added, as do the
//! future ones with `unidirectional` (query `i` sees keys up to `T − S + i`). `attention_bias
//! (B or 1, N or 1, S, T)` is added; `scale` defaults to `1/√H`. onnxruntime's CPU kernel refuses
//! the packed layouts; strata reads them through strides. The shared past/present buffer,
//! `cache_indirection` and the `qk` output are refused.

use strata_core::{DType, Device};

use super::access::{contiguous, contiguous_mut, optional_slice, read_optional, write_optional};
use super::attention_heads::{attend_heads, context_to_rows, HeadShape, HeadView};
use super::head_copy::{copy_heads, copy_past};
use crate::support::inputs::{optional, required};
use crate::support::scratch::{carve, scratch_as};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "MultiHeadAttention";

#[derive(Debug, Clone)]
pub(crate) struct MultiHeadAttention {
    num_heads: usize,
    unidirectional: bool,
    mask_filter_value: f32,
    scale: f32,
}

pub(crate) fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    let a = ctx.attrs;
    let num_heads = usize::try_from(a.int_or("num_heads", 0)?)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| OpError::attribute(OP, "num_heads", "must be positive"))?;
    if ctx.num_outputs > 3 {
        return Err(OpError::attribute(
            OP,
            "qk",
            "the qk output is not supported",
        ));
    }
    Ok(Box::new(MultiHeadAttention {
        num_heads,
        unidirectional: a.int_or("unidirectional", 0)? != 0,
        mask_filter_value: a.float_or("mask_filter_value", -10000.0)?,
        scale: a.float_or("scale", 0.0)?,
    }))
}

/// Where K and V come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Separate,
    PackedQkv,
    PackedKv,
    /// K and V already `(B, N, L, H)`.
    Cache,
}

/// The sizes of one call.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    layout: Layout,
    batch: usize,
    q_len: usize,
    kv_len: usize,
    past: usize,
    head: usize,
    v_head: usize,
}

impl Sizes {
    fn total(&self) -> usize {
        self.past + self.kv_len
    }
}

impl MultiHeadAttention {
    fn sizes(
        &self,
        q: &[usize],
        k: Option<&[usize]>,
        v: Option<&[usize]>,
        past: Option<(&[usize], &[usize])>,
    ) -> OpResult<Sizes> {
        let n = self.num_heads;
        let err = |m: String| OpError::shape(OP, m);
        let per_head = |d: usize, what: &str| {
            if d.is_multiple_of(n) && d > 0 {
                Ok(d / n)
            } else {
                Err(err(format!(
                    "{what} width {d} is not a multiple of {n} heads"
                )))
            }
        };
        let (layout, batch, q_len, kv_len, head, v_head) = match (q, k, v) {
            (&[b, s, nn, 3, h], None, None) if nn == n => (Layout::PackedQkv, b, s, s, h, h),
            (&[b, s, d], Some(&[kb, l, kd]), Some(&[vb, vl, vd]))
                if kb == b && vb == b && vl == l && kd == d =>
            {
                let h = per_head(d, "query")?;
                (Layout::Separate, b, s, l, h, per_head(vd, "value")?)
            }
            (&[b, s, d], Some(&[kb, l, nn, 2, h]), None) if kb == b && nn == n && h * n == d => {
                (Layout::PackedKv, b, s, l, h, h)
            }
            (&[b, s, d], Some(&[kb, kn, l, h]), Some(&[vb, vn, vl, hv]))
                if kb == b && vb == b && kn == n && vn == n && vl == l && h * n == d =>
            {
                (Layout::Cache, b, s, l, h, hv)
            }
            _ => {
                return Err(err(format!(
                    "query {q:?}, key {k:?}, value {v:?} are none of the supported layouts"
                )))
            }
        };
        let past = match past {
            None => 0,
            Some(_) if layout == Layout::Cache => {
                return Err(err("past_key needs new keys, not a key cache".into()))
            }
            Some((&[pb, pn, p, ph], &[vb, vn, vp, vh]))
                if pb == batch
                    && vb == batch
                    && pn == n
                    && vn == n
                    && vp == p
                    && ph == head
                    && vh == v_head =>
            {
                p
            }
            Some((pk, pv)) => {
                let want = format!("({batch}, {n}, P, {head} / {v_head})");
                return Err(err(format!("past {pk:?} / {pv:?} must be {want}")));
            }
        };
        Ok(Sizes {
            layout,
            batch,
            q_len,
            kv_len,
            past,
            head,
            v_head,
        })
    }

    fn head_shape(&self, s: &Sizes) -> HeadShape {
        HeadShape {
            batch: s.batch,
            q_heads: self.num_heads,
            kv_heads: self.num_heads,
            q_len: s.q_len,
            kv_len: s.total(),
            head_size: s.head,
            v_head_size: s.v_head,
        }
    }

    /// Sizes from concrete input dims (`None` while one is unknown).
    fn sizes_of(&self, inputs: &[&Fact]) -> OpResult<Option<Sizes>> {
        let concrete = |i: usize| optional(inputs, i).map(|f| f.concrete());
        let q = required(OP, inputs, 0)?.concrete();
        let (k, v, pk, pv) = (concrete(1), concrete(2), concrete(6), concrete(7));
        let known = |x: &Option<Option<Vec<usize>>>| !matches!(x, Some(None));
        if q.is_none() || ![&k, &v, &pk, &pv].iter().all(|x| known(x)) {
            return Ok(None);
        }
        let flat = |x: &Option<Option<Vec<usize>>>| x.clone().flatten();
        let (k, v, pk, pv) = (flat(&k), flat(&v), flat(&pk), flat(&pv));
        let past = match (&pk, &pv) {
            (Some(a), Some(b)) => Some((a.as_slice(), b.as_slice())),
            (None, None) => None,
            _ => return Err(OpError::shape(OP, "past_key and past_value go together")),
        };
        let q = q.unwrap_or_default();
        self.sizes(&q, k.as_deref(), v.as_deref(), past).map(Some)
    }
}

impl Operator for MultiHeadAttention {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let q = required(OP, inputs, 0)?;
        for index in [0, 1, 2, 3, 5, 6, 7] {
            if let Some(f) = optional(inputs, index).filter(|f| f.dtype != DType::F32) {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: "float32".into(),
                    actual: f.dtype,
                });
            }
        }
        if let Some(m) = optional(inputs, 4).filter(|m| m.dtype != DType::I32) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 4,
                expected: "int32".into(),
                actual: m.dtype,
            });
        }
        for (index, what) in [(8, "past_sequence_length"), (9, "cache_indirection")] {
            if optional(inputs, index).is_some() {
                return Err(OpError::shape(OP, format!("{what} is not supported")));
            }
        }
        let n = self.num_heads;
        Ok(match self.sizes_of(inputs)? {
            Some(s) => vec![
                Fact::known(DType::F32, &[s.batch, s.q_len, n * s.v_head]),
                Fact::known(DType::F32, &[s.batch, n, s.total(), s.head]),
                Fact::known(DType::F32, &[s.batch, n, s.total(), s.v_head]),
            ],
            None => {
                let (b, s) = (
                    q.dims.first().cloned().unwrap_or(Dim::Unknown),
                    q.dims.get(1).cloned().unwrap_or(Dim::Unknown),
                );
                let present = vec![b.clone(), Dim::Known(n), Dim::Unknown, Dim::Unknown];
                vec![
                    Fact::new(DType::F32, vec![b, s, Dim::Unknown]),
                    Fact::new(DType::F32, present.clone()),
                    Fact::new(DType::F32, present),
                ]
            }
        })
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let Some(s) = self.sizes_of(inputs)? else {
            return Ok(0);
        };
        let hs = self.head_shape(&s);
        let n = self.num_heads;
        let (b, t) = (s.batch, s.total());
        [
            b * n * s.q_len * s.head,
            b * n * t * s.head,
            b * n * t * s.v_head,
            hs.scores_len(),
            hs.context_len(),
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
        Ok(Box::new(MhaKernel { op: self.clone() }))
    }
}

#[derive(Debug)]
struct MhaKernel {
    op: MultiHeadAttention,
}

/// How key_padding_mask is read.
#[derive(Clone, Copy, Debug)]
enum Mask {
    None,
    /// `(B)`: keys at or past `mask[b]` are masked.
    Lengths,
    /// 0/1 values: element `(b, i, j)` at `b·batch + i·query + j`.
    Raw {
        batch: usize,
        query: usize,
    },
}

impl Mask {
    fn new(dims: Option<&[usize]>, s: &Sizes) -> OpResult<Mask> {
        let (b, q, t) = (s.batch, s.q_len, s.total());
        Ok(match dims {
            None => Mask::None,
            Some(&[n]) if n == b => Mask::Lengths,
            Some(&[mb, mt]) if mb == b && mt == t => Mask::Raw { batch: t, query: 0 },
            Some(&[mb, mq, mt]) if mb == b && mq == q && mt == t => Mask::Raw {
                batch: q * t,
                query: t,
            },
            Some(d) => {
                return Err(OpError::shape(
                    OP,
                    format!("key_padding_mask {d:?} is none of ({b}), ({b}, {t}), ({b}, {q}, {t})"),
                ))
            }
        })
    }

    fn apply(&self, mask: &[i32], b: usize, i: usize, row: &mut [f32], filter: f32) {
        match *self {
            Mask::None => {}
            Mask::Lengths => {
                let end = usize::try_from(mask[b]).unwrap_or(0);
                row.iter_mut().skip(end).for_each(|x| *x += filter);
            }
            Mask::Raw { batch, query } => {
                let at = b * batch + i * query;
                for (x, &m) in row.iter_mut().zip(&mask[at..]) {
                    if m == 0 {
                        *x += filter;
                    }
                }
            }
        }
    }
}

/// The element strides (batch, head) of an attention_bias `(B or 1, N or 1, S, T)`.
pub(crate) fn bias_strides(
    op: &str,
    dims: Option<&[usize]>,
    (batch, heads, q_len, total): (usize, usize, usize, usize),
) -> OpResult<Option<[usize; 2]>> {
    let Some(d) = dims else { return Ok(None) };
    match *d {
        [b, h, q, t]
            if (b == 1 || b == batch) && (h == 1 || h == heads) && q == q_len && t == total =>
        {
            let plane = q * t;
            Ok(Some([
                if b == 1 { 0 } else { h * plane },
                if h == 1 { 0 } else { plane },
            ]))
        }
        _ => Err(OpError::shape(
            op,
            format!("attention_bias {d:?} must be ({batch} or 1, {heads} or 1, {q_len}, {total})"),
        )),
    }
}

impl Kernel for MhaKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = &self.op;
        let n = op.num_heads;
        let defined = |i: usize| io.input(i).is_defined().then(|| io.input(i).dims());
        let past_dims = match (defined(6), defined(7)) {
            (Some(a), Some(b)) => Some((a, b)),
            (None, None) => None,
            _ => return Err(OpError::shape(OP, "past_key and past_value go together")),
        };
        let s = op.sizes(io.input(0).dims(), defined(1), defined(2), past_dims)?;
        let hs = op.head_shape(&s);
        let (batch, t, h, hv) = (s.batch, s.total(), s.head, s.v_head);
        let d = n * h;

        let qr = io.input(0).read::<f32>()?;
        let q_in = contiguous(OP, "query", &qr)?;
        let kr = read_optional::<f32>(io.input(1))?;
        let k_in = optional_slice(OP, "key", &kr)?;
        let vr = read_optional::<f32>(io.input(2))?;
        let v_in = optional_slice(OP, "value", &vr)?;
        let br = read_optional::<f32>(io.input(3))?;
        let bias = optional_slice(OP, "bias", &br)?;
        if !bias.is_empty() && bias.len() != 2 * d + n * hv {
            return Err(OpError::shape(
                OP,
                format!("bias has {} values, need {}", bias.len(), 2 * d + n * hv),
            ));
        }
        let bias_of = |which: usize| -> &[f32] {
            if bias.is_empty() {
                &[]
            } else {
                &bias[which * d..]
            }
        };
        let pkr = read_optional::<f32>(io.input(6))?;
        let past_k = optional_slice(OP, "past_key", &pkr)?;
        let pvr = read_optional::<f32>(io.input(7))?;
        let past_v = optional_slice(OP, "past_value", &pvr)?;

        let mut guard = io
            .scratch
            .map(|t| t.write_bytes(OP))
            .transpose()?
            .ok_or_else(|| OpError::kernel(OP, "needs scratch"))?;
        let mut rest = scratch_as::<f32>(OP, guard.bytes())?;
        let q_buf = carve(OP, &mut rest, batch * n * s.q_len * h)?;
        let k_scratch = carve(OP, &mut rest, batch * n * t * h)?;
        let v_scratch = carve(OP, &mut rest, batch * n * t * hv)?;
        let scores = carve(OP, &mut rest, hs.scores_len())?;
        let context = carve(OP, &mut rest, hs.context_len())?;

        // Where each operand's new rows are read from.
        let (q_src, k_src, v_src) = match s.layout {
            Layout::Separate => (
                HeadView::packed(q_in, 0, s.q_len, d, h),
                HeadView::packed(k_in, 0, s.kv_len, d, h),
                HeadView::packed(v_in, 0, s.kv_len, n * hv, hv),
            ),
            Layout::PackedQkv => {
                let row = 3 * d;
                let view = |offset| HeadView {
                    data: q_in,
                    offset,
                    batch: s.q_len * row,
                    head: 3 * h,
                    seq: row,
                };
                (view(0), view(h), view(2 * h))
            }
            Layout::PackedKv => {
                let row = 2 * d;
                let view = |offset| HeadView {
                    data: k_in,
                    offset,
                    batch: s.kv_len * row,
                    head: 2 * h,
                    seq: row,
                };
                (HeadView::packed(q_in, 0, s.q_len, d, h), view(0), view(h))
            }
            Layout::Cache => (
                HeadView::packed(q_in, 0, s.q_len, d, h),
                HeadView::head_major(k_in, n, s.kv_len, h),
                HeadView::head_major(v_in, n, s.kv_len, hv),
            ),
        };
        let needed = |v: &HeadView<'_>, len: usize, size: usize| {
            batch == 0 || len == 0 || {
                let last = v.offset + (batch - 1) * v.batch + (n - 1) * v.head + (len - 1) * v.seq;
                last + size <= v.data.len()
            }
        };
        if !needed(&q_src, s.q_len, h)
            || !needed(&k_src, s.kv_len, h)
            || !needed(&v_src, s.kv_len, hv)
        {
            return Err(OpError::kernel(OP, "an input is smaller than its dims"));
        }
        copy_heads(
            &q_src,
            (batch, n, s.q_len, h),
            bias_of(0),
            q_buf,
            s.q_len,
            0,
        );

        // K and V with the past in front: into present_key/present_value when requested.
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
        if k_all.len() != batch * n * t * h || v_all.len() != batch * n * t * hv {
            return Err(OpError::kernel(OP, "present has the wrong size"));
        }
        let (kv_bias_k, kv_bias_v) = if s.layout == Layout::Cache {
            (&[][..], &[][..])
        } else {
            (bias_of(1), bias_of(2))
        };
        if s.past > 0 {
            copy_past(past_k, (batch, n, s.past, h), s.past, k_all, t);
            copy_past(past_v, (batch, n, s.past, hv), s.past, v_all, t);
        }
        copy_heads(&k_src, (batch, n, s.kv_len, h), kv_bias_k, k_all, t, s.past);
        copy_heads(
            &v_src,
            (batch, n, s.kv_len, hv),
            kv_bias_v,
            v_all,
            t,
            s.past,
        );

        let mr = read_optional::<i32>(io.input(4))?;
        let mask = optional_slice(OP, "key_padding_mask", &mr)?;
        let mask_form = Mask::new(defined(4), &s)?;
        let abr = read_optional::<f32>(io.input(5))?;
        let attn_bias = optional_slice(OP, "attention_bias", &abr)?;
        let ab = bias_strides(OP, defined(5), (batch, n, s.q_len, t))?;
        let (filter, causal) = (op.mask_filter_value, op.unidirectional);
        let offset = t - s.q_len.min(t);
        let row_bias = move |b: usize, hd: usize, i: usize, row: &mut [f32]| {
            mask_form.apply(mask, b, i, row, filter);
            if causal {
                row.iter_mut()
                    .skip(offset + i + 1)
                    .for_each(|x| *x += filter);
            }
            if let Some([sb, sh]) = ab {
                let at = b * sb + hd * sh + i * t;
                row.iter_mut()
                    .zip(&attn_bias[at..at + t])
                    .for_each(|(x, &a)| *x += a);
            }
        };
        let scale = if op.scale == 0.0 {
            1.0 / (h as f32).sqrt()
        } else {
            op.scale
        };
        let (k_all, v_all): (&[f32], &[f32]) = (k_all, v_all);
        attend_heads(
            &hs,
            HeadView::head_major(q_buf, n, s.q_len, h),
            HeadView::head_major(k_all, n, t, h),
            HeadView::head_major(v_all, n, t, hv),
            scale,
            &row_bias,
            scores,
            context,
            io.threads,
        )?;
        let mut yw = io.output(0).write::<f32>()?;
        let y = contiguous_mut(OP, "output", &mut yw)?;
        if y.len() != batch * s.q_len * n * hv {
            return Err(OpError::kernel(OP, "output has the wrong size"));
        }
        context_to_rows(context, y, n, s.q_len, hv);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use strata_core::Tensor;

    use crate::support::test_util::OpRun;
    use crate::{Attr, OpError};

    fn t(v: &[f32], dims: &[usize]) -> Tensor {
        Tensor::from_slice(v, dims).unwrap()
    }

    fn ramp(len: usize, step: f32) -> Vec<f32> {
        (0..len).map(|i| (i as f32 * step).sin()).collect()
    }

    fn mha(inputs: &[Tensor], outputs: usize) -> Result<Vec<Tensor>, OpError> {
        OpRun::new("MultiHeadAttention", 1)
            .domain("com.microsoft")
            .attrs(&[("num_heads", Attr::Int(2))])
            .outputs(outputs)
            .checked_writes()
            .run(inputs)
    }

    #[test]
    fn packed_qkv_equals_separate_inputs() {
        let (b, s, n, h) = (2, 3, 2, 4);
        let (q, k, v) = (
            ramp(b * s * n * h, 0.3),
            ramp(b * s * n * h, 0.7),
            ramp(b * s * n * h, 1.1),
        );
        let mut packed = vec![];
        for row in 0..b * s {
            for head in 0..n {
                for x in [&q, &k, &v] {
                    packed.extend_from_slice(&x[(row * n + head) * h..][..h]);
                }
            }
        }
        let dims = [b, s, n * h];
        let sep = mha(&[t(&q, &dims), t(&k, &dims), t(&v, &dims)], 1).unwrap();
        let pk = mha(&[t(&packed, &[b, s, n, 3, h])], 1).unwrap();
        let (x, y) = (
            sep[0].to_vec::<f32>().unwrap(),
            pk[0].to_vec::<f32>().unwrap(),
        );
        assert_eq!(x, y);
    }

    #[test]
    fn present_holds_past_then_new_keys() {
        let (b, s, n, h, p) = (1, 2, 2, 2, 3);
        let dims = [b, s, n * h];
        let q = t(&ramp(b * s * n * h, 0.5), &dims);
        let k = t(&[10.0, 11.0, 12.0, 13.0, 20.0, 21.0, 22.0, 23.0], &dims);
        let past: Vec<f32> = (0..b * n * p * h).map(|i| -(i as f32)).collect();
        let pt = t(&past, &[b, n, p, h]);
        let u = Tensor::undefined();
        let inputs = [q, k.clone(), k, u.clone(), u.clone(), u, pt.clone(), pt];
        let y = mha(&inputs, 3).unwrap();
        assert_eq!(y[1].dims(), [1, 2, 5, 2]);
        let present = y[1].to_vec::<f32>().unwrap();
        // Head 0: its 3 past rows, then the new rows' first head.
        assert_eq!(
            &present[..10],
            &[-0.0, -1.0, -2.0, -3.0, -4.0, -5.0, 10.0, 11.0, 20.0, 21.0]
        );
    }

    #[test]
    fn bad_layouts_and_the_qk_output_are_errors() {
        let x = t(&ramp(24, 0.1), &[2, 3, 4]);
        let k = t(&ramp(30, 0.1), &[2, 5, 3]);
        let err = mha(&[x.clone(), k.clone(), k], 1).unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{err}");
        let err = mha(&[x.clone(), x.clone(), x], 4).unwrap_err();
        assert!(matches!(err, OpError::Attribute { .. }), "{err}");
    }
}
