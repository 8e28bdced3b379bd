//! ReverseSequence (opset 10): reverses the first `sequence_lens[b]` entries along `time_axis`
//! of every batch entry `b` (along `batch_axis`); the rest is copied unchanged. Any dtype: rows
//! move as bytes through strided views.

use strata_core::{Device, Tensor};

use crate::support::axes::{check_int_input, read_ints};
use crate::support::copy_runs::copy_view;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "ReverseSequence";

#[derive(Debug, Clone, Copy)]
pub struct ReverseSequence {
    batch_axis: usize,
    time_axis: usize,
}

impl ReverseSequence {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let axis = |name: &str, default: i64| -> OpResult<usize> {
            match ctx.attrs.int_or(name, default)? {
                0 => Ok(0),
                1 => Ok(1),
                other => Err(OpError::attribute(
                    OP,
                    name,
                    format!("must be 0 or 1, got {other}"),
                )),
            }
        };
        let batch_axis = axis("batch_axis", 1)?;
        let time_axis = axis("time_axis", 0)?;
        if batch_axis == time_axis {
            return Err(OpError::attribute(
                OP,
                "batch_axis",
                format!("equals time_axis ({time_axis})"),
            ));
        }
        Ok(Box::new(ReverseSequence {
            batch_axis,
            time_axis,
        }))
    }

    /// The validated lengths, one per batch entry, each at most the time axis' size.
    fn lengths(&self, dims: &[usize], lens: &[i64]) -> OpResult<Vec<usize>> {
        if dims.len() < 2 {
            return Err(OpError::shape(
                OP,
                format!("input must have rank >= 2, got {dims:?}"),
            ));
        }
        let (batch, time) = (dims[self.batch_axis], dims[self.time_axis]);
        if lens.len() != batch {
            return Err(OpError::shape(
                OP,
                format!(
                    "sequence_lens has {} values for batch size {batch}",
                    lens.len()
                ),
            ));
        }
        lens.iter()
            .map(|&l| {
                usize::try_from(l)
                    .ok()
                    .filter(|&l| l <= time)
                    .ok_or_else(|| {
                        OpError::shape(OP, format!("sequence length {l} is outside 0..={time}"))
                    })
            })
            .collect()
    }
}

impl Operator for ReverseSequence {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let lens = required(OP, inputs, 1)?;
        check_int_input(OP, inputs, 1)?;
        if x.rank() < 2 || lens.rank() != 1 {
            return Err(OpError::shape(
                OP,
                format!(
                    "needs input of rank >= 2 and 1-D sequence_lens, got {:?} and {:?}",
                    x.dims, lens.dims
                ),
            ));
        }
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_plain(OP, dtype, device)?;
        Ok(Box::new(*self))
    }
}

impl Kernel for ReverseSequence {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let lens = self.lengths(x.dims(), &read_ints(OP, io.input(1))?)?;
        copy_view(OP, out, x)?;
        // After selecting the batch entry, the time axis shifts down when it came after it.
        let time = (self.time_axis - usize::from(self.time_axis > self.batch_axis)) as isize;
        for (b, &len) in lens.iter().enumerate() {
            let src: Tensor = x.select(self.batch_axis as isize, b as isize)?;
            let dst: Tensor = out.select(self.batch_axis as isize, b as isize)?;
            for t in 0..len {
                let from = src.select(time, (len - 1 - t) as isize)?;
                copy_view(OP, &dst.select(time, t as isize)?, &from)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attr, Attributes};

    fn run(attrs: Attributes, x: &Tensor, lens: &[i64]) -> OpResult<Tensor> {
        let op = ReverseSequence::build(&OpContext {
            op_type: OP,
            domain: "",
            opset: 10,
            attrs: &attrs,
            num_inputs: 2,
            num_outputs: 1,
        })?;
        let lens = Tensor::from_slice(lens, &[lens.len()])?;
        let facts = [Fact::constant(x.clone()), Fact::constant(lens.clone())];
        let outs = op.infer(&[&facts[0], &facts[1]])?;
        let out = Tensor::zeros(&outs[0].concrete().unwrap(), x.dtype())?;
        op.kernel(&[&facts[0], &facts[1]], &[], Device::Cpu)?
            .run(&KernelIo {
                inputs: &[x, &lens],
                outputs: &[&out],
                scratch: None,
                in_place: None,
                threads: 1,
            })?;
        Ok(out)
    }

    #[test]
    fn reverses_each_batch_entry_up_to_its_length() {
        // Time-major [time 3, batch 2]: column 0 reversed over 3 steps, column 1 over 2.
        let x = Tensor::from_slice(&[1i32, 10, 2, 20, 3, 30], &[3, 2]).unwrap();
        let out = run(Attributes::new(OP), &x, &[3, 2]).unwrap();
        assert_eq!(out.to_vec::<i32>().unwrap(), vec![3, 20, 2, 10, 1, 30]);
        // Batch-major [batch 2, time 3].
        let attrs = Attributes::new(OP)
            .with("batch_axis", Attr::Int(0))
            .with("time_axis", Attr::Int(1));
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
        let out = run(attrs, &x, &[1, 3]).unwrap();
        assert_eq!(
            out.to_vec::<f32>().unwrap(),
            vec![1.0, 2.0, 3.0, 6.0, 5.0, 4.0]
        );
    }

    #[test]
    fn bad_lengths_and_axes_are_errors() {
        let x = Tensor::from_slice(&[1i32, 10, 2, 20], &[2, 2]).unwrap();
        assert!(run(Attributes::new(OP), &x, &[3, 1]).is_err());
        assert!(run(Attributes::new(OP), &x, &[1]).is_err());
        assert!(run(Attributes::new(OP), &x, &[-1, 1]).is_err());
        let same = Attributes::new(OP).with("batch_axis", Attr::Int(0));
        assert!(run(same, &x, &[1, 1]).is_err());
    }
}
