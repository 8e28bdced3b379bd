//! Flatten: dims before `axis` into one, the rest into another.

use strata_core::Device;

use crate::ops::shape::identity::copy_kernel;
use crate::support::axes::normalize_split_axis;
use crate::support::inputs::required;
use crate::{Dim, Fact, Kernel, OpContext, OpError, OpResult, Operator};

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

/// The product of known dims (declared dims may be anything: an overflow is an error).
fn product(dims: &[Dim]) -> OpResult<Dim> {
    let Some(known) = dims.iter().map(Dim::known).collect::<Option<Vec<_>>>() else {
        return Ok(Dim::Unknown);
    };
    let n = strata_core::shape::checked_numel(&known)
        .map_err(|e| OpError::shape("Flatten", e.to_string()))?;
    Ok(Dim::Known(n))
}

impl Operator for Flatten {
    fn op_type(&self) -> &str {
        "Flatten"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Flatten", inputs, 0)?;
        let axis = normalize_split_axis("Flatten", "axis", self.axis, x.rank())?;
        let (outer, inner) = x.dims.split_at(axis);
        let mut out = Fact::new(x.dtype, vec![product(outer)?, product(inner)?]);
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
