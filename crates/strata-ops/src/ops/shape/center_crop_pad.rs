//! CenterCropPad (opset 18): crops or zero-pads each axis listed in `axes` (all by default,
//! negative allowed) to the length `shape` gives, keeping the input centered (an odd
//! difference puts the extra element at the end). Any element type: the kept block moves as
//! byte runs. Output dims come from the values of `shape`, so without a constant `shape` the
//! runtime sizes the output when the node runs.

use smallvec::SmallVec;
use strata_core::Device;

use crate::support::axes::{
    check_int_input, known_ints, normalize_axes, normalize_axis, read_ints,
};
use crate::support::copy_runs::{copy_strided, StridedBytes};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "CenterCropPad";

#[derive(Debug, Clone)]
pub struct CenterCropPad {
    axes: Option<Vec<i64>>,
}

/// Per axis: output length, first input element kept, first output element written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    out_len: usize,
    in_start: usize,
    out_start: usize,
    len: usize,
}

impl CenterCropPad {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(CenterCropPad {
            axes: ctx.attrs.ints("axes")?,
        }))
    }

    fn windows(&self, in_dims: &[usize], shape: &[i64]) -> OpResult<SmallVec<[Window; 8]>> {
        let rank = in_dims.len();
        let axes: SmallVec<[usize; 8]> = match &self.axes {
            Some(a) => normalize_axes(OP, "axes", a, rank)?.into_iter().collect(),
            None => (0..rank).collect(),
        };
        // normalize_axes sorts; `shape` follows the attribute's order.
        let order: SmallVec<[usize; 8]> = match &self.axes {
            Some(a) => a
                .iter()
                .map(|&x| normalize_axis(OP, "axes", x, rank))
                .collect::<OpResult<_>>()?,
            None => axes,
        };
        if shape.len() != order.len() {
            return Err(OpError::shape(
                OP,
                format!(
                    "shape {shape:?} must have one value per axis ({})",
                    order.len()
                ),
            ));
        }
        let mut w: SmallVec<[Window; 8]> = in_dims
            .iter()
            .map(|&d| Window {
                out_len: d,
                in_start: 0,
                out_start: 0,
                len: d,
            })
            .collect();
        for (&axis, &s) in order.iter().zip(shape) {
            let s = usize::try_from(s)
                .map_err(|_| OpError::shape(OP, format!("negative length in shape {shape:?}")))?;
            let d = in_dims[axis];
            w[axis] = if s <= d {
                Window {
                    out_len: s,
                    in_start: (d - s) / 2,
                    out_start: 0,
                    len: s,
                }
            } else {
                Window {
                    out_len: s,
                    in_start: 0,
                    out_start: (s - d) / 2,
                    len: d,
                }
            };
        }
        Ok(w)
    }
}

impl Operator for CenterCropPad {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        required(OP, inputs, 1)?;
        check_int_input(OP, inputs, 1)?;
        let dims = match (known_ints(OP, inputs, 1)?, x.concrete()) {
            (Some(shape), Some(in_dims)) => self
                .windows(&in_dims, &shape)?
                .iter()
                .map(|w| Dim::Known(w.out_len))
                .collect(),
            _ => vec![Dim::Unknown; x.rank()],
        };
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }
}

impl Kernel for CenterCropPad {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let shape = read_ints(OP, io.input(1))?;
        let w = self.windows(x.dims(), &shape)?;
        let fits = out.dtype() == x.dtype()
            && out.rank() == w.len()
            && out.dims().iter().zip(&w).all(|(&o, w)| o == w.out_len);
        if !fits {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output {:?} does not match shape {shape:?} of input {:?}",
                    out.dims(),
                    x.dims()
                ),
            ));
        }
        out.fill_zero()?;
        if w.iter().any(|w| w.len == 0) {
            return Ok(());
        }
        let offset = |base: usize, strides: &[isize], start: fn(&Window) -> usize| {
            let at: isize = w
                .iter()
                .zip(strides)
                .map(|(w, &s)| start(w) as isize * s)
                .sum();
            (base as isize + at) as usize
        };
        let dims: SmallVec<[usize; 8]> = w.iter().map(|w| w.len).collect();
        let input = x.read_bytes(OP)?;
        let mut output = out.write_bytes(OP)?;
        copy_strided(
            StridedBytes {
                offset: offset(x.storage_offset(), x.strides(), |w| w.in_start),
                strides: x.strides(),
            },
            input.bytes(),
            StridedBytes {
                offset: offset(out.storage_offset(), out.strides(), |w| w.out_start),
                strides: out.strides(),
            },
            output.bytes(),
            &dims,
            x.dtype().size_in_bytes(),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_constant;
    use crate::{Attr, Attributes};
    use strata_core::Tensor;

    fn crop_pad(x: &Tensor, shape: &[i64], axes: Option<Vec<i64>>) -> crate::OpResult<Tensor> {
        let mut attrs = Attributes::new("CenterCropPad");
        if let Some(a) = axes {
            attrs.insert("axes", Attr::Ints(a));
        }
        let s = Tensor::from_slice(shape, &[shape.len()]).unwrap();
        run_constant("CenterCropPad", 18, attrs, &[Some(x.clone()), Some(s)])
    }

    #[test]
    fn crops_and_pads_around_the_center() {
        let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6, 7, 8], &[2, 4]).unwrap();
        // Rows padded 2 -> 3 (extra zero row at the end), columns cropped 4 -> 1 (index 1).
        let y = crop_pad(&x, &[3, 1], None).unwrap();
        assert_eq!(y.dims(), &[3, 1]);
        assert_eq!(y.to_vec::<i32>().unwrap(), vec![2, 6, 0]);
        // Only the last axis, 4 -> 6: one zero each side.
        let y = crop_pad(&x, &[6], Some(vec![-1])).unwrap();
        assert_eq!(
            y.to_vec::<i32>().unwrap(),
            vec![0, 1, 2, 3, 4, 0, 0, 5, 6, 7, 8, 0]
        );
    }

    #[test]
    fn bad_shape_is_an_error() {
        let x = Tensor::from_slice(&[1.0f32; 4], &[2, 2]).unwrap();
        assert!(crop_pad(&x, &[2], None).is_err());
        assert!(crop_pad(&x, &[2, -1], None).is_err());
        assert!(crop_pad(&x, &[2], Some(vec![2])).is_err());
    }
}
