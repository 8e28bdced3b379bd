//! Broadcasting binary operators: the shared operator and kernel plumbing (numpy broadcasting,
//! and the pre-opset-7 `broadcast`/`axis` form), and the arithmetic ops Add, Sub, Mul, Div, Mod
//! and PRelu for every numeric dtype.

use std::fmt;
use std::marker::PhantomData;

use bytemuck::Zeroable;
use strata_core::{DType, Device, Element, Tensor};

use crate::support::broadcast::{
    expanded, legacy_fact_dims, legacy_layout, zip1_assign, zip2, Walk,
};
use crate::support::inputs::exact_inputs;
use crate::support::numeric::Arith;
use crate::{
    broadcast_dims, dispatch_arith, dispatch_types, Fact, Kernel, KernelIo, OpContext, OpError,
    OpResult, Operator,
};

/// What a broadcasting binary operator supplies: its name, dtype rules and kernels.
pub trait BinaryKind: Send + Sync + fmt::Debug + 'static {
    fn name(&self) -> &'static str;

    /// The output dtype, or an error when the input dtypes do not go together. By default both
    /// inputs must share a dtype, which the output has.
    fn out_dtype(&self, a: DType, b: DType) -> OpResult<DType> {
        same_dtype(self.name(), a, b)?;
        Ok(a)
    }

    /// Whether output 0 has input 0's dtype and may reuse its memory.
    fn in_place(&self) -> bool {
        true
    }

    /// The kernel for these input dtypes, or `None` when the op does not take them.
    fn kernel(&self, a: DType, b: DType, legacy_axis: Option<i64>) -> Option<Box<dyn Kernel>>;
}

/// An error unless `b` has `a`'s dtype.
pub fn same_dtype(op: &str, a: DType, b: DType) -> OpResult<()> {
    if a == b {
        return Ok(());
    }
    Err(OpError::DType {
        op: op.into(),
        index: 1,
        expected: a.to_string(),
        actual: b,
    })
}

/// A two-input broadcasting operator whose behaviour comes from `K`.
#[derive(Debug)]
pub struct Binary<K> {
    kind: K,
    /// Opset < 7 with `broadcast=1`: B's dims align with A's starting at this axis.
    legacy_axis: Option<i64>,
}

impl<K: BinaryKind> Binary<K> {
    /// Builds the operator, reading the legacy `broadcast`/`axis` attributes before opset 7.
    pub fn build(kind: K, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let legacy_axis = if ctx.opset < 7 && ctx.attrs.int_or("broadcast", 0)? == 1 {
            Some(ctx.attrs.int_or("axis", -1)?)
        } else if ctx.opset < 7 && kind.name() == "PRelu" {
            // PRelu-1/6: the slope is per channel ([C], or [C, 1, …]): it lines up with axis 1.
            Some(1)
        } else {
            None
        };
        Ok(Box::new(Binary { kind, legacy_axis }))
    }
}

impl<K: BinaryKind> Operator for Binary<K> {
    fn op_type(&self) -> &str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let name = self.kind.name();
        let [a, b] = exact_inputs(name, inputs)?;
        let dtype = self.kind.out_dtype(a.dtype, b.dtype)?;
        let dims = match self.legacy_axis {
            Some(axis) => {
                let b_dims = legacy_fact_dims(name, &a.dims, &b.dims, axis)?;
                broadcast_dims(name, &a.dims, &b_dims)?
            }
            None => broadcast_dims(name, &a.dims, &b.dims)?,
        };
        Ok(vec![Fact::new(dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let [a, b] = exact_inputs(self.kind.name(), inputs)?;
        self.kind.out_dtype(a.dtype, b.dtype)?;
        let kernel = if device == Device::Cpu {
            self.kind.kernel(a.dtype, b.dtype, self.legacy_axis)
        } else {
            None
        };
        kernel.ok_or_else(|| {
            OpError::no_kernel(
                self.kind.name(),
                if a.dtype == b.dtype || kernel_for_a_only(&self.kind, a.dtype) {
                    a.dtype
                } else {
                    b.dtype
                },
                device,
            )
        })
    }

    fn in_place_input(&self) -> Option<usize> {
        self.kind.in_place().then_some(0)
    }
}

/// Whether A's dtype is one the op takes (so a missing kernel is B's fault), for error text.
fn kernel_for_a_only<K: BinaryKind>(kind: &K, a: DType) -> bool {
    kind.kernel(a, a, None).is_none()
}

/// `out = f(a, b)` with broadcasting; never in place.
pub struct Zip<A, B, O, F> {
    name: &'static str,
    legacy_axis: Option<i64>,
    f: F,
    _t: PhantomData<fn(A, B) -> O>,
}

/// `out = f(a, b)` with broadcasting, also in place over A (the output has A's type).
pub struct ZipInPlace<T, B, F> {
    name: &'static str,
    legacy_axis: Option<i64>,
    f: F,
    _t: PhantomData<fn(T, B) -> T>,
}

impl<A, B, O, F> fmt::Debug for Zip<A, B, O, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Zip({})", self.name)
    }
}

