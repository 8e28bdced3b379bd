//! ONNX Attention (opsets 23, 24, 25): scaled dot-product attention over 3-D `(batch, seq,
//! hidden)` inputs split into `q_num_heads` / `kv_num_heads` heads or 4-D `(batch, heads, seq,
//! head_size)` inputs, with grouped-query attention, a boolean or additive `attn_mask`,
//! `is_causal`, `scale`, `softcap`, `softmax_precision`, a past key/value cache with
//! `present_key` / `present_value` outputs, the `qk_matmul_output` output of
//! `qk_matmul_output_mode`, `nonpad_kv_seqlen` (opset 24+) and the sliding window
//! `left_window_size` / `right_window_size` (opset 25). f32, f64, f16 and bf16; 16-bit inputs
//! compute in f32, rounded where the reference rounds.

use std::marker::PhantomData;

use num_traits::Zero;
use strata_core::{DType, Device, Tensor};

use super::attention_bias::{Bias, Mask, MaskValues};
use super::attention_core::{attend, Buffers, QkCapture, ScoreParams, SoftmaxPrecision};
use super::attention_geometry::{Geometry, InputDims};
use super::fused_sdpa::{FusedAttention, MaskStep, OperandLayout, OutputLayout};
use crate::cpu_float_kernel;
use crate::kernels::GemmFloat;
use crate::support::inputs::{optional, required};
use crate::support::numeric::{Real, WideFloat};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "Attention";

/// Input indices.
const MASK: usize = 3;
const PAST_KEY: usize = 4;
const PAST_VALUE: usize = 5;
const NONPAD: usize = 6;

#[derive(Clone, Debug)]
pub struct Attention {
    opset: i64,
    scale: Option<f32>,
    is_causal: bool,
    /// `(q_num_heads, kv_num_heads)`, when both are given.
    heads: Option<(usize, usize)>,
    /// Whether either head attribute is given (opset 25 forbids them with 4-D inputs).
    head_attrs: bool,
    params: ScoreParams,
    left_window: i64,
    right_window: i64,
}

fn positive_heads(ctx: &OpContext, name: &str) -> OpResult<Option<usize>> {
    ctx.attrs
        .int(name)?
        .map(|v| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| OpError::attribute(OP, name, format!("must be positive, got {v}")))
        })
        .transpose()
}

fn window_size(ctx: &OpContext, name: &str) -> OpResult<i64> {
    let value = ctx.attrs.int(name)?;
    match value {
        Some(_) if ctx.opset < 25 => Err(OpError::attribute(
            OP,
            name,
            format!("is defined from opset 25, the node has opset {}", ctx.opset),
        )),
        Some(v) if v < -1 => Err(OpError::attribute(
            OP,
            name,
            format!("must be -1 or non-negative, got {v}"),
        )),
        v => Ok(v.unwrap_or(-1)),
    }
}

