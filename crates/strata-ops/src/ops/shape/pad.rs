//! Pad: constant, reflect, edge and wrap modes; pads (and the constant) as attributes before
//! opset 11 and inputs after, with an `axes` input from opset 18. Negative pads crop first and
//! the other modes then read the cropped input, as the ONNX reference does.
//!
//! The kernel writes the output row by row (a row is the last axis): a row whose outer index
//! falls in a constant border is filled, any other row copies its interior from the mapped input
//! row with one `memcpy` and maps only the border elements one by one.

use smallvec::SmallVec;
use strata_core::Device;

use crate::support::axes::{
    check_int_input, known_ints, normalize_axes, normalize_axis, read_ints, read_optional_ints,
    Ints,
};
use crate::support::copy_runs::copy_view;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_plain;
use crate::support::scalar::ScalarBytes;
use crate::support::strided::advance_index;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("Pad", Pad::build)];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// Opset 1-10 parameters.
#[derive(Debug, Clone)]
struct Legacy {
    pads: Ints,
    value: f32,
}

#[derive(Debug, Clone)]
pub struct Pad {
    mode: Mode,
    legacy: Option<Legacy>,
}

impl Pad {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let mode = match ctx.attrs.string_or("mode", "constant")?.as_str() {
            "constant" => Mode::Constant,
            "reflect" => Mode::Reflect,
            "edge" => Mode::Edge,
            "wrap" if ctx.opset >= 19 => Mode::Wrap,
            other => {
                return Err(OpError::attribute(
                    "Pad",
                    "mode",
                    format!("unknown mode {other:?} (opset {})", ctx.opset),
                ))
            }
        };
        let legacy = if ctx.opset < 11 {
            // Opset 1 named the attribute `paddings`.
            let pads = match ctx.attrs.ints("pads")? {
                Some(p) => p,
                None => ctx.attrs.ints("paddings")?.ok_or_else(|| {
                    OpError::attribute("Pad", "pads", "is required before opset 11")
                })?,
            };
            Some(Legacy {
                pads: pads.into_iter().collect(),
                value: ctx.attrs.float_or("value", 0.0)?,
            })
        } else {
            None
        };
        Ok(Box::new(Pad { mode, legacy }))
    }
}

/// Pads for every axis, `[begin_0.., end_0..]`, from pads over `axes` (all axes when absent).
fn full_pads(pads: &[i64], axes: Option<&[i64]>, rank: usize) -> OpResult<SmallVec<[i64; 16]>> {
    let all: Ints = (0..rank as i64).collect();
    let axes_list = axes.unwrap_or(&all);
    let n = axes_list.len();
    if pads.len() != 2 * n {
        return Err(OpError::shape(
            "Pad",
            format!("pads {pads:?} must hold 2 values for each of the {n} padded axes"),
        ));
    }
    normalize_axes("Pad", "axes", axes_list, rank)?;
    let mut out: SmallVec<[i64; 16]> = SmallVec::from_elem(0, 2 * rank);
    for (i, &a) in axes_list.iter().enumerate() {
        let a = normalize_axis("Pad", "axes", a, rank)?;
        out[a] = pads[i];
        out[rank + a] = pads[n + i];
    }
    Ok(out)
}

fn padded_dim(d: usize, begin: i64, end: i64, axis: usize) -> OpResult<usize> {
    usize::try_from(d as i64 + begin + end).map_err(|_| {
        OpError::shape(
            "Pad",
            format!("pads {begin}, {end} crop more than the {d} elements of axis {axis}"),
        )
    })
}

