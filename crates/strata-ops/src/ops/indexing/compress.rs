//! Compress: the slices along `axis` (or the elements of the flattened input when no axis is
//! given) whose entry in a bool `condition` is true; a shorter condition drops the rest. The
//! output size depends on the condition's values, so unless it is constant the runtime sizes
//! the output when the node runs. Selected slices are copied with one `memcpy` each.

use strata_core::{DType, Device, Tensor};

use crate::support::axes::normalize_axis;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("Compress", Compress::build)];

#[derive(Debug, Clone, Copy)]
pub struct Compress {
    axis: Option<i64>,
}

impl Compress {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Compress {
            axis: ctx.attrs.int("axis")?,
        }))
    }

    /// (outer, axis length, inner) of the input as Compress sees it.
    fn split(&self, dims: &[usize]) -> OpResult<(usize, usize, usize)> {
        Ok(match self.axis {
            Some(a) => {
                let a = normalize_axis("Compress", "axis", a, dims.len())?;
                (
                    dims[..a].iter().product(),
                    dims[a],
                    dims[a + 1..].iter().product(),
                )
            }
            None => (1, dims.iter().product(), 1),
        })
    }
}

/// The number of true entries of a condition, checked against the axis length.
fn selected(condition: &[u8], n: usize) -> OpResult<usize> {
    if condition.len() > n {
        return Err(OpError::shape(
            "Compress",
            format!(
                "condition has {} entries for an axis of {n}",
                condition.len()
            ),
        ));
    }
    Ok(condition.iter().filter(|&&c| c != 0).count())
}

fn condition_bytes(t: &Tensor) -> OpResult<Vec<u8>> {
    Ok(t.read::<u8>()?.to_vec()?)
}

impl Operator for Compress {
    fn op_type(&self) -> &str {
        "Compress"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Compress", inputs, 0)?;
        let c = required("Compress", inputs, 1)?;
        if c.dtype != DType::Bool || c.rank() != 1 {
            return Err(OpError::DType {
                op: "Compress".into(),
                index: 1,
                expected: "a 1-D bool tensor".into(),
                actual: c.dtype,
            });
        }
        let count = match (&c.value, x.concrete()) {
            (Some(v), Some(dims)) => {
                let (_, n, _) = self.split(&dims)?;
                Dim::Known(selected(&condition_bytes(v)?, n)?)
            }
            _ => Dim::Unknown,
        };
        let dims = match self.axis {
            Some(a) => {
                let a = normalize_axis("Compress", "axis", a, x.rank())?;
                let mut dims = x.dims.clone();
                dims[a] = count;
                dims
            }
            None => vec![count],
        };
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("Compress", required("Compress", inputs, 0)?.dtype, device)?;
        Ok(Box::new(*self))
    }

    fn is_data_dependent(&self) -> bool {
        true
    }
}

impl Kernel for Compress {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, c, out) = (io.input(0), io.input(1), io.output(0));
        let (outer, n, inner) = self.split(x.dims())?;
        let r = c.read::<u8>()?;
        let cond = r
            .as_slice()
            .ok_or_else(|| OpError::kernel("Compress", "condition is not contiguous"))?;
        let count = selected(cond, n)?;
        if out.numel() != outer * count * inner || !x.is_contiguous() || !out.is_contiguous() {
            return Err(OpError::kernel(
                "Compress",
                format!(
                    "output {:?} does not hold {count} of {n} slices of {:?}",
                    out.dims(),
                    x.dims()
                ),
            ));
        }
        let elem = x.dtype().size_in_bytes();
        let run = inner * elem;
        let src = x.read_bytes("Compress")?;
        let src = &src.bytes()[x.storage_offset() * elem..];
        let mut w = out.write_bytes("Compress")?;
        let dst = &mut w.bytes()[out.storage_offset() * elem..];
        let mut at = 0;
        for o in 0..outer {
            for (i, _) in cond.iter().enumerate().filter(|(_, &c)| c != 0) {
                let from = (o * n + i) * run;
                dst[at..at + run].copy_from_slice(&src[from..from + run]);
                at += run;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(axis: Option<i64>, x: &Tensor, cond: &[bool]) -> OpResult<Tensor> {
        let op = Compress { axis };
        let c = Tensor::from_bools(cond, &[cond.len()])?;
        let facts = [Fact::constant(x.clone()), Fact::constant(c.clone())];
        let f = op.infer(&[&facts[0], &facts[1]])?.remove(0);
        let o = Tensor::zeros(&f.concrete().unwrap(), x.dtype())?;
        op.run(&KernelIo {
            inputs: &[x, &c],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    #[test]
    fn along_axes_and_flattened() {
        let x = Tensor::from_slice(&[1i16, 2, 3, 4, 5, 6], &[3, 2]).unwrap();
        let y = run(Some(0), &x, &[false, true, true]).unwrap();
        assert_eq!(y.dims(), &[2, 2]);
        assert_eq!(y.to_vec::<i16>().unwrap(), vec![3, 4, 5, 6]);
        let y = run(Some(-1), &x, &[false, true]).unwrap();
        assert_eq!(y.to_vec::<i16>().unwrap(), vec![2, 4, 6]);
        let y = run(None, &x, &[false, true, false, false, true]).unwrap();
        assert_eq!(y.to_vec::<i16>().unwrap(), vec![2, 5]);
        assert!(run(Some(1), &x, &[true, true, true]).is_err());
    }
}
