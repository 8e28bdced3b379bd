//! Constant: a value given as an attribute; always folded into an initializer at plan time.

use strata_core::{Device, Tensor};

use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct Constant {
    value: Tensor,
}

impl Constant {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let value = if let Some(t) = a.tensor("value")? {
            t
        } else if let Some(v) = a.float("value_float")? {
            Tensor::scalar(v)?
        } else if let Some(v) = a.floats("value_floats")? {
            Tensor::from_slice(&v, &[v.len()])?
        } else if let Some(v) = a.int("value_int")? {
            Tensor::scalar(v)?
        } else if let Some(v) = a.ints("value_ints")? {
            Tensor::from_slice(&v, &[v.len()])?
        } else if a.contains("sparse_value")
            || a.contains("value_string")
            || a.contains("value_strings")
        {
            return Err(OpError::attribute(
                "Constant",
                "value",
                "sparse and string constants are not supported",
            ));
        } else {
            return Err(OpError::attribute(
                "Constant",
                "value",
                "no value attribute",
            ));
        };
        Ok(Box::new(Constant { value }))
    }
}

impl Operator for Constant {
    fn op_type(&self) -> &str {
        "Constant"
    }

    fn infer(&self, _inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        Ok(vec![Fact::constant(self.value.clone())])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        _device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        Ok(Box::new(ConstantKernel {
            value: self.value.clone(),
        }))
    }
}

#[derive(Debug)]
struct ConstantKernel {
    value: Tensor,
}

impl Kernel for ConstantKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        io.output(0).copy_from(&self.value)?;
        Ok(())
    }
}
