//! StringConcat (opset 20): element-wise concatenation of two string tensors, with NumPy
//! broadcasting.

use strata_core::{DType, Tensor};

use super::common::{for_each_pair, text_fact, text_input, TextOutputs};
use crate::fact::{broadcast_dims, broadcast_shapes};
use crate::{Fact, Kernel, OpContext, OpResult, Operator};

const OP: &str = "StringConcat";

#[derive(Debug)]
pub struct StringConcat;

impl StringConcat {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(StringConcat))
    }
}

impl Operator for StringConcat {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let (x, y) = (text_fact(OP, inputs, 0)?, text_fact(OP, inputs, 1)?);
        Ok(vec![Fact::new(
            DType::String,
            broadcast_dims(OP, &x.dims, &y.dims)?,
        )])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        _device: strata_core::Device,
    ) -> OpResult<Box<dyn Kernel>> {
        Ok(TextOutputs::boxed(OP, concat))
    }
}

fn concat(inputs: &[&Tensor]) -> OpResult<Vec<Tensor>> {
    let (x, y) = (text_input(OP, inputs, 0)?, text_input(OP, inputs, 1)?);
    let dims = broadcast_shapes(OP, x.dims(), y.dims())?;
    let mut out = Vec::with_capacity(dims.iter().product());
    for_each_pair(OP, x, y, &dims, |a, b| out.push([a, b].concat()))?;
    Ok(vec![Tensor::from_strings(&dims, out)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpError;

    #[test]
    fn concatenates_with_broadcasting_and_utf8() {
        let x = Tensor::from_strings(&[2], ["abc", "é"]).unwrap();
        let y = Tensor::from_strings(&[], ["!"]).unwrap();
        let out = concat(&[&x, &y]).unwrap();
        assert_eq!(out[0].dims(), [2]);
        assert_eq!(out[0].strings().unwrap(), ["abc!", "é!"]);
        let empty = Tensor::from_strings(&[0], Vec::<&str>::new()).unwrap();
        assert_eq!(concat(&[&empty, &y]).unwrap()[0].dims(), [0]);
    }

    #[test]
    fn numbers_and_bad_shapes_are_errors() {
        let x = Tensor::from_strings(&[2], ["a", "b"]).unwrap();
        let n = Tensor::from_slice(&[1i64], &[1]).unwrap();
        assert!(matches!(
            concat(&[&x, &n]),
            Err(OpError::DType { index: 1, .. })
        ));
        let y = Tensor::from_strings(&[3], ["a", "b", "c"]).unwrap();
        assert!(concat(&[&x, &y]).is_err());
        assert!(matches!(
            concat(&[&x]),
            Err(OpError::MissingInput { index: 1, .. })
        ));
    }
}
