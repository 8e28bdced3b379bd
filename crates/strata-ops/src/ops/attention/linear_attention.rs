//! ONNX LinearAttention (opset 27): recurrent linear attention over 3-D `(batch, seq, heads *
//! dim)` query/key/value with a `(batch, kv_heads, d_k, d_v)` state carried from `past_state`
//! (zeros when absent) to `present_state`. Per step: the `gated` rules decay the state by
//! `exp(decay)` (per head or per key dim), the `delta` rules replace the value by
//! `beta * (v - Sᵀk)`, then `S += k ⊗ v` and each query head reads `scale * qᵀS` from its
//! key/value head (grouped-query). `update_rule` is "linear", "gated", "delta" or
//! "gated_delta" (default); `chunk_size` is a tuning hint without effect. The state
//! accumulates in f32 (f64 for f64 inputs) whatever the input type.

use std::marker::PhantomData;

use num_traits::Zero;
use strata_core::{DType, Device};

use crate::cpu_float_kernel;
use crate::support::inputs::{optional, required};
use crate::support::numeric::{Real, WideFloat};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "LinearAttention";

/// Input indices.
const PAST_STATE: usize = 3;
const DECAY: usize = 4;
const BETA: usize = 5;

#[derive(Clone, Copy, Debug)]
pub struct LinearAttention {
    q_heads: usize,
    kv_heads: usize,
    /// `None` (or 0 in the model): `1 / sqrt(d_k)`.
    scale: Option<f32>,
    gated: bool,
    delta: bool,
}

/// Validated sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    batch: usize,
    seq: usize,
    d_k: usize,
    d_v: usize,
    /// Decay values per step and key/value head: 1 (per head) or `d_k`.
    decay_width: usize,
    /// Beta values per step: `kv_heads` or 1 (shared).
    beta_width: usize,
}

fn shape_err(message: String) -> OpError {
    OpError::shape(OP, message)
}

impl LinearAttention {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let heads = |name: &str| -> OpResult<usize> {
            let v = ctx
                .attrs
                .int(name)?
                .ok_or_else(|| OpError::attribute(OP, name, "is required"))?;
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| OpError::attribute(OP, name, format!("must be positive, got {v}")))
        };
        let (q_heads, kv_heads) = (heads("q_num_heads")?, heads("kv_num_heads")?);
        if !q_heads.is_multiple_of(kv_heads) {
            return Err(OpError::attribute(
                OP,
                "q_num_heads",
                format!("{q_heads} is not a multiple of kv_num_heads {kv_heads}"),
            ));
        }
        let (gated, delta) = match ctx.attrs.string_or("update_rule", "gated_delta")?.as_str() {
            "linear" => (false, false),
            "gated" => (true, false),
            "delta" => (false, true),
            "gated_delta" => (true, true),
            other => {
                return Err(OpError::attribute(
                    OP,
                    "update_rule",
                    format!("must be linear, gated, delta or gated_delta, got {other:?}"),
                ))
            }
        };
        let scale = ctx.attrs.float("scale")?.filter(|&s| s != 0.0);
        if scale.is_some_and(|s| !s.is_finite()) {
            return Err(OpError::attribute(
                OP,
                "scale",
                format!("must be finite, got {scale:?}"),
            ));
        }
        Ok(Box::new(LinearAttention {
            q_heads,
            kv_heads,
            scale,
            gated,
            delta,
        }))
    }

    /// Validates the dims (`None` for absent optional inputs).
    fn geometry(
        &self,
        q: &[usize],
        k: &[usize],
        v: &[usize],
        past: Option<&[usize]>,
        decay: Option<&[usize]>,
        beta: Option<&[usize]>,
    ) -> OpResult<Geometry> {
        let [batch, seq, q_hidden] = *q else {
            return Err(shape_err(format!(
                "query must be (batch, seq, hidden), got {q:?}"
            )));
        };
        let (hq, hk) = (self.q_heads, self.kv_heads);
        if !q_hidden.is_multiple_of(hq) {
            return Err(shape_err(format!(
                "query hidden size {q_hidden} is not a multiple of q_num_heads {hq}"
            )));
        }
        let d_k = q_hidden / hq;
        let d_v = match *v {
            [b, s, h] if b == batch && s == seq && h.is_multiple_of(hk) => h / hk,
            _ => {
                return Err(shape_err(format!(
                    "value {v:?} must be (batch, seq, kv_num_heads * d_v) with batch {batch}, seq {seq}"
                )))
            }
        };
        if k != [batch, seq, hk * d_k] {
            return Err(shape_err(format!(
                "key {k:?} must be (batch, seq, kv_num_heads * d_k) = {:?}",
                [batch, seq, hk * d_k]
            )));
        }
        if let Some(p) = past.filter(|p| *p != [batch, hk, d_k, d_v]) {
            return Err(shape_err(format!(
                "past_state {p:?} must be (batch, kv_num_heads, d_k, d_v) = {:?}",
                [batch, hk, d_k, d_v]
            )));
        }
        let required_if = |on: bool, what: &str, dims: Option<&[usize]>| match (on, dims) {
            (true, None) => Err(shape_err(format!(
                "this update_rule needs the {what} input"
            ))),
            (false, Some(_)) => Err(shape_err(format!("this update_rule takes no {what} input"))),
            _ => Ok(()),
        };
        required_if(self.gated, "decay", decay)?;
        required_if(self.delta, "beta", beta)?;
        let decay_width = match decay {
            None => 1,
            Some(&[b, s, w]) if b == batch && s == seq && (w == hk || w == hk * d_k) => w / hk,
            Some(d) => {
                return Err(shape_err(format!(
                    "decay {d:?} must be (batch, seq, kv_num_heads) or (batch, seq, kv_num_heads * d_k)"
                )))
            }
        };
        let beta_width = match beta {
            None => 1,
            Some(&[b, s, w]) if b == batch && s == seq && (w == hk || w == 1) => w,
            Some(d) => {
                return Err(shape_err(format!(
                    "beta {d:?} must be (batch, seq, kv_num_heads) or (batch, seq, 1)"
                )))
            }
        };
        // The output and state sizes must be addressable.
        [seq, hq.max(hk), d_k.max(1), d_v]
            .iter()
            .try_fold(batch, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| shape_err("sizes overflow".into()))?;
        Ok(Geometry {
            batch,
            seq,
            d_k,
            d_v,
            decay_width,
            beta_width,
        })
    }
}

