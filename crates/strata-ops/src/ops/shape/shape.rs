//! Shape: the input's dims as an int64 tensor, optionally sliced by `start`/`end` (opset 15).
//! Its value is known whenever the input dims are, which lets shape computations fold.

use strata_core::{DType, Device, Tensor};

use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct Shape {
    start: i64,
    end: Option<i64>,
}

impl Shape {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Shape {
            start: ctx.attrs.int_or("start", 0)?,
            end: ctx.attrs.int("end")?,
        }))
    }

    fn range(&self, rank: usize) -> (usize, usize) {
        let clamp = |v: i64| {
            let r = rank as i64;
            (if v < 0 { v + r } else { v }).clamp(0, r) as usize
        };
        let (s, e) = (clamp(self.start), clamp(self.end.unwrap_or(rank as i64)));
        (s, e.max(s))
    }
}

impl Operator for Shape {
    fn op_type(&self) -> &str {
        "Shape"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Shape", inputs, 0)?;
        let (s, e) = self.range(x.rank());
        let mut out = Fact::known(DType::I64, &[e - s]);
        if let Some(dims) = x.dims[s..e]
            .iter()
            .map(|d| d.known().map(|d| d as i64))
            .collect::<Option<Vec<_>>>()
        {
            out.value = Some(Tensor::from_slice(&dims, &[dims.len()])?);
        }
        Ok(vec![out])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only("Shape", DType::I64, device)?;
        Ok(Box::new(ShapeKernel {
            start: self.start,
            end: self.end,
        }))
    }
}

#[derive(Debug)]
struct ShapeKernel {
    start: i64,
    end: Option<i64>,
}

impl Kernel for ShapeKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let dims = io.input(0).dims();
        let (s, e) = Shape {
            start: self.start,
            end: self.end,
        }
        .range(dims.len());
        let mut w = io.output(0).write::<i64>()?;
        let out = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel("Shape", "output is not contiguous"))?;
        for (o, &d) in out.iter_mut().zip(&dims[s..e]) {
            *o = d as i64;
        }
        Ok(())
    }
}
