//! CumSum (opsets 11-14) and CumProd (opset 26): running sums or products along the axis given
//! by a scalar input, with `exclusive` and `reverse`. Running values are kept for a stack chunk
//! of inner lanes at a time (rows are read contiguously), widened where the element type needs
//! it (f16, bf16); integers wrap.

use strata_core::{DType, Device};

use crate::support::accumulate::{dispatch_accumulate, Accumulate};
use crate::support::axes::{check_int_input, normalize_axis, read_ints};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[
    ("CumSum", |c| Cumulative::build(Running::Sum, c)),
    ("CumProd", |c| Cumulative::build(Running::Product, c)),
];

/// What the running value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Running {
    Sum,
    Product,
}

impl Running {
    fn op(self) -> &'static str {
        match self {
            Running::Sum => "CumSum",
            Running::Product => "CumProd",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Cumulative {
    kind: Running,
    exclusive: bool,
    reverse: bool,
}

impl Cumulative {
    pub fn build(kind: Running, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Cumulative {
            kind,
            exclusive: ctx.attrs.int_or("exclusive", 0)? != 0,
            reverse: ctx.attrs.int_or("reverse", 0)? != 0,
        }))
    }
}

impl Operator for Cumulative {
    fn op_type(&self) -> &str {
        self.kind.op()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.kind.op();
        let x = required(op, inputs, 0)?;
        let axis = required(op, inputs, 1)?;
        check_int_input(op, inputs, 1)?;
        if x.dtype == DType::Bool || x.dtype.is_quantized() {
            return Err(OpError::DType {
                op: op.into(),
                index: 0,
                expected: "a numeric type".into(),
                actual: x.dtype,
            });
        }
        if axis.numel().is_some_and(|n| n != 1) {
            return Err(OpError::shape(
                op,
                format!("axis must hold one value, got dims {:?}", axis.dims),
            ));
        }
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let op = self.kind.op();
        cpu_plain(op, required(op, inputs, 0)?.dtype, device)?;
        Ok(Box::new(*self))
    }
}

const CHUNK: usize = 64;

/// The running `kind` over `n` steps of `inner` lanes, for every outer block of `x`.
fn running<T: Accumulate>(
    kind: Running,
    x: &[T],
    out: &mut [T],
    n: usize,
    inner: usize,
    exclusive: bool,
    reverse: bool,
) {
    type Combine<A> = fn(A, A) -> A;
    let (start, combine): (T::Acc, Combine<T::Acc>) = match kind {
        Running::Sum => (T::zero(), T::add),
        Running::Product => (T::one(), T::mul),
    };
    let outer = x.len().checked_div(n * inner).unwrap_or(0);
    for o in 0..outer {
        let base = o * n * inner;
        let mut c = 0;
        while c < inner {
            let w = CHUNK.min(inner - c);
            let mut acc = [start; CHUNK];
            for step in 0..n {
                let k = if reverse { n - 1 - step } else { step };
                let at = base + k * inner + c;
                let (src, dst) = (&x[at..at + w], &mut out[at..at + w]);
                for ((a, &v), d) in acc.iter_mut().zip(src).zip(dst) {
                    if exclusive {
                        *d = T::narrow(*a);
                        *a = combine(*a, v.widen());
                    } else {
                        *a = combine(*a, v.widen());
                        *d = T::narrow(*a);
                    }
                }
            }
            c += w;
        }
    }
}

