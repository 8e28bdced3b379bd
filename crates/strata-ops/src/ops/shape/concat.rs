//! Concat along one axis.

use strata_core::{Device, Tensor};

use crate::support::axes::normalize_axis;
use crate::support::kernel_choice::cpu_only;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct Concat {
    axis: i64,
}

impl Concat {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let axis = match ctx.attrs.int("axis")? {
            Some(axis) => axis,
            // Opset 1 defaulted to axis 1.
            None if ctx.opset < 4 => 1,
            None => return Err(OpError::attribute("Concat", "axis", "is required")),
        };
        Ok(Box::new(Concat { axis }))
    }
}

/// Concat of 8-bit tensors, each brought to the output's scale: com.microsoft QLinearConcat.
impl crate::HasQLinearForm for Concat {
    fn qlinear(&self) -> Option<Box<dyn Operator>> {
        Some(Box::new(
            crate::ops::quantization::microsoft::qlinear_concat::QLinearConcat::with_axis(
                self.axis,
            ),
        ))
    }
}

impl Operator for Concat {
    fn op_type(&self) -> &str {
        "Concat"
    }

    fn capabilities(&self) -> crate::OpCapabilities<'_> {
        crate::OpCapabilities {
            qlinear: Some(self),
            ..crate::OpCapabilities::default()
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let first =
            inputs
                .iter()
                .find(|f| f.is_defined())
                .ok_or_else(|| OpError::MissingInput {
                    op: "Concat".into(),
                    index: 0,
                })?;
        let axis = normalize_axis("Concat", "axis", self.axis, first.rank())?;
        let mut dims = first.dims.clone();
        let mut total = Some(0usize);
        for (i, f) in inputs.iter().enumerate() {
            if f.dtype != first.dtype {
                return Err(OpError::DType {
                    op: "Concat".into(),
                    index: i,
                    expected: first.dtype.to_string(),
                    actual: f.dtype,
                });
            }
            if f.rank() != first.rank() {
                return Err(OpError::shape(
                    "Concat",
                    format!(
                        "input {i} has rank {} but input 0 has rank {}",
                        f.rank(),
                        first.rank()
                    ),
                ));
            }
            for (d, (x, y)) in f.dims.iter().zip(&first.dims).enumerate() {
                if d != axis && x != y {
                    match (x, y) {
                        (Dim::Known(a), Dim::Known(b)) => {
                            return Err(OpError::shape(
                                "Concat",
                                format!("input {i} has {a} at axis {d}, input 0 has {b}"),
                            ));
                        }
                        _ => {
                            dims[d] = if dims[d].known().is_some() {
                                dims[d].clone()
                            } else {
                                x.clone()
                            }
                        }
                    }
                }
            }
            total = match (total, f.dims[axis].known()) {
                (Some(t), Some(d)) => Some(t.checked_add(d).ok_or_else(|| {
                    OpError::shape("Concat", "the length along the axis overflows")
                })?),
                _ => None,
            };
        }
        dims[axis] = total.map_or(Dim::Unknown, Dim::Known);
        Ok(vec![Fact::new(first.dtype, dims)])
    }

    fn places_inputs_in_output(&self, inputs: &[&Fact], output: &Fact) -> Option<Vec<usize>> {
        let dims = output.concrete()?;
        let axis = normalize_axis("Concat", "axis", self.axis, dims.len()).ok()?;
        // Only 1s before the axis: each input is one contiguous run of the output.
        if dims[..axis].iter().any(|&d| d != 1) || inputs.len() < 2 {
            return None;
        }
        let mut offsets = Vec::with_capacity(inputs.len());
        let mut at = 0usize;
        for input in inputs {
            offsets.push(at);
            at = at.checked_add(input.numel()?)?;
        }
        Some(offsets)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only("Concat", inputs[0].dtype, device)?;
        Ok(Box::new(ConcatKernel {
            axis: normalize_axis("Concat", "axis", self.axis, inputs[0].rank())?,
        }))
    }
}

#[derive(Debug)]
struct ConcatKernel {
    axis: usize,
}

impl Kernel for ConcatKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let out = io.output(0);
        let mut start = 0;
        for input in io.inputs {
            let len = input.dims()[self.axis];
            let target = out.narrow(self.axis as isize, start, len)?;
            // The memory plan may have had the producer write this input in place already.
            if !same_elements(input, &target) {
                target.copy_from(input)?;
            }
            start += len;
        }
        Ok(())
    }
}

/// Whether `a` and `b` are the same contiguous elements of memory (so copying one onto the
/// other would do nothing).
fn same_elements(a: &Tensor, b: &Tensor) -> bool {
    let address = |t: &Tensor| {
        t.storage()
            .ok()
            .map(|s| s.as_ptr() as usize + t.layout().offset() * t.dtype().size_in_bytes())
    };
    a.is_contiguous()
        && b.is_contiguous()
        && a.dims() == b.dims()
        && a.dtype() == b.dtype()
        && address(a).is_some()
        && address(a) == address(b)
}
