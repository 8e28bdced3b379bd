//! com.microsoft Attention: BERT/GPT-2 self-attention with the Q, K and V projections packed in
//! one weight. `QKV = input · weights + bias` (one GEMM into scratch), heads read from it through
//! strides, then the shared head core. mask_index forms: `(B)` key end positions, `(2B)` ends
//! then starts, `(B, T)` and `(B, S, T)` raw 0/1 masks (the 4-D form is refused, as onnxruntime's CPU kernel
//! does); masked
//! scores get `mask_filter_value` added, as onnxruntime does (so a fully masked row is still a
//! softmax). `unidirectional` adds the causal mask. Optional past `(2, B, N, P, H)` is prepended
//! to K and V and `present` returned; attention_bias `(B or 1, N or 1, S, T)` is added.
//! Rotary (`do_rotary`) and the shared past/present buffer are refused; f32 only.

use strata_core::{DType, Device};

use super::access::{contiguous, contiguous_mut, optional_slice, read_optional, write_optional};
use super::attention_heads::{attend_heads, context_to_rows, HeadShape, HeadView};
use crate::kernels::gemm;
use crate::support::inputs::{optional, required};
use crate::support::scratch::{carve, scratch_as};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "Attention";

#[derive(Debug, Clone)]
pub(crate) struct MsAttention {
    num_heads: usize,
    /// (q, k, v) hidden sizes; equal thirds of the weight's columns when not given.
    qkv_sizes: Option<[usize; 3]>,
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
    for (name, what) in [
        ("do_rotary", "rotary embedding inside Attention"),
        ("past_present_share_buffer", "a shared past/present buffer"),
    ] {
        if a.int_or(name, 0)? != 0 {
            return Err(OpError::attribute(
                OP,
                name,
                format!("{what} is not supported"),
            ));
        }
    }
    let qkv_sizes = match a.usizes("qkv_hidden_sizes")? {
        None => None,
        Some(v)
            if v.len() == 3 && v[0] == v[1] && v.iter().all(|&d| d > 0 && d % num_heads == 0) =>
        {
            Some([v[0], v[1], v[2]])
        }
        Some(v) => {
            return Err(OpError::attribute(
                OP,
                "qkv_hidden_sizes",
                format!("{v:?}: three positive multiples of num_heads, q and k equal"),
            ))
        }
    };
    Ok(Box::new(MsAttention {
        num_heads,
        qkv_sizes,
        unidirectional: a.int_or("unidirectional", 0)? != 0,
        mask_filter_value: a.float_or("mask_filter_value", -10000.0)?,
        scale: a.float_or("scale", 0.0)?,
    }))
}

/// The sizes of one call.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    batch: usize,
    seq: usize,
    input_hidden: usize,
    qkv: [usize; 3],
    past: usize,
}

impl Sizes {
    fn total(&self) -> usize {
        self.past + self.seq
    }
    fn width(&self) -> usize {
        self.qkv.iter().sum()
    }
}

impl MsAttention {
    fn sizes(&self, x: &[usize], w: &[usize], past: Option<&[usize]>) -> OpResult<Sizes> {
        let err = |m: String| OpError::shape(OP, m);
        let [batch, seq, input_hidden] = *x else {
            return Err(err(format!(
                "input must be (batch, seq, hidden), got {x:?}"
            )));
        };
        if w.len() != 2 || w[0] != input_hidden {
            return Err(err(format!(
                "weights {w:?} must be ({input_hidden}, q+k+v hidden)"
            )));
        }
        let qkv = match self.qkv_sizes {
            Some(s) => s,
            None if w[1].is_multiple_of(3 * self.num_heads) => [w[1] / 3; 3],
            None => {
                return Err(err(format!(
                    "weights {w:?}: columns are not 3 × a multiple of num_heads {}",
                    self.num_heads
                )))
            }
        };
        if qkv.iter().sum::<usize>() != w[1] {
            return Err(err(format!(
                "weights {w:?} do not hold q, k, v sizes {qkv:?}"
            )));
        }
        let head = qkv[0] / self.num_heads;
        let past = match past {
            None => 0,
            Some(&[2, b, n, p, h])
                if b == batch && n == self.num_heads && h == head && qkv[1] == qkv[2] =>
            {
                p
            }
            Some(p) => {
                return Err(err(format!(
                    "past {p:?} must be (2, {batch}, {}, past, {head})",
                    self.num_heads
                )))
            }
        };
        Ok(Sizes {
            batch,
            seq,
            input_hidden,
            qkv,
            past,
        })
    }

