//! Flatten: dims before `axis` into one, the rest into another.

use strata_core::Device;

use crate::ops::shape::identity::copy_kernel;
use crate::support::axes::normalize_split_axis;
use crate::support::inputs::required;
use crate::{Dim, Fact, Kernel, OpContext, OpResult, Operator};

#[derive(Debug)]
pub struct Flatten {
    axis: i64,
}

impl Flatten {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Flatten {
            axis: ctx.attrs.int_or("axis", 1)?,
        }))
    }
}

fn product(dims: &[Dim]) -> Dim {
    dims.iter()
        .try_fold(1usize, |acc, d| d.known().map(|d| acc * d))
        .map_or(Dim::Unknown, Dim::Known)
}

impl Operator for Flatten {
    fn op_type(&self) -> &str {
        "Flatten"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Flatten", inputs, 0)?;
        let axis = normalize_split_axis("Flatten", "axis", self.axis, x.rank())?;
        let (outer, inner) = x.dims.split_at(axis);
        let mut out = Fact::new(x.dtype, vec![product(outer), product(inner)]);
        if let (Some(v), Some(dims)) = (&x.value, out.concrete()) {
            out.value = Some(v.reshape(&dims)?);
        }
        Ok(vec![out])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        copy_kernel("Flatten", device)
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}
