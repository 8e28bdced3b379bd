//! Split along one axis: sizes from the `split` attribute (before opset 13) or input, or
//! `num_outputs` parts of `ceil(dim / n)` with a smaller last part (opset 18). Each output is a
//! narrowed view of the input copied run by run; the kernel takes the sizes from the outputs'
//! planned dims.

use strata_core::Device;

use crate::support::axes::{check_int_input, input_len, normalize_axis};
use crate::support::copy_runs::copy_view;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_plain;
use crate::{
    int_values, Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator,
};

pub const OPS: &[(&str, Constructor)] = &[("Split", Split::build)];

#[derive(Debug, Clone)]
pub struct Split {
    axis: i64,
    split_attr: Option<Vec<i64>>,
    num_outputs: Option<usize>,
}

impl Split {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let num_outputs = ctx
            .attrs
            .int("num_outputs")?
            .map(|n| {
                usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| {
                    OpError::attribute("Split", "num_outputs", format!("{n} is not positive"))
                })
            })
            .transpose()?
            // Before opset 18 an equal split has as many parts as the node has outputs.
            .or((ctx.num_outputs > 0).then_some(ctx.num_outputs));
        // Each part is an output: a count that disagrees with the node's outputs is a broken
        // model, and must not size anything (it may read 2^62).
        if let Some(n) = num_outputs.filter(|&n| ctx.num_outputs > 0 && n != ctx.num_outputs) {
            return Err(OpError::attribute(
                "Split",
                "num_outputs",
                format!("{n} parts, but the node has {} outputs", ctx.num_outputs),
            ));
        }
        let split_attr = ctx.attrs.ints("split")?;
        if split_attr
            .as_ref()
            .is_some_and(|s| s.iter().any(|&v| v < 0))
        {
            return Err(OpError::attribute(
                "Split",
                "split",
                format!("negative size in {:?}", split_attr.unwrap_or_default()),
            ));
        }
        Ok(Box::new(Split {
            axis: ctx.attrs.int_or("axis", 0)?,
            split_attr,
            num_outputs,
        }))
    }
}

/// Sizes of `num_outputs` parts of `dim`: `ceil(dim / n)` each, the last one smaller.
fn even_parts(dim: usize, n: usize) -> Vec<usize> {
    let chunk = dim.div_ceil(n);
    (0..n)
        .map(|i| chunk.min(dim.saturating_sub(chunk * i)))
        .collect()
}