impl Operator for LinearAttention {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let q = required(OP, inputs, 0)?;
        let (k, v) = (required(OP, inputs, 1)?, required(OP, inputs, 2)?);
        if !matches!(q.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a float type".into(),
                actual: q.dtype,
            });
        }
        for index in [1, 2, PAST_STATE, DECAY, BETA] {
            if let Some(f) = optional(inputs, index).filter(|f| f.dtype != q.dtype) {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: format!("{} like the query", q.dtype),
                    actual: f.dtype,
                });
            }
        }
        if q.rank() != 3 || k.rank() != 3 || v.rank() != 3 {
            return Err(shape_err(format!(
                "query {:?}, key {:?}, value {:?} must be 3-D",
                q.dims, k.dims, v.dims
            )));
        }
        let dims = |i: usize| optional(inputs, i).map(|f| f.concrete());
        let all_known = [PAST_STATE, DECAY, BETA]
            .iter()
            .all(|&i| !matches!(dims(i), Some(None)));
        let mut out_v = Dim::Unknown;
        let mut state = vec![
            q.dims[0].clone(),
            Dim::Known(self.kv_heads),
            Dim::Unknown,
            Dim::Unknown,
        ];
        if let (Some(qd), Some(kd), Some(vd), true) =
            (q.concrete(), k.concrete(), v.concrete(), all_known)
        {
            let g = self.geometry(
                &qd,
                &kd,
                &vd,
                dims(PAST_STATE).flatten().as_deref(),
                dims(DECAY).flatten().as_deref(),
                dims(BETA).flatten().as_deref(),
            )?;
            out_v = Dim::Known(self.q_heads.checked_mul(g.d_v).ok_or_else(|| {
                OpError::shape(OP, "the output width (heads × value dim) overflows")
            })?);
            state[2] = Dim::Known(g.d_k);
            state[3] = Dim::Known(g.d_v);
        }
        Ok(vec![
            Fact::new(q.dtype, vec![q.dims[0].clone(), q.dims[1].clone(), out_v]),
            Fact::new(q.dtype, state),
        ])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => LinearAttentionKernel::<T> {
            op: *self,
            _t: PhantomData,
        })
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let Some(q) = optional(inputs, 0) else {
            return Ok(0);
        };
        let (Some(qd), Some(vd)) = (q.concrete(), optional(inputs, 2).and_then(|v| v.concrete()))
        else {
            return Ok(0);
        };
        let (Some(&q_hidden), Some(&v_hidden)) = (qd.get(2), vd.get(2)) else {
            return Ok(0);
        };
        let (d_k, d_v) = (q_hidden / self.q_heads, v_hidden / self.kv_heads);
        let wide = if q.dtype == DType::F64 { 8 } else { 4 };
        Ok(state_len(qd[0], self.kv_heads, d_k, d_v) * wide)
    }
}

/// Elements of the working state plus one value row.
fn state_len(batch: usize, kv_heads: usize, d_k: usize, d_v: usize) -> usize {
    batch * kv_heads * d_k * d_v + d_v
}

