//! Expand: broadcasts the input against a shape tensor (numpy rules in both directions: a 1 in
//! the shape keeps the input's dim). A stride-0 view of the input copied run by run.

use strata_core::Device;

use crate::support::axes::{check_int_input, known_ints, read_ints};
use crate::support::copy_runs::copy_view;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{
    broadcast_dims, Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult,
    Operator,
};

pub const OPS: &[(&str, Constructor)] = &[("Expand", Expand::build)];

#[derive(Debug, Clone, Copy)]
pub struct Expand;

impl Expand {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Expand))
    }
}

/// The shape values as dims; negative entries are an error.
fn shape_dims(shape: &[i64]) -> OpResult<Vec<usize>> {
    shape
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                OpError::shape("Expand", format!("negative dim {d} in shape {shape:?}"))
            })
        })
        .collect()
}

impl Operator for Expand {
    fn op_type(&self) -> &str {
        "Expand"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Expand", inputs, 0)?;
        let shape = required("Expand", inputs, 1)?;
        check_int_input("Expand", inputs, 1)?;
        let dims = match known_ints("Expand", inputs, 1)? {
            Some(s) => {
                let target: Vec<Dim> = shape_dims(&s)?.into_iter().map(Dim::Known).collect();
                broadcast_dims("Expand", &x.dims, &target)?
            }
            None => {
                let len = match shape.dims.as_slice() {
                    [d] => d.known(),
                    _ => None,
                }
                .ok_or_else(|| OpError::shape("Expand", "the shape input has unknown length"))?;
                // Where the input dim exceeds 1 it is the output dim whatever the shape says.
                let rank = len.max(x.rank());
                (0..rank)
                    .map(
                        |i| match (i + x.rank()).checked_sub(rank).map(|j| &x.dims[j]) {
                            Some(Dim::Known(d)) if *d != 1 => Dim::Known(*d),
                            _ => Dim::Unknown,
                        },
                    )
                    .collect()
            }
        };
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("Expand", required("Expand", inputs, 0)?.dtype, device)?;
        Ok(Box::new(Expand))
    }
}

impl Kernel for Expand {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let shape = read_ints("Expand", io.input(1))?;
        // The output must be the broadcast of the input dims with the shape: checked per axis
        // (the input side by `expand`) so nothing is allocated.
        let rank = out.rank();
        let fits = rank == shape.len().max(x.rank())
            && shape.iter().enumerate().all(|(i, &d)| {
                let o = out.dims()[rank - shape.len() + i] as i64;
                d == 1 || d == o
            });
        if !fits {
            return Err(OpError::kernel(
                "Expand",
                format!(
                    "cannot expand {:?} by shape {shape:?} into output {:?}",
                    x.dims(),
                    out.dims()
                ),
            ));
        }
        copy_view("Expand", out, &x.expand(out.dims())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(x: &Tensor, shape: &[i64]) -> OpResult<Tensor> {
        let s = Tensor::from_slice(shape, &[shape.len()]).unwrap();
        let facts = [Fact::constant(x.clone()), Fact::constant(s.clone())];
        let out = Expand.infer(&[&facts[0], &facts[1]])?.remove(0);
        let o = Tensor::zeros(&out.concrete().unwrap(), x.dtype())?;
        Expand.run(&KernelIo {
            inputs: &[x, &s],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    #[test]
    fn broadcasts_both_ways() {
        let x = Tensor::from_slice(&[1i64, 2, 3], &[3, 1]).unwrap();
        let y = run(&x, &[2, 1, 2]).unwrap();
        assert_eq!(y.dims(), &[2, 3, 2]);
        assert_eq!(
            y.to_vec::<i64>().unwrap(),
            vec![1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3]
        );
        let y = run(&x, &[1]).unwrap();
        assert_eq!(y.dims(), &[3, 1]);
        assert!(run(&x, &[2, 2]).is_err());
        assert!(run(&x, &[-1]).is_err());
        let y = run(&x, &[3, 0]).unwrap();
        assert_eq!(y.dims(), &[3, 0]);
    }
}
