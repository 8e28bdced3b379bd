//! com.microsoft QLinearConcat: `Y = Concat(requantize(X_i))` along `axis`. Inputs are
//! `(Y_scale, Y_zero_point, X_0, X_0_scale, X_0_zero_point, X_1, ...)`; each X is brought to Y's
//! scale through a 256-entry table (dequantize in f32, quantize half to even, saturate), or
//! copied when its parameters equal Y's.

use strata_core::Device;

use super::qparams::{eight_bit, with_bytes, with_bytes_mut, QParam};
use crate::support::axes::normalize_axis;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QLinearConcat";

#[derive(Debug, Clone)]
pub struct QLinearConcat {
    axis: i64,
}

impl QLinearConcat {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearConcat {
            axis: ctx.attrs.int_or("axis", 0)?,
        }))
    }

    /// The operator concatenating along `axis`.
    pub fn with_axis(axis: i64) -> QLinearConcat {
        QLinearConcat { axis }
    }

    fn data_count(count: usize) -> OpResult<usize> {
        if count < 5 || !(count - 2).is_multiple_of(3) {
            return Err(OpError::shape(
                OP,
                format!("takes Y_scale, Y_zero_point and triples (X, scale, zero point); got {count} inputs"),
            ));
        }
        Ok((count - 2) / 3)
    }
}

impl Operator for QLinearConcat {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let count = Self::data_count(inputs.len())?;
        let first = eight_bit(OP, inputs, 2)?;
        let axis = normalize_axis(OP, "axis", self.axis, first.rank())?;
        let mut dims = first.dims.clone();
        let mut total = Some(0usize);
        for i in 0..count {
            let x = eight_bit(OP, inputs, 2 + 3 * i)?;
            if x.dtype != first.dtype || x.rank() != first.rank() {
                return Err(OpError::shape(
                    OP,
                    format!(
                        "input {} is {} of rank {}, input 2 {} of rank {}",
                        2 + 3 * i,
                        x.dtype,
                        x.rank(),
                        first.dtype,
                        first.rank()
                    ),
                ));
            }
            for (d, (a, b)) in x.dims.iter().zip(&first.dims).enumerate() {
                if d != axis {
                    if let (Dim::Known(a), Dim::Known(b)) = (a, b) {
                        if a != b {
                            return Err(OpError::shape(
                                OP,
                                format!("input {} has {a} at axis {d}, input 2 has {b}", 2 + 3 * i),
                            ));
                        }
                    }
                }
            }
            total = total.zip(x.dims[axis].known()).map(|(t, d)| t + d);
        }
        dims[axis] = total.map_or(Dim::Unknown, Dim::Known);
        Ok(vec![Fact::new(first.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 2)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }
}

impl Kernel for QLinearConcat {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let count = Self::data_count(io.inputs.len())?;
        let out = io.output(0);
        let y = QParam::read(OP, "Y", io.input(0), io.input(1), out.dtype())?;
        let axis = normalize_axis(OP, "axis", self.axis, out.rank())?;
        let outer: usize = out.dims()[..axis].iter().product();
        let out_row: usize = out.dims()[axis..].iter().product();
        with_bytes_mut(OP, out, |dst| {
            let mut column = 0;
            for i in 0..count {
                let x_t = io.input(2 + 3 * i);
                if x_t.dtype() != out.dtype() || x_t.rank() != out.rank() {
                    return Err(OpError::kernel(
                        OP,
                        format!("input {} does not match the output", 2 + 3 * i),
                    ));
                }
                let x = QParam::read(
                    OP,
                    "X",
                    io.input(3 + 3 * i),
                    io.input(4 + 3 * i),
                    x_t.dtype(),
                )?;
                let row: usize = x_t.dims()[axis..].iter().product();
                if column + row > out_row || x_t.numel() != outer * row {
                    return Err(OpError::kernel(OP, "inputs do not fill the output"));
                }
                let table = (x != y).then(|| x.table(&y, |v| v));
                with_bytes(OP, x_t, |src| {
                    for o in 0..outer {
                        let s = &src[o * row..(o + 1) * row];
                        let d = &mut dst[o * out_row + column..o * out_row + column + row];
                        match &table {
                            Some(t) => d.iter_mut().zip(s).for_each(|(d, &v)| *d = t[v as usize]),
                            None => d.copy_from_slice(s),
                        }
                    }
                    Ok(())
                })?;
                column += row;
            }
            Ok(())
        })
    }
}