    fn head_shape(&self, s: &Sizes) -> HeadShape {
        HeadShape {
            batch: s.batch,
            q_heads: self.num_heads,
            kv_heads: self.num_heads,
            q_len: s.seq,
            kv_len: s.total(),
            head_size: s.qkv[0] / self.num_heads,
            v_head_size: s.qkv[2] / self.num_heads,
        }
    }
}

impl Operator for MsAttention {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let w = required(OP, inputs, 1)?;
        for (index, f) in [
            (0, Some(x)),
            (1, Some(w)),
            (2, optional(inputs, 2)),
            (4, optional(inputs, 4)),
            (5, optional(inputs, 5)),
        ] {
            if let Some(f) = f.filter(|f| f.dtype != DType::F32) {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: "float32".into(),
                    actual: f.dtype,
                });
            }
        }
        if let Some(m) = optional(inputs, 3).filter(|m| m.dtype != DType::I32) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 3,
                expected: "int32".into(),
                actual: m.dtype,
            });
        }
        if optional(inputs, 6).is_some() {
            return Err(OpError::shape(
                OP,
                "past_sequence_length (the shared past/present buffer) is not supported",
            ));
        }
        if x.rank() != 3 {
            return Err(OpError::shape(
                OP,
                format!("input must be (batch, seq, hidden), got {:?}", x.dims),
            ));
        }
        let w_dims = w.concrete_or_err(OP)?;
        let mut out = vec![];
        match (x.concrete(), optional(inputs, 4).map(|p| p.concrete())) {
            (Some(xd), None) | (Some(xd), Some(Some(_))) => {
                let past = optional(inputs, 4).and_then(|p| p.concrete());
                let s = self.sizes(&xd, &w_dims, past.as_deref())?;
                out.push(Fact::known(DType::F32, &[s.batch, s.seq, s.qkv[2]]));
                let h = s.qkv[1] / self.num_heads;
                out.push(Fact::known(
                    DType::F32,
                    &[2, s.batch, self.num_heads, s.total(), h],
                ));
            }
            _ => {
                let v = w_dims
                    .get(1)
                    .map_or(0, |c| self.qkv_sizes.map_or(c / 3, |s| s[2]));
                out.push(Fact::new(
                    DType::F32,
                    vec![x.dims[0].clone(), x.dims[1].clone(), Dim::Known(v)],
                ));
                out.push(Fact::new(
                    DType::F32,
                    vec![
                        Dim::Known(2),
                        x.dims[0].clone(),
                        Dim::Known(self.num_heads),
                        Dim::Unknown,
                        Dim::Unknown,
                    ],
                ));
            }
        }
        Ok(out)
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (Some(x), Some(w)) = (inputs[0].concrete(), inputs[1].concrete()) else {
            return Ok(0);
        };
        let past = optional(inputs, 4).and_then(|p| p.concrete());
        let s = self.sizes(&x, &w, past.as_deref())?;
        let hs = self.head_shape(&s);
        let kv = 2 * s.batch * s.total() * s.qkv[1];
        [
            s.batch * s.seq * s.width(),
            hs.scores_len(),
            hs.context_len(),
            kv,
        ]
        .iter()
        .try_fold(0usize, |a, &n| a.checked_add(n))
        .and_then(|n| n.checked_mul(4))
        .ok_or_else(|| OpError::shape(OP, "scratch size overflows"))
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        crate::support::kernel_choice::cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(AttentionKernel { op: self.clone() }))
    }
}

#[derive(Debug)]
struct AttentionKernel {
    op: MsAttention,
}

