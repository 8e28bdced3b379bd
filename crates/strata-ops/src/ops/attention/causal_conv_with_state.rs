//! ONNX CausalConvWithState (opset 27): a depthwise causal 1-D convolution with a carried
//! state. The input `(batch, channels, length)` is left-padded with `past_state` `(batch,
//! channels, k - 1)` (zeros when absent) and convolved per channel with `weight` `(channels, 1,
//! k)` plus the optional `bias` `(channels)`; `activation` "silu" / "swish" applies
//! `x * sigmoid(x)`. Output 1, `present_state`, is the last `k - 1` positions of the padded
//! input. f32, f64, f16, bf16 (16-bit types compute in f32, rounded after the convolution as
//! the reference does).

use std::marker::PhantomData;

use num_traits::Zero;
use strata_core::{DType, Device};

use crate::cpu_float_kernel;
use crate::support::inputs::{optional, required};
use crate::support::numeric::{Real, WideFloat};
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "CausalConvWithState";

/// Input indices.
const WEIGHT: usize = 1;
const BIAS: usize = 2;
const PAST_STATE: usize = 3;

#[derive(Clone, Copy, Debug)]
pub struct CausalConvWithState {
    /// Apply SiLU (`x * sigmoid(x)`) to the convolution.
    silu: bool,
}

/// Validated sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    batch: usize,
    channels: usize,
    length: usize,
    kernel: usize,
}

impl Geometry {
    fn new(
        x: &[usize],
        weight: &[usize],
        bias: Option<&[usize]>,
        past: Option<&[usize]>,
    ) -> OpResult<Geometry> {
        let shape_err = |m: String| OpError::shape(OP, m);
        let [batch, channels, length] = *x else {
            return Err(shape_err(format!(
                "input must be (batch, channels, length), got {x:?}"
            )));
        };
        let kernel = match *weight {
            [c, 1, k] if c == channels && k > 0 => k,
            _ => {
                return Err(shape_err(format!(
                    "weight {weight:?} must be (channels = {channels}, 1, k >= 1)"
                )))
            }
        };
        if let Some(b) = bias.filter(|b| *b != [channels]) {
            return Err(shape_err(format!("bias {b:?} must be ({channels})")));
        }
        if let Some(p) = past.filter(|p| *p != [batch, channels, kernel - 1]) {
            return Err(shape_err(format!(
                "past_state {p:?} must be (batch, channels, k - 1) = {:?}",
                [batch, channels, kernel - 1]
            )));
        }
        Ok(Geometry {
            batch,
            channels,
            length,
            kernel,
        })
    }
}

impl CausalConvWithState {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let silu = match ctx.attrs.string_or("activation", "none")?.as_str() {
            "none" => false,
            "silu" | "swish" => true,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "activation",
                    format!("must be \"none\", \"silu\" or \"swish\", got {other:?}"),
                ))
            }
        };
        Ok(Box::new(CausalConvWithState { silu }))
    }
}

