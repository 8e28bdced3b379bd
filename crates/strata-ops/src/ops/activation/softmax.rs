//! Softmax, LogSoftmax and Hardmax (all opsets). From opset 13 they work along one axis (default
//! -1); before 13 the input is coerced to 2-D at `axis` (default 1) and each row of all the
//! trailing dims is one lane. Math runs in f32 for f16/bf16 inputs (f64 for f64).

use std::marker::PhantomData;

use num_traits::{Float, Zero};
use strata_core::{DType, Device, Element};

use crate::kernels::softmax::softmax_rows;
use crate::support::axes::{normalize_axis, normalize_split_axis};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::support::numeric::{Real, WideFloat};
use crate::{
    dispatch_float, Constructor, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator,
};

/// The softmax family's constructors, listed in the activation family's `OPS` (which the
/// registry reads).
pub const OPS: &[(&str, Constructor)] = &[
    ("Softmax", |c| Softmax::build(SoftmaxKind::Softmax, c)),
    ("LogSoftmax", |c| Softmax::build(SoftmaxKind::LogSoftmax, c)),
    ("Hardmax", |c| Softmax::build(SoftmaxKind::Hardmax, c)),
];

/// What each lane becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftmaxKind {
    /// `exp(x - max) / Σ exp(x - max)`.
    Softmax,
    /// `x - max - log Σ exp(x - max)`.
    LogSoftmax,
    /// 1 at the first maximum, 0 elsewhere.
    Hardmax,
}

