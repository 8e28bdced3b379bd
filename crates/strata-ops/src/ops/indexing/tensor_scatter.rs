//! TensorScatter (opset 24): a KV-cache update. `present = past` with, for each batch entry
//! `b`, the `update` rows along `axis` written from `write_indices[b]` (zero when absent) on;
//! `mode = "circular"` wraps the position modulo the cache's length, `"linear"` requires the
//! rows to fit. Any dtype: rows move as bytes through strided views.

use strata_core::{Device, Tensor};

use crate::support::axes::{check_int_input, normalize_axis, read_ints};
use crate::support::copy_runs::copy_view;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "TensorScatter";

#[derive(Debug, Clone, Copy)]
pub struct TensorScatter {
    axis: i64,
    circular: bool,
}

impl TensorScatter {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let circular = match ctx.attrs.string_or("mode", "linear")?.as_str() {
            "linear" => false,
            "circular" => true,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "mode",
                    format!("expected linear or circular, got {other:?}"),
                ))
            }
        };
        Ok(Box::new(TensorScatter {
            axis: ctx.attrs.int_or("axis", -2)?,
            circular,
        }))
    }

    /// The sequence axis; it may not be the batch axis 0.
    fn axis(&self, rank: usize) -> OpResult<usize> {
        match normalize_axis(OP, "axis", self.axis, rank)? {
            0 => Err(OpError::attribute(OP, "axis", "cannot be the batch axis 0")),
            a => Ok(a),
        }
    }

    /// Where update row `s` of batch entry `b` lands along the axis.
    fn position(&self, start: i64, s: usize, max_len: usize) -> OpResult<usize> {
        let pos = start.checked_add(s as i64);
        let pos = match (pos, self.circular) {
            (Some(p), true) if max_len > 0 => Some(p.rem_euclid(max_len as i64)),
            (p, _) => p,
        };
        pos.and_then(|p| usize::try_from(p).ok())
            .filter(|&p| p < max_len)
            .ok_or_else(|| {
                OpError::shape(
                    OP,
                    format!("write index {start} + {s} is outside the cache's {max_len} positions"),
                )
            })
    }
}

impl Operator for TensorScatter {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let past = required(OP, inputs, 0)?;
        let update = required(OP, inputs, 1)?;
        check_int_input(OP, inputs, 2)?;
        if update.dtype != past.dtype {
            return Err(OpError::DType {
                op: OP.into(),
                index: 1,
                expected: past.dtype.to_string(),
                actual: update.dtype,
            });
        }
        let axis = self.axis(past.rank())?;
        if update.rank() != past.rank() {
            return Err(OpError::shape(
                OP,
                format!(
                    "update {:?} and cache {:?} differ in rank",
                    update.dims, past.dims
                ),
            ));
        }
        for (i, (u, p)) in update.dims.iter().zip(&past.dims).enumerate() {
            if let (Dim::Known(u), Dim::Known(p)) = (u, p) {
                if (i != axis && u != p) || (i == axis && u > p) {
                    return Err(OpError::shape(
                        OP,
                        format!(
                            "update {:?} does not fit cache {:?} at axis {i}",
                            update.dims, past.dims
                        ),
                    ));
                }
            }
        }
        Ok(vec![Fact::new(past.dtype, past.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(*self))
    }
}

impl Kernel for TensorScatter {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (past, update, out) = (io.input(0), io.input(1), io.output(0));
        let axis = self.axis(past.rank())?;
        let (pd, ud) = (past.dims(), update.dims());
        let fits = pd.len() == ud.len()
            && pd
                .iter()
                .zip(ud)
                .enumerate()
                .all(|(i, (p, u))| if i == axis { u <= p } else { u == p });
        if !fits {
            return Err(OpError::shape(
                OP,
                format!("update {ud:?} does not fit cache {pd:?}"),
            ));
        }
        let batch = pd[0];
        let starts = match io.input(2) {
            t if t.is_defined() => read_ints(OP, t)?.to_vec(),
            _ => vec![0; batch],
        };
        if starts.len() != batch {
            return Err(OpError::shape(
                OP,
                format!(
                    "write_indices has {} values for batch {batch}",
                    starts.len()
                ),
            ));
        }
        copy_view(OP, out, past)?;
        // Within one batch entry the sequence axis is `axis - 1`.
        let seq_axis = (axis - 1) as isize;
        for (b, &start) in starts.iter().enumerate() {
            let src: Tensor = update.select(0, b as isize)?;
            let dst: Tensor = out.select(0, b as isize)?;
            for s in 0..ud[axis] {
                let pos = self.position(start, s, pd[axis])?;
                copy_view(
                    OP,
                    &dst.select(seq_axis, pos as isize)?,
                    &src.select(seq_axis, s as isize)?,
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attr, Attributes};

    fn run(mode: &str, past: &Tensor, update: &Tensor, starts: &[i64]) -> OpResult<Tensor> {
        let attrs = Attributes::new(OP).with("mode", Attr::String(mode.into()));
        let op = TensorScatter::build(&OpContext {
            op_type: OP,
            domain: "",
            opset: 24,
            attrs: &attrs,
            num_inputs: 3,
            num_outputs: 1,
        })?;
        let idx = Tensor::from_slice(starts, &[starts.len()])?;
        let facts = [
            Fact::constant(past.clone()),
            Fact::constant(update.clone()),
            Fact::constant(idx.clone()),
        ];
        let refs = [&facts[0], &facts[1], &facts[2]];
        let outs = op.infer(&refs)?;
        let out = Tensor::zeros(&outs[0].concrete().unwrap(), past.dtype())?;
        op.kernel(&refs, &[], Device::Cpu)?.run(&KernelIo {
            inputs: &[past, update, &idx],
            outputs: &[&out],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(out)
    }

    #[test]
    fn linear_and_circular_writes() {
        // Cache [batch 2, seq 3, 1], update [2, 2, 1].
        let past = Tensor::from_slice(&[0i64; 6], &[2, 3, 1]).unwrap();
        let update = Tensor::from_slice(&[1i64, 2, 3, 4], &[2, 2, 1]).unwrap();
        let out = run("linear", &past, &update, &[1, 0]).unwrap();
        assert_eq!(out.to_vec::<i64>().unwrap(), vec![0, 1, 2, 3, 4, 0]);
        let out = run("circular", &past, &update, &[2, 0]).unwrap();
        assert_eq!(out.to_vec::<i64>().unwrap(), vec![2, 0, 1, 3, 4, 0]);
        // Linear writes past the end are an error, not a wrap.
        assert!(run("linear", &past, &update, &[2, 0]).is_err());
        assert!(run("linear", &past, &update, &[0]).is_err());
        assert!(run("sideways", &past, &update, &[0, 0]).is_err());
    }
}