impl Attention {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let max_inputs = if ctx.opset >= 24 { 7 } else { 6 };
        if ctx.num_inputs < 3 || ctx.num_inputs > max_inputs || ctx.num_outputs > 4 {
            return Err(OpError::InputCount {
                op: OP.into(),
                expected: format!("3 to {max_inputs} inputs and at most 4 outputs"),
                actual: ctx.num_inputs,
            });
        }
        let is_causal = match ctx.attrs.int_or("is_causal", 0)? {
            0 => false,
            1 => true,
            v => {
                return Err(OpError::attribute(
                    OP,
                    "is_causal",
                    format!("must be 0 or 1, got {v}"),
                ))
            }
        };
        let q_heads = positive_heads(ctx, "q_num_heads")?;
        let kv_heads = positive_heads(ctx, "kv_num_heads")?;
        let precision = match ctx.attrs.int("softmax_precision")? {
            None => SoftmaxPrecision::Input,
            Some(1 | 11) => SoftmaxPrecision::Wide,
            Some(10) => SoftmaxPrecision::F16,
            Some(16) => SoftmaxPrecision::BF16,
            Some(v) => {
                return Err(OpError::attribute(
                    OP,
                    "softmax_precision",
                    format!("must be 1, 10, 11 or 16 (a float type), got {v}"),
                ))
            }
        };
        let capture = match ctx.attrs.int_or("qk_matmul_output_mode", 0)? {
            0 => QkCapture::Raw,
            1 => QkCapture::Softcapped,
            2 => QkCapture::Biased,
            3 => QkCapture::Probabilities,
            v => {
                return Err(OpError::attribute(
                    OP,
                    "qk_matmul_output_mode",
                    format!("must be 0 to 3, got {v}"),
                ))
            }
        };
        let scale = ctx.attrs.float("scale")?;
        if scale.is_some_and(|s| !(s.is_finite() && s > 0.0)) {
            // Q and K are each scaled by sqrt(scale).
            return Err(OpError::attribute(
                OP,
                "scale",
                format!("must be positive and finite, got {scale:?}"),
            ));
        }
        Ok(Box::new(Attention {
            opset: ctx.opset,
            scale,
            is_causal,
            heads: q_heads.zip(kv_heads),
            head_attrs: q_heads.is_some() || kv_heads.is_some(),
            params: ScoreParams {
                softcap: ctx.attrs.float_or("softcap", 0.0)?,
                capture,
                precision,
            },
            left_window: window_size(ctx, "left_window_size")?,
            right_window: window_size(ctx, "right_window_size")?,
        }))
    }

    /// Checks dtypes and the optional inputs' presence rules; returns Q's dtype.
    fn check_inputs(&self, inputs: &[&Fact]) -> OpResult<DType> {
        let q = required(OP, inputs, 0)?;
        if !matches!(q.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a float type".into(),
                actual: q.dtype,
            });
        }
        for index in [1, 2, PAST_KEY, PAST_VALUE] {
            let fact = if index < 3 {
                Some(required(OP, inputs, index)?)
            } else {
                optional(inputs, index)
            };
            if let Some(f) = fact.filter(|f| f.dtype != q.dtype) {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: format!("{} like Q", q.dtype),
                    actual: f.dtype,
                });
            }
        }
        if let Some(m) = optional(inputs, MASK) {
            if m.dtype != DType::Bool && m.dtype != q.dtype {
                return Err(OpError::DType {
                    op: OP.into(),
                    index: MASK,
                    expected: format!("bool or {}", q.dtype),
                    actual: m.dtype,
                });
            }
        }
        let has_past = optional(inputs, PAST_KEY).is_some();
        if has_past != optional(inputs, PAST_VALUE).is_some() {
            return Err(OpError::shape(
                OP,
                "past_key and past_value must be given together",
            ));
        }
        if let Some(n) = optional(inputs, NONPAD) {
            if n.dtype != DType::I64 {
                return Err(OpError::DType {
                    op: OP.into(),
                    index: NONPAD,
                    expected: "int64".into(),
                    actual: n.dtype,
                });
            }
            if has_past {
                return Err(OpError::shape(
                    OP,
                    "nonpad_kv_seqlen cannot be combined with past_key / past_value",
                ));
            }
        }
        if self.opset >= 25 && self.head_attrs && q.rank() == 4 {
            return Err(OpError::attribute(
                OP,
                "q_num_heads",
                "must not be given for 4-D inputs (opset 25)",
            ));
        }
        Ok(q.dtype)
    }
}