impl SoftmaxKind {
    fn name(self) -> &'static str {
        match self {
            SoftmaxKind::Softmax => "Softmax",
            SoftmaxKind::LogSoftmax => "LogSoftmax",
            SoftmaxKind::Hardmax => "Hardmax",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Softmax {
    kind: SoftmaxKind,
    axis: i64,
    /// Before opset 13 the input is coerced to 2-D at `axis` and the op runs over all of the
    /// trailing dims at once.
    coerce_2d: bool,
}

impl Softmax {
    pub fn build(kind: SoftmaxKind, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let coerce_2d = ctx.opset < 13;
        let axis = ctx.attrs.int_or("axis", if coerce_2d { 1 } else { -1 })?;
        Ok(Box::new(Softmax {
            kind,
            axis,
            coerce_2d,
        }))
    }

    /// `axis` as an index into dims of rank `rank` (a scalar counts as rank 1).
    fn axis_index(&self, rank: usize) -> OpResult<usize> {
        let (op, rank) = (self.kind.name(), rank.max(1));
        if self.coerce_2d {
            // Before opset 13 the axis may equal the rank (the 2-D coercion then has one column).
            normalize_split_axis(op, "axis", self.axis, rank)
        } else {
            normalize_axis(op, "axis", self.axis, rank)
        }
    }

    /// `(outer, len, inner)`: the lanes of `dims` the op works on, `len` elements `inner` apart.
    fn lanes(&self, dims: &[usize]) -> OpResult<(usize, usize, usize)> {
        let axis = self.axis_index(dims.len())?;
        if dims.is_empty() {
            return Ok((1, 1, 1));
        }
        let outer = dims[..axis].iter().product();
        Ok(if self.coerce_2d {
            (outer, dims[axis..].iter().product(), 1)
        } else {
            (outer, dims[axis], dims[axis + 1..].iter().product())
        })
    }
}

impl Operator for Softmax {
    fn op_type(&self) -> &str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(self.kind.name(), inputs, 0)?;
        if !x.dtype.is_float() {
            return Err(OpError::DType {
                op: self.kind.name().into(),
                index: 0,
                expected: "a float type".into(),
                actual: x.dtype,
            });
        }
        self.axis_index(x.rank())?;
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(self.kind.name(), inputs, 0)?.dtype;
        cpu_only(self.kind.name(), dtype, device)?;
        let op = *self;
        dispatch_float!(dtype, T => Ok(Box::new(SoftmaxKernel::<T> { op, _t: PhantomData })
            as Box<dyn Kernel>), _ => Err(OpError::no_kernel(self.kind.name(), dtype, device)))
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

#[derive(Debug)]
struct SoftmaxKernel<T> {
    op: Softmax,
    _t: PhantomData<T>,
}

/// Applies `kind` to each of `outer × inner` lanes of `len` elements (stride `inner`) of
/// `data`, in place.
pub(crate) fn apply_lanes<T: Real>(
    kind: SoftmaxKind,
    data: &mut [T],
    outer: usize,
    len: usize,
    inner: usize,
) {
    for o in 0..outer {
        for i in 0..inner {
            let base = o * len * inner + i;
            let lane = (0..len).map(|k| base + k * inner);
            let max = lane
                .clone()
                .fold(T::Wide::neg_infinity(), |m, p| m.max(data[p].widen()));
            match kind {
                SoftmaxKind::Hardmax => {
                    let first = lane.clone().find(|&p| data[p].widen() == max);
                    for p in lane {
                        let hit = Some(p) == first;
                        data[p] = T::narrow(<T::Wide as WideFloat>::lit(f64::from(u8::from(hit))));
                    }
                }
                SoftmaxKind::Softmax => {
                    let sum = lane
                        .clone()
                        .fold(T::Wide::zero(), |s, p| s + (data[p].widen() - max).exp());
                    for p in lane {
                        data[p] = T::narrow((data[p].widen() - max).exp() / sum);
                    }
                }
                SoftmaxKind::LogSoftmax => {
                    let sum = lane
                        .clone()
                        .fold(T::Wide::zero(), |s, p| s + (data[p].widen() - max).exp());
                    // Subtract the max first: `x - (max + ln Σ)` would round at the scale of x.
                    let ln_sum = sum.ln();
                    for p in lane {
                        data[p] = T::narrow((data[p].widen() - max) - ln_sum);
                    }
                }
            }
        }
    }
}

/// Where each output element starts: copied from the input, unless the planner ran the op in
/// place; then `apply` works on the output as a slice of `U`.
fn in_output<U: Element>(
    io: &KernelIo<'_>,
    name: &str,
    apply: impl FnOnce(&mut [U]),
) -> OpResult<()> {
    let out = io.output(0);
    let mut w = out.write::<U>()?;
    let data = w
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(name, "output is not contiguous"))?;
    if io.in_place != Some(0) {
        let x = io.input(0);
        if x.dims() != out.dims() || x.dtype() != U::DTYPE {
            return Err(OpError::kernel(
                name,
                format!(
                    "input {:?} does not match output {:?}",
                    x.dims(),
                    out.dims()
                ),
            ));
        }
        let r = x.read::<U>()?;
        data.copy_from_slice(
            r.as_slice()
                .ok_or_else(|| OpError::kernel(name, "input is not contiguous"))?,
        );
    }
    apply(data);
    Ok(())
}

impl<T: Real + Element> Kernel for SoftmaxKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let kind = self.op.kind;
        let (outer, len, inner) = self.op.lanes(io.output(0).dims())?;
        // f32 Softmax along contiguous lanes (the last axis, or all trailing dims before
        // opset 13): the vectorized row kernel.
        if kind == SoftmaxKind::Softmax && inner == 1 && T::DTYPE == DType::F32 {
            return in_output::<f32>(io, kind.name(), |data| softmax_rows(data, len));
        }
        in_output::<T>(io, kind.name(), |data| {
            apply_lanes(kind, data, outer, len, inner)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::{assert_close, run_outputs as run};
    use crate::Attr;
    use strata_core::{bf16, Tensor};

    fn ln_sum_exp(v: &[f32]) -> f32 {
        v.iter().map(|x| x.exp()).sum::<f32>().ln()
    }

    #[test]
    fn log_softmax_along_one_axis_from_opset_13() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
        let out = run("LogSoftmax", 13, &[("axis", Attr::Int(0))], &[x], 1).unwrap();
        let (a, b) = (ln_sum_exp(&[1.0, 3.0]), ln_sum_exp(&[2.0, 4.0]));
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[1.0 - a, 2.0 - b, 3.0 - a, 4.0 - b],
            "y",
        );
    }

    #[test]
    fn before_opset_13_the_trailing_dims_form_one_lane() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 2, 2]).unwrap();
        let out = run(
            "LogSoftmax",
            11,
            &[("axis", Attr::Int(1))],
            std::slice::from_ref(&x),
            1,
        )
        .unwrap();
        let l = ln_sum_exp(&[1.0, 2.0, 3.0, 4.0]);
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[1.0 - l, 2.0 - l, 3.0 - l, 4.0 - l],
            "log",
        );
        let out = run("Hardmax", 11, &[], &[x], 1).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![0.0, 0.0, 0.0, 1.0]);
    }

    #[test]
    fn hardmax_marks_the_first_maximum() {
        let x = Tensor::from_slice(&[3.0f32, 1.0, 3.0, 0.0, -1.0, 5.0], &[2, 3]).unwrap();
        let out = run("Hardmax", 13, &[], &[x], 1).unwrap();
        assert_eq!(
            out[0].to_vec::<f32>().unwrap(),
            vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
        );
    }

    #[test]
    fn softmax_of_bf16_and_large_inputs() {
        let x = Tensor::from_slice(&[bf16::from_f32(0.0), bf16::from_f32(0.0)], &[2]).unwrap();
        let out = run("Softmax", 13, &[], &[x], 1).unwrap();
        let y: Vec<f32> = out[0]
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert_eq!(y, vec![0.5, 0.5]);
        let x = Tensor::from_slice(&[1000.0f32, 1000.0], &[2]).unwrap();
        let out = run("LogSoftmax", 13, &[], &[x], 1).unwrap();
        assert_close(
            &out[0].to_vec::<f32>().unwrap(),
            &[-(2.0f32.ln()); 2],
            "large",
        );
    }

    #[test]
    fn bad_axis_and_dtype_are_errors() {
        let x = Tensor::from_slice(&[1.0f32; 4], &[2, 2]).unwrap();
        let err = run(
            "LogSoftmax",
            13,
            &[("axis", Attr::Int(2))],
            std::slice::from_ref(&x),
            1,
        )
        .unwrap_err();
        assert!(err.to_string().contains("LogSoftmax") && err.to_string().contains("axis"));
        let err = run("Hardmax", 13, &[("axis", Attr::Int(-3))], &[x], 1).unwrap_err();
        assert!(err.to_string().contains("axis"), "{err}");
        let xi = Tensor::from_slice(&[1i32; 2], &[2]).unwrap();
        let err = run("Softmax", 13, &[], &[xi], 1).unwrap_err();
        assert!(err.to_string().contains("dtype"), "{err}");
    }
}