/// The contiguous elements of an optional read guard.
fn slice<'a, T: strata_core::Element>(
    guard: &'a Option<strata_core::ReadGuard<'a, T>>,
) -> OpResult<Option<&'a [T]>> {
    guard
        .as_ref()
        .map(|r| {
            r.as_slice()
                .ok_or_else(|| OpError::kernel(OP, "an input is not contiguous"))
        })
        .transpose()
}

#[derive(Debug)]
struct LinearAttentionKernel<T> {
    op: LinearAttention,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for LinearAttentionKernel<T>
where
    T::Wide: bytemuck::Pod,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = &self.op;
        let defined = |i: usize| Some(io.input(i)).filter(|t| t.is_defined());
        let (q_t, k_t, v_t) = (io.input(0), io.input(1), io.input(2));
        let (past_t, decay_t, beta_t) = (defined(PAST_STATE), defined(DECAY), defined(BETA));
        let g = op.geometry(
            q_t.dims(),
            k_t.dims(),
            v_t.dims(),
            past_t.map(|t| t.dims()),
            decay_t.map(|t| t.dims()),
            beta_t.map(|t| t.dims()),
        )?;
        let (hq, hk, d_k, d_v, seq) = (op.q_heads, op.kv_heads, g.d_k, g.d_v, g.seq);
        let (y_t, state_t) = (io.output(0), io.output(1));
        let state_dims = [g.batch, hk, d_k, d_v];
        if y_t.dims() != [g.batch, seq, hq * d_v]
            || (state_t.is_defined() && state_t.dims() != state_dims)
        {
            return Err(OpError::kernel(
                OP,
                format!(
                    "outputs are bound with dims {:?} / {:?}",
                    y_t.dims(),
                    state_t.dims()
                ),
            ));
        }
        let not_contiguous = || OpError::kernel(OP, "an input or output is not contiguous");
        let reads = [Some(q_t), Some(k_t), Some(v_t), past_t, decay_t, beta_t]
            .map(|t| t.map(|t| t.read::<T>()).transpose());
        let [q_r, k_r, v_r, past_r, decay_r, beta_r] = reads;
        let (q_r, k_r, v_r) = (q_r?, k_r?, v_r?);
        let (past_r, decay_r, beta_r) = (past_r?, decay_r?, beta_r?);
        let (q, k, v) = (
            slice(&q_r)?.unwrap_or_default(),
            slice(&k_r)?.unwrap_or_default(),
            slice(&v_r)?.unwrap_or_default(),
        );
        let (past, decay, beta) = (slice(&past_r)?, slice(&decay_r)?, slice(&beta_r)?);