impl Operator for Pad {
    fn op_type(&self) -> &str {
        "Pad"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Pad", inputs, 0)?;
        let rank = x.rank();
        let pads = match &self.legacy {
            Some(l) => Some(full_pads(&l.pads, None, rank)?),
            None => {
                required("Pad", inputs, 1)?;
                check_int_input("Pad", inputs, 1)?;
                check_int_input("Pad", inputs, 3)?;
                if let Some(c) = optional(inputs, 2) {
                    if c.dtype != x.dtype {
                        return Err(OpError::DType {
                            op: "Pad".into(),
                            index: 2,
                            expected: x.dtype.to_string(),
                            actual: c.dtype,
                        });
                    }
                }
                let axes_unknown = optional(inputs, 3).is_some_and(|f| f.value.is_none());
                match (known_ints("Pad", inputs, 1)?, axes_unknown) {
                    (Some(p), false) => Some(full_pads(
                        &p,
                        known_ints("Pad", inputs, 3)?.as_deref(),
                        rank,
                    )?),
                    _ => None,
                }
            }
        };
        let dims = match pads {
            None => vec![Dim::Unknown; rank],
            Some(p) => x
                .dims
                .iter()
                .enumerate()
                .map(|(a, d)| match d.known() {
                    Some(d) => padded_dim(d, p[a], p[rank + a], a).map(Dim::Known),
                    None if p[a] == 0 && p[rank + a] == 0 => Ok(d.clone()),
                    None => Ok(Dim::Unknown),
                })
                .collect::<OpResult<_>>()?,
        };
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("Pad", required("Pad", inputs, 0)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }
}

/// How one axis maps output indices to input indices.
#[derive(Debug, Clone, Copy)]
struct AxisMap {
    /// Output elements before the copied interior.
    before: usize,
    /// First input index kept after cropping, and how many are kept.
    crop_start: usize,
    kept: usize,
}

impl AxisMap {
    /// The input index output index `o` reads, or `None` for the constant.
    #[inline]
    fn source(&self, o: usize, mode: Mode) -> Option<usize> {
        let i = o as i64 - self.before as i64;
        let n = self.kept as i64;
        let j = if (0..n).contains(&i) {
            i
        } else {
            match mode {
                Mode::Constant => return None,
                Mode::Edge => i.clamp(0, n - 1),
                Mode::Wrap => i.rem_euclid(n),
                Mode::Reflect if n == 1 => 0,
                Mode::Reflect => {
                    let period = 2 * (n - 1);
                    let m = i.rem_euclid(period);
                    if m >= n {
                        period - m
                    } else {
                        m
                    }
                }
            }
        };
        Some(self.crop_start + j as usize)
    }
}

impl Kernel for Pad {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let rank = x.rank();
        let (pads, value) = match &self.legacy {
            Some(l) => (
                full_pads(&l.pads, None, rank)?,
                ScalarBytes::from_f64("Pad", x.dtype(), l.value as f64)?,
            ),
            None => {
                let pads = read_ints("Pad", io.input(1))?;
                let axes = read_optional_ints("Pad", io.inputs, 3)?;
                let c = io.input(2);
                let value = if c.is_defined() && c.numel() > 0 {
                    ScalarBytes::from_tensor("Pad", c)?
                } else {
                    ScalarBytes::zero(x.dtype())
                };
                (full_pads(&pads, axes.as_deref(), rank)?, value)
            }
        };
        let dims = x.dims();
        let mut maps: SmallVec<[AxisMap; 8]> = SmallVec::new();
        for (a, &d) in dims.iter().enumerate() {
            let (begin, end) = (pads[a], pads[rank + a]);
            let o = padded_dim(d, begin, end, a)?;
            if out.dims().get(a) != Some(&o) {
                return Err(OpError::kernel(
                    "Pad",
                    format!("output {:?} is not {dims:?} padded by {pads:?}", out.dims()),
                ));
            }
            let crop_start = (-begin).max(0) as usize;
            let kept = d - crop_start - (-end).max(0) as usize;
            if kept == 0 && o > 0 && self.mode != Mode::Constant {
                return Err(OpError::kernel(
                    "Pad",
                    format!(
                        "cannot pad axis {a} in {:?} mode: nothing is left to repeat",
                        self.mode
                    ),
                ));
            }
            maps.push(AxisMap {
                before: begin.max(0) as usize,
                crop_start,
                kept,
            });
        }
        if out.rank() != rank {
            return Err(OpError::kernel(
                "Pad",
                format!("output {:?} has not the rank of input {dims:?}", out.dims()),
            ));
        }
        if rank == 0 {
            return copy_view("Pad", out, x);
        }
        if out.numel() == 0 {
            return Ok(());
        }
        if !out.is_contiguous() {
            return Err(OpError::kernel("Pad", "output is not contiguous"));
        }
        let elem = x.dtype().size_in_bytes();
        let input = x.read_bytes("Pad")?;
        let mut output = out.write_bytes("Pad")?;
        let rows = PadRows {
            src: input.bytes(),
            x_offset: x.storage_offset(),
            x_strides: x.strides(),
            out_dims: out.dims(),
            maps: &maps,
            mode: self.mode,
            value,
            elem,
        };
        pad_rows(&rows, &mut output.bytes()[out.storage_offset() * elem..]);
        Ok(())
    }
}

/// Everything the row writer reads.
struct PadRows<'a> {
    src: &'a [u8],
    x_offset: usize,
    x_strides: &'a [isize],
    out_dims: &'a [usize],
    maps: &'a [AxisMap],
    mode: Mode,
    value: ScalarBytes,
    elem: usize,
}

