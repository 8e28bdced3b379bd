//! GroupNormalization (opsets 18 and 21) and InstanceNormalization (opsets 1+): the channels of
//! each sample are split into groups, every group (its channels times the spatial dims, one
//! contiguous block in NC... layout) is normalized to zero mean and unit variance, then an affine
//! transform is applied. InstanceNormalization is the case of one channel per group.
//! GroupNormalization-18 takes scale and bias per group, GroupNormalization-21 per channel.

use std::marker::PhantomData;

use num_traits::Float;
use strata_core::Device;

use super::common::{check_vector, contiguous, contiguous_mut, float_input, mean_var, same_dtype};
use crate::cpu_float_kernel;
use crate::support::inputs::required;
use crate::support::numeric::{Real, WideFloat};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

/// How the channels are grouped.
#[derive(Debug, Clone, Copy)]
enum Grouping {
    /// `num_groups` groups of `C / num_groups` channels.
    Groups(usize),
    /// One group per channel (InstanceNormalization).
    PerChannel,
}

#[derive(Debug, Clone)]
pub struct GroupNorm {
    op: &'static str,
    grouping: Grouping,
    epsilon: f32,
    /// Scale and bias hold one value per group (GroupNormalization before opset 21) instead of
    /// one per channel.
    affine_per_group: bool,
}

impl GroupNorm {
    pub fn build_group(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let op = "GroupNormalization";
        let groups = ctx
            .attrs
            .int("num_groups")?
            .ok_or_else(|| OpError::attribute(op, "num_groups", "is required"))?;
        let groups = usize::try_from(groups)
            .ok()
            .filter(|&g| g > 0)
            .ok_or_else(|| {
                OpError::attribute(op, "num_groups", format!("{groups} is not positive"))
            })?;
        Ok(Box::new(GroupNorm {
            op,
            grouping: Grouping::Groups(groups),
            epsilon: ctx.attrs.float_or("epsilon", 1e-5)?,
            affine_per_group: ctx.opset < 21,
        }))
    }

    pub fn build_instance(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(GroupNorm {
            op: "InstanceNormalization",
            grouping: Grouping::PerChannel,
            epsilon: ctx.attrs.float_or("epsilon", 1e-5)?,
            affine_per_group: false,
        }))
    }

    /// The number of groups for `channels` channels; they must divide evenly.
    fn groups(&self, channels: usize) -> OpResult<usize> {
        match self.grouping {
            Grouping::PerChannel => Ok(channels),
            Grouping::Groups(g) if channels.is_multiple_of(g) => Ok(g),
            Grouping::Groups(g) => Err(OpError::attribute(
                self.op,
                "num_groups",
                format!("{g} does not divide the {channels} channels"),
            )),
        }
    }
}

