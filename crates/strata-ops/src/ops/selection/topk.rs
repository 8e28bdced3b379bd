//! TopK: the `k` largest (or smallest) elements along an axis and their int64 indices, `k` from
//! an attribute (opset 1) or an input. Equal values keep the lower index first, as ONNX
//! requires. Each lane sorts a permutation of indices held in planned scratch space.

use std::cmp::Ordering;

use strata_core::{bf16, f16, DType, Device, Element};

use crate::support::accumulate::dispatch_accumulate;
use crate::support::axes::{check_int_input, known_ints, normalize_axis, read_ints};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("TopK", TopK::build)];

#[derive(Debug, Clone, Copy)]
pub struct TopK {
    axis: i64,
    largest: bool,
    /// Opset 1 takes `k` as an attribute.
    k_attr: Option<i64>,
}

impl TopK {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let k_attr =
            if ctx.opset < 10 {
                Some(ctx.attrs.int("k")?.ok_or_else(|| {
                    OpError::attribute("TopK", "k", "is required before opset 10")
                })?)
            } else {
                None
            };
        Ok(Box::new(TopK {
            axis: ctx.attrs.int_or("axis", -1)?,
            largest: ctx.attrs.int_or("largest", 1)? != 0,
            k_attr,
        }))
    }

    fn k_value(k: &[i64]) -> OpResult<i64> {
        match k {
            &[k] => Ok(k),
            other => Err(OpError::shape(
                "TopK",
                format!("K must hold one value, got {other:?}"),
            )),
        }
    }
}

/// Checks `k` against the axis size.
fn check_k(k: i64, n: usize, axis: usize) -> OpResult<usize> {
    usize::try_from(k)
        .ok()
        .filter(|&k| k <= n)
        .ok_or_else(|| OpError::shape("TopK", format!("k = {k} is outside 0..={n} (axis {axis})")))
}

impl Operator for TopK {
    fn op_type(&self) -> &str {
        "TopK"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("TopK", inputs, 0)?;
        if x.dtype == DType::Bool || x.dtype.is_quantized() {
            return Err(OpError::DType {
                op: "TopK".into(),
                index: 0,
                expected: "a numeric type".into(),
                actual: x.dtype,
            });
        }
        let axis = normalize_axis("TopK", "axis", self.axis, x.rank())?;
        let k = match self.k_attr {
            Some(k) => Some(k),
            None => {
                required("TopK", inputs, 1)?;
                check_int_input("TopK", inputs, 1)?;
                known_ints("TopK", inputs, 1)?
                    .map(|k| Self::k_value(&k))
                    .transpose()?
            }
        };
        let mut dims = x.dims.clone();
        dims[axis] = match (k, x.dims[axis].known()) {
            (Some(k), Some(n)) => Dim::Known(check_k(k, n, axis)?),
            (Some(k), None) if k >= 0 => Dim::Known(k as usize),
            _ => Dim::Unknown,
        };
        Ok(vec![
            Fact::new(x.dtype, dims.clone()),
            Fact::new(DType::I64, dims),
        ])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("TopK", required("TopK", inputs, 0)?.dtype, device)?;
        Ok(Box::new(*self))
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let x = required("TopK", inputs, 0)?;
        let axis = normalize_axis("TopK", "axis", self.axis, x.rank())?;
        Ok(x.dims[axis].known().map_or(0, |n| n * 4))
    }
}

/// A total order on element values (floats by IEEE total order, so NaN sorts consistently).
trait TotalOrder: Element + Copy {
    fn total_cmp(a: Self, b: Self) -> Ordering;
}

macro_rules! int_total {
    ($($t:ty),*) => {$(
        impl TotalOrder for $t {
            fn total_cmp(a: $t, b: $t) -> Ordering { a.cmp(&b) }
        }
    )*};
}
int_total!(i8, i16, i32, i64, u8, u16, u32, u64);

impl TotalOrder for f32 {
    fn total_cmp(a: f32, b: f32) -> Ordering {
        a.total_cmp(&b)
    }
}

impl TotalOrder for f64 {
    fn total_cmp(a: f64, b: f64) -> Ordering {
        a.total_cmp(&b)
    }
}

impl TotalOrder for f16 {
    fn total_cmp(a: f16, b: f16) -> Ordering {
        a.to_f32().total_cmp(&b.to_f32())
    }
}

impl TotalOrder for bf16 {
    fn total_cmp(a: bf16, b: bf16) -> Ordering {
        a.to_f32().total_cmp(&b.to_f32())
    }
}

/// Lane geometry of one run: `[outer, n, inner]` with `k` kept.
struct Lanes {
    n: usize,
    inner: usize,
    k: usize,
    largest: bool,
}

fn topk<T: TotalOrder>(
    x: &[T],
    values: &mut [T],
    indices: &mut [i64],
    order: &mut [u32],
    l: &Lanes,
) -> OpResult<()> {
    let (n, inner, k) = (l.n, l.inner, l.k);
    let outer = x.len().checked_div(n * inner).unwrap_or(0);
    let order = &mut order[..n];
    // Cancellation and deadlines, once per lane.
    let stop = crate::run_control::stop_token();
    for o in 0..outer {
        for i in 0..inner {
            stop.poll(o * inner + i, "TopK")?;
            let base = o * n * inner + i;
            let at = |j: u32| x[base + j as usize * inner];
            let cmp = |a: &u32, b: &u32| {
                let by_value = T::total_cmp(at(*a), at(*b));
                let by_value = if l.largest {
                    by_value.reverse()
                } else {
                    by_value
                };
                by_value.then(a.cmp(b))
            };
            for (j, slot) in order.iter_mut().enumerate() {
                *slot = j as u32;
            }
            if k > 0 && k < n {
                order.select_nth_unstable_by(k - 1, cmp);
            }
            order[..k].sort_unstable_by(cmp);
            let out_base = o * k * inner + i;
            for (r, &j) in order[..k].iter().enumerate() {
                values[out_base + r * inner] = at(j);
                indices[out_base + r * inner] = j as i64;
            }
        }
    }
    Ok(())
}