impl Kernel for AttentionKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = &self.op;
        let (x_t, w_t, mask_t, past_t) = (io.input(0), io.input(1), io.input(3), io.input(4));
        let past_dims = past_t.is_defined().then(|| past_t.dims());
        let s = op.sizes(x_t.dims(), w_t.dims(), past_dims)?;
        let hs = op.head_shape(&s);
        let (xr, wr) = (x_t.read::<f32>()?, w_t.read::<f32>()?);
        let br = read_optional::<f32>(io.input(2))?;
        let bias = optional_slice(OP, "bias", &br)?;
        let mut guard = io
            .scratch
            .map(|t| t.write_bytes(OP))
            .transpose()?
            .ok_or_else(|| OpError::kernel(OP, "needs scratch"))?;
        let mut rest = scratch_as::<f32>(OP, guard.bytes())?;
        let width = s.width();
        let qkv = carve(OP, &mut rest, s.batch * s.seq * width)?;
        let row = |c: usize| (c as isize, 1isize);
        gemm(
            s.batch * s.seq,
            width,
            s.input_hidden,
            contiguous(OP, "input", &xr)?,
            row(s.input_hidden),
            contiguous(OP, "weights", &wr)?,
            row(width),
            qkv,
            row(width),
            1.0,
            0.0,
            io.threads,
        )?;
        if !bias.is_empty() {
            if bias.len() != width {
                return Err(OpError::kernel(
                    OP,
                    format!("bias has {} elements, need {width}", bias.len()),
                ));
            }
            for r in qkv.chunks_exact_mut(width) {
                r.iter_mut().zip(bias).for_each(|(v, &b)| *v += b);
            }
        }
        let qkv: &[f32] = qkv;
        let (n, hk, hv) = (op.num_heads, hs.head_size, hs.v_head_size);
        // K and V with the past prepended: into `present` when requested, else scratch.
        let mut present_w = write_optional::<f32>(io.output(1))?;
        let kv_len = 2 * s.batch * n * s.total() * hk;
        let pastr = read_optional::<f32>(past_t)?;
        let past = optional_slice(OP, "past", &pastr)?;
        let needs_concat = s.past > 0 || present_w.is_some();
        let kv_buf: &mut [f32] = match present_w.as_mut() {
            Some(w) => contiguous_mut(OP, "present", w)?,
            None if needs_concat => carve(OP, &mut rest, kv_len)?,
            None => &mut [],
        };
        if needs_concat && kv_buf.len() != kv_len {
            return Err(OpError::kernel(OP, "present has the wrong size"));
        }
        let (scores, rest2) = std::mem::take(&mut rest).split_at_mut(hs.scores_len());
        let context = carve(OP, &mut &mut rest2[..], hs.context_len())?;
        let (q, k, v) = if needs_concat {
            let (t, p) = (s.total(), s.past);
            for (which, col) in [(0usize, s.qkv[0]), (1, s.qkv[0] + s.qkv[1])] {
                for b in 0..s.batch {
                    for h in 0..n {
                        let dst =
                            &mut kv_buf[(((which * s.batch + b) * n + h) * t) * hk..][..t * hk];
                        if p > 0 {
                            dst[..p * hk].copy_from_slice(
                                &past[(((which * s.batch + b) * n + h) * p) * hk..][..p * hk],
                            );
                        }
                        for i in 0..s.seq {
                            let src = (b * s.seq + i) * width + col + h * hk;
                            dst[(p + i) * hk..][..hk].copy_from_slice(&qkv[src..src + hk]);
                        }
                    }
                }
            }
            let kv: &[f32] = kv_buf;
            let (kh, vh) = kv.split_at(kv_len / 2);
            (
                HeadView::packed(qkv, 0, s.seq, width, hk),
                HeadView::head_major(kh, n, t, hk),
                HeadView::head_major(vh, n, t, hv),
            )
        } else {
            (
                HeadView::packed(qkv, 0, s.seq, width, hk),
                HeadView::packed(qkv, s.qkv[0], s.seq, width, hk),
                HeadView::packed(qkv, s.qkv[0] + s.qkv[1], s.seq, width, hv),
            )
        };
        let maskr = read_optional::<i32>(mask_t)?;
        let mask = optional_slice(OP, "mask_index", &maskr)?;
        let mask_form = MaskForm::new(mask_t.is_defined().then(|| mask_t.dims()), &s)?;
        let abr = read_optional::<f32>(io.input(5))?;
        let attn_bias = optional_slice(OP, "attention_bias", &abr)?;
        let ab_strides = bias_strides(io.input(5).is_defined().then(|| io.input(5).dims()), &s, n)?;
        let filter = op.mask_filter_value;
        let (t, past_len) = (s.total(), s.past);
        let unidirectional = op.unidirectional;
        let row_bias = move |b: usize, h: usize, i: usize, row: &mut [f32]| {
            mask_form.apply(mask, b, i, row, filter);
            if unidirectional {
                for x in row.iter_mut().skip(past_len + i + 1) {
                    *x += filter;
                }
            }
            if let Some([sb, sh]) = ab_strides {
                let at = b * sb + h * sh + i * t;
                row.iter_mut()
                    .zip(&attn_bias[at..at + t])
                    .for_each(|(x, &a)| *x += a);
            }
        };
        let scale = if op.scale == 0.0 {
            1.0 / (hk as f32).sqrt()
        } else {
            op.scale
        };
        attend_heads(&hs, q, k, v, scale, &row_bias, scores, context, io.threads)?;
        let mut yw = io.output(0).write::<f32>()?;
        let y = contiguous_mut(OP, "output", &mut yw)?;
        if y.len() != s.batch * s.seq * s.qkv[2] {
            return Err(OpError::kernel(OP, "output has the wrong size"));
        }
        context_to_rows(context, y, n, s.seq, hv);
        Ok(())
    }
}