impl<T, B, F> fmt::Debug for ZipInPlace<T, B, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ZipInPlace({})", self.name)
    }
}

/// A broadcasting kernel computing `f(a, b)` into a (possibly differently typed) output.
pub fn zip_kernel<A, B, O, F>(name: &'static str, legacy_axis: Option<i64>, f: F) -> Box<dyn Kernel>
where
    A: Element,
    B: Element,
    O: Element,
    F: Fn(A, B) -> O + Send + Sync + 'static,
{
    Box::new(Zip {
        name,
        legacy_axis,
        f,
        _t: PhantomData,
    })
}

/// A broadcasting kernel computing `f(a, b)` with A's type, in place when the plan says so.
pub fn zip_kernel_in_place<T, B, F>(
    name: &'static str,
    legacy_axis: Option<i64>,
    f: F,
) -> Box<dyn Kernel>
where
    T: Element,
    B: Element,
    F: Fn(T, B) -> T + Send + Sync + 'static,
{
    Box::new(ZipInPlace {
        name,
        legacy_axis,
        f,
        _t: PhantomData,
    })
}

/// B's layout over the output's dims (through the legacy placement when given).
pub fn rhs_layout(
    name: &str,
    a: &Tensor,
    b: &Tensor,
    legacy_axis: Option<i64>,
    dims: &[usize],
) -> OpResult<strata_core::Layout> {
    match legacy_axis {
        Some(axis) => Ok(legacy_layout(name, a.rank(), b, axis)?
            .expand(dims)
            .map_err(|e| OpError::shape(name, e.to_string()))?),
        None => expanded(name, b, dims),
    }
}

fn zip_into<A: Element, B: Element, O: Element>(
    name: &str,
    legacy_axis: Option<i64>,
    io: &KernelIo<'_>,
    f: &impl Fn(A, B) -> O,
) -> OpResult<()> {
    let (a, b, out) = (io.input(0), io.input(1), io.output(0));
    let dims = out.dims();
    let la = expanded(name, a, dims)?;
    let lb = rhs_layout(name, a, b, legacy_axis, dims)?;
    let walk = Walk::new(name, dims, [&la, &lb])?;
    let (ra, rb) = (a.read::<A>()?, b.read::<B>()?);
    let mut w = out.write::<O>()?;
    let data = w
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(name, "output is not contiguous"))?;
    zip2(&walk, ra.storage_data(), rb.storage_data(), data, f);
    Ok(())
}

impl<A, B, O, F> Kernel for Zip<A, B, O, F>
where
    A: Element,
    B: Element,
    O: Element,
    F: Fn(A, B) -> O + Send + Sync,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        if io.in_place.is_some() {
            return Err(OpError::kernel(self.name, "cannot run in place"));
        }
        zip_into(self.name, self.legacy_axis, io, &self.f)
    }
}

impl<T, B, F> Kernel for ZipInPlace<T, B, F>
where
    T: Element,
    B: Element,
    F: Fn(T, B) -> T + Send + Sync,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        if io.in_place != Some(0) {
            return zip_into(self.name, self.legacy_axis, io, &self.f);
        }
        // A's memory is the output's: read A through the output guard.
        let (a, b, out) = (io.input(0), io.input(1), io.output(0));
        let dims = out.dims();
        if a.numel() != out.numel() {
            return Err(OpError::kernel(
                self.name,
                format!("in place over {:?} into {dims:?}", a.dims()),
            ));
        }
        let lb = rhs_layout(self.name, a, b, self.legacy_axis, dims)?;
        let walk = Walk::new(self.name, dims, [&lb])?;
        let rb = b.read::<B>()?;
        let mut w = out.write::<T>()?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(self.name, "output is not contiguous"))?;
        zip1_assign(&walk, data, rb.storage_data(), &self.f);
        Ok(())
    }
}