impl Kernel for TopK {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, values, indices) = (io.input(0), io.output(0), io.output(1));
        let axis = normalize_axis("TopK", "axis", self.axis, x.rank())?;
        let k = match self.k_attr {
            Some(k) => k,
            None => Self::k_value(&read_ints("TopK", io.input(1))?)?,
        };
        let dims = x.dims();
        let n = dims[axis];
        let k = check_k(k, n, axis)?;
        let lanes = Lanes {
            n,
            inner: dims[axis + 1..].iter().product(),
            k,
            largest: self.largest,
        };
        let expected = x.numel() / n.max(1) * k;
        if n == 0 || (values.numel(), indices.numel()) != (expected, expected) {
            if n == 0 && values.numel() == 0 && indices.numel() == 0 {
                return Ok(());
            }
            return Err(OpError::kernel(
                "TopK",
                format!(
                    "outputs {:?}/{:?} do not hold k = {k} of {dims:?}",
                    values.dims(),
                    indices.dims()
                ),
            ));
        }
        u32::try_from(n)
            .map_err(|_| OpError::kernel("TopK", format!("axis of {n} elements is too long")))?;
        // The index permutation lives in planned scratch; allocate only when none was planned.
        let mut scratch_guard = match io.scratch {
            Some(s) if s.numel() >= n * 4 => Some(s.write_bytes("TopK")?),
            _ => None,
        };
        let mut owned = Vec::new();
        let order: &mut [u32] = match scratch_guard.as_mut() {
            Some(g) => bytemuck::try_cast_slice_mut(&mut g.bytes()[..n * 4])
                .map_err(|e| OpError::kernel("TopK", format!("scratch is misaligned: {e}")))?,
            None => {
                owned.resize(n, 0u32);
                &mut owned
            }
        };
        let not_contiguous = || OpError::kernel("TopK", "an input or output is not contiguous");
        let mut iw = indices.write::<i64>()?;
        let is = iw.as_mut_slice().ok_or_else(not_contiguous)?;
        dispatch_accumulate!(x.dtype(), bool: false, T => {
            let xr = x.read::<T>()?;
            let xs = xr.as_slice().ok_or_else(not_contiguous)?;
            let mut vw = values.write::<T>()?;
            let vs = vw.as_mut_slice().ok_or_else(not_contiguous)?;
            topk(xs, vs, is, order, &lanes)
        }, _ => Err(OpError::no_kernel("TopK", x.dtype(), Device::Cpu)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(op: TopK, x: &Tensor, k: i64) -> OpResult<(Tensor, Vec<i64>)> {
        let kt = Tensor::from_slice(&[k], &[1]).unwrap();
        let facts = [Fact::constant(x.clone()), Fact::constant(kt.clone())];
        let outs = op.infer(&[&facts[0], &facts[1]])?;
        let v = Tensor::zeros(&outs[0].concrete().unwrap(), x.dtype())?;
        let i = Tensor::zeros(&outs[1].concrete().unwrap(), DType::I64)?;
        op.run(&KernelIo {
            inputs: &[x, &kt],
            outputs: &[&v, &i],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        let idx = i.to_vec::<i64>()?;
        Ok((v, idx))
    }

    #[test]
    fn largest_smallest_ties_and_axis() {
        let x = Tensor::from_slice(&[3.0f32, 1.0, 3.0, 2.0, 0.0, 5.0, 5.0, 4.0], &[2, 4]).unwrap();
        let op = |axis, largest| TopK {
            axis,
            largest,
            k_attr: None,
        };
        let (v, i) = run(op(-1, true), &x, 2).unwrap();
        assert_eq!(v.to_vec::<f32>().unwrap(), vec![3.0, 3.0, 5.0, 5.0]);
        assert_eq!(i, vec![0, 2, 1, 2]);
        let (v, i) = run(op(1, false), &x, 3).unwrap();
        assert_eq!(
            v.to_vec::<f32>().unwrap(),
            vec![1.0, 2.0, 3.0, 0.0, 4.0, 5.0]
        );
        assert_eq!(i, vec![1, 3, 0, 0, 3, 1]);
        let (v, i) = run(op(0, true), &x, 1).unwrap();
        assert_eq!(v.dims(), &[1, 4]);
        assert_eq!(i, vec![0, 1, 1, 1]);
        let big = Tensor::from_slice(&[u64::MAX, u64::MAX - 1, 0], &[3]).unwrap();
        let (v, _) = run(op(0, true), &big, 2).unwrap();
        assert_eq!(v.to_vec::<u64>().unwrap(), vec![u64::MAX, u64::MAX - 1]);
        assert!(run(op(0, true), &x, 3).is_err());
        assert!(run(op(1, true), &x, -1).is_err());
    }
}
