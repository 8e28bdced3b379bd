//! Slice: starts/ends/axes as attributes (opset 1-9) or starts/ends/axes/steps as inputs
//! (opset 10+). Negative indices count from the end; out-of-range bounds clamp (to `[0, dim]`
//! for positive steps, to `[-1, dim-1]` for the end and `[0, dim-1]` for the start of negative
//! steps, as ONNX specifies). The kernel narrows a view of the input and copies it run by run.

use smallvec::SmallVec;
use strata_core::{Device, Tensor};

use crate::support::axes::{
    check_int_input, known_ints, normalize_axes, normalize_axis, read_optional_ints, Ints,
};
use crate::support::copy_runs::copy_view;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("Slice", Slice::build)];

/// Opset 1-9 parameters.
#[derive(Debug, Clone)]
struct Legacy {
    starts: Ints,
    ends: Ints,
    axes: Option<Ints>,
}

#[derive(Debug, Clone)]
pub struct Slice {
    legacy: Option<Legacy>,
}

impl Slice {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let legacy = if ctx.opset < 10 {
            let get = |name: &str| {
                ctx.attrs
                    .ints(name)?
                    .ok_or_else(|| OpError::attribute("Slice", name, "is required before opset 10"))
            };
            Some(Legacy {
                starts: get("starts")?.into_iter().collect(),
                ends: get("ends")?.into_iter().collect(),
                axes: ctx.attrs.ints("axes")?.map(|a| a.into_iter().collect()),
            })
        } else {
            None
        };
        Ok(Box::new(Slice { legacy }))
    }
}

/// One sliced axis: the first index taken, how many, and the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AxisSlice {
    axis: usize,
    first: usize,
    len: usize,
    step: i64,
}

/// The indices ONNX takes for `start:end:step` on an axis of `dim` elements.
fn axis_range(start: i64, end: i64, step: i64, dim: usize) -> (usize, usize) {
    let d = dim as i64;
    let adjust = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    if step > 0 {
        let (s, e) = (adjust(start).clamp(0, d), adjust(end).clamp(0, d));
        let len = if e > s {
            ((e - s - 1) / step + 1) as usize
        } else {
            0
        };
        (s as usize, len)
    } else if dim == 0 {
        (0, 0)
    } else {
        let (s, e) = (adjust(start).clamp(0, d - 1), adjust(end).clamp(-1, d - 1));
        let len = if s > e {
            ((s - e - 1) as u64 / step.unsigned_abs() + 1) as usize
        } else {
            0
        };
        (s as usize, len)
    }
}

/// Validated parameters: `(axis, start, end, step)` per sliced axis.
type Params = SmallVec<[(usize, i64, i64, i64); 8]>;

fn params(
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
    rank: usize,
) -> OpResult<Params> {
    let n = starts.len();
    let all: Ints = (0..n as i64).collect();
    let axes = axes.unwrap_or(&all);
    if ends.len() != n || axes.len() != n || steps.is_some_and(|s| s.len() != n) {
        return Err(OpError::shape(
            "Slice",
            format!(
                "starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} differ in length"
            ),
        ));
    }
    // Validates range and uniqueness; the order of `axes` pairs with starts/ends.
    normalize_axes("Slice", "axes", axes, rank)?;
    let mut out = Params::new();
    for i in 0..n {
        let step = steps.map_or(1, |s| s[i]);
        if step == 0 {
            return Err(OpError::shape(
                "Slice",
                format!("step 0 for axis {}", axes[i]),
            ));
        }
        let a = axes[i];
        let axis = normalize_axis("Slice", "axes", a, rank)?;
        out.push((axis, starts[i], ends[i], step));
    }
    Ok(out)
}

