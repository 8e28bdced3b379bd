//! Gather along one axis with int32/int64 indices (negative indices count from the end;
//! out-of-range indices are an error, never an out-of-bounds read).

use strata_core::{DType, Device};

use crate::support::axes::normalize_axis;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct Gather {
    axis: i64,
}

impl Gather {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Gather {
            axis: ctx.attrs.int_or("axis", 0)?,
        }))
    }
}

impl Operator for Gather {
    fn op_type(&self) -> &str {
        "Gather"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let data = required("Gather", inputs, 0)?;
        let indices = required("Gather", inputs, 1)?;
        if !matches!(indices.dtype, DType::I64 | DType::I32) {
            return Err(OpError::DType {
                op: "Gather".into(),
                index: 1,
                expected: "int32 or int64".into(),
                actual: indices.dtype,
            });
        }
        let axis = normalize_axis("Gather", "axis", self.axis, data.rank())?;
        let dims: Vec<Dim> = data.dims[..axis]
            .iter()
            .chain(&indices.dims)
            .chain(&data.dims[axis + 1..])
            .cloned()
            .collect();
        Ok(vec![Fact::new(data.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("Gather", inputs[0].dtype, device)?;
        Ok(Box::new(GatherKernel {
            axis: normalize_axis("Gather", "axis", self.axis, inputs[0].rank())?,
        }))
    }
}

#[derive(Debug)]
struct GatherKernel {
    axis: usize,
}

impl GatherKernel {
    fn gather(
        &self,
        io: &KernelIo<'_>,
        index_at: impl Fn(usize) -> i64,
        count: usize,
    ) -> OpResult<()> {
        let (data, out) = (io.input(0), io.output(0));
        if !data.is_contiguous() {
            return Err(OpError::kernel("Gather", "data input is not contiguous"));
        }
        let dims = data.dims();
        let elem = data.dtype().size_in_bytes();
        let axis_len = dims[self.axis];
        let outer: usize = dims[..self.axis].iter().product();
        let inner: usize = dims[self.axis + 1..].iter().product::<usize>() * elem;
        let src = data.read_bytes("Gather")?;
        let src = &src.bytes()[data.storage_offset() * elem..];
        let mut dst = out.write_bytes("Gather")?;
        let dst = &mut dst.bytes()[out.storage_offset() * elem..];
        for o in 0..outer {
            for j in 0..count {
                let raw = index_at(j);
                let i = if raw < 0 { raw + axis_len as i64 } else { raw };
                if !(0..axis_len as i64).contains(&i) {
                    return Err(OpError::kernel(
                        "Gather",
                        format!(
                            "index {raw} out of range for axis {} of size {axis_len}",
                            self.axis
                        ),
                    ));
                }
                let from = (o * axis_len + i as usize) * inner;
                let to = (o * count + j) * inner;
                dst[to..to + inner].copy_from_slice(&src[from..from + inner]);
            }
        }
        Ok(())
    }
}

impl Kernel for GatherKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let indices = io.input(1);
        let count = indices.numel();
        match indices.dtype() {
            DType::I64 => {
                let r = indices.read::<i64>()?;
                let idx = r
                    .as_slice()
                    .ok_or_else(|| OpError::kernel("Gather", "indices are not contiguous"))?;
                self.gather(io, |j| idx[j], count)
            }
            _ => {
                let r = indices.read::<i32>()?;
                let idx = r
                    .as_slice()
                    .ok_or_else(|| OpError::kernel("Gather", "indices are not contiguous"))?;
                self.gather(io, |j| idx[j] as i64, count)
            }
        }
    }
}