/// The arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// `fmod=0`: the remainder takes the divisor's sign (integers only, per ONNX).
    Mod,
    /// `fmod=1`: the remainder takes the dividend's sign.
    Fmod,
    /// `x < 0 ? slope * x : x`, the slope broadcast to X.
    PRelu,
}

impl BinaryOp {
    pub fn build(op: BinaryOp, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Binary::build(op, ctx)
    }

    fn build_mod(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        match ctx.attrs.int_or("fmod", 0)? {
            0 => Binary::build(BinaryOp::Mod, ctx),
            1 => Binary::build(BinaryOp::Fmod, ctx),
            other => Err(OpError::attribute(
                "Mod",
                "fmod",
                format!("must be 0 or 1, got {other}"),
            )),
        }
    }
}

impl BinaryKind for BinaryOp {
    fn name(&self) -> &'static str {
        match self {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
            BinaryOp::Mod | BinaryOp::Fmod => "Mod",
            BinaryOp::PRelu => "PRelu",
        }
    }

    fn in_place(&self) -> bool {
        // Mod is rare: one out-of-place kernel per dtype keeps the code small.
        !matches!(self, BinaryOp::Mod | BinaryOp::Fmod)
    }

    fn kernel(&self, a: DType, _b: DType, legacy: Option<i64>) -> Option<Box<dyn Kernel>> {
        let name = self.name();
        // One closure per (op, dtype): the loops inside the kernel see no branches.
        match self {
            BinaryOp::Add => {
                dispatch_arith!(a, T => Some(zip_kernel_in_place(name, legacy, |x: T, y: T| x.add(y))), _ => None)
            }
            BinaryOp::Sub => {
                dispatch_arith!(a, T => Some(zip_kernel_in_place(name, legacy, |x: T, y: T| x.sub(y))), _ => None)
            }
            BinaryOp::Mul => {
                dispatch_arith!(a, T => Some(zip_kernel_in_place(name, legacy, |x: T, y: T| x.mul(y))), _ => None)
            }
            BinaryOp::Div => {
                dispatch_arith!(a, T => Some(zip_kernel_in_place(name, legacy, |x: T, y: T| x.div(y))), _ => None)
            }
            BinaryOp::Mod => {
                dispatch_arith!(a, T => Some(zip_kernel::<T, T, T, _>(name, legacy, |x: T, y: T| x.rem_floor(y))), _ => None)
            }
            BinaryOp::Fmod => {
                dispatch_arith!(a, T => Some(zip_kernel::<T, T, T, _>(name, legacy, |x: T, y: T| x.fmod(y))), _ => None)
            }
            // The types ONNX PRelu takes.
            BinaryOp::PRelu => dispatch_types!(a, [F32 => f32, F64 => f64, F16 => strata_core::f16,
                BF16 => strata_core::bf16, I32 => i32, I64 => i64, U32 => u32, U64 => u64], T => {
                let zero = T::zeroed();
                Some(zip_kernel_in_place(name, legacy, move |x: T, s: T| if x < zero { x.mul(s) } else { x }))
            }, _ => None),
        }
    }
}

