//! NegativeLogLikelihoodLoss (opsets 12, 13, 22), and the parts SoftmaxCrossEntropyLoss shares
//! with it: the `reduction` and `ignore_index` attributes, the input checks, and the gather of
//! `-weight[t] * log_prob[n, t, d...]` with its `none` / `sum` / `mean` reduction. Input dims are
//! `[N, C, d1..dk]`, target dims `[N, d1..dk]`; `mean` divides by the sum of the weights of the
//! targets that are not ignored.

use std::marker::PhantomData;

use num_traits::{One, Zero};
use strata_core::{DType, Device, Tensor};

use crate::ops::indexing::gather_elements::{with_indices, Indices};
use crate::ops::normalization::common::{contiguous, contiguous_mut, float_input, same_dtype};
use crate::support::axes::check_int_input;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::numeric::Real;
use crate::{dispatch_float, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

/// How the per-element losses are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reduction {
    None,
    Sum,
    Mean,
}

/// The attributes both loss operators share.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LossConfig {
    pub op: &'static str,
    pub reduction: Reduction,
    pub ignore_index: Option<i64>,
}

impl LossConfig {
    pub fn parse(op: &'static str, ctx: &OpContext) -> OpResult<Self> {
        let reduction = match ctx.attrs.string_or("reduction", "mean")?.as_str() {
            "none" => Reduction::None,
            "sum" => Reduction::Sum,
            "mean" => Reduction::Mean,
            other => {
                return Err(OpError::attribute(
                    op,
                    "reduction",
                    format!("expected none, sum or mean, got {other:?}"),
                ))
            }
        };
        Ok(LossConfig {
            op,
            reduction,
            ignore_index: ctx.attrs.int("ignore_index")?,
        })
    }

    /// Checks scores (input 0), target (input 1) and the optional weight (input 2); returns the
    /// fact of the loss output.
    pub fn infer_loss(&self, inputs: &[&Fact]) -> OpResult<Fact> {
        let op = self.op;
        let x = float_input(op, inputs, 0)?;
        let target = required(op, inputs, 1)?;
        check_int_input(op, inputs, 1)?;
        same_dtype(op, inputs, 2, x.dtype)?;
        if x.rank() < 2 {
            return Err(OpError::shape(
                op,
                format!("scores must have rank >= 2 (N, C, ...), got {:?}", x.dims),
            ));
        }
        let expected: Vec<Dim> = std::iter::once(x.dims[0].clone())
            .chain(x.dims[2..].iter().cloned())
            .collect();
        let compatible = target.rank() == expected.len()
            && target
                .dims
                .iter()
                .zip(&expected)
                .all(|(t, e)| t.known().is_none() || e.known().is_none() || t == e);
        if !compatible {
            return Err(OpError::shape(
                op,
                format!(
                    "target dims {:?} do not match scores {:?} without the class axis",
                    target.dims, x.dims
                ),
            ));
        }
        if let Some(w) = optional(inputs, 2) {
            let ok = matches!(w.dims.as_slice(), [d] if d.known().is_none()
                || x.dims[1].known().is_none() || *d == x.dims[1]);
            if !ok {
                return Err(OpError::shape(
                    op,
                    format!("weight must have dims [{:?}], got {:?}", x.dims[1], w.dims),
                ));
            }
        }
        let dims = match self.reduction {
            Reduction::None => target.dims.clone(),
            Reduction::Sum | Reduction::Mean => Vec::new(),
        };
        Ok(Fact::new(x.dtype, dims))
    }

    /// Gathers `-weight[t] * log_prob[n, t, d]` for every target and writes them (reduction
    /// `none`) or their reduction to `out`. `dims` are the scores' dims.
    pub fn gather_loss<T: Real>(
        &self,
        log_prob: &[T],
        dims: &[usize],
        target: &Tensor,
        weight: &Tensor,
        out: &Tensor,
    ) -> OpResult<()> {
        let op = self.op;
        let (n, classes) = (dims[0], dims[1]);
        let spatial: usize = dims[2..].iter().product();
        let expected: Vec<usize> = std::iter::once(n)
            .chain(dims[2..].iter().copied())
            .collect();
        if target.dims() != expected.as_slice() || log_prob.len() != n * classes * spatial {
            return Err(OpError::kernel(
                op,
                format!(
                    "target dims {:?} do not match scores {dims:?}",
                    target.dims()
                ),
            ));
        }
        let wr = if weight.is_defined() {
            Some(weight.read::<T>()?)
        } else {
            None
        };
        let weight = wr
            .as_ref()
            .map(|g| contiguous(op, "weight", g))
            .transpose()?;
        if weight.is_some_and(|w| w.len() != classes) {
            return Err(OpError::kernel(
                op,
                format!("weight needs {classes} elements"),
            ));
        }
        let mut ow = out.write::<T>()?;
        let out = contiguous_mut(op, "loss", &mut ow)?;
        let expected_out = if self.reduction == Reduction::None {
            n * spatial
        } else {
            1
        };
        if out.len() != expected_out {
            return Err(OpError::kernel(
                op,
                format!("loss output has {} elements", out.len()),
            ));
        }
        with_indices(op, target, |targets: Indices<'_>| {
            let (mut total, mut weight_sum) = (T::Wide::zero(), T::Wide::zero());
            // `i` indexes the targets, the log-probs (via n, class, d) and, unreduced, the output.
            #[allow(clippy::needless_range_loop)]
            for i in 0..n * spatial {
                let t = targets.get(i);
                let (loss, w) = if Some(t) == self.ignore_index {
                    (T::Wide::zero(), T::Wide::zero())
                } else {
                    let class = usize::try_from(t)
                        .ok()
                        .filter(|&c| c < classes)
                        .ok_or_else(|| {
                            OpError::kernel(
                                op,
                                format!("target {t} out of range for {classes} classes"),
                            )
                        })?;
                    let w = weight.map_or(T::Wide::one(), |w| w[class].widen());
                    let (b, s) = (i / spatial.max(1), i % spatial.max(1));
                    let lp = log_prob[(b * classes + class) * spatial + s].widen();
                    (-lp * w, w)
                };
                if self.reduction == Reduction::None {
                    out[i] = T::narrow(loss);
                }
                total = total + loss;
                weight_sum = weight_sum + w;
            }
            match self.reduction {
                Reduction::None => {}
                Reduction::Sum => out[0] = T::narrow(total),
                Reduction::Mean => out[0] = T::narrow(total / weight_sum),
            }
            Ok(())
        })
    }
}

