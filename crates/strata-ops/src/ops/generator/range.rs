//! Range: `start, start + delta, ...` up to (excluding) `limit`, scalars of one numeric dtype.
//! The length, `max(ceil((limit - start) / delta), 0)`, depends on the values, so without
//! constant inputs the runtime sizes the output when the node runs. Integers are computed
//! exactly (i128), floats in f64.

use strata_core::{DType, Device, Tensor};

use crate::support::accumulate::{dispatch_accumulate, Accumulate};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("Range", Range::build)];

#[derive(Debug, Clone, Copy)]
pub struct Range;

impl Range {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Range))
    }
}

/// start, limit, delta, exact for integers.
#[derive(Debug, Clone, Copy)]
enum Bounds {
    Int(i128, i128, i128),
    Float(f64, f64, f64),
}

fn first_f64<T: Accumulate>(t: &Tensor) -> OpResult<f64> {
    let r = t.read::<T>()?;
    let v = r
        .elements()?
        .first()
        .copied()
        .ok_or_else(|| OpError::kernel("Range", "an input is empty"))?;
    Ok(T::to_f64(v.widen()))
}

fn scalar(t: &Tensor) -> OpResult<(bool, f64, i128)> {
    if t.numel() != 1 {
        return Err(OpError::shape(
            "Range",
            format!("inputs must be scalars, got dims {:?}", t.dims()),
        ));
    }
    Ok(match t.dtype() {
        DType::I64 => {
            let v = t.read::<i64>()?.elements()?[0];
            (true, v as f64, v as i128)
        }
        DType::U64 => {
            let v = t.read::<u64>()?.elements()?[0];
            (true, v as f64, v as i128)
        }
        d => {
            let v = dispatch_accumulate!(d, bool: false, T => first_f64::<T>(t)?,
                _ => return Err(OpError::kernel("Range", format!("no Range for dtype {d}"))));
            (!d.is_float(), v, v as i128)
        }
    })
}

fn bounds(start: &Tensor, limit: &Tensor, delta: &Tensor) -> OpResult<Bounds> {
    let (int, s, si) = scalar(start)?;
    let (_, l, li) = scalar(limit)?;
    let (_, d, di) = scalar(delta)?;
    Ok(if int {
        Bounds::Int(si, li, di)
    } else {
        Bounds::Float(s, l, d)
    })
}

fn count(b: Bounds) -> OpResult<usize> {
    let n = match b {
        Bounds::Int(s, l, d) => {
            if d == 0 {
                return Err(OpError::shape("Range", "delta is zero"));
            }
            let (q, r) = ((l - s) / d, (l - s) % d);
            let q = if r != 0 && (r > 0) == (d > 0) {
                q + 1
            } else {
                q
            };
            q.max(0)
        }
        Bounds::Float(s, l, d) => {
            let n = ((l - s) / d).ceil();
            if d == 0.0 || n.is_nan() || n.is_infinite() {
                return Err(OpError::shape(
                    "Range",
                    format!("cannot count from {s} to {l} by {d}"),
                ));
            }
            n.max(0.0) as i128
        }
    };
    usize::try_from(n).map_err(|_| OpError::shape("Range", format!("{n} elements is too many")))
}

impl Operator for Range {
    fn op_type(&self) -> &str {
        "Range"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let facts = [
            required("Range", inputs, 0)?,
            required("Range", inputs, 1)?,
            required("Range", inputs, 2)?,
        ];
        let dtype = facts[0].dtype;
        if let Some((i, f)) = facts.iter().enumerate().find(|(_, f)| f.dtype != dtype) {
            return Err(OpError::DType {
                op: "Range".into(),
                index: i,
                expected: dtype.to_string(),
                actual: f.dtype,
            });
        }
        if dtype == DType::Bool || dtype.is_quantized() {
            return Err(OpError::DType {
                op: "Range".into(),
                index: 0,
                expected: "a numeric type".into(),
                actual: dtype,
            });
        }
        let dim = match (&facts[0].value, &facts[1].value, &facts[2].value) {
            (Some(s), Some(l), Some(d)) => Dim::Known(count(bounds(s, l, d)?)?),
            _ => Dim::Unknown,
        };
        Ok(vec![Fact::new(dtype, vec![dim])])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("Range", required("Range", inputs, 0)?.dtype, device)?;
        Ok(Box::new(Range))
    }
}

fn fill<T: Accumulate>(out: &Tensor, b: Bounds) -> OpResult<()> {
    let mut w = out.write::<T>()?;
    let o = w
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel("Range", "output is not contiguous"))?;
    match b {
        Bounds::Int(s, _, d) => {
            for (i, v) in o.iter_mut().enumerate() {
                *v = int_from_i128::<T>(s + i as i128 * d);
            }
        }
        Bounds::Float(s, _, d) => {
            for (i, v) in o.iter_mut().enumerate() {
                *v = T::narrow(T::from_f64(s + i as f64 * d));
            }
        }
    }
    Ok(())
}

/// An integer element from its exact value (in range by construction: it lies between start
/// and limit).
fn int_from_i128<T: Accumulate>(x: i128) -> T {
    let bytes = (x as i64).to_ne_bytes();
    let size = std::mem::size_of::<T>();
    // Two's complement truncation, matching `as` casts of in-range values.
    let start = if cfg!(target_endian = "big") {
        8 - size
    } else {
        0
    };
    bytemuck::pod_read_unaligned(&bytes[start..start + size])
}

impl Kernel for Range {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let out = io.output(0);
        let b = bounds(io.input(0), io.input(1), io.input(2))?;
        let n = count(b)?;
        if out.dims() != [n] {
            return Err(OpError::kernel(
                "Range",
                format!("output has dims {:?}, expected [{n}]", out.dims()),
            ));
        }
        dispatch_accumulate!(out.dtype(), bool: false, T => fill::<T>(out, b),
            _ => Err(OpError::no_kernel("Range", out.dtype(), Device::Cpu)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: strata_core::Element>(s: T, l: T, d: T) -> OpResult<Vec<T>> {
        let t = [Tensor::scalar(s)?, Tensor::scalar(l)?, Tensor::scalar(d)?];
        let facts: Vec<Fact> = t.iter().map(|t| Fact::constant(t.clone())).collect();
        let f = Range.infer(&[&facts[0], &facts[1], &facts[2]])?.remove(0);
        let o = Tensor::zeros(&f.concrete().unwrap(), T::DTYPE)?;
        Range.run(&KernelIo {
            inputs: &[&t[0], &t[1], &t[2]],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        o.to_vec::<T>().map_err(Into::into)
    }

    #[test]
    fn counts_and_values() {
        assert_eq!(run(10i32, 6, -3).unwrap(), vec![10, 7]);
        assert_eq!(run(1.0f32, 5.0, 2.0).unwrap(), vec![1.0, 3.0]);
        assert_eq!(run(0i64, 3, 1).unwrap(), vec![0, 1, 2]);
        assert_eq!(run(5i16, 1, 1).unwrap(), Vec::<i16>::new());
        assert_eq!(
            run(i64::MAX - 2, i64::MAX, 1).unwrap(),
            vec![i64::MAX - 2, i64::MAX - 1]
        );
        assert!(run(0i32, 3, 0).is_err());
        assert!(run(0.0f64, f64::INFINITY, 1.0).is_err());
    }
}
