//! ArgMax and ArgMin along one axis: int64 indices, `keepdims`, `select_last_index` (ties go to
//! the first index unless set). Lanes across the inner dims are scanned a stack chunk at a
//! time so rows are read contiguously.

use std::cmp::Ordering;

use strata_core::{DType, Device};

use crate::support::accumulate::dispatch_accumulate;
use crate::support::axes::normalize_axis;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[
    ("ArgMax", |c| ArgMinMax::build(true, c)),
    ("ArgMin", |c| ArgMinMax::build(false, c)),
];

#[derive(Debug, Clone, Copy)]
pub struct ArgMinMax {
    max: bool,
    axis: i64,
    keepdims: bool,
    last: bool,
}

impl ArgMinMax {
    pub fn build(max: bool, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(ArgMinMax {
            max,
            axis: ctx.attrs.int_or("axis", 0)?,
            keepdims: ctx.attrs.int_or("keepdims", 1)? != 0,
            last: ctx.attrs.int_or("select_last_index", 0)? != 0,
        }))
    }

    fn name(&self) -> &'static str {
        if self.max {
            "ArgMax"
        } else {
            "ArgMin"
        }
    }
}

impl Operator for ArgMinMax {
    fn op_type(&self) -> &str {
        self.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(self.name(), inputs, 0)?;
        if x.dtype == DType::Bool || x.dtype.is_quantized() {
            return Err(OpError::DType {
                op: self.name().into(),
                index: 0,
                expected: "a numeric type".into(),
                actual: x.dtype,
            });
        }
        let axis = normalize_axis(self.name(), "axis", self.axis, x.rank())?;
        let mut dims = x.dims.clone();
        if self.keepdims {
            dims[axis] = Dim::Known(1);
        } else {
            dims.remove(axis);
        }
        Ok(vec![Fact::new(DType::I64, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let x = required(self.name(), inputs, 0)?;
        cpu_plain(self.name(), x.dtype, device)?;
        Ok(Box::new(*self))
    }
}

const CHUNK: usize = 64;

/// Index of the best element along the middle axis of a contiguous `[outer, n, inner]` view;
/// `better(a, b)` says `a` replaces the current best `b`.
fn arg_best<T: Copy>(
    x: &[T],
    n: usize,
    inner: usize,
    out: &mut [i64],
    better: impl Fn(T, T) -> bool,
) {
    for (o, out_row) in out.chunks_mut(inner).enumerate() {
        let base = o * n * inner;
        let mut c = 0;
        while c < inner {
            let w = CHUNK.min(inner - c);
            let mut best = [x[base + c]; CHUNK];
            best[..w].copy_from_slice(&x[base + c..base + c + w]);
            let mut index = [0i64; CHUNK];
            for k in 1..n {
                let row = &x[base + k * inner + c..base + k * inner + c + w];
                for ((b, i), &v) in best.iter_mut().zip(index.iter_mut()).zip(row) {
                    if better(v, *b) {
                        *b = v;
                        *i = k as i64;
                    }
                }
            }
            out_row[c..c + w].copy_from_slice(&index[..w]);
            c += w;
        }
    }
}

impl Kernel for ArgMinMax {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let name = self.name();
        let (x, out) = (io.input(0), io.output(0));
        let axis = normalize_axis(name, "axis", self.axis, x.rank())?;
        let dims = x.dims();
        let n = dims[axis];
        let outer: usize = dims[..axis].iter().product();
        let inner: usize = dims[axis + 1..].iter().product();
        if out.numel() != outer * inner || out.dtype() != DType::I64 {
            return Err(OpError::kernel(
                name,
                format!(
                    "output {}{:?} does not match input {dims:?}",
                    out.dtype(),
                    out.dims()
                ),
            ));
        }
        if outer * inner == 0 {
            return Ok(());
        }
        if n == 0 {
            return Err(OpError::kernel(
                name,
                format!("axis {axis} of input {dims:?} is empty: no index to select"),
            ));
        }
        let not_contiguous = || OpError::kernel(name, "input or output is not contiguous");
        let mut ow = out.write::<i64>()?;
        let os = ow.as_mut_slice().ok_or_else(not_contiguous)?;
        let (max, last) = (self.max, self.last);
        dispatch_accumulate!(x.dtype(), bool: false, T => {
            let xr = x.read::<T>()?;
            let xs = xr.as_slice().ok_or_else(not_contiguous)?;
            // Ties keep the first index unless `select_last_index`; NaN is never "better".
            let wanted = if max { Ordering::Greater } else { Ordering::Less };
            arg_best(xs, n, inner, os, |v: T, b: T| match v.partial_cmp(&b) {
                Some(Ordering::Equal) => last,
                Some(o) => o == wanted,
                None => false,
            });
            Ok(())
        }, _ => Err(OpError::no_kernel(name, x.dtype(), Device::Cpu)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(op: ArgMinMax, x: &Tensor) -> OpResult<Tensor> {
        let f = Fact::constant(x.clone());
        let out = op.infer(&[&f])?.remove(0);
        let o = Tensor::zeros(&out.concrete().unwrap(), DType::I64)?;
        op.run(&KernelIo {
            inputs: &[x],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    #[test]
    fn ties_first_or_last_and_negative_axis() {
        let x = Tensor::from_slice(&[2.0f32, 2.0, 1.0, 3.0, 4.0, 4.0], &[2, 3]).unwrap();
        let op = |max, axis, keepdims, last| ArgMinMax {
            max,
            axis,
            keepdims,
            last,
        };
        let y = run(op(true, -1, true, false), &x).unwrap();
        assert_eq!(y.dims(), &[2, 1]);
        assert_eq!(y.to_vec::<i64>().unwrap(), vec![0, 1]);
        let y = run(op(true, 1, false, true), &x).unwrap();
        assert_eq!(y.to_vec::<i64>().unwrap(), vec![1, 2]);
        let y = run(op(false, 0, false, false), &x).unwrap();
        assert_eq!(y.dims(), &[3]);
        assert_eq!(y.to_vec::<i64>().unwrap(), vec![0, 0, 0]);
        let xi = Tensor::from_slice(&[5u8, 1, 7, 1], &[4]).unwrap();
        let y = run(op(false, 0, false, true), &xi).unwrap();
        assert_eq!(y.to_vec::<i64>().unwrap(), vec![3]);
        assert!(run(op(true, 2, true, false), &x).is_err());
        let empty = Tensor::zeros(&[0, 2], DType::F32).unwrap();
        assert!(run(op(true, 0, true, false), &empty).is_err());
    }
}
