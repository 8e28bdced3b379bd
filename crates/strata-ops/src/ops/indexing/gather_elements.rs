//! GatherElements: `out[i..] = data[i.. with axis replaced by indices[i..]]`, output dims are the
//! indices' dims. Elements move as raw words of the dtype's size, so every dtype shares one
//! kernel; negative indices count from the end, out-of-range ones are errors.

use smallvec::SmallVec;
use strata_core::Device;

use crate::support::axes::{check_int_input, normalize_axis};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::support::strided::StridedWalk;
use crate::{Constructor, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("GatherElements", GatherElements::build)];

#[derive(Debug, Clone, Copy)]
pub struct GatherElements {
    axis: i64,
}

impl GatherElements {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(GatherElements {
            axis: ctx.attrs.int_or("axis", 0)?,
        }))
    }
}

impl Operator for GatherElements {
    fn op_type(&self) -> &str {
        "GatherElements"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let data = required("GatherElements", inputs, 0)?;
        let indices = required("GatherElements", inputs, 1)?;
        check_int_input("GatherElements", inputs, 1)?;
        if indices.rank() != data.rank() {
            return Err(OpError::shape(
                "GatherElements",
                format!(
                    "indices {:?} and data {:?} differ in rank",
                    indices.dims, data.dims
                ),
            ));
        }
        normalize_axis("GatherElements", "axis", self.axis, data.rank())?;
        Ok(vec![Fact::new(data.dtype, indices.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain(
            "GatherElements",
            required("GatherElements", inputs, 0)?.dtype,
            device,
        )?;
        Ok(Box::new(*self))
    }
}

/// Resolves a possibly negative index against an axis of `n`, naming the index and axis.
pub(crate) fn resolve_index(op: &str, raw: i64, n: usize, axis: usize) -> OpResult<usize> {
    let i = if raw < 0 { raw + n as i64 } else { raw };
    if (0..n as i64).contains(&i) {
        Ok(i as usize)
    } else {
        Err(OpError::kernel(
            op,
            format!("index {raw} out of range for axis {axis} of size {n}"),
        ))
    }
}

/// Calls `f(index_position, data_position_without_axis, indices_flat)` for every index in
/// row-major order over `dims`, where positions use the given strides.
pub(crate) fn for_each_index(
    dims: &[usize],
    a_strides: &[isize],
    b_strides: &[isize],
    mut f: impl FnMut(isize, isize, usize) -> OpResult<()>,
) -> OpResult<()> {
    let walk = StridedWalk::new(dims, [a_strides, b_strides], [0, 0]);
    for (flat, [pa, pb]) in walk.enumerate() {
        f(pa, pb, flat)?;
    }
    Ok(())
}

fn gather<T: bytemuck::Pod>(
    data: &strata_core::Tensor,
    out: &strata_core::Tensor,
    idx: Indices<'_>,
    axis: usize,
) -> OpResult<()> {
    let d = data.read_raw::<T>("GatherElements")?;
    let src = d.storage_data();
    let mut o = out.write_raw::<T>("GatherElements")?;
    let dst = o
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel("GatherElements", "output is not contiguous"))?;
    let (n, axis_stride) = (data.dims()[axis], data.strides()[axis]);
    // The data position of every index ignores the axis; the index value supplies it.
    let mut strides: SmallVec<[isize; 8]> = SmallVec::from_slice(data.strides());
    strides[axis] = 0;
    let base = data.storage_offset() as isize;
    for_each_index(out.dims(), &strides, &strides, |p, _, flat| {
        let i = resolve_index("GatherElements", idx.get(flat), n, axis)?;
        dst[flat] = src[(base + p + i as isize * axis_stride) as usize];
        Ok(())
    })
}

impl Kernel for GatherElements {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (data, indices, out) = (io.input(0), io.input(1), io.output(0));
        let axis = normalize_axis("GatherElements", "axis", self.axis, data.rank())?;
        if out.dims() != indices.dims() || indices.rank() != data.rank() {
            return Err(OpError::kernel(
                "GatherElements",
                format!(
                    "indices {:?}, data {:?}, output {:?}",
                    indices.dims(),
                    data.dims(),
                    out.dims()
                ),
            ));
        }
        // Non-axis index coordinates must lie inside data.
        if let Some(a) = (0..data.rank()).find(|&a| a != axis && indices.dims()[a] > data.dims()[a])
        {
            return Err(OpError::kernel(
                "GatherElements",
                format!(
                    "indices {:?} exceed data {:?} on axis {a}",
                    indices.dims(),
                    data.dims()
                ),
            ));
        }
        with_indices("GatherElements", indices, |idx| {
            match data.dtype().size_in_bytes() {
                1 => gather::<u8>(data, out, idx, axis),
                2 => gather::<u16>(data, out, idx, axis),
                4 => gather::<u32>(data, out, idx, axis),
                8 => gather::<u64>(data, out, idx, axis),
                _ => Err(OpError::no_kernel(
                    "GatherElements",
                    data.dtype(),
                    Device::Cpu,
                )),
            }
        })
    }
}

/// Contiguous int32 or int64 indices.
#[derive(Clone, Copy)]
pub(crate) enum Indices<'a> {
    I64(&'a [i64]),
    I32(&'a [i32]),
}

impl Indices<'_> {
    #[inline]
    pub fn get(&self, i: usize) -> i64 {
        match self {
            Indices::I64(s) => s[i],
            Indices::I32(s) => s[i] as i64,
        }
    }
}

/// Calls `f` with the (contiguous) indices of an int32 or int64 tensor, borrowed.
pub(crate) fn with_indices<R>(
    op: &'static str,
    indices: &strata_core::Tensor,
    f: impl FnOnce(Indices<'_>) -> OpResult<R>,
) -> OpResult<R> {
    let not_contiguous = || OpError::kernel(op, "indices are not contiguous");
    match indices.dtype() {
        strata_core::DType::I64 => {
            let r = indices.read::<i64>()?;
            f(Indices::I64(r.as_slice().ok_or_else(not_contiguous)?))
        }
        strata_core::DType::I32 => {
            let r = indices.read::<i32>()?;
            f(Indices::I32(r.as_slice().ok_or_else(not_contiguous)?))
        }
        other => Err(OpError::kernel(
            op,
            format!("indices must be int32 or int64, got {other}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(axis: i64, data: &Tensor, idx: &Tensor) -> OpResult<Tensor> {
        let op = GatherElements { axis };
        let facts = [Fact::constant(data.clone()), Fact::constant(idx.clone())];
        let f = op.infer(&[&facts[0], &facts[1]])?.remove(0);
        let o = Tensor::zeros(&f.concrete().unwrap(), data.dtype())?;
        op.run(&KernelIo {
            inputs: &[data, idx],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    #[test]
    fn gathers_along_either_axis() {
        let data = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2]).unwrap();
        let idx = Tensor::from_slice(&[0i64, 0, 1, 0], &[2, 2]).unwrap();
        assert_eq!(
            run(1, &data, &idx).unwrap().to_vec::<i32>().unwrap(),
            vec![1, 1, 4, 3]
        );
        let idx = Tensor::from_slice(&[1i32, -1, 0, 0], &[2, 2]).unwrap();
        assert_eq!(
            run(0, &data, &idx).unwrap().to_vec::<i32>().unwrap(),
            vec![3, 4, 1, 2]
        );
        let idx = Tensor::from_slice(&[2i64], &[1, 1]).unwrap();
        let err = run(0, &data, &idx).unwrap_err();
        assert!(
            err.to_string().contains("index 2") && err.to_string().contains("axis 0"),
            "{err}"
        );
    }
}
