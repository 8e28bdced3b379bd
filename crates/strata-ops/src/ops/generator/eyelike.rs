//! EyeLike: a 2-D tensor shaped like the input with ones on the diagonal shifted by `k` and
//! zeros elsewhere, of the `dtype` attribute's type (the input's when absent).

use strata_core::{DType, Device};

use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::support::scalar::ScalarBytes;
use crate::{Constructor, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("EyeLike", EyeLike::build)];

#[derive(Debug, Clone, Copy)]
pub struct EyeLike {
    dtype: Option<DType>,
    k: i64,
}

/// The dtype an ONNX `TensorProto.DataType` code names, for the types strata stores.
fn dtype_from_code(code: i64) -> Option<DType> {
    Some(match code {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        _ => return None,
    })
}

impl EyeLike {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let dtype = ctx
            .attrs
            .int("dtype")?
            .map(|code| {
                dtype_from_code(code).ok_or_else(|| {
                    OpError::attribute("EyeLike", "dtype", format!("unsupported data type {code}"))
                })
            })
            .transpose()?;
        Ok(Box::new(EyeLike {
            dtype,
            k: ctx.attrs.int_or("k", 0)?,
        }))
    }
}

impl Operator for EyeLike {
    fn op_type(&self) -> &str {
        "EyeLike"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("EyeLike", inputs, 0)?;
        if x.rank() != 2 {
            return Err(OpError::shape(
                "EyeLike",
                format!("input must be 2-D, got {:?}", x.dims),
            ));
        }
        Ok(vec![Fact::new(
            self.dtype.unwrap_or(x.dtype),
            x.dims.clone(),
        )])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let x = required("EyeLike", inputs, 0)?;
        cpu_plain("EyeLike", self.dtype.unwrap_or(x.dtype), device)?;
        Ok(Box::new(*self))
    }
}

impl Kernel for EyeLike {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let out = io.output(0);
        let dims = out.dims();
        if dims.len() != 2 || dims != io.input(0).dims() || !out.is_contiguous() {
            return Err(OpError::kernel(
                "EyeLike",
                format!(
                    "output {dims:?} does not match input {:?}",
                    io.input(0).dims()
                ),
            ));
        }
        let (rows, cols) = (dims[0], dims[1]);
        let one = ScalarBytes::from_f64("EyeLike", out.dtype(), 1.0)?;
        let elem = out.dtype().size_in_bytes();
        let mut w = out.write_bytes("EyeLike")?;
        let dst = &mut w.bytes()[out.storage_offset() * elem..][..rows * cols * elem];
        dst.fill(0);
        for i in 0..rows {
            let j = i as i64 + self.k;
            if (0..cols as i64).contains(&j) {
                let at = (i * cols + j as usize) * elem;
                dst[at..at + elem].copy_from_slice(one.as_bytes());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    #[test]
    fn shifted_diagonals_in_any_dtype() {
        let x = Tensor::zeros(&[3, 4], DType::I32).unwrap();
        for (k, dtype, expected) in [
            (
                0,
                DType::F64,
                vec![1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1., 0.],
            ),
            (
                1,
                DType::F64,
                vec![0., 1., 0., 0., 0., 0., 1., 0., 0., 0., 0., 1.],
            ),
            (
                -2,
                DType::F64,
                vec![0., 0., 0., 0., 0., 0., 0., 0., 1., 0., 0., 0.],
            ),
        ] {
            let op = EyeLike {
                dtype: Some(dtype),
                k,
            };
            let f = op.infer(&[&Fact::constant(x.clone())]).unwrap().remove(0);
            assert_eq!(f.dtype, DType::F64);
            let o = Tensor::zeros(x.dims(), dtype).unwrap();
            op.run(&KernelIo {
                inputs: &[&x],
                outputs: &[&o],
                scratch: None,
                in_place: None,
                threads: 1,
            })
            .unwrap();
            assert_eq!(o.to_vec::<f64>().unwrap(), expected, "k = {k}");
        }
        assert!(EyeLike { dtype: None, k: 0 }
            .infer(&[&Fact::known(DType::F32, &[3])])
            .is_err());
    }
}
