//! LayerNormalization (opset 17) and RMSNormalization (opset 23): each row of the input reshaped
//! to 2-D at `axis` is normalized over its trailing dims, then scaled (and, for LayerNorm,
//! shifted). LayerNorm centers with the row mean, RMSNorm only divides by the root mean square.
//! LayerNorm's optional outputs Mean and InvStdDev (dims `X[..axis]` followed by ones) take the
//! dtype named by `stash_type`; statistics are computed in f32 (f64 for f64 inputs).

use std::marker::PhantomData;

use num_traits::{Float, Zero};
use strata_core::{DType, Device, Tensor};

use super::common::{
    block_param_len, check_block_param, contiguous, contiguous_mut, float_input, same_dtype,
};
use super::row_kernel::{RowNormKernel, RowSlots};
use crate::cpu_float_kernel;
use crate::ops::cast::cast::dtype_from_onnx_code;
use crate::support::axes::normalize_axis;
use crate::support::inputs::{optional, required};
use crate::support::numeric::{Real, WideFloat};
use crate::{
    dispatch_float, Dim, Fact, Kernel, KernelIo, OpCapabilities, OpContext, OpError, OpResult,
    Operator, RowNorm,
};

/// Whether the rows are centered before scaling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Centering {
    /// LayerNormalization: `(x - mean) / sqrt(var + eps)`.
    Mean,
    /// RMSNormalization: `x / sqrt(mean(x²) + eps)`.
    None,
}

#[derive(Debug, Clone)]
pub struct LayerNorm {
    op: &'static str,
    centering: Centering,
    axis: i64,
    epsilon: f32,
    /// dtype of the Mean and InvStdDev outputs.
    stash: DType,
    num_outputs: usize,
}

impl LayerNorm {
    pub fn build_layer(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Self::build(ctx, "LayerNormalization", Centering::Mean, 3)
    }

    pub fn build_rms(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Self::build(ctx, "RMSNormalization", Centering::None, 1)
    }

    fn build(
        ctx: &OpContext,
        op: &'static str,
        centering: Centering,
        max_outputs: usize,
    ) -> OpResult<Box<dyn Operator>> {
        let code = ctx.attrs.int_or("stash_type", 1)?;
        let stash = dtype_from_onnx_code(code)
            .filter(|d| d.is_float())
            .ok_or_else(|| {
                OpError::attribute(op, "stash_type", format!("{code} is not a float type"))
            })?;
        if ctx.num_outputs > max_outputs {
            return Err(OpError::shape(
                op,
                format!(
                    "at most {max_outputs} outputs, the node lists {}",
                    ctx.num_outputs
                ),
            ));
        }
        Ok(Box::new(LayerNorm {
            op,
            centering,
            axis: ctx.attrs.int_or("axis", -1)?,
            epsilon: ctx.attrs.float_or("epsilon", 1e-5)?,
            stash,
            num_outputs: ctx.num_outputs.max(1),
        }))
    }
}