impl Operator for GroupNorm {
    fn op_type(&self) -> &str {
        self.op
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.op;
        let x = float_input(op, inputs, 0)?;
        required(op, inputs, 1)?;
        required(op, inputs, 2)?;
        same_dtype(op, inputs, 1, x.dtype)?;
        same_dtype(op, inputs, 2, x.dtype)?;
        if x.rank() < 2 {
            return Err(OpError::shape(
                op,
                format!("input must have rank >= 2 (N, C, ...), got {:?}", x.dims),
            ));
        }
        let param_len = match (self.affine_per_group, self.grouping, &x.dims[1]) {
            (true, Grouping::Groups(g), _) => Dim::Known(g),
            (_, _, c) => {
                if let Some(c) = c.known() {
                    self.groups(c)?;
                }
                c.clone()
            }
        };
        check_vector(op, inputs, 1, "scale", &param_len)?;
        check_vector(op, inputs, 2, "bias", &param_len)?;
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = float_input(self.op, inputs, 0)?.dtype;
        cpu_float_kernel!(self.op, dtype, device, T => GroupNormKernel::<T> {
            op: self.clone(),
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct GroupNormKernel<T> {
    op: GroupNorm,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for GroupNormKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.op.op;
        let x = io.input(0);
        let dims = x.dims();
        if dims.len() < 2 {
            return Err(OpError::kernel(
                op,
                format!("input dims {dims:?} have rank < 2"),
            ));
        }
        let channels = dims[1];
        let groups = self.op.groups(channels)?;
        let spatial: usize = dims[2..].iter().product();
        let per_group = channels / groups.max(1);
        let param_len = if self.op.affine_per_group {
            groups
        } else {
            channels
        };
        let (sr, br) = (io.input(1).read::<T>()?, io.input(2).read::<T>()?);
        let (scale, bias) = (contiguous(op, "scale", &sr)?, contiguous(op, "bias", &br)?);
        if scale.len() != param_len || bias.len() != param_len {
            return Err(OpError::kernel(
                op,
                format!(
                    "scale and bias need {param_len} elements, got {} and {}",
                    scale.len(),
                    bias.len()
                ),
            ));
        }
        let xr = x.read::<T>()?;
        let xs = contiguous(op, "input", &xr)?;
        let mut yw = io.output(0).write::<T>()?;
        let y = contiguous_mut(op, "output", &mut yw)?;
        let block = per_group * spatial;
        if block == 0 {
            return Ok(());
        }
        let eps = <T::Wide as WideFloat>::lit(f64::from(self.op.epsilon));
        for (b, (xb, yb)) in xs
            .chunks_exact(block)
            .zip(y.chunks_exact_mut(block))
            .enumerate()
        {
            let group = b % groups;
            let (mean, var) = mean_var(xb);
            let inv_std = (var + eps).sqrt().recip();
            for (k, (xc, yc)) in xb
                .chunks_exact(spatial)
                .zip(yb.chunks_exact_mut(spatial))
                .enumerate()
            {
                let p = if self.op.affine_per_group {
                    group
                } else {
                    group * per_group + k
                };
                let (s, t) = (scale[p].widen() * inv_std, bias[p].widen());
                for (o, &v) in yc.iter_mut().zip(xc) {
                    *o = T::narrow((v.widen() - mean) * s + t);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::{assert_close, run_outputs};
    use crate::Attr;
    use strata_core::Tensor;

    #[test]
    fn instance_norm_per_channel() {
        // One sample, two channels of two values each.
        let x = Tensor::from_slice(&[1.0f32, 3.0, 10.0, 20.0], &[1, 2, 2]).unwrap();
        let s = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let b = Tensor::from_slice(&[0.0f32, 1.0], &[2]).unwrap();
        let out = run_outputs(
            "InstanceNormalization",
            6,
            &[("epsilon", Attr::Float(0.0))],
            &[x, s, b],
            1,
        )
        .unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-1.0, 1.0, -1.0, 3.0],
            "y",
        );
    }

    #[test]
    fn group_norm_per_channel_affine_at_21_and_per_group_at_18() {
        // Two groups of two channels, one value per channel.
        let x = Tensor::from_slice(&[1.0f32, 3.0, 5.0, 9.0], &[1, 4]).unwrap();
        let attrs = [("num_groups", Attr::Int(2)), ("epsilon", Attr::Float(0.0))];
        let s = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
        let b = Tensor::from_slice(&[0.0f32, 0.0, 0.0, 1.0], &[4]).unwrap();
        let out = run_outputs("GroupNormalization", 21, &attrs, &[x.clone(), s, b], 1).unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-1.0, 2.0, -3.0, 5.0],
            "y21",
        );
        let s = Tensor::from_slice(&[2.0f32, 1.0], &[2]).unwrap();
        let b = Tensor::from_slice(&[0.0f32, 1.0], &[2]).unwrap();
        let out = run_outputs("GroupNormalization", 18, &attrs, &[x, s, b], 1).unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-2.0, 2.0, 0.0, 2.0],
            "y18",
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_slice(&[1.0f32; 6], &[1, 3, 2]).unwrap();
        let s = Tensor::from_slice(&[1.0f32; 3], &[3]).unwrap();
        let err = run_outputs(
            "GroupNormalization",
            21,
            &[("num_groups", Attr::Int(2))],
            &[x.clone(), s.clone(), s.clone()],
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("num_groups"), "{err}");
        let err = run_outputs(
            "GroupNormalization",
            21,
            &[],
            &[x.clone(), s.clone(), s.clone()],
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("required"), "{err}");
        let s2 = Tensor::from_slice(&[1.0f32; 2], &[2]).unwrap();
        let err = run_outputs(
            "InstanceNormalization",
            6,
            &[],
            &[x.clone(), s2, s.clone()],
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("scale"), "{err}");
        let v = Tensor::from_slice(&[1.0f32; 3], &[3]).unwrap();
        assert!(run_outputs("InstanceNormalization", 6, &[], &[v, s.clone(), s], 1).is_err());
    }
}
