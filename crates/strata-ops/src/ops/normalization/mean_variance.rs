//! MeanVarianceNormalization (opsets 9 and 13): `(x - mean) / (std + 1e-9)`, the mean and the
//! (biased) standard deviation taken over `axes` (default `[0, 2, 3]`), as the operator's ONNX
//! function body defines it.

use std::marker::PhantomData;

use num_traits::{Float, Zero};
use smallvec::SmallVec;
use strata_core::Device;

use super::common::{contiguous, contiguous_mut, float_input};
use crate::cpu_float_kernel;
use crate::ops::indexing::gather_elements::for_each_index;
use crate::support::axes::{contiguous_strides, normalize_axes, Axes};
use crate::support::numeric::{Real, WideFloat};
use crate::{Fact, Kernel, KernelIo, OpContext, OpResult, Operator};

const OP: &str = "MeanVarianceNormalization";

/// Added to the standard deviation (not the variance) by the ONNX function body.
const STD_EPSILON: f64 = 1e-9;

#[derive(Debug, Clone)]
pub struct MeanVarianceNorm {
    axes: Vec<i64>,
}

impl MeanVarianceNorm {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(MeanVarianceNorm {
            axes: ctx.attrs.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]),
        }))
    }
}

impl Operator for MeanVarianceNorm {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = float_input(OP, inputs, 0)?;
        normalize_axes(OP, "axes", &self.axes, x.rank())?;
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = float_input(OP, inputs, 0)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => MvnKernel::<T> {
            op: self.clone(),
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct MvnKernel<T> {
    op: MeanVarianceNorm,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for MvnKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = io.input(0);
        let dims = x.dims();
        let axes: Axes = normalize_axes(OP, "axes", &self.op.axes, dims.len())?;
        // Every element maps to the statistics slot of its kept (non-reduced) coordinates.
        let kept_dims: SmallVec<[usize; 8]> = (0..dims.len())
            .map(|a| if axes.contains(&a) { 1 } else { dims[a] })
            .collect();
        let kept_contig = contiguous_strides(&kept_dims);
        let slot_strides: SmallVec<[isize; 8]> = (0..dims.len())
            .map(|a| {
                if axes.contains(&a) {
                    0
                } else {
                    kept_contig[a] as isize
                }
            })
            .collect();
        let no_strides: SmallVec<[isize; 8]> = SmallVec::from_elem(0, dims.len());
        let slots: usize = kept_dims.iter().product();
        let count: usize = axes.iter().map(|&a| dims[a]).product();
        let n = <T::Wide as WideFloat>::lit(count.max(1) as f64);

        let xr = x.read::<T>()?;
        let xs = contiguous(OP, "input", &xr)?;
        let mut mean = vec![T::Wide::zero(); slots];
        for_each_index(dims, &slot_strides, &no_strides, |s, _, flat| {
            mean[s as usize] = mean[s as usize] + xs[flat].widen();
            Ok(())
        })?;
        mean.iter_mut().for_each(|m| *m = *m / n);
        let mut var = vec![T::Wide::zero(); slots];
        for_each_index(dims, &slot_strides, &no_strides, |s, _, flat| {
            let d = xs[flat].widen() - mean[s as usize];
            var[s as usize] = var[s as usize] + d * d;
            Ok(())
        })?;
        let eps = <T::Wide as WideFloat>::lit(STD_EPSILON);
        // From here `var` holds 1 / (std + eps).
        var.iter_mut()
            .for_each(|v| *v = ((*v / n).sqrt() + eps).recip());
        let mut yw = io.output(0).write::<T>()?;
        let y = contiguous_mut(OP, "output", &mut yw)?;
        for_each_index(dims, &slot_strides, &no_strides, |s, _, flat| {
            let s = s as usize;
            y[flat] = T::narrow((xs[flat].widen() - mean[s]) * var[s]);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::{assert_close, run_outputs};
    use crate::Attr;
    use strata_core::Tensor;

    #[test]
    fn normalizes_over_the_given_axes() {
        // Over axis 0 the two columns are [1, 3] and [2, 6]: std 1 and 2.
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 6.0], &[2, 2]).unwrap();
        let out = run_outputs(
            "MeanVarianceNormalization",
            13,
            &[("axes", Attr::Ints(vec![0]))],
            &[x],
            1,
        )
        .unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-1.0, -1.0, 1.0, 1.0],
            "y",
        );
    }

    #[test]
    fn default_axes_keep_channels() {
        // [N=1, C=2, H=1, W=2]: channel 0 is [0, 2], channel 1 is [5, 5] (std 0).
        let x = Tensor::from_slice(&[0.0f32, 2.0, 5.0, 5.0], &[1, 2, 1, 2]).unwrap();
        let out = run_outputs("MeanVarianceNormalization", 13, &[], &[x], 1).unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-1.0, 1.0, 0.0, 0.0],
            "y",
        );
    }

    #[test]
    fn bad_axes_are_errors() {
        let x = Tensor::from_slice(&[1.0f32; 4], &[2, 2]).unwrap();
        // The default axes need rank 4.
        let err = run_outputs(
            "MeanVarianceNormalization",
            13,
            &[],
            std::slice::from_ref(&x),
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("axes"), "{err}");
        let err = run_outputs(
            "MeanVarianceNormalization",
            13,
            &[("axes", Attr::Ints(vec![1, -1]))],
            &[x],
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("repeated"), "{err}");
    }
}
