//! Reshape: new dims from a shape tensor (0 copies the input dim unless `allowzero`, -1 infers).

use strata_core::shape::checked_numel;
use strata_core::Device;

use crate::ops::shape::identity::copy_kernel;
use crate::support::axes::dims_input_len;
use crate::support::inputs::required;
use crate::{int_values, Dim, Fact, Kernel, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct Reshape {
    allow_zero: bool,
    /// Opset < 5 takes the shape as an attribute.
    shape_attr: Option<Vec<i64>>,
}

impl Reshape {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Reshape {
            allow_zero: ctx.attrs.int_or("allowzero", 0)? != 0,
            shape_attr: if ctx.opset < 5 {
                ctx.attrs.ints("shape")?
            } else {
                None
            },
        }))
    }
}

/// Resolves ONNX reshape dims against the input dims.
pub fn reshape_dims(op: &str, input: &[Dim], spec: &[i64], allow_zero: bool) -> OpResult<Vec<Dim>> {
    let mut out = Vec::with_capacity(spec.len());
    let mut infer_at = None;
    for (i, &s) in spec.iter().enumerate() {
        out.push(match s {
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                Dim::Known(1)
            }
            -1 => {
                return Err(OpError::shape(
                    op,
                    format!("more than one -1 in shape {spec:?}"),
                ))
            }
            0 if !allow_zero => input.get(i).cloned().ok_or_else(|| {
                OpError::shape(
                    op,
                    format!(
                        "0 at axis {i} of {spec:?} but the input has rank {}",
                        input.len()
                    ),
                )
            })?,
            s if s < 0 => {
                return Err(OpError::shape(
                    op,
                    format!("invalid dim {s} in shape {spec:?}"),
                ))
            }
            s => Dim::Known(s as usize),
        });
    }
    let known = |dims: &[Dim]| dims.iter().map(Dim::known).collect::<Option<Vec<_>>>();
    // Declared dims may be anything: element counts are checked, an overflow is an error.
    let numel = |dims: &[usize]| checked_numel(dims).map_err(|e| OpError::shape(op, e.to_string()));
    let in_numel = known(input).as_deref().map(numel).transpose()?;
    if let Some(at) = infer_at {
        let rest = known(&out).as_deref().map(numel).transpose()?;
        out[at] = match (in_numel, rest) {
            (Some(n), Some(r)) if r != 0 && n % r == 0 => Dim::Known(n / r),
            (Some(n), Some(r)) => {
                return Err(OpError::shape(
                    op,
                    format!("cannot reshape {n} elements into {spec:?} ({r} per -1 slot)"),
                ));
            }
            _ => Dim::Unknown,
        };
    } else if let (Some(n), Some(out_dims)) = (in_numel, known(&out)) {
        let m = numel(&out_dims)?;
        if n != m {
            return Err(OpError::shape(
                op,
                format!("cannot reshape {input:?} ({n} elements) into {spec:?} ({m} elements)"),
            ));
        }
    }
    Ok(out)
}

impl Operator for Reshape {
    fn op_type(&self) -> &str {
        "Reshape"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Reshape", inputs, 0)?;
        let spec = match (&self.shape_attr, inputs.get(1)) {
            (Some(spec), _) => spec.clone(),
            (None, Some(shape)) if shape.is_defined() => match &shape.value {
                Some(v) => int_values("Reshape", v)?,
                None => {
                    let rank = dims_input_len("Reshape", inputs, 1)?
                        .filter(|_| shape.rank() == 1)
                        .ok_or_else(|| {
                            OpError::shape("Reshape", "the shape input has unknown length")
                        })?;
                    return Ok(vec![Fact::new(x.dtype, vec![Dim::Unknown; rank])]);
                }
            },
            _ => {
                return Err(OpError::MissingInput {
                    op: "Reshape".into(),
                    index: 1,
                })
            }
        };
        let mut out = Fact::new(
            x.dtype,
            reshape_dims("Reshape", &x.dims, &spec, self.allow_zero)?,
        );
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
        copy_kernel("Reshape", device)
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}