#[derive(Debug, Clone, Copy)]
pub struct NllLoss {
    config: LossConfig,
}

impl NllLoss {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(NllLoss {
            config: LossConfig::parse("NegativeLogLikelihoodLoss", ctx)?,
        }))
    }
}

impl Operator for NllLoss {
    fn op_type(&self) -> &str {
        self.config.op
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        Ok(vec![self.config.infer_loss(inputs)?])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = float_input(self.config.op, inputs, 0)?.dtype;
        loss_kernel(self.config, dtype, device, |config, dtype| {
            dispatch_float!(dtype, T => Some(Box::new(NllKernel::<T> { config, _t: PhantomData })
                as Box<dyn Kernel>), _ => None)
        })
    }
}

/// Picks a loss kernel on the CPU for a float dtype, or names what is missing.
pub(crate) fn loss_kernel(
    config: LossConfig,
    dtype: DType,
    device: Device,
    pick: impl FnOnce(LossConfig, DType) -> Option<Box<dyn Kernel>>,
) -> OpResult<Box<dyn Kernel>> {
    cpu_only(config.op, dtype, device)?;
    pick(config, dtype).ok_or_else(|| OpError::no_kernel(config.op, dtype, device))
}

#[derive(Debug)]
struct NllKernel<T> {
    config: LossConfig,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for NllKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = io.input(0);
        if x.rank() < 2 {
            return Err(OpError::kernel(
                self.config.op,
                "scores must have rank >= 2",
            ));
        }
        let xr = x.read::<T>()?;
        let xs = contiguous(self.config.op, "input", &xr)?;
        self.config
            .gather_loss(xs, x.dims(), io.input(1), io.input(2), io.output(0))
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::{assert_close, run_outputs as run};
    use crate::Attr;
    use strata_core::Tensor;

    fn scores() -> Tensor {
        // N = 2, C = 3, d1 = 2; element [n, c, d] = n * 10 + c + d / 10.
        let v: Vec<f32> = (0..2)
            .flat_map(|n| {
                (0..3).flat_map(move |c| (0..2).map(move |d| (n * 10 + c) as f32 + d as f32 / 10.0))
            })
            .collect();
        Tensor::from_slice(&v, &[2, 3, 2]).unwrap()
    }

    #[test]
    fn none_sum_and_weighted_mean() {
        let t = Tensor::from_slice(&[2i64, 0, 1, 1], &[2, 2]).unwrap();
        let none = [("reduction", Attr::String("none".into()))];
        let out = run(
            "NegativeLogLikelihoodLoss",
            22,
            &none,
            &[scores(), t.clone()],
            1,
        )
        .unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-2.0, -0.1, -11.0, -11.1],
            "none",
        );
        let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let out = run(
            "NegativeLogLikelihoodLoss",
            22,
            &[],
            &[scores(), t.clone(), w],
            1,
        )
        .unwrap();
        // (-2*3 - 0.1*1 - 11*2 - 11.1*2) / (3 + 1 + 2 + 2)
        assert_close(&out[0].to_vec::<f32>().unwrap(), &[-50.3 / 8.0], "mean");
        let sum = [
            ("reduction", Attr::String("sum".into())),
            ("ignore_index", Attr::Int(1)),
        ];
        let out = run("NegativeLogLikelihoodLoss", 22, &sum, &[scores(), t], 1).unwrap();
        assert_close(&out[0].to_vec::<f32>().unwrap(), &[-2.1], "sum");
    }

    #[test]
    fn negative_ignore_index_is_skipped_not_an_error() {
        let t = Tensor::from_slice(&[-1i64, 0, -1, 2], &[2, 2]).unwrap();
        let attrs = [("ignore_index", Attr::Int(-1))];
        let out = run("NegativeLogLikelihoodLoss", 22, &attrs, &[scores(), t], 1).unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-(0.1 + 12.1) / 2.0],
            "mean",
        );
    }

    #[test]
    fn bad_targets_and_attributes_are_errors() {
        let t = Tensor::from_slice(&[3i64, 0, 1, 1], &[2, 2]).unwrap();
        let err = run("NegativeLogLikelihoodLoss", 22, &[], &[scores(), t], 1).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
        let t = Tensor::from_slice(&[0i64, 0], &[2]).unwrap();
        let err = run(
            "NegativeLogLikelihoodLoss",
            22,
            &[],
            &[scores(), t.clone()],
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("target dims"), "{err}");
        let bad = [("reduction", Attr::String("max".into()))];
        let err = run("NegativeLogLikelihoodLoss", 22, &bad, &[scores(), t], 1).unwrap_err();
        assert!(err.to_string().contains("reduction"), "{err}");
        let tf = Tensor::from_slice(&[0.0f32; 4], &[2, 2]).unwrap();
        assert!(run("NegativeLogLikelihoodLoss", 22, &[], &[scores(), tf], 1).is_err());
    }
}