impl Attention {
    /// This node as a [`FusedAttention`], when the tiled kernel computes exactly what it asks
    /// for: f32 with known dims, no past or padding lengths, as many K/V heads as Q heads, no
    /// softcap or window, a mask (if any) covering every key, and only output Y used.
    fn fused(&self, inputs: &[&Fact], outputs: &[&Fact]) -> Option<FusedAttention> {
        let defined = |f: &&Fact| f.is_defined();
        if inputs.iter().skip(PAST_KEY).any(defined) || outputs.iter().skip(1).any(defined) {
            return None;
        }
        if self.params.softcap > 0.0 || self.left_window >= 0 || self.right_window >= 0 {
            return None;
        }
        let (q, k, v) = (inputs.first()?, inputs.get(1)?, inputs.get(2)?);
        if [q, k, v].iter().any(|f| f.dtype != DType::F32) {
            return None;
        }
        let (qd, kd) = (q.concrete()?, k.concrete()?);
        v.concrete()?;
        let (layout, out, head_dim, keys) = match (q.rank(), k.rank(), v.rank()) {
            (3, 3, 3) => {
                let (hq, hkv) = self.heads?;
                let layout = OperandLayout {
                    split_heads: Some(hq),
                    perm: [0, 2, 1, 3],
                    columns: None,
                };
                (hq == hkv).then_some((layout, OutputLayout::Merged, qd[2] / hq.max(1), kd[1]))?
            }
            (4, 4, 4) if qd[1] == kd[1] => {
                (OperandLayout::HEADS, OutputLayout::Heads, qd[3], kd[2])
            }
            _ => return None,
        };
        let mut steps = Vec::new();
        if let Some(mask) = inputs.get(MASK).filter(|f| f.is_defined()) {
            // A shorter mask would mask the keys past its end.
            if mask.dims.last() != Some(&Dim::Known(keys)) {
                return None;
            }
            steps.push(match mask.dtype {
                DType::Bool => MaskStep::Select {
                    input: MASK,
                    keep_when: true,
                    fill: f32::NEG_INFINITY,
                },
                DType::F32 => MaskStep::Add { input: MASK },
                _ => return None,
            });
        }
        let op = FusedAttention {
            q: layout,
            k: layout,
            v: layout,
            out,
            scale: self
                .scale
                .unwrap_or_else(|| 1.0 / (head_dim.max(1) as f32).sqrt()),
            steps,
            causal: self.is_causal,
            zero_empty_rows: true,
            slots: std::thread::available_parallelism().map_or(1, |n| n.get().min(16)),
        };
        let fits = op.infer(inputs).ok()?;
        let y = outputs.first().map(|f| &f.dims);
        (y.is_none_or(|y| *y == fits[0].dims)).then_some(op)
    }
}

/// `a + b` when both are known.
fn add_dims(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => x.checked_add(*y).map_or(Dim::Unknown, Dim::Known),
        (x, Dim::Known(0)) => x.clone(),
        _ => Dim::Unknown,
    }
}