/// The table of this family's arithmetic operators.
pub const OPS: &[(&str, crate::Constructor)] = &[
    ("Add", |c| BinaryOp::build(BinaryOp::Add, c)),
    ("Sub", |c| BinaryOp::build(BinaryOp::Sub, c)),
    ("Mul", |c| BinaryOp::build(BinaryOp::Mul, c)),
    ("Div", |c| BinaryOp::build(BinaryOp::Div, c)),
    ("Mod", BinaryOp::build_mod),
    ("PRelu", |c| BinaryOp::build(BinaryOp::PRelu, c)),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::{run_op, run_op_in_place};
    use crate::Attr;

    fn t<T: Element>(data: &[T], dims: &[usize]) -> Tensor {
        Tensor::from_slice(data, dims).unwrap()
    }

    #[test]
    fn prelu_before_opset_7_applies_a_vector_slope_per_channel() {
        // x [1, 2, 3]; slope [2] belongs to axis 1 (channels), not to the last axis.
        let x = t(&[-1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0], &[1, 2, 3]);
        let slope = t(&[0.5f32, 0.25], &[2]);
        let y = run_op("PRelu", 6, &[], &[x.clone(), slope.clone()]).unwrap();
        assert_eq!(
            y[0].to_vec::<f32>().unwrap(),
            [-0.5, -1.0, 3.0, -1.0, 5.0, -1.5]
        );
        // From opset 7 it is numpy broadcasting: [2] against a last axis of 3 is an error.
        assert!(run_op("PRelu", 9, &[], &[x, slope]).is_err());
    }

    #[test]
    fn add_broadcasts_and_runs_in_place() {
        let a = t(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let b = t(&[10.0f32, 20.0, 30.0], &[3]);
        let want = [11.0, 22.0, 33.0, 14.0, 25.0, 36.0];
        let y = run_op("Add", 14, &[], &[a.clone(), b.clone()]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), want);
        let y = run_op_in_place("Add", 14, &[], &[a, b]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), want);
        // Column against row: both broadcast.
        let col = t(&[1i64, 2], &[2, 1]);
        let row = t(&[10i64, 20, 30], &[1, 3]);
        let y = run_op("Sub", 14, &[], &[col, row]).unwrap();
        assert_eq!(y[0].dims(), &[2, 3]);
        assert_eq!(y[0].to_vec::<i64>().unwrap(), [-9, -19, -29, -8, -18, -28]);
    }

    #[test]
    fn integer_division_truncates_and_never_panics() {
        let a = t(&[7i32, -7, i32::MIN, 5], &[4]);
        let b = t(&[2i32, 2, -1, 0], &[4]);
        let y = run_op("Div", 14, &[], &[a, b]).unwrap();
        assert_eq!(y[0].to_vec::<i32>().unwrap(), [3, -3, i32::MIN, 0]);
        let y = run_op("Div", 14, &[], &[t(&[1u8], &[1]), t(&[0u8], &[1])]).unwrap();
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [0]);
    }

    #[test]
    fn float_nan_and_mod() {
        let a = t(&[f32::NAN, 1.0], &[2]);
        let y = run_op("Mul", 14, &[], &[a, t(&[2.0f32], &[])]).unwrap();
        let v = y[0].to_vec::<f32>().unwrap();
        assert!(v[0].is_nan() && v[1] == 2.0);
        let a = t(&[-4i32, 7, -7, 4], &[4]);
        let b = t(&[3i32, -3, -3, 0], &[4]);
        let y = run_op("Mod", 13, &[], &[a.clone(), b.clone()]).unwrap();
        assert_eq!(y[0].to_vec::<i32>().unwrap(), [2, -2, -1, 0]);
        let y = run_op("Mod", 13, &[("fmod", Attr::Int(1))], &[a, b]).unwrap();
        assert_eq!(y[0].to_vec::<i32>().unwrap(), [-1, 1, -1, 0]);
        let fa = t(&[-4.5f64, 7.0], &[2]);
        let y = run_op(
            "Mod",
            13,
            &[("fmod", Attr::Int(1))],
            &[fa, t(&[2.0f64], &[1])],
        )
        .unwrap();
        assert_eq!(y[0].to_vec::<f64>().unwrap(), [-0.5, 1.0]);
    }

    #[test]
    fn legacy_axis_broadcast() {
        let a = t(&[0.0f32; 24], &[2, 3, 4]);
        let b = t(&[1.0f32, 2.0, 3.0], &[3]);
        let attrs = [("broadcast", Attr::Int(1)), ("axis", Attr::Int(1))];
        let y = run_op("Add", 6, &attrs, &[a, b]).unwrap();
        let v = y[0].to_vec::<f32>().unwrap();
        assert_eq!(&v[..8], &[1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]);
    }

    #[test]
    fn prelu_broadcasts_slope() {
        let x = t(&[-2.0f32, -1.0, 1.0, 2.0], &[2, 2]);
        let s = t(&[0.5f32, 0.25], &[2]);
        let y = run_op("PRelu", 16, &[], &[x, s]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), [-1.0, -0.25, 1.0, 2.0]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let a = t(&[1.0f32; 6], &[2, 3]);
        let err = run_op("Add", 14, &[], &[a.clone(), t(&[1.0f32; 4], &[4])]).unwrap_err();
        assert!(err.to_string().contains("Add"), "{err}");
        let err = run_op("Add", 14, &[], &[a.clone(), t(&[1i32], &[1])]).unwrap_err();
        assert!(matches!(err, OpError::DType { .. }), "{err}");
        let err = run_op("Add", 14, &[], &[a]).unwrap_err();
        assert!(matches!(err, OpError::InputCount { .. }), "{err}");
        let bools = Tensor::from_bools(&[true], &[1]).unwrap();
        let err = run_op("Add", 14, &[], &[bools.clone(), bools]).unwrap_err();
        assert!(matches!(err, OpError::NoKernel { .. }), "{err}");
    }
}
