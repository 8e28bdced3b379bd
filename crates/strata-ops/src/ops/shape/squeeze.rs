//! Squeeze and Unsqueeze: remove or insert size-1 axes; axes come from an attribute before
//! opset 13 and from an input from opset 13 on (when that input is not known at plan time the
//! output rank still is, and the runtime resolves the dims when the node runs).

use strata_core::Device;

use crate::ops::shape::identity::copy_kernel;
use crate::support::axes::{dims_input_len, normalize_axes};
use crate::support::inputs::required;
use crate::{int_values, Dim, Fact, Kernel, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct Squeeze {
    unsqueeze: bool,
    axes_attr: Option<Vec<i64>>,
}

impl Squeeze {
    pub fn build_squeeze(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Squeeze {
            unsqueeze: false,
            axes_attr: ctx.attrs.ints("axes")?,
        }))
    }

    pub fn build_unsqueeze(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Squeeze {
            unsqueeze: true,
            axes_attr: ctx.attrs.ints("axes")?,
        }))
    }

    fn name(&self) -> &'static str {
        if self.unsqueeze {
            "Unsqueeze"
        } else {
            "Squeeze"
        }
    }

    fn axes(&self, inputs: &[&Fact]) -> OpResult<Option<Vec<i64>>> {
        if let Some(axes) = &self.axes_attr {
            return Ok(Some(axes.clone()));
        }
        match inputs.get(1) {
            Some(f) if f.is_defined() => match &f.value {
                Some(v) => Ok(Some(int_values(self.name(), v)?)),
                None => Err(OpError::shape(self.name(), "axes must be a constant")),
            },
            _ => Ok(None),
        }
    }

    /// Output dims when the axes input is present but its value is not known yet: every dim
    /// unknown, the rank from the axes count.
    fn unknown_axes_dims(&self, inputs: &[&Fact]) -> OpResult<Option<Vec<Dim>>> {
        if self.axes_attr.is_some() {
            return Ok(None);
        }
        let Some(axes) = inputs
            .get(1)
            .filter(|f| f.is_defined() && f.value.is_none())
        else {
            return Ok(None);
        };
        let (x, op) = (required(self.name(), inputs, 0)?, self.name());
        let count = match axes.dims.as_slice() {
            [] => Some(1),
            [_] => dims_input_len(op, inputs, 1)?,
            _ => None,
        }
        .ok_or_else(|| OpError::shape(op, format!("axes input has dims {:?}", axes.dims)))?;
        let rank = if self.unsqueeze {
            Some(x.rank() + count)
        } else {
            x.rank().checked_sub(count)
        }
        .ok_or_else(|| {
            OpError::shape(
                op,
                format!("{count} axes for an input of rank {}", x.rank()),
            )
        })?;
        Ok(Some(vec![Dim::Unknown; rank]))
    }
}

impl Operator for Squeeze {
    fn op_type(&self) -> &str {
        self.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let op = self.name();
        let x = required(op, inputs, 0)?;
        if let Some(dims) = self.unknown_axes_dims(inputs)? {
            return Ok(vec![Fact::new(x.dtype, dims)]);
        }
        let axes = self.axes(inputs)?;
        let dims = if self.unsqueeze {
            let axes = axes.ok_or_else(|| OpError::MissingInput {
                op: op.into(),
                index: 1,
            })?;
            let axes = normalize_axes(op, "axes", &axes, x.rank() + axes.len())?;
            let mut rest = x.dims.iter();
            (0..x.rank() + axes.len())
                .map(|i| {
                    if axes.binary_search(&i).is_ok() {
                        Dim::Known(1)
                    } else {
                        rest.next().cloned().unwrap_or(Dim::Known(1))
                    }
                })
                .collect()
        } else {
            match axes {
                Some(axes) => {
                    let axes = normalize_axes(op, "axes", &axes, x.rank())?;
                    for &a in &axes {
                        if x.dims[a] != Dim::Known(1) && x.dims[a] != Dim::Unknown {
                            return Err(OpError::shape(
                                op,
                                format!("axis {a} of {:?} is not 1", x.dims),
                            ));
                        }
                    }
                    x.dims
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| axes.binary_search(i).is_err())
                        .map(|(_, d)| d.clone())
                        .collect()
                }
                None => {
                    if x.dims.iter().any(|d| d.known().is_none()) {
                        return Err(OpError::shape(
                            op,
                            format!("squeezing every 1 needs known dims, got {:?}", x.dims),
                        ));
                    }
                    x.dims
                        .iter()
                        .filter(|d| **d != Dim::Known(1))
                        .cloned()
                        .collect()
                }
            }
        };
        let mut out = Fact::new(x.dtype, dims);
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
        copy_kernel(self.name(), device)
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}
