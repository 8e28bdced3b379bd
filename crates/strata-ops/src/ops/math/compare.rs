//! Comparisons with broadcasting, producing bool: Equal, Less, LessOrEqual, Greater,
//! GreaterOrEqual, for every numeric dtype and bool. NaN compares false (IEEE). Equal also
//! compares strings (`text::TextEqual`).

use std::fmt;
use std::marker::PhantomData;

use strata_core::{DType, Element};

use crate::ops::math::binary::{rhs_layout, same_dtype, Binary, BinaryKind};
use crate::support::broadcast::{expanded, zip2, Walk};
use crate::{dispatch_plain, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl CompareOp {
    pub fn build(op: CompareOp, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Binary::build(op, ctx)
    }
}

impl BinaryKind for CompareOp {
    fn name(&self) -> &'static str {
        match self {
            CompareOp::Equal => "Equal",
            CompareOp::Less => "Less",
            CompareOp::LessOrEqual => "LessOrEqual",
            CompareOp::Greater => "Greater",
            CompareOp::GreaterOrEqual => "GreaterOrEqual",
        }
    }

    fn out_dtype(&self, a: DType, b: DType) -> OpResult<DType> {
        same_dtype(self.name(), a, b)?;
        Ok(DType::Bool)
    }

    fn in_place(&self) -> bool {
        false
    }

    fn kernel(&self, a: DType, _b: DType, legacy: Option<i64>) -> Option<Box<dyn Kernel>> {
        let name = self.name();
        // Greater(a, b) is Less(b, a): swapped operands share one kernel per dtype.
        let swapped = matches!(self, CompareOp::Greater | CompareOp::GreaterOrEqual);
        if a == DType::String {
            // Text has equality only (ONNX allows strings in Equal alone), from opset 11.
            return (matches!(self, CompareOp::Equal) && legacy.is_none())
                .then(|| Box::new(crate::ops::text::TextEqual) as Box<dyn Kernel>);
        }
        dispatch_plain!(a, T => Some(match self {
            CompareOp::Equal => compare_kernel(name, legacy, false, |x: T, y: T| (x == y) as u8),
            CompareOp::Less | CompareOp::Greater => {
                compare_kernel(name, legacy, swapped, |x: T, y: T| (x < y) as u8)
            }
            CompareOp::LessOrEqual | CompareOp::GreaterOrEqual => {
                compare_kernel(name, legacy, swapped, |x: T, y: T| (x <= y) as u8)
            }
        }), _ => None)
    }
}

/// `out = f(a, b)`, or `f(b, a)` when `swapped`, over broadcast inputs of one type.
struct Compare<T, F> {
    name: &'static str,
    legacy_axis: Option<i64>,
    swapped: bool,
    f: F,
    _t: PhantomData<fn(T, T) -> u8>,
}

impl<T, F> fmt::Debug for Compare<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Compare({}, swapped: {})", self.name, self.swapped)
    }
}

fn compare_kernel<T, F>(
    name: &'static str,
    legacy_axis: Option<i64>,
    swapped: bool,
    f: F,
) -> Box<dyn Kernel>
where
    T: Element,
    F: Fn(T, T) -> u8 + Send + Sync + 'static,
{
    Box::new(Compare {
        name,
        legacy_axis,
        swapped,
        f,
        _t: PhantomData,
    })
}

impl<T: Element, F: Fn(T, T) -> u8 + Send + Sync> Kernel for Compare<T, F> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let name = self.name;
        let (a, b, out) = (io.input(0), io.input(1), io.output(0));
        let dims = out.dims();
        let la = expanded(name, a, dims)?;
        let lb = rhs_layout(name, a, b, self.legacy_axis, dims)?;
        let (ra, rb) = (a.read::<T>()?, b.read::<T>()?);
        let (first, second) = (ra.storage_data(), rb.storage_data());
        let mut w = out.write::<u8>()?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(name, "output is not contiguous"))?;
        if self.swapped {
            let walk = Walk::new(name, dims, [&lb, &la])?;
            zip2(&walk, second, first, data, &self.f);
        } else {
            let walk = Walk::new(name, dims, [&la, &lb])?;
            zip2(&walk, first, second, data, &self.f);
        }
        Ok(())
    }
}

/// The table of this family's comparison operators.
pub const OPS: &[(&str, crate::Constructor)] = &[
    ("Equal", |c| CompareOp::build(CompareOp::Equal, c)),
    ("Less", |c| CompareOp::build(CompareOp::Less, c)),
    ("LessOrEqual", |c| {
        CompareOp::build(CompareOp::LessOrEqual, c)
    }),
    ("Greater", |c| CompareOp::build(CompareOp::Greater, c)),
    ("GreaterOrEqual", |c| {
        CompareOp::build(CompareOp::GreaterOrEqual, c)
    }),
];

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_op;
    use strata_core::{DType, Tensor};

    #[test]
    fn compares_with_broadcast_and_nan() {
        let a = Tensor::from_slice(&[1.0f32, 2.0, f32::NAN, 4.0], &[2, 2]).unwrap();
        let b = Tensor::from_slice(&[2.0f32, 2.0], &[2]).unwrap();
        let cases = [
            ("Equal", [false, true, false, false]),
            ("Less", [true, false, false, false]),
            ("LessOrEqual", [true, true, false, false]),
            ("Greater", [false, false, false, true]),
            ("GreaterOrEqual", [false, true, false, true]),
        ];
        for (op, want) in cases {
            let y = run_op(op, 16, &[], &[a.clone(), b.clone()]).unwrap();
            assert_eq!(y[0].dtype(), DType::Bool);
            assert_eq!(y[0].to_bools().unwrap(), want, "{op}");
        }
    }

    #[test]
    fn integers_and_bools() {
        let a = Tensor::from_slice(&[i64::MIN, 0, i64::MAX], &[3]).unwrap();
        let b = Tensor::from_slice(&[0i64], &[1]).unwrap();
        let y = run_op("Less", 13, &[], &[a, b]).unwrap();
        assert_eq!(y[0].to_bools().unwrap(), [true, false, false]);
        let p = Tensor::from_bools(&[true, false], &[2]).unwrap();
        let q = Tensor::from_bools(&[true, true], &[2]).unwrap();
        let y = run_op("Equal", 13, &[], &[p, q]).unwrap();
        assert_eq!(y[0].to_bools().unwrap(), [true, false]);
    }

    #[test]
    fn mismatched_dtypes_are_errors() {
        let a = Tensor::from_slice(&[1i32], &[1]).unwrap();
        let b = Tensor::from_slice(&[1i64], &[1]).unwrap();
        let err = run_op("Equal", 13, &[], &[a, b]).unwrap_err();
        assert!(err.to_string().contains("Equal"), "{err}");
    }
}