impl Operator for CausalConvWithState {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let w = required(OP, inputs, WEIGHT)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a float type".into(),
                actual: x.dtype,
            });
        }
        for index in [WEIGHT, BIAS, PAST_STATE] {
            if let Some(f) = optional(inputs, index).filter(|f| f.dtype != x.dtype) {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: format!("{} like the input", x.dtype),
                    actual: f.dtype,
                });
            }
        }
        if x.rank() != 3 || w.rank() != 3 {
            return Err(OpError::shape(
                OP,
                format!("input {:?} and weight {:?} must be 3-D", x.dims, w.dims),
            ));
        }
        let concrete = |i: usize| optional(inputs, i).map(|f| f.concrete());
        if let (Some(xd), Some(wd), b, p) = (
            x.concrete(),
            w.concrete(),
            concrete(BIAS),
            concrete(PAST_STATE),
        ) {
            if !matches!(b, Some(None)) && !matches!(p, Some(None)) {
                Geometry::new(&xd, &wd, b.flatten().as_deref(), p.flatten().as_deref())?;
            }
        }
        let state_len = w.dims[2].map(|k| k.saturating_sub(1));
        Ok(vec![
            Fact::new(x.dtype, x.dims.clone()),
            Fact::new(
                x.dtype,
                vec![x.dims[0].clone(), x.dims[1].clone(), state_len],
            ),
        ])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => CausalConvKernel::<T> {
            silu: self.silu,
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct CausalConvKernel<T> {
    silu: bool,
    _t: PhantomData<T>,
}

/// `x * sigmoid(x)`.
fn silu<W: WideFloat>(x: W) -> W {
    x / (W::one() + (-x).exp_v())
}

impl<T: Real> Kernel for CausalConvKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let defined = |i: usize| Some(io.input(i)).filter(|t| t.is_defined());
        let (x_t, w_t) = (io.input(0), io.input(WEIGHT));
        let (bias_t, past_t) = (defined(BIAS), defined(PAST_STATE));
        let g = Geometry::new(
            x_t.dims(),
            w_t.dims(),
            bias_t.map(|t| t.dims()),
            past_t.map(|t| t.dims()),
        )?;
        let (y_t, state_t) = (io.output(0), io.output(1));
        let state_dims = [g.batch, g.channels, g.kernel - 1];
        if y_t.dims() != x_t.dims() || (state_t.is_defined() && state_t.dims() != state_dims) {
            return Err(OpError::kernel(
                OP,
                format!(
                    "outputs are bound with dims {:?} / {:?}, expected {:?} / {state_dims:?}",
                    y_t.dims(),
                    state_t.dims(),
                    x_t.dims()
                ),
            ));
        }
        let not_contiguous = || OpError::kernel(OP, "an input or output is not contiguous");
        let (x_r, w_r) = (x_t.read::<T>()?, w_t.read::<T>()?);
        let x = x_r.as_slice().ok_or_else(not_contiguous)?;
        let w = w_r.as_slice().ok_or_else(not_contiguous)?;
        let bias_r = bias_t.map(|t| t.read::<T>()).transpose()?;
        let bias = bias_r
            .as_ref()
            .map(|r| r.as_slice().ok_or_else(not_contiguous))
            .transpose()?;
        let past_r = past_t.map(|t| t.read::<T>()).transpose()?;
        let past = past_r
            .as_ref()
            .map(|r| r.as_slice().ok_or_else(not_contiguous))
            .transpose()?;
        let mut y_w = y_t.write::<T>()?;
        let y = y_w.as_mut_slice().ok_or_else(not_contiguous)?;
        let mut state_w = if state_t.is_defined() {
            Some(state_t.write::<T>()?)
        } else {
            None
        };
        let mut state = state_w
            .as_mut()
            .map(|s| s.as_mut_slice().ok_or_else(not_contiguous))
            .transpose()?;

        let (k, len, hist) = (g.kernel, g.length, g.kernel - 1);
        for lane in 0..g.batch * g.channels {
            let c = lane % g.channels;
            let x = &x[lane * len..(lane + 1) * len];
            let past = past.map(|p| &p[lane * hist..(lane + 1) * hist]);
            // Position `p` of the padded sequence (past then input).
            let padded = |p: usize| -> T::Wide {
                if p < hist {
                    past.map_or(T::Wide::zero(), |past| past[p].widen())
                } else {
                    x[p - hist].widen()
                }
            };
            let w = &w[c * k..(c + 1) * k];
            let b = bias.map_or(T::Wide::zero(), |b| b[c].widen());
            for (t, out) in y[lane * len..(lane + 1) * len].iter_mut().enumerate() {
                let acc = w
                    .iter()
                    .enumerate()
                    .fold(b, |acc, (i, wi)| acc + wi.widen() * padded(t + i));
                let conv = T::narrow(acc).widen();
                *out = T::narrow(if self.silu { silu(conv) } else { conv });
            }
            if let Some(state) = state.as_deref_mut() {
                // The last k - 1 positions of the padded sequence (length hist + len).
                for (i, s) in state[lane * hist..(lane + 1) * hist].iter_mut().enumerate() {
                    *s = T::narrow(padded(len + i));
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
    use crate::Attr;
    use strata_core::Tensor;

    fn run(activation: &str, inputs: &[&Tensor]) -> OpResult<(Vec<f32>, Vec<f32>)> {
        let inputs: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
        let out = OpRun::new(OP, 27)
            .attrs(&[("activation", Attr::String(activation.to_string()))])
            .outputs(2)
            .constant_inputs()
            .run(&inputs)?;
        Ok((out[0].to_vec::<f32>()?, out[1].to_vec::<f32>()?))
    }

    #[test]
    fn convolves_causally_and_carries_the_state() {
        // One channel, k = 3: y[t] = w0 * p[t] + w1 * p[t+1] + w2 * p[t+2] + bias over the
        // padded p = past ++ x.
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 1, 3]).unwrap();
        let w = Tensor::from_slice(&[1.0f32, 10.0, 100.0], &[1, 1, 3]).unwrap();
        let b = Tensor::from_slice(&[0.5f32], &[1]).unwrap();
        let past = Tensor::from_slice(&[4.0f32, 5.0], &[1, 1, 2]).unwrap();
        let (y, s) = run("none", &[&x, &w, &b, &past]).unwrap();
        assert_eq!(
            y,
            vec![
                4.0 + 50.0 + 100.0 + 0.5,
                5.0 + 10.0 + 200.0 + 0.5,
                1.0 + 20.0 + 300.0 + 0.5
            ]
        );
        assert_eq!(s, vec![2.0, 3.0]);
        // No past: zeros; SiLU on top.
        let none = Tensor::undefined();
        let (y, s) = run("silu", &[&x, &w, &none, &none]).unwrap();
        let silu = |v: f32| v / (1.0 + (-v).exp());
        assert!((y[0] - silu(100.0)).abs() < 1e-4);
        assert!((y[1] - silu(210.0)).abs() < 1e-3);
        assert_eq!(s, vec![2.0, 3.0]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 1, 3]).unwrap();
        let w = Tensor::from_slice(&[1.0f32, 10.0], &[2, 1, 1]).unwrap();
        assert!(run("none", &[&x, &w]).is_err());
        let w = Tensor::from_slice(&[1.0f32, 10.0], &[1, 1, 2]).unwrap();
        let past = Tensor::from_slice(&[1.0f32, 10.0], &[1, 1, 2]).unwrap();
        let none = Tensor::undefined();
        assert!(run("none", &[&x, &w, &none, &past]).is_err());
        assert!(run("relu", &[&x, &w]).is_err());
    }
}