impl Operator for Slice {
    fn op_type(&self) -> &str {
        "Slice"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Slice", inputs, 0)?;
        let rank = x.rank();
        let p = match &self.legacy {
            Some(l) => Some(params(&l.starts, &l.ends, l.axes.as_deref(), None, rank)?),
            None => {
                required("Slice", inputs, 1)?;
                required("Slice", inputs, 2)?;
                for i in 1..5 {
                    check_int_input("Slice", inputs, i)?;
                }
                let known = |i| known_ints("Slice", inputs, i);
                let unknown = |i| optional(inputs, i).is_some_and(|f| f.value.is_none());
                if (1..5).any(unknown) {
                    None
                } else {
                    let (starts, ends) =
                        (known(1)?.unwrap_or_default(), known(2)?.unwrap_or_default());
                    let (axes, steps) = (known(3)?, known(4)?);
                    Some(params(
                        &starts,
                        &ends,
                        axes.as_deref(),
                        steps.as_deref(),
                        rank,
                    )?)
                }
            }
        };
        let dims = match p {
            None => vec![Dim::Unknown; rank],
            Some(p) => {
                let mut dims = x.dims.clone();
                for (axis, start, end, step) in p {
                    dims[axis] = match dims[axis].known() {
                        Some(d) => Dim::Known(axis_range(start, end, step, d).1),
                        None => Dim::Unknown,
                    };
                }
                dims
            }
        };
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("Slice", required("Slice", inputs, 0)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }
}

/// A view of `t` taking `len` elements of `axis` from `first` every `step`.
fn view_axis(t: &Tensor, s: AxisSlice) -> OpResult<Tensor> {
    let axis = s.axis as isize;
    if s.len == 0 {
        return Ok(t.narrow(axis, 0, 0)?);
    }
    let span = (s.len - 1)
        .checked_mul(s.step.unsigned_abs() as usize)
        .ok_or_else(|| OpError::kernel("Slice", "slice span overflows"))?;
    let step = s.step as isize;
    Ok(if s.step > 0 {
        t.narrow(axis, s.first, span + 1)?
            .slice(axis, 0, isize::MAX, step)?
    } else {
        // Walk backwards from `first`: the view's last element, every |step| down.
        t.narrow(axis, s.first - span, span + 1)?
            .slice(axis, -1, isize::MIN, step)?
    })
}

impl Kernel for Slice {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let p = match &self.legacy {
            Some(l) => params(&l.starts, &l.ends, l.axes.as_deref(), None, x.rank())?,
            None => {
                let read = |i| read_optional_ints("Slice", io.inputs, i);
                let (starts, ends) = (read(1)?.unwrap_or_default(), read(2)?.unwrap_or_default());
                let (axes, steps) = (read(3)?, read(4)?);
                params(&starts, &ends, axes.as_deref(), steps.as_deref(), x.rank())?
            }
        };
        let mut view = x.clone();
        for (axis, start, end, step) in p {
            let (first, len) = axis_range(start, end, step, view.dims()[axis]);
            view = view_axis(
                &view,
                AxisSlice {
                    axis,
                    first,
                    len,
                    step,
                },
            )?;
        }
        copy_view("Slice", out, &view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::DType;

    fn run(x: &Tensor, args: &[Option<&[i64]>]) -> OpResult<Tensor> {
        let mut inputs = vec![x.clone()];
        for a in args {
            inputs.push(match a {
                Some(v) => Tensor::from_slice(v, &[v.len()]).unwrap(),
                None => Tensor::undefined(),
            });
        }
        let facts: Vec<Fact> = inputs
            .iter()
            .map(|t| {
                if t.is_defined() {
                    Fact::constant(t.clone())
                } else {
                    Fact::absent()
                }
            })
            .collect();
        let refs: Vec<&Fact> = facts.iter().collect();
        let op = Slice { legacy: None };
        let f = op.infer(&refs)?.remove(0);
        let o = Tensor::zeros(&f.concrete().unwrap(), x.dtype())?;
        let ins: Vec<&Tensor> = inputs.iter().collect();
        op.run(&KernelIo {
            inputs: &ins,
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    #[test]
    fn onnx_clamping_rules() {
        assert_eq!(axis_range(1, 1000, 1, 5), (1, 4));
        assert_eq!(axis_range(-2, i64::MAX, 1, 5), (3, 2));
        assert_eq!(axis_range(i64::MIN, 2, 1, 5), (0, 2));
        assert_eq!(axis_range(-1, i64::MIN, -1, 5), (4, 5));
        assert_eq!(axis_range(100, -100, -2, 5), (4, 3));
        // A negative-step start below the axis clamps to 0 (one element), unlike Python.
        assert_eq!(axis_range(-100, -200, -1, 5), (0, 1));
        assert_eq!(axis_range(-100, -6, -1, 5), (0, 1));
        assert_eq!(axis_range(0, -6, -1, 5), (0, 1));
        assert_eq!(axis_range(3, 1, 1, 5), (3, 0));
        assert_eq!(axis_range(0, 5, -1, 0), (0, 0));
    }

    #[test]
    fn slices_with_axes_steps_and_negatives() {
        let v: Vec<i32> = (0..20).collect();
        let x = Tensor::from_slice(&v, &[4, 5]).unwrap();
        let y = run(&x, &[Some(&[1, 0]), Some(&[3, 5]), None, Some(&[1, 2])]).unwrap();
        assert_eq!(y.dims(), &[2, 3]);
        assert_eq!(y.to_vec::<i32>().unwrap(), vec![5, 7, 9, 10, 12, 14]);
        let y = run(&x, &[Some(&[-1]), Some(&[-1000]), Some(&[-1]), Some(&[-2])]).unwrap();
        assert_eq!(y.dims(), &[4, 3]);
        assert_eq!(&y.to_vec::<i32>().unwrap()[..3], &[4, 2, 0]);
        let y = run(&x, &[Some(&[10]), Some(&[20]), Some(&[0]), None]).unwrap();
        assert_eq!(y.dims(), &[0, 5]);
        assert!(run(&x, &[Some(&[0]), Some(&[1]), Some(&[2]), None]).is_err());
        assert!(run(&x, &[Some(&[0]), Some(&[1]), Some(&[0]), Some(&[0])]).is_err());
        assert!(run(&x, &[Some(&[0, 0]), Some(&[1]), None, None]).is_err());
        let f = Tensor::zeros(&[2, 2], DType::F16).unwrap();
        assert_eq!(
            run(&f, &[Some(&[1]), Some(&[2]), None, None])
                .unwrap()
                .dims(),
            &[1, 2]
        );
    }
}