impl Operator for Attention {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let dtype = self.check_inputs(inputs)?;
        let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
        let past_key = optional(inputs, PAST_KEY);
        let past_value = optional(inputs, PAST_VALUE);
        // Absent inputs count as known; present ones need known dims.
        let concrete = |f: Option<&Fact>| match f {
            None => Some(None),
            Some(f) => f.concrete().map(Some),
        };
        if let (Some(qd), Some(kd), Some(vd), Some(pk), Some(pv)) = (
            q.concrete(),
            k.concrete(),
            v.concrete(),
            concrete(past_key),
            concrete(past_value),
        ) {
            let g = Geometry::new(
                &InputDims {
                    q: &qd,
                    k: &kd,
                    v: &vd,
                    past_key: pk.as_deref(),
                    past_value: pv.as_deref(),
                },
                self.heads,
            )?;
            let (present_key, present_value) = g.present_dims();
            return Ok(vec![
                Fact::known(dtype, &g.y_dims()),
                Fact::known(dtype, &present_key),
                Fact::known(dtype, &present_value),
                Fact::known(dtype, &g.scores_dims()),
            ]);
        }
        // Symbolic dims: keep what passes through, leave computed sizes unknown.
        let rank = q.rank();
        if !(rank == 3 || rank == 4) || k.rank() != rank || v.rank() != rank {
            return Err(OpError::shape(
                OP,
                format!(
                    "Q, K, V must all be 3-D or 4-D, got {:?}, {:?}, {:?}",
                    q.dims, k.dims, v.dims
                ),
            ));
        }
        let past_len = past_key
            .and_then(|p| p.dims.get(2).cloned())
            .unwrap_or(Dim::Known(0));
        let (y, present_k, present_v, scores) = if rank == 3 {
            let (hq, hkv) = self.heads.ok_or_else(|| {
                OpError::attribute(
                    OP,
                    "q_num_heads",
                    "3-D inputs need q_num_heads and kv_num_heads",
                )
            })?;
            let total = add_dims(&past_len, &k.dims[1]);
            let v_hidden = v.dims[2].map(|d| d / hkv * hq);
            (
                vec![q.dims[0].clone(), q.dims[1].clone(), v_hidden],
                vec![
                    k.dims[0].clone(),
                    Dim::Known(hkv),
                    total.clone(),
                    k.dims[2].map(|d| d / hkv),
                ],
                vec![
                    v.dims[0].clone(),
                    Dim::Known(hkv),
                    total.clone(),
                    v.dims[2].map(|d| d / hkv),
                ],
                vec![q.dims[0].clone(), Dim::Known(hq), q.dims[1].clone(), total],
            )
        } else {
            let total = add_dims(&past_len, &k.dims[2]);
            (
                vec![
                    q.dims[0].clone(),
                    q.dims[1].clone(),
                    q.dims[2].clone(),
                    v.dims[3].clone(),
                ],
                vec![
                    k.dims[0].clone(),
                    k.dims[1].clone(),
                    total.clone(),
                    k.dims[3].clone(),
                ],
                vec![
                    v.dims[0].clone(),
                    v.dims[1].clone(),
                    total.clone(),
                    v.dims[3].clone(),
                ],
                vec![
                    q.dims[0].clone(),
                    q.dims[1].clone(),
                    q.dims[2].clone(),
                    total,
                ],
            )
        };
        Ok(vec![
            Fact::new(dtype, y),
            Fact::new(dtype, present_k),
            Fact::new(dtype, present_v),
            Fact::new(dtype, scores),
        ])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = self.check_inputs(inputs)?;
        if let Some(fused) = self.fused(inputs, outputs) {
            return fused.kernel(inputs, outputs, device);
        }
        cpu_float_kernel!(OP, dtype, device, T => AttentionKernel::<T> {
            op: self.clone(),
            _t: PhantomData,
        })
    }

    fn scratch_bytes(&self, inputs: &[&Fact], outputs: &[&Fact]) -> OpResult<usize> {
        if let Some(fused) = self.fused(inputs, outputs) {
            return fused.scratch_bytes(inputs, outputs);
        }
        let dims = |i: usize| optional(inputs, i).map(|f| f.concrete());
        let (Some(Some(q)), Some(Some(k)), Some(Some(v))) = (dims(0), dims(1), dims(2)) else {
            return Ok(0);
        };
        let (Some(pk), Some(pv)) = (
            dims(PAST_KEY).unwrap_or(Some(Vec::new())),
            dims(PAST_VALUE).unwrap_or(Some(Vec::new())),
        ) else {
            return Ok(0);
        };
        let g = Geometry::new(
            &InputDims {
                q: &q,
                k: &k,
                v: &v,
                past_key: optional(inputs, PAST_KEY).map(|_| pk.as_slice()),
                past_value: optional(inputs, PAST_VALUE).map(|_| pv.as_slice()),
            },
            self.heads,
        )?;
        let wide = if inputs[0].dtype == DType::F64 { 8 } else { 4 };
        Ok(g.working_lens().iter().sum::<usize>() * wide)
    }
}

#[derive(Debug)]
struct AttentionKernel<T> {
    op: Attention,
    _t: PhantomData<T>,
}

fn not_contiguous() -> OpError {
    OpError::kernel(OP, "an input or output is not contiguous")
}

/// Element offset of row `t` of head `h` in batch `b` of a Q/K/V/Y tensor: 3-D tensors hold
/// `(batch, seq, heads * width)`, 4-D ones `(batch, heads, seq, width)`.
fn row_offset(
    packed: bool,
    (heads, len, width): (usize, usize, usize),
    b: usize,
    h: usize,
    t: usize,
) -> usize {
    if packed {
        ((b * len + t) * heads + h) * width
    } else {
        ((b * heads + h) * len + t) * width
    }
}