impl Operator for LayerNorm {
    fn op_type(&self) -> &str {
        self.op
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            row_norm: Some(RowNorm {
                axis: self.axis,
                epsilon: self.epsilon,
                centered: self.centering == Centering::Mean,
            }),
            ..OpCapabilities::default()
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.op;
        let x = float_input(op, inputs, 0)?;
        let scale = required(op, inputs, 1)?;
        same_dtype(op, inputs, 1, x.dtype)?;
        same_dtype(op, inputs, 2, x.dtype)?;
        let axis = normalize_axis(op, "axis", self.axis, x.rank())?;
        let block = &x.dims[axis..];
        check_block_param(op, "scale", scale, block)?;
        if self.centering == Centering::Mean {
            if let Some(bias) = optional(inputs, 2) {
                check_block_param(op, "bias", bias, block)?;
            }
        } else if optional(inputs, 2).is_some() {
            return Err(OpError::InputCount {
                op: op.into(),
                expected: "2".into(),
                actual: inputs.len(),
            });
        }
        let mut stat_dims: Vec<Dim> = x.dims[..axis].to_vec();
        stat_dims.resize(x.rank(), Dim::Known(1));
        let mut out = vec![Fact::new(x.dtype, x.dims.clone())];
        for _ in 1..self.num_outputs {
            out.push(Fact::new(self.stash, stat_dims.clone()));
        }
        Ok(out)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let x = float_input(self.op, inputs, 0)?;
        let dtype = x.dtype;
        let centered = self.centering == Centering::Mean;
        let slots = RowSlots {
            skip: None,
            gamma: 1,
            beta: centered.then_some(2),
            bias: None,
            mean: centered.then_some(1),
            inv_std: centered.then_some(2),
            sum: None,
        };
        let axis = normalize_axis(self.op, "axis", self.axis, x.rank())?;
        if device == Device::Cpu && RowNormKernel::fits(&slots, axis, inputs, outputs) {
            return Ok(Box::new(RowNormKernel {
                op: self.op,
                slots,
                axis,
                epsilon: self.epsilon,
                centered,
            }));
        }
        cpu_float_kernel!(self.op, dtype, device, T => LayerNormKernel::<T> {
            op: self.clone(),
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct LayerNormKernel<T> {
    op: LayerNorm,
    _t: PhantomData<T>,
}

/// Mean and inverse standard deviation of every row, in the wide type.
struct RowStats<W> {
    mean: Vec<W>,
    inv_std: Vec<W>,
}

impl<T: Real> Kernel for LayerNormKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.op.op;
        let x = io.input(0);
        let axis = normalize_axis(op, "axis", self.op.axis, x.rank())?;
        let block = &x.dims()[axis..];
        let cols: usize = block.iter().product();
        let rows: usize = x.dims()[..axis].iter().product();
        let scale_len = block_param_len(op, "scale", io.input(1), block)?;
        let bias = io.input(2);
        let bias_len = if bias.is_defined() {
            block_param_len(op, "bias", bias, block)?
        } else {
            0
        };

        let xr = x.read::<T>()?;
        let xs = contiguous(op, "X", &xr)?;
        let sr = io.input(1).read::<T>()?;
        let scale = contiguous(op, "scale", &sr)?;
        let br = if bias.is_defined() {
            Some(bias.read::<T>()?)
        } else {
            None
        };
        let bias = br.as_ref().map(|g| contiguous(op, "bias", g)).transpose()?;

        let eps = <T::Wide as WideFloat>::lit(f64::from(self.op.epsilon));
        // Row statistics only when an output asks for them: without, a run allocates nothing.
        let keep_stats = io.output(1).is_defined() || io.output(2).is_defined();
        let stats_rows = if keep_stats { rows } else { 0 };
        let mut stats = RowStats {
            mean: Vec::with_capacity(stats_rows),
            inv_std: Vec::with_capacity(stats_rows),
        };
        let mut yw = io.output(0).write::<T>()?;
        let y = contiguous_mut(op, "Y", &mut yw)?;
        if cols > 0 {
            for (row, out) in xs.chunks_exact(cols).zip(y.chunks_exact_mut(cols)) {
                let (mean, var) = match self.op.centering {
                    Centering::Mean => super::common::mean_var(row),
                    Centering::None => (T::Wide::zero(), mean_square(row)),
                };
                let inv_std = (var + eps).sqrt().recip();
                for (j, (o, &v)) in out.iter_mut().zip(row).enumerate() {
                    let mut r = (v.widen() - mean) * inv_std * scale[j % scale_len].widen();
                    if let Some(b) = bias {
                        r = r + b[j % bias_len].widen();
                    }
                    *o = T::narrow(r);
                }
                if keep_stats {
                    stats.mean.push(mean);
                    stats.inv_std.push(inv_std);
                }
            }
        }
        write_stats(op, io.output(1), &stats.mean, rows)?;
        write_stats(op, io.output(2), &stats.inv_std, rows)
    }
}

/// Mean of the squares of `row`, in the wide type.
fn mean_square<T: Real>(row: &[T]) -> T::Wide {
    let n = <T::Wide as WideFloat>::lit(row.len().max(1) as f64);
    row.iter().fold(T::Wide::zero(), |s, &x| {
        let v = x.widen();
        s + v * v
    }) / n
}

/// Writes per-row statistics to an optional output of any float dtype.
fn write_stats<W: Float>(op: &str, out: &Tensor, values: &[W], rows: usize) -> OpResult<()> {
    if !out.is_defined() {
        return Ok(());
    }
    if out.numel() != rows {
        return Err(OpError::kernel(
            op,
            format!(
                "statistics output has {} elements for {rows} rows",
                out.numel()
            ),
        ));
    }
    let dtype = out.dtype();
    dispatch_float!(dtype, U => {
        let mut w = out.write::<U>()?;
        let dst = contiguous_mut(op, "statistics output", &mut w)?;
        for (d, v) in dst.iter_mut().zip(values) {
            let wide = <<U as Real>::Wide as WideFloat>::lit(v.to_f64().unwrap_or(f64::NAN));
            *d = U::narrow(wide);
        }
        Ok(())
    }, _ => Err(OpError::kernel(op, format!("statistics dtype {dtype} is not a float type"))))
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::{assert_close, run_outputs};
    use crate::Attr;
    use strata_core::{f16, Tensor};

    #[test]
    fn layer_norm_rows_with_scale_bias_and_stats() {
        // Rows [1, 2, 3] and [2, 4, 6]: means 2 and 4, variances 2/3 and 8/3.
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 2.0, 4.0, 6.0], &[2, 3]).unwrap();
        let w = Tensor::from_slice(&[1.0f32, 2.0, 1.0], &[3]).unwrap();
        let b = Tensor::from_slice(&[0.0f32, 0.0, 1.0], &[3]).unwrap();
        let out = run_outputs(
            "LayerNormalization",
            17,
            &[("epsilon", Attr::Float(0.0))],
            &[x, w, b],
            3,
        )
        .unwrap();
        let k = (1.5f32).sqrt(); // 1 / sqrt(2/3)
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-k, 0.0, k + 1.0, -k, 0.0, k + 1.0],
            "Y",
        );
        assert_eq!(out[1].dims(), &[2, 1]);
        assert_close(&out[1].to_vec::<f32>().unwrap(), &[2.0, 4.0], "Mean");
        assert_close(
            &out[2].to_vec::<f32>().unwrap(),
            &[k, (3.0f32 / 8.0).sqrt()],
            "InvStdDev",
        );
    }

    #[test]
    fn layer_norm_axis_zero_normalizes_everything() {
        let x = Tensor::from_slice(&[0.0f32, 2.0, 4.0, 6.0], &[2, 2]).unwrap();
        let w = Tensor::from_slice(&[1.0f32; 4], &[2, 2]).unwrap();
        let out = run_outputs(
            "LayerNormalization",
            17,
            &[("axis", Attr::Int(0)), ("epsilon", Attr::Float(0.0))],
            &[x, w],
            1,
        )
        .unwrap();
        // mean 3, variance 5.
        let s = 5.0f32.sqrt();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-3.0 / s, -1.0 / s, 1.0 / s, 3.0 / s],
            "Y",
        );
    }

    #[test]
    fn rms_norm_divides_by_root_mean_square() {
        let x = Tensor::from_slice(&[3.0f32, 4.0], &[1, 2]).unwrap();
        let w = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let out = run_outputs(
            "RMSNormalization",
            23,
            &[("epsilon", Attr::Float(0.0))],
            &[x, w],
            1,
        )
        .unwrap();
        // rms = sqrt(12.5)
        let r = 12.5f32.sqrt();
        assert_close(&out[0].to_vec::<f32>().unwrap(), &[3.0 / r, 8.0 / r], "Y");
    }

    #[test]
    fn half_inputs_compute_in_f32() {
        let x = Tensor::from_slice(&[f16::from_f32(1.0), f16::from_f32(3.0)], &[2]).unwrap();
        let w = Tensor::from_slice(&[f16::from_f32(1.0); 2], &[2]).unwrap();
        let out = run_outputs(
            "LayerNormalization",
            17,
            &[("epsilon", Attr::Float(0.0))],
            &[x, w],
            2,
        )
        .unwrap();
        let y: Vec<f32> = out[0]
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert_eq!(y, vec![-1.0, 1.0]);
        // The Mean output takes stash_type's dtype (float).
        assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![2.0]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
        let w = Tensor::from_slice(&[1.0f32; 2], &[2]).unwrap();
        let err = run_outputs("LayerNormalization", 17, &[], &[x.clone(), w], 1).unwrap_err();
        assert!(err.to_string().contains("scale"), "{err}");
        let w = Tensor::from_slice(&[1.0f32; 3], &[3]).unwrap();
        let err = run_outputs(
            "LayerNormalization",
            17,
            &[("axis", Attr::Int(2))],
            &[x.clone(), w.clone()],
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("axis"), "{err}");
        let err = run_outputs(
            "LayerNormalization",
            17,
            &[("stash_type", Attr::Int(7))],
            &[x.clone(), w],
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("stash_type"), "{err}");
        let err = run_outputs("RMSNormalization", 23, &[], &[x], 1).unwrap_err();
        assert!(err.to_string().contains("RMSNormalization"), "{err}");
        let xi = Tensor::from_slice(&[1i32, 2], &[2]).unwrap();
        let wi = Tensor::from_slice(&[1i32, 2], &[2]).unwrap();
        assert!(run_outputs("RMSNormalization", 23, &[], &[xi, wi], 1).is_err());
    }
}
