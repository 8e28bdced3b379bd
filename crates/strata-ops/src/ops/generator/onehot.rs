//! OneHot: a new axis of `depth` entries, `values[1]` where the index points and `values[0]`
//! elsewhere. Indices and depth may be any numeric type (floats truncate); negative indices
//! count from `depth`; indices outside `[-depth, depth)` give an all-off row, as ONNX specifies.

use strata_core::{DType, Device, Tensor};

use crate::support::accumulate::{dispatch_accumulate, Accumulate};
use crate::support::axes::normalize_axis;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::support::scalar::ScalarBytes;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("OneHot", OneHot::build)];

#[derive(Debug, Clone, Copy)]
pub struct OneHot {
    axis: i64,
}

impl OneHot {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(OneHot {
            axis: ctx.attrs.int_or("axis", -1)?,
        }))
    }
}

/// Calls `f(i, value)` for every element of a numeric tensor, as an integer.
fn for_each_int(t: &Tensor, mut f: impl FnMut(usize, i64)) -> OpResult<()> {
    fn typed<T: Accumulate>(t: &Tensor, f: &mut impl FnMut(usize, i64)) -> OpResult<()> {
        let r = t.read::<T>()?;
        let s = r
            .as_slice()
            .ok_or_else(|| OpError::kernel("OneHot", "indices are not contiguous"))?;
        for (i, &v) in s.iter().enumerate() {
            f(i, T::to_f64(v.widen()) as i64);
        }
        Ok(())
    }
    match t.dtype() {
        // Exact for the full 64-bit range.
        DType::I64 => {
            let r = t.read::<i64>()?;
            let s = r
                .as_slice()
                .ok_or_else(|| OpError::kernel("OneHot", "indices are not contiguous"))?;
            s.iter().enumerate().for_each(|(i, &v)| f(i, v));
            Ok(())
        }
        d => dispatch_accumulate!(d, bool: false, T => typed::<T>(t, &mut f),
            _ => Err(OpError::kernel("OneHot", format!("indices and depth must be numeric, got {d}")))),
    }
}

fn depth_of(t: &Tensor) -> OpResult<usize> {
    if t.numel() != 1 {
        return Err(OpError::shape(
            "OneHot",
            format!("depth must hold one value, got dims {:?}", t.dims()),
        ));
    }
    let mut depth = 0;
    for_each_int(&t.contiguous()?, |_, v| depth = v)?;
    usize::try_from(depth)
        .ok()
        .filter(|&d| d > 0)
        .ok_or_else(|| OpError::shape("OneHot", format!("depth {depth} is not positive")))
}

impl Operator for OneHot {
    fn op_type(&self) -> &str {
        "OneHot"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let indices = required("OneHot", inputs, 0)?;
        let depth = required("OneHot", inputs, 1)?;
        let values = required("OneHot", inputs, 2)?;
        if values.numel().is_some_and(|n| n != 2) {
            return Err(OpError::shape(
                "OneHot",
                format!("values must hold [off, on], got dims {:?}", values.dims),
            ));
        }
        let axis = normalize_axis("OneHot", "axis", self.axis, indices.rank() + 1)?;
        let d = match &depth.value {
            Some(v) => Dim::Known(depth_of(v)?),
            None => Dim::Unknown,
        };
        let mut dims = indices.dims.clone();
        dims.insert(axis, d);
        Ok(vec![Fact::new(values.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("OneHot", required("OneHot", inputs, 2)?.dtype, device)?;
        Ok(Box::new(*self))
    }
}

impl Kernel for OneHot {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (indices, values, out) = (io.input(0), io.input(2), io.output(0));
        let depth = depth_of(io.input(1))?;
        let axis = normalize_axis("OneHot", "axis", self.axis, indices.rank() + 1)?;
        let id = indices.dims();
        let inner: usize = id[axis..].iter().product();
        let ok_dims = out.rank() == id.len() + 1
            && out.dims()[axis] == depth
            && out.dims()[..axis] == id[..axis]
            && out.dims()[axis + 1..] == id[axis..];
        if !ok_dims || values.numel() != 2 || !out.is_contiguous() {
            return Err(OpError::kernel(
                "OneHot",
                format!(
                    "output {:?} does not fit indices {id:?} with depth {depth}",
                    out.dims()
                ),
            ));
        }
        let off = ScalarBytes::from_tensor("OneHot", &values.narrow(0, 0, 1)?)?;
        let on = ScalarBytes::from_tensor("OneHot", &values.narrow(0, 1, 1)?)?;
        let elem = out.dtype().size_in_bytes();
        let mut w = out.write_bytes("OneHot")?;
        let bytes = &mut w.bytes()
            [out.storage_offset() * elem..out.storage_offset() * elem + out.numel() * elem];
        off.fill(bytes);
        let d = depth as i64;
        for_each_int(indices, |p, raw| {
            let i = if raw < 0 { raw + d } else { raw };
            if (0..d).contains(&i) {
                let (outer, rest) = (p / inner.max(1), p % inner.max(1));
                let at = ((outer * depth + i as usize) * inner + rest) * elem;
                bytes[at..at + elem].copy_from_slice(on.as_bytes());
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(axis: i64, indices: &Tensor, depth: f32, values: &Tensor) -> OpResult<Tensor> {
        let op = OneHot { axis };
        let d = Tensor::scalar(depth)?;
        let facts = [
            Fact::constant(indices.clone()),
            Fact::constant(d.clone()),
            Fact::constant(values.clone()),
        ];
        let f = op.infer(&[&facts[0], &facts[1], &facts[2]])?.remove(0);
        let o = Tensor::zeros(&f.concrete().unwrap(), values.dtype())?;
        op.run(&KernelIo {
            inputs: &[indices, &d, values],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    #[test]
    fn axes_negative_and_out_of_range_indices() {
        let values = Tensor::from_slice(&[0i32, 5], &[2]).unwrap();
        let idx = Tensor::from_slice(&[0i64, -1, 3, -4], &[4]).unwrap();
        let y = run(-1, &idx, 3.0, &values).unwrap();
        assert_eq!(y.dims(), &[4, 3]);
        assert_eq!(
            y.to_vec::<i32>().unwrap(),
            vec![5, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0]
        );
        let idx = Tensor::from_slice(&[1.7f32, 0.0], &[2]).unwrap();
        let y = run(0, &idx, 2.0, &values).unwrap();
        assert_eq!(y.dims(), &[2, 2]);
        assert_eq!(y.to_vec::<i32>().unwrap(), vec![0, 5, 5, 0]);
        assert!(run(0, &idx, 0.0, &values).is_err());
        assert!(run(2, &idx, 2.0, &values).is_err());
    }
}