/// Row `t` of key/value head `h` in batch `b` of the present cache: the past for `t <
/// past_len`, the current K/V after it.
fn present_row<'a, T>(
    g: &Geometry,
    past: Option<&'a [T]>,
    current: &'a [T],
    width: usize,
    (b, h, t): (usize, usize, usize),
) -> &'a [T] {
    let at = match past {
        Some(past) if t < g.past_len => {
            let at = ((b * g.kv_heads + h) * g.past_len + t) * width;
            return &past[at..at + width];
        }
        _ => row_offset(
            g.packed,
            (g.kv_heads, g.new_kv_len, width),
            b,
            h,
            t - g.past_len,
        ),
    };
    &current[at..at + width]
}

/// Calls `f(row index in head-major order, (b, h, t))` for every key/value row.
fn for_each_kv_row(g: &Geometry, mut f: impl FnMut(usize, (usize, usize, usize))) {
    let mut index = 0;
    for b in 0..g.batch {
        for h in 0..g.kv_heads {
            for t in 0..g.total_kv {
                f(index, (b, h, t));
                index += 1;
            }
        }
    }
}

fn read_slice<'a, T: strata_core::Element>(
    guard: &'a strata_core::ReadGuard<'a, T>,
) -> OpResult<&'a [T]> {
    guard.as_slice().ok_or_else(not_contiguous)
}

fn check_output(index: usize, tensor: &Tensor, want: &[usize]) -> OpResult<()> {
    if tensor.dims() != want {
        return Err(OpError::kernel(
            OP,
            format!(
                "output {index} is bound with dims {:?}, expected {want:?}",
                tensor.dims()
            ),
        ));
    }
    Ok(())
}