/// The element strides (batch, head) of an attention_bias `(B or 1, N or 1, S, T)`.
fn bias_strides(dims: Option<&[usize]>, s: &Sizes, n: usize) -> OpResult<Option<[usize; 2]>> {
    let Some(d) = dims else { return Ok(None) };
    match *d {
        [b, h, q, t]
            if (b == 1 || b == s.batch) && (h == 1 || h == n) && q == s.seq && t == s.total() =>
        {
            let plane = q * t;
            Ok(Some([
                if b == 1 { 0 } else { h * plane },
                if h == 1 { 0 } else { plane },
            ]))
        }
        _ => Err(OpError::shape(
            OP,
            format!(
                "attention_bias {d:?} must be (B or 1, N or 1, {}, {})",
                s.seq,
                s.total()
            ),
        )),
    }
}

/// How mask_index is read.
#[derive(Clone, Copy, Debug)]
enum MaskForm {
    None,
    /// `(B)`: keys at or past `mask[b]` are masked.
    End,
    /// `(2B)`: keys outside `[mask[B + b], mask[b])` are masked.
    EndStart,
    /// Raw 0/1 masks: element `(b, i, j)` at `b·batch + i·query + j`.
    Raw {
        batch: usize,
        query: usize,
    },
}

impl MaskForm {
    fn new(dims: Option<&[usize]>, s: &Sizes) -> OpResult<MaskForm> {
        let (b, q, t) = (s.batch, s.seq, s.total());
        let err = |d: &[usize]| {
            OpError::shape(OP, format!("mask_index {d:?} is none of (B), (2B), (B, T), (B, S, T) for B={b} S={q} T={t}"))
        };
        Ok(match dims {
            None => MaskForm::None,
            Some(&[n]) if n == b => MaskForm::End,
            Some(&[n]) if n == 2 * b => MaskForm::EndStart,
            Some(&[mb, mt]) if mb == b && mt == t => MaskForm::Raw { batch: t, query: 0 },
            Some(&[mb, mq, mt]) if mb == b && mq == q && mt == t => MaskForm::Raw {
                batch: q * t,
                query: t,
            },
            Some(d) => return Err(err(d)),
        })
    }

    fn apply(&self, mask: &[i32], b: usize, i: usize, row: &mut [f32], filter: f32) {
        match *self {
            MaskForm::None => {}
            MaskForm::End => {
                let end = usize::try_from(mask[b]).unwrap_or(0);
                row.iter_mut().skip(end).for_each(|x| *x += filter);
            }
            MaskForm::EndStart => {
                let bsz = mask.len() / 2;
                let end = usize::try_from(mask[b]).unwrap_or(0);
                let start = usize::try_from(mask[bsz + b]).unwrap_or(0);
                for (j, x) in row.iter_mut().enumerate() {
                    if j < start || j >= end {
                        *x += filter;
                    }
                }
            }
            MaskForm::Raw { batch, query } => {
                let at = b * batch + i * query;
                for (x, &m) in row.iter_mut().zip(&mask[at..]) {
                    if m <= 0 {
                        *x += filter;
                    }
                }
            }
        }
    }
}
