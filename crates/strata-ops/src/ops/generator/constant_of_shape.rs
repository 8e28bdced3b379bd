//! ConstantOfShape: a tensor of the dims an int64 input holds, filled with the one-element
//! `value` attribute (f32 zero when absent). Without a constant shape the runtime sizes the
//! output when the node runs.

use strata_core::{DType, Device};

use crate::support::axes::{check_int_input, dims_input_len, known_ints, read_ints};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::support::scalar::ScalarBytes;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("ConstantOfShape", ConstantOfShape::build)];

#[derive(Debug, Clone, Copy)]
pub struct ConstantOfShape {
    dtype: DType,
    value: ScalarBytes,
}

impl ConstantOfShape {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let (dtype, value) = match ctx.attrs.tensor("value")? {
            Some(t) if t.numel() == 1 && !t.dtype().is_quantized() => (
                t.dtype(),
                ScalarBytes::from_tensor("ConstantOfShape", &t)
                    .map_err(|e| OpError::attribute("ConstantOfShape", "value", e.to_string()))?,
            ),
            Some(t) => {
                return Err(OpError::attribute(
                    "ConstantOfShape",
                    "value",
                    format!("must hold one element, got {}{:?}", t.dtype(), t.dims()),
                ))
            }
            None => (DType::F32, ScalarBytes::zero(DType::F32)),
        };
        Ok(Box::new(ConstantOfShape { dtype, value }))
    }
}

fn dims_of(shape: &[i64]) -> OpResult<Vec<usize>> {
    shape
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                OpError::shape(
                    "ConstantOfShape",
                    format!("negative dim {d} in shape {shape:?}"),
                )
            })
        })
        .collect()
}

impl Operator for ConstantOfShape {
    fn op_type(&self) -> &str {
        "ConstantOfShape"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        required("ConstantOfShape", inputs, 0)?;
        check_int_input("ConstantOfShape", inputs, 0)?;
        let dims = match known_ints("ConstantOfShape", inputs, 0)? {
            Some(s) => dims_of(&s)?.into_iter().map(Dim::Known).collect(),
            None => {
                let n = dims_input_len("ConstantOfShape", inputs, 0)?.ok_or_else(|| {
                    OpError::shape("ConstantOfShape", "the shape input has unknown length")
                })?;
                vec![Dim::Unknown; n]
            }
        };
        Ok(vec![Fact::new(self.dtype, dims)])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("ConstantOfShape", self.dtype, device)?;
        Ok(Box::new(*self))
    }
}

impl Kernel for ConstantOfShape {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let out = io.output(0);
        let shape = read_ints("ConstantOfShape", io.input(0))?;
        let fits = out.rank() == shape.len()
            && out.dims().iter().zip(&shape).all(|(&o, &s)| o as i64 == s);
        if !fits || out.dtype() != self.dtype || !out.is_contiguous() {
            return Err(OpError::kernel(
                "ConstantOfShape",
                format!(
                    "output {}{:?} is not {} of shape {shape:?}",
                    out.dtype(),
                    out.dims(),
                    self.dtype
                ),
            ));
        }
        let elem = self.dtype.size_in_bytes();
        let mut w = out.write_bytes("ConstantOfShape")?;
        let start = out.storage_offset() * elem;
        self.value
            .fill(&mut w.bytes()[start..start + out.numel() * elem]);
        Ok(())
    }
}

/// Unit tests build the op from an attribute tensor.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attr, Attributes};
    use strata_core::Tensor;

    #[test]
    fn fills_with_the_value_attribute() {
        let attrs = Attributes::new("ConstantOfShape").with(
            "value",
            Attr::Tensor(Tensor::from_slice(&[7i32], &[1]).unwrap()),
        );
        let ctx = OpContext {
            op_type: "ConstantOfShape",
            domain: "",
            opset: 20,
            attrs: &attrs,
            num_inputs: 1,
            num_outputs: 1,
        };
        let op = ConstantOfShape::build(&ctx).unwrap();
        let shape = Tensor::from_slice(&[2i64, 3], &[2]).unwrap();
        let f = op
            .infer(&[&Fact::constant(shape.clone())])
            .unwrap()
            .remove(0);
        assert_eq!(f.dtype, DType::I32);
        let o = Tensor::zeros(&f.concrete().unwrap(), DType::I32).unwrap();
        let k = op
            .kernel(&[&Fact::constant(shape.clone())], &[&f], Device::Cpu)
            .unwrap();
        k.run(&KernelIo {
            inputs: &[&shape],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })
        .unwrap();
        assert_eq!(o.to_vec::<i32>().unwrap(), vec![7; 6]);
        let neg = Tensor::from_slice(&[-1i64], &[1]).unwrap();
        assert!(op.infer(&[&Fact::constant(neg)]).is_err());
        let zero = Tensor::from_slice(&[0i64], &[1]).unwrap();
        assert_eq!(
            op.infer(&[&Fact::constant(zero)]).unwrap()[0].concrete(),
            Some(vec![0])
        );
    }
}