impl Kernel for Cumulative {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let op = self.kind.op();
        let (x, out) = (io.input(0), io.output(0));
        let axis = read_ints(op, io.input(1))?;
        let &[axis] = axis.as_slice() else {
            return Err(OpError::kernel(
                op,
                format!("axis must hold one value, got {axis:?}"),
            ));
        };
        let axis = normalize_axis(op, "axis", axis, x.rank())?;
        if out.dims() != x.dims() || out.dtype() != x.dtype() {
            return Err(OpError::kernel(
                op,
                format!("output {:?} differs from input {:?}", out.dims(), x.dims()),
            ));
        }
        let dims = x.dims();
        let (n, inner) = (dims[axis], dims[axis + 1..].iter().product::<usize>());
        let not_contiguous = || OpError::kernel(op, "input or output is not contiguous");
        let (kind, exclusive, reverse) = (self.kind, self.exclusive, self.reverse);
        dispatch_accumulate!(x.dtype(), bool: false, T => {
            let xr = x.read::<T>()?;
            let xs = xr.as_slice().ok_or_else(not_contiguous)?;
            let mut ow = out.write::<T>()?;
            let os = ow.as_mut_slice().ok_or_else(not_contiguous)?;
            running(kind, xs, os, n, inner, exclusive, reverse);
            Ok(())
        }, _ => Err(OpError::no_kernel(op, x.dtype(), Device::Cpu)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(op: Cumulative, x: &Tensor, axis: i64) -> Vec<i32> {
        let axis = Tensor::from_slice(&[axis], &[]).unwrap();
        let o = Tensor::zeros(x.dims(), x.dtype()).unwrap();
        op.run(&KernelIo {
            inputs: &[x, &axis],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })
        .unwrap();
        o.to_vec::<i32>().unwrap()
    }

    #[test]
    fn forward_reverse_exclusive_on_both_axes() {
        let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
        let op = |exclusive, reverse| Cumulative {
            kind: Running::Sum,
            exclusive,
            reverse,
        };
        assert_eq!(run(op(false, false), &x, 1), vec![1, 3, 6, 4, 9, 15]);
        assert_eq!(run(op(true, false), &x, -1), vec![0, 1, 3, 0, 4, 9]);
        assert_eq!(run(op(false, true), &x, 1), vec![6, 5, 3, 15, 11, 6]);
        assert_eq!(run(op(true, true), &x, 1), vec![5, 3, 0, 11, 6, 0]);
        assert_eq!(run(op(false, false), &x, 0), vec![1, 2, 3, 5, 7, 9]);
        assert_eq!(run(op(true, true), &x, 0), vec![4, 5, 6, 0, 0, 0]);
    }

    #[test]
    fn products_forward_reverse_exclusive() {
        let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
        let op = |exclusive, reverse| Cumulative {
            kind: Running::Product,
            exclusive,
            reverse,
        };
        assert_eq!(run(op(false, false), &x, 1), vec![1, 2, 6, 4, 20, 120]);
        assert_eq!(run(op(true, false), &x, 1), vec![1, 1, 2, 1, 4, 20]);
        assert_eq!(run(op(false, true), &x, -1), vec![6, 6, 3, 120, 30, 6]);
        assert_eq!(run(op(true, true), &x, 1), vec![6, 3, 1, 30, 6, 1]);
        assert_eq!(run(op(false, false), &x, 0), vec![1, 2, 3, 4, 10, 18]);
        // Integer products wrap instead of panicking.
        let big = Tensor::from_slice(&[i32::MAX, 2], &[2]).unwrap();
        assert_eq!(run(op(false, false), &big, 0), vec![i32::MAX, -2]);
    }

    #[test]
    fn bad_axis_is_an_error() {
        let x = Tensor::from_slice(&[1i32, 2, 3], &[3]).unwrap();
        let o = Tensor::zeros(x.dims(), x.dtype()).unwrap();
        let axis = Tensor::from_slice(&[1i64], &[]).unwrap();
        let op = Cumulative {
            kind: Running::Product,
            exclusive: false,
            reverse: false,
        };
        let err = op
            .run(&KernelIo {
                inputs: &[&x, &axis],
                outputs: &[&o],
                scratch: None,
                in_place: None,
                threads: 1,
            })
            .unwrap_err();
        assert!(err.to_string().starts_with("CumProd"), "{err}");
    }
}