impl Operator for Split {
    fn op_type(&self) -> &str {
        "Split"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Split", inputs, 0)?;
        check_int_input("Split", inputs, 1)?;
        let axis = normalize_axis("Split", "axis", self.axis, x.rank())?;
        let dim = x.dims[axis].known();
        let sizes: Vec<Option<usize>> = match (&self.split_attr, optional(inputs, 1)) {
            (Some(s), _) => s.iter().map(|&v| Some(v as usize)).collect(),
            (None, Some(f)) => match &f.value {
                Some(v) => int_values("Split", v)?
                    .into_iter()
                    .map(|v| {
                        usize::try_from(v).map(Some).map_err(|_| {
                            OpError::shape("Split", format!("negative size {v} in the split input"))
                        })
                    })
                    .collect::<OpResult<_>>()?,
                None => {
                    let n = input_len(inputs, 1).ok_or_else(|| {
                        OpError::shape("Split", "the split input has unknown length")
                    })?;
                    if self.num_outputs.is_some_and(|outputs| outputs != n) {
                        return Err(OpError::shape(
                            "Split",
                            format!(
                                "the split input lists {n} sizes for {} outputs",
                                self.num_outputs.unwrap_or_default()
                            ),
                        ));
                    }
                    vec![None; n]
                }
            },
            (None, None) => {
                let n = self.num_outputs.ok_or_else(|| {
                    OpError::attribute(
                        "Split",
                        "num_outputs",
                        "an equal split without `split` needs `num_outputs` or the node's \
                         output count",
                    )
                })?;
                match dim {
                    Some(d) => even_parts(d, n).into_iter().map(Some).collect(),
                    None => vec![None; n],
                }
            }
        };
        if let (Some(d), Some(total)) = (dim, sizes.iter().copied().sum::<Option<usize>>()) {
            if total != d {
                return Err(OpError::shape(
                    "Split",
                    format!("split sizes {sizes:?} sum to {total}, but axis {axis} has {d}"),
                ));
            }
        }
        Ok(sizes
            .into_iter()
            .map(|s| {
                let mut dims = x.dims.clone();
                dims[axis] = s.map_or(Dim::Unknown, Dim::Known);
                Fact::new(x.dtype, dims)
            })
            .collect())
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("Split", required("Split", inputs, 0)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }
}

impl Kernel for Split {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = io.input(0);
        let axis = normalize_axis("Split", "axis", self.axis, x.rank())?;
        let dim = x.dims()[axis];
        let mut start = 0;
        for out in io.outputs {
            let len = out.dims().get(axis).copied().unwrap_or(0);
            if start + len > dim {
                return Err(OpError::kernel(
                    "Split",
                    format!("outputs take more than the {dim} elements of axis {axis}"),
                ));
            }
            copy_view("Split", out, &x.narrow(axis as isize, start, len)?)?;
            start += len;
        }
        if start != dim {
            return Err(OpError::kernel(
                "Split",
                format!("outputs take {start} of the {dim} elements of axis {axis}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(op: &Split, x: &Tensor, split: Option<&[i64]>) -> OpResult<Vec<Vec<f32>>> {
        let s = split.map_or_else(Tensor::undefined, |v| {
            Tensor::from_slice(v, &[v.len()]).unwrap()
        });
        let facts = [
            Fact::constant(x.clone()),
            if s.is_defined() {
                Fact::constant(s.clone())
            } else {
                Fact::absent()
            },
        ];
        let outs = op.infer(&[&facts[0], &facts[1]])?;
        let tensors: Vec<Tensor> = outs
            .iter()
            .map(|f| Tensor::zeros(&f.concrete().unwrap(), x.dtype()).unwrap())
            .collect();
        let refs: Vec<&Tensor> = tensors.iter().collect();
        op.run(&KernelIo {
            inputs: &[x, &s],
            outputs: &refs,
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(tensors.iter().map(|t| t.to_vec::<f32>().unwrap()).collect())
    }

    #[test]
    fn sizes_from_input_attribute_or_count() {
        let x = Tensor::from_slice(&[1.0f32, 2., 3., 4., 5., 6., 7.], &[7]).unwrap();
        let op = |split_attr, num_outputs| Split {
            axis: -1,
            split_attr,
            num_outputs,
        };
        let parts = run(&op(None, Some(4)), &x, None).unwrap();
        assert_eq!(
            parts,
            vec![vec![1., 2.], vec![3., 4.], vec![5., 6.], vec![7.]]
        );
        let parts = run(&op(None, None), &x, Some(&[3, 0, 4])).unwrap();
        assert_eq!(parts[1], Vec::<f32>::new());
        assert_eq!(parts[2], vec![4., 5., 6., 7.]);
        let parts = run(&op(Some(vec![5, 2]), None), &x, None).unwrap();
        assert_eq!(parts[1], vec![6., 7.]);
        assert!(run(&op(None, None), &x, Some(&[3, 3])).is_err());
        assert!(run(&op(None, None), &x, None).is_err());
        let m = Tensor::from_slice(&[1.0f32, 2., 3., 4.], &[2, 2]).unwrap();
        let rows = run(
            &Split {
                axis: 0,
                split_attr: None,
                num_outputs: Some(2),
            },
            &m,
            None,
        )
        .unwrap();
        assert_eq!(rows, vec![vec![1., 2.], vec![3., 4.]]);
    }
}