        // The state and one value row in wide floats: planned scratch when it fits.
        let total = state_len(g.batch, hk, d_k, d_v);
        let bytes = total * std::mem::size_of::<T::Wide>();
        let mut scratch = match io.scratch {
            Some(s) if s.numel() >= bytes => Some(s.write_bytes("LinearAttention")?),
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
        let (states, value) = work.split_at_mut(total - d_v);
        match past {
            Some(p) => states.iter_mut().zip(p).for_each(|(s, &p)| *s = p.widen()),
            None => states.fill(T::Wide::zero()),
        }

        let mut y_w = y_t.write::<T>()?;
        let y = y_w.as_mut_slice().ok_or_else(not_contiguous)?;
        let scale = T::Wide::lit(op.scale.map_or(1.0 / (d_k as f64).sqrt(), f64::from));
        let group = hq / hk;
        for b in 0..g.batch {
            for h in 0..hk {
                let state = &mut states[(b * hk + h) * d_k * d_v..(b * hk + h + 1) * d_k * d_v];
                for t in 0..seq {
                    let step = b * seq + t;
                    let k_row = &k[(step * hk + h) * d_k..(step * hk + h + 1) * d_k];
                    let v_row = &v[(step * hk + h) * d_v..(step * hk + h + 1) * d_v];
                    if let Some(decay) = decay {
                        let w = g.decay_width;
                        let at = (step * hk + h) * w;
                        for (d, s_row) in state.chunks_mut(d_v).enumerate() {
                            let factor = decay[at + d % w].widen().exp_v();
                            s_row.iter_mut().for_each(|s| *s = *s * factor);
                        }
                    }
                    for (m, out) in value.iter_mut().enumerate() {
                        *out = v_row[m].widen();
                    }
                    if let Some(beta) = beta {
                        let bv = beta[step * g.beta_width + h % g.beta_width].widen();
                        for (m, out) in value.iter_mut().enumerate() {
                            // Sᵀk: what the state already retrieves for this key.
                            let retrieved = (0..d_k).fold(T::Wide::zero(), |acc, d| {
                                acc + state[d * d_v + m] * k_row[d].widen()
                            });
                            *out = bv * (*out - retrieved);
                        }
                    }
                    for (d, s_row) in state.chunks_mut(d_v).enumerate() {
                        let kd = k_row[d].widen();
                        for (s, &val) in s_row.iter_mut().zip(value.iter()) {
                            *s = *s + kd * val;
                        }
                    }
                    for r in 0..group {
                        let qh = h * group + r;
                        let q_row = &q[(step * hq + qh) * d_k..(step * hq + qh + 1) * d_k];
                        let y_row = &mut y[(step * hq + qh) * d_v..(step * hq + qh + 1) * d_v];
                        for (m, out) in y_row.iter_mut().enumerate() {
                            let acc = (0..d_k).fold(T::Wide::zero(), |acc, d| {
                                acc + q_row[d].widen() * state[d * d_v + m]
                            });
                            *out = T::narrow(scale * acc);
                        }
                    }
                }
            }
        }
        if state_t.is_defined() {
            let mut s_w = state_t.write::<T>()?;
            let out = s_w.as_mut_slice().ok_or_else(not_contiguous)?;
            out.iter_mut()
                .zip(states.iter())
                .for_each(|(o, &s)| *o = T::narrow(s));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::OpRun;
    use crate::Attr;
    use strata_core::Tensor;

    fn run(rule: &str, heads: (i64, i64), inputs: &[&Tensor]) -> OpResult<(Vec<f32>, Vec<f32>)> {
        let inputs: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
        let out = OpRun::new(OP, 27)
            .attrs(&[
                ("update_rule", Attr::String(rule.into())),
                ("q_num_heads", Attr::Int(heads.0)),
                ("kv_num_heads", Attr::Int(heads.1)),
                ("scale", Attr::Float(1.0)),
            ])
            .outputs(2)
            .constant_inputs()
            .run(&inputs)?;
        Ok((out[0].to_vec::<f32>()?, out[1].to_vec::<f32>()?))
    }

    #[test]
    fn linear_rule_accumulates_outer_products() {
        // d_k = d_v = 1, two steps: S1 = k1 v1 = 6, S2 = 6 + k2 v2 = 6 + 20; y_t = q_t S_t.
        let q = Tensor::from_slice(&[1.0f32, 0.5], &[1, 2, 1]).unwrap();
        let k = Tensor::from_slice(&[2.0f32, 4.0], &[1, 2, 1]).unwrap();
        let v = Tensor::from_slice(&[3.0f32, 5.0], &[1, 2, 1]).unwrap();
        let (y, s) = run("linear", (1, 1), &[&q, &k, &v]).unwrap();
        assert_eq!(y, vec![6.0, 13.0]);
        assert_eq!(s, vec![26.0]);
    }

    #[test]
    fn gated_delta_decays_and_corrects() {
        // One step with past S0 = 2, decay g = ln 0.5, beta 0.5, k = 1, v = 3, q = 1:
        // S = 1; v' = 0.5 * (3 - 1) = 1; S = 1 + 1 = 2; y = 2.
        let one = Tensor::from_slice(&[1.0f32], &[1, 1, 1]).unwrap();
        let v = Tensor::from_slice(&[3.0f32], &[1, 1, 1]).unwrap();
        let past = Tensor::from_slice(&[2.0f32], &[1, 1, 1, 1]).unwrap();
        let decay = Tensor::from_slice(&[0.5f32.ln()], &[1, 1, 1]).unwrap();
        let beta = Tensor::from_slice(&[0.5f32], &[1, 1, 1]).unwrap();
        let (y, s) = run(
            "gated_delta",
            (1, 1),
            &[&one, &one, &v, &past, &decay, &beta],
        )
        .unwrap();
        assert!(
            (y[0] - 2.0).abs() < 1e-6 && (s[0] - 2.0).abs() < 1e-6,
            "{y:?} {s:?}"
        );
    }

    #[test]
    fn rule_inputs_and_shapes_are_checked() {
        let q = Tensor::from_slice(&[1.0f32, 0.5], &[1, 2, 1]).unwrap();
        // gated_delta without decay / beta.
        assert!(run("gated_delta", (1, 1), &[&q, &q, &q]).is_err());
        // Heads that do not divide.
        assert!(run("linear", (3, 2), &[&q, &q, &q]).is_err());
        assert!(run("softmax", (1, 1), &[&q, &q, &q]).is_err());
        let k = Tensor::from_slice(&[1.0f32, 0.5, 1.0, 1.0], &[1, 2, 2]).unwrap();
        assert!(run("linear", (1, 1), &[&q, &k, &q]).is_err());
    }
}