impl<T: Real> Kernel for AttentionKernel<T>
where
    T::Wide: GemmFloat,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = &self.op;
        let defined = |i: usize| Some(io.input(i)).filter(|t| t.is_defined());
        let (q_t, k_t, v_t) = (io.input(0), io.input(1), io.input(2));
        let (pk_t, pv_t) = (defined(PAST_KEY), defined(PAST_VALUE));
        let g = Geometry::new(
            &InputDims {
                q: q_t.dims(),
                k: k_t.dims(),
                v: v_t.dims(),
                past_key: pk_t.map(|t| t.dims()),
                past_value: pv_t.map(|t| t.dims()),
            },
            op.heads,
        )?;
        let (q_r, k_r, v_r) = (q_t.read::<T>()?, k_t.read::<T>()?, v_t.read::<T>()?);
        let (q, k, v) = (read_slice(&q_r)?, read_slice(&k_r)?, read_slice(&v_r)?);
        let pk_r = pk_t.map(|t| t.read::<T>()).transpose()?;
        let pv_r = pv_t.map(|t| t.read::<T>()).transpose()?;
        let past_key = pk_r.as_ref().map(read_slice).transpose()?;
        let past_value = pv_r.as_ref().map(read_slice).transpose()?;

        // Bias inputs.
        let mask_t = defined(MASK);
        let mask_bool = mask_t
            .filter(|m| m.dtype() == DType::Bool)
            .map(|m| m.read_raw::<u8>("Attention"))
            .transpose()?;
        let mask_add = mask_t
            .filter(|m| m.dtype() != DType::Bool)
            .map(|m| m.read::<T>())
            .transpose()?;
        let target = [g.batch, g.q_heads, g.q_len, g.total_kv];
        let mask = match (&mask_bool, &mask_add, mask_t) {
            (Some(r), _, Some(m)) => Some(Mask::new(
                MaskValues::Bool(read_slice(r)?),
                m.dims(),
                target,
            )?),
            (_, Some(r), Some(m)) => Some(Mask::new(
                MaskValues::Additive(read_slice(r)?),
                m.dims(),
                target,
            )?),
            _ => None,
        };
        let nonpad_r = defined(NONPAD).map(|t| t.read::<i64>()).transpose()?;
        let nonpad = nonpad_r.as_ref().map(read_slice).transpose()?;
        if let Some(n) = nonpad.filter(|n| n.len() != g.batch) {
            return Err(OpError::shape(
                OP,
                format!(
                    "nonpad_kv_seqlen has {} values for a batch of {}",
                    n.len(),
                    g.batch
                ),
            ));
        }
        if nonpad.is_some() && past_key.is_some() {
            return Err(OpError::shape(
                OP,
                "nonpad_kv_seqlen cannot be combined with past_key / past_value",
            ));
        }
        let bias = Bias {
            mask,
            is_causal: op.is_causal,
            left_window: op.left_window,
            right_window: op.right_window,
            past_len: past_key.map(|_| g.past_len),
            nonpad,
            q_len: g.q_len,
        };

        // Working buffers: planned scratch when it fits, else owned.
        let lens = g.working_lens();
        let total: usize = lens.iter().sum();
        let bytes = total * std::mem::size_of::<T::Wide>();
        let mut scratch = match io.scratch {
            Some(s) if s.numel() >= bytes => Some(s.write_bytes("Attention")?),
            _ => None,
        };
        let mut owned = Vec::new();
        let work: &mut [T::Wide] = match scratch
            .as_mut()
            .and_then(|s| bytemuck::try_cast_slice_mut(&mut s.bytes()[..bytes]).ok())
        {
            Some(w) => w,
            None => {
                owned.resize(total, T::Wide::zero());
                &mut owned
            }
        };
        let (q_w, rest) = work.split_at_mut(lens[0]);
        let (k_w, rest) = rest.split_at_mut(lens[1]);
        let (v_w, rest) = rest.split_at_mut(lens[2]);
        let (scores, y_w) = rest.split_at_mut(lens[3]);

        // Q and K are each scaled by sqrt(scale), the factor rounded to T as the reference does.
        let scale = op
            .scale
            .map_or(1.0 / (g.head_size as f64).sqrt(), f64::from);
        let sqrt_scale = T::narrow(T::Wide::lit(scale.sqrt())).widen();
        let scaled = |x: T| T::narrow(x.widen() * sqrt_scale).widen();
        let (d, dv) = (g.head_size, g.v_head_size);
        let mut index = 0;
        for b in 0..g.batch {
            for h in 0..g.q_heads {
                for t in 0..g.q_len {
                    let at = row_offset(g.packed, (g.q_heads, g.q_len, d), b, h, t);
                    for (w, &x) in q_w[index * d..(index + 1) * d]
                        .iter_mut()
                        .zip(&q[at..at + d])
                    {
                        *w = scaled(x);
                    }
                    index += 1;
                }
            }
        }
        for_each_kv_row(&g, |row, at| {
            let src = present_row(&g, past_key, k, d, at);
            for (w, &x) in k_w[row * d..(row + 1) * d].iter_mut().zip(src) {
                *w = scaled(x);
            }
            let src = present_row(&g, past_value, v, dv, at);
            for (w, &x) in v_w[row * dv..(row + 1) * dv].iter_mut().zip(src) {
                *w = x.widen();
            }
        });

        // present_key / present_value: the unscaled cache.
        let (present_k_dims, present_v_dims) = g.present_dims();
        for (index, past, current, width, dims) in [
            (1, past_key, k, d, &present_k_dims),
            (2, past_value, v, dv, &present_v_dims),
        ] {
            let out = io.output(index);
            if !out.is_defined() {
                continue;
            }
            check_output(index, out, dims)?;
            let mut w = out.write::<T>()?;
            let out = w.as_mut_slice().ok_or_else(not_contiguous)?;
            for_each_kv_row(&g, |row, at| {
                out[row * width..(row + 1) * width]
                    .copy_from_slice(present_row(&g, past, current, width, at));
            });
        }

        let qk_t = Some(io.output(3)).filter(|t| t.is_defined());
        if let Some(t) = qk_t {
            check_output(3, t, &g.scores_dims())?;
        }
        let mut qk_w = qk_t.map(|t| t.write::<T>()).transpose()?;
        let qk = qk_w
            .as_mut()
            .map(|w| w.as_mut_slice().ok_or_else(not_contiguous))
            .transpose()?;
        attend::<T>(
            &g,
            Buffers {
                q: q_w,
                k: k_w,
                v: v_w,
                scores,
                y: y_w,
            },
            qk,
            &bias,
            &op.params,
            io.threads,
        )?;

        let y_t = io.output(0);
        check_output(0, y_t, &g.y_dims())?;
        let mut y_guard = y_t.write::<T>()?;
        let y = y_guard.as_mut_slice().ok_or_else(not_contiguous)?;
        let mut index = 0;
        for b in 0..g.batch {
            for h in 0..g.q_heads {
                for t in 0..g.q_len {
                    let at = row_offset(g.packed, (g.q_heads, g.q_len, dv), b, h, t);
                    for (o, &x) in y[at..at + dv]
                        .iter_mut()
                        .zip(&y_w[index * dv..(index + 1) * dv])
                    {
                        *o = T::narrow(x);
                    }
                    index += 1;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::OpRun;
    use crate::{Attr, Attributes};

    /// Runs Attention (opset 23) and returns Y and qk_matmul_output.
    fn run(attrs: Attributes, inputs: &[&Tensor]) -> OpResult<(Vec<f32>, Vec<f32>)> {
        let inputs: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
        let out = OpRun::new(OP, 23)
            .attributes(&attrs)
            .outputs(4)
            .constant_inputs()
            .run(&inputs)?;
        Ok((out[0].to_vec::<f32>()?, out[3].to_vec::<f32>()?))
    }

    fn t(values: &[f32], dims: &[usize]) -> Tensor {
        Tensor::from_slice(values, dims).unwrap()
    }

    #[test]
    fn weights_values_by_softmax_of_scores_and_applies_causal_mask() {
        // One head, head size 1, scale 1: scores (q = 1) are [0, ln 3] -> weights [1/4, 3/4].
        let q = t(&[1.0, 1.0], &[1, 1, 2, 1]);
        let k = t(&[0.0, 3.0f32.ln()], &[1, 1, 2, 1]);
        let v = t(&[4.0, 8.0], &[1, 1, 2, 1]);
        let attrs = Attributes::new(OP)
            .with("scale", Attr::Float(1.0))
            .with("qk_matmul_output_mode", Attr::Int(3));
        let (y, p) = run(attrs.clone(), &[&q, &k, &v]).unwrap();
        assert!(
            (y[0] - 7.0).abs() < 1e-5 && (y[1] - 7.0).abs() < 1e-5,
            "{y:?}"
        );
        assert!(
            (p[0] - 0.25).abs() < 1e-6 && (p[1] - 0.75).abs() < 1e-6,
            "{p:?}"
        );
        // Causal: query 0 sees key 0 only.
        let (y, _) = run(attrs.with("is_causal", Attr::Int(1)), &[&q, &k, &v]).unwrap();
        assert!(
            (y[0] - 4.0).abs() < 1e-6 && (y[1] - 7.0).abs() < 1e-5,
            "{y:?}"
        );
    }

    #[test]
    fn fully_masked_rows_give_zeros() {
        let q = t(&[1.0], &[1, 1, 1, 1]);
        let k = t(&[1.0, 2.0], &[1, 1, 2, 1]);
        let v = t(&[4.0, 8.0], &[1, 1, 2, 1]);
        let mask = t(&[f32::NEG_INFINITY, f32::NEG_INFINITY], &[1, 2]);
        let (y, _) = run(Attributes::new(OP), &[&q, &k, &v, &mask]).unwrap();
        assert_eq!(y, vec![0.0]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let q = t(&[1.0, 1.0], &[1, 1, 2, 1]);
        let k = t(&[1.0, 2.0], &[1, 1, 1, 2]);
        // Head sizes differ.
        assert!(run(Attributes::new(OP), &[&q, &k, &q]).is_err());
        // An integer mask.
        let mask = Tensor::from_slice(&[1i64, 0], &[1, 2]).unwrap();
        assert!(run(Attributes::new(OP), &[&q, &q, &q, &mask]).is_err());
        // 3-D inputs without head counts; a bad output mode.
        let q3 = t(&[1.0, 1.0], &[1, 2, 1]);
        assert!(run(Attributes::new(OP), &[&q3, &q3, &q3]).is_err());
        let attrs = Attributes::new(OP).with("qk_matmul_output_mode", Attr::Int(4));
        assert!(run(attrs, &[&q, &q, &q]).is_err());
    }
}