fn pad_rows(p: &PadRows<'_>, out: &mut [u8]) {
    let src = p.src;
    let rank = p.out_dims.len();
    let last = rank - 1;
    let (row_len, elem) = (p.out_dims[last], p.elem);
    let row_bytes = row_len * elem;
    let lm = p.maps[last];
    let inner_stride = p.x_strides[last];
    let rows: usize = p.out_dims[..last].iter().product();
    let mut index: SmallVec<[usize; 8]> = SmallVec::from_elem(0, last);
    for row in 0..rows {
        let dst = &mut out[row * row_bytes..(row + 1) * row_bytes];
        // The input row this output row reads, if any.
        let mut base = Some(p.x_offset as isize);
        for (a, &o) in index.iter().enumerate() {
            base = base.and_then(|b| {
                p.maps[a]
                    .source(o, p.mode)
                    .map(|i| b + i as isize * p.x_strides[a])
            });
        }
        match base {
            None => p.value.fill(dst),
            Some(base) => {
                let at = |i: usize| (base + i as isize * inner_stride) as usize * elem;
                let interior = lm.before..lm.before + lm.kept;
                if inner_stride == 1 {
                    let s = at(lm.crop_start);
                    dst[interior.start * elem..interior.end * elem]
                        .copy_from_slice(&src[s..s + lm.kept * elem]);
                }
                for o in 0..row_len {
                    if inner_stride == 1 && interior.contains(&o) {
                        continue;
                    }
                    let d = &mut dst[o * elem..(o + 1) * elem];
                    match lm.source(o, p.mode) {
                        Some(i) => d.copy_from_slice(&src[at(i)..at(i) + elem]),
                        None => d.copy_from_slice(p.value.as_bytes()),
                    }
                }
            }
        }
        advance_index(&mut index[..last], &p.out_dims[..last]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(
        mode: Mode,
        x: &Tensor,
        pads: &[i64],
        value: Option<f32>,
        axes: Option<&[i64]>,
    ) -> OpResult<Vec<f32>> {
        let p = Tensor::from_slice(pads, &[pads.len()]).unwrap();
        let c = value.map_or_else(Tensor::undefined, |v| Tensor::scalar(v).unwrap());
        let a = axes.map_or_else(Tensor::undefined, |v| {
            Tensor::from_slice(v, &[v.len()]).unwrap()
        });
        let tensors = [x.clone(), p, c, a];
        let facts: Vec<Fact> = tensors
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
        let op = Pad { mode, legacy: None };
        let f = op.infer(&refs)?.remove(0);
        let o = Tensor::zeros(&f.concrete().unwrap(), x.dtype())?;
        let ins: Vec<&Tensor> = tensors.iter().collect();
        op.run(&KernelIo {
            inputs: &ins,
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o.to_vec::<f32>()?)
    }

    #[test]
    fn modes_on_one_axis() {
        let x = Tensor::from_slice(&[1.0f32, 2., 3.], &[1, 3]).unwrap();
        let pads = [0, 2, 0, 3];
        assert_eq!(
            run(Mode::Constant, &x, &pads, Some(9.), None).unwrap(),
            vec![9., 9., 1., 2., 3., 9., 9., 9.]
        );
        assert_eq!(
            run(Mode::Edge, &x, &pads, None, None).unwrap(),
            vec![1., 1., 1., 2., 3., 3., 3., 3.]
        );
        assert_eq!(
            run(Mode::Reflect, &x, &pads, None, None).unwrap(),
            vec![3., 2., 1., 2., 3., 2., 1., 2.]
        );
        assert_eq!(
            run(Mode::Wrap, &x, &pads, None, None).unwrap(),
            vec![2., 3., 1., 2., 3., 1., 2., 3.]
        );
    }

    #[test]
    fn outer_axes_negative_pads_and_axes_input() {
        let x = Tensor::from_slice(&[1.0f32, 2., 3., 4.], &[2, 2]).unwrap();
        // One row of constant above, crop the first column.
        assert_eq!(
            run(Mode::Constant, &x, &[1, -1, 0, 0], None, None).unwrap(),
            vec![0., 2., 4.]
        );
        assert_eq!(
            run(Mode::Reflect, &x, &[1, 0, 1, 0], None, None).unwrap(),
            vec![3., 4., 1., 2., 3., 4., 1., 2.]
        );
        assert_eq!(
            run(Mode::Edge, &x, &[1, 1], None, Some(&[-1])).unwrap(),
            vec![1., 1., 2., 2., 3., 3., 4., 4.]
        );
        assert!(run(Mode::Constant, &x, &[0, -3, 0, 0], None, None).is_err());
        assert!(run(Mode::Constant, &x, &[1, 1], None, None).is_err());
        assert!(run(Mode::Reflect, &x, &[0, -2, 0, 1], None, None).is_err());
    }
}
