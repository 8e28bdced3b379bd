//! Logical operators on bool tensors: And, Or, Xor (broadcasting) and Not. Any non-zero byte
//! reads as true, so results are always 0 or 1.

use strata_core::DType;

use crate::ops::math::binary::{zip_kernel_in_place, Binary, BinaryKind};
use crate::ops::math::unary::{map_kernel_in_place, Unary, UnaryKind};
use crate::{Kernel, OpContext, OpError, OpResult, Operator};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogicOp {
    And,
    Or,
    Xor,
}

impl LogicOp {
    pub fn build(op: LogicOp, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Binary::build(op, ctx)
    }
}

fn require_bool(op: &str, index: usize, dtype: DType) -> OpResult<()> {
    if dtype == DType::Bool {
        return Ok(());
    }
    Err(OpError::DType {
        op: op.into(),
        index,
        expected: "bool".into(),
        actual: dtype,
    })
}

impl BinaryKind for LogicOp {
    fn name(&self) -> &'static str {
        match self {
            LogicOp::And => "And",
            LogicOp::Or => "Or",
            LogicOp::Xor => "Xor",
        }
    }

    fn out_dtype(&self, a: DType, b: DType) -> OpResult<DType> {
        require_bool(self.name(), 0, a)?;
        require_bool(self.name(), 1, b)?;
        Ok(DType::Bool)
    }

    fn kernel(&self, a: DType, b: DType, legacy: Option<i64>) -> Option<Box<dyn Kernel>> {
        if a != DType::Bool || b != DType::Bool {
            return None;
        }
        let name = self.name();
        Some(match self {
            LogicOp::And => {
                zip_kernel_in_place(name, legacy, |x: u8, y: u8| ((x != 0) & (y != 0)) as u8)
            }
            LogicOp::Or => zip_kernel_in_place(name, legacy, |x: u8, y: u8| ((x | y) != 0) as u8),
            LogicOp::Xor => {
                zip_kernel_in_place(name, legacy, |x: u8, y: u8| ((x != 0) ^ (y != 0)) as u8)
            }
        })
    }
}

/// Logical negation of a bool tensor.
#[derive(Debug, Clone, Copy)]
pub struct Not;

impl UnaryKind for Not {
    fn name(&self) -> &'static str {
        "Not"
    }

    fn kernel(&self, dtype: DType) -> Option<Box<dyn Kernel>> {
        (dtype == DType::Bool).then(|| map_kernel_in_place("Not", |x: u8| (x == 0) as u8))
    }
}

/// The table of this family's logical operators.
pub const OPS: &[(&str, crate::Constructor)] = &[
    ("And", |c| LogicOp::build(LogicOp::And, c)),
    ("Or", |c| LogicOp::build(LogicOp::Or, c)),
    ("Xor", |c| LogicOp::build(LogicOp::Xor, c)),
    ("Not", |_| Unary::boxed(Not)),
];

#[cfg(test)]
mod tests {
    use crate::support::test_util::{run_op, run_op_in_place};
    use crate::OpError;
    use strata_core::Tensor;

    fn bools(v: &[bool], dims: &[usize]) -> Tensor {
        Tensor::from_bools(v, dims).unwrap()
    }

    #[test]
    fn truth_tables_with_broadcast() {
        let a = bools(&[false, false, true, true], &[2, 2]);
        let b = bools(&[false, true], &[2]);
        for (op, want) in [
            ("And", [false, false, false, true]),
            ("Or", [false, true, true, true]),
            ("Xor", [false, true, true, false]),
        ] {
            let y = run_op(op, 7, &[], &[a.clone(), b.clone()]).unwrap();
            assert_eq!(y[0].to_bools().unwrap(), want, "{op}");
            let y = run_op_in_place(op, 7, &[], &[a.clone(), b.clone()]).unwrap();
            assert_eq!(y[0].to_bools().unwrap(), want, "{op} in place");
        }
        let y = run_op("Not", 1, &[], &[b]).unwrap();
        assert_eq!(y[0].to_bools().unwrap(), [true, false]);
    }

    #[test]
    fn non_bool_inputs_are_dtype_errors() {
        let a = Tensor::from_slice(&[1u8], &[1]).unwrap();
        let err = run_op("And", 7, &[], &[a.clone(), a]).unwrap_err();
        assert!(matches!(err, OpError::DType { .. }), "{err}");
    }
}
