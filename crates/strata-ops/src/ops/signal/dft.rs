//! DFT (opsets 17 and 20): the discrete Fourier transform along one axis of a real (`[..., 1]`)
//! or complex (`[..., 2]`, interleaved) signal. Opset 17 takes `axis` as an attribute (default
//! 1), opset 20 as an optional scalar input (default -2); `dft_length` (optional input) zero-pads
//! or truncates the signal. `onesided` keeps the `n / 2 + 1` non-redundant bins of a forward
//! transform; with `inverse` it is the inverse real FFT: one-sided bins in, `n` real values out
//! (`n` defaults to `2 * (bins - 1)`). `inverse` scales by `1 / n`. Computed in f64, one
//! transform at a time in planned scratch, reading the input and writing the output in place.

use strata_core::shape::checked_numel;
use strata_core::{DType, Device};

use super::fft::{Complex, Fft};
use super::values::{
    known_scalar_int, scalar_int, with_float_output, with_floats, Floats, FloatsMut,
};
use crate::support::axes::{check_int_input, normalize_axis, Axes};
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::{carve, scratch_as};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "DFT";

#[derive(Debug, Clone, Copy)]
pub struct Dft {
    /// Opset 17's attribute; from opset 20 the axis is input 2.
    axis_attr: Option<i64>,
    inverse: bool,
    onesided: bool,
    /// Whether the node has the `dft_length` or `axis` input, which decide the output dims.
    has_size_inputs: bool,
}

/// One transform's geometry: the signal viewed as `[outer, len, inner, channels]`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Geometry {
    axis: usize,
    outer: usize,
    len: usize,
    inner: usize,
    channels: usize,
    /// The transform length.
    n: usize,
    /// Output bins along the axis and output channels (1 for the inverse real FFT).
    out_len: usize,
    out_channels: usize,
}

impl Dft {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let axis_attr = if ctx.opset < 20 {
            Some(ctx.attrs.int_or("axis", 1)?)
        } else {
            None
        };
        Ok(Box::new(Dft {
            axis_attr,
            inverse: ctx.attrs.int_or("inverse", 0)? != 0,
            onesided: ctx.attrs.int_or("onesided", 0)? != 0,
            has_size_inputs: ctx.num_inputs > 1,
        }))
    }

    /// The plan for signal dims `dims`, the raw axis and the optional `dft_length`.
    fn geometry(&self, dims: &[usize], axis: i64, length: Option<i64>) -> OpResult<Geometry> {
        let rank = dims.len();
        let channels = dims.last().copied().unwrap_or(0);
        if rank < 2 || !(channels == 1 || channels == 2) {
            return Err(OpError::shape(
                OP,
                format!("input must be [..., 1] (real) or [..., 2] (complex), got {dims:?}"),
            ));
        }
        let axis = normalize_axis(OP, "axis", axis, rank)?;
        if axis == rank - 1 {
            return Err(OpError::attribute(
                OP,
                "axis",
                "cannot be the last (real/imaginary) axis",
            ));
        }
        let len = dims[axis];
        let irfft = self.inverse && self.onesided;
        let n = match length {
            Some(l) => usize::try_from(l).ok().filter(|&l| l > 0).ok_or_else(|| {
                OpError::shape(OP, format!("dft_length must be positive, got {l}"))
            })?,
            None if irfft => 2 * len.saturating_sub(1),
            None => len,
        };
        if n == 0 {
            return Err(OpError::shape(OP, format!("empty transform of {dims:?}")));
        }
        let (out_len, out_channels) = match (self.inverse, self.onesided) {
            (true, true) => (n, 1),
            (false, true) => (n / 2 + 1, 2),
            _ => (n, 2),
        };
        Ok(Geometry {
            axis,
            outer: checked_numel(&dims[..axis])?,
            len,
            inner: checked_numel(&dims[axis + 1..rank - 1])?,
            channels,
            n,
            out_len,
            out_channels,
        })
    }

    /// Complex values of scratch one run needs: a transform buffer and the FFT's tables.
    fn work_len(p: &Geometry) -> Option<usize> {
        p.n.checked_add(Fft::work_len(p.n)?)
    }

    /// Transforms every line of `x` along the axis into `out`, with `work` as scratch.
    fn transform(
        &self,
        p: &Geometry,
        x: &Floats<'_>,
        out: &mut FloatsMut<'_>,
        work: &mut [Complex],
    ) -> OpResult<()> {
        let short = || OpError::kernel(OP, "scratch is smaller than planned");
        let mut rest = work;
        let buf = carve(OP, &mut rest, p.n)?;
        let mut fft = Fft::new(p.n, self.inverse, rest).ok_or_else(short)?;
        let irfft = self.inverse && self.onesided;
        // The inverse real FFT reads the non-redundant half and mirrors it.
        let taken = if irfft {
            p.len.min(p.n / 2 + 1)
        } else {
            p.len.min(p.n)
        };
        let scale = if self.inverse { 1.0 / p.n as f64 } else { 1.0 };
        let stop = crate::run_control::stop_token();
        for o in 0..p.outer {
            for i in 0..p.inner {
                stop.poll(o * p.inner + i, OP)?;
                buf.fill(Complex::ZERO);
                for (k, slot) in buf.iter_mut().enumerate().take(taken) {
                    let at = ((o * p.len + k) * p.inner + i) * p.channels;
                    let im = if p.channels == 2 { x.get(at + 1) } else { 0.0 };
                    *slot = Complex::new(x.get(at), im);
                }
                if irfft {
                    for k in 1..p.n.div_ceil(2) {
                        buf[p.n - k] = buf[k].conj();
                    }
                }
                fft.run(buf);
                for (k, v) in buf.iter().take(p.out_len).enumerate() {
                    let at = ((o * p.out_len + k) * p.inner + i) * p.out_channels;
                    out.set(at, v.re * scale);
                    if p.out_channels == 2 {
                        out.set(at + 1, v.im * scale);
                    }
                }
            }
        }
        Ok(())
    }

    /// The plan for known input facts, when the dims and every size argument are known.
    fn geometry_for(&self, inputs: &[&Fact]) -> OpResult<Option<Geometry>> {
        let Some(dims) = required(OP, inputs, 0)?.concrete() else {
            return Ok(None);
        };
        let known = |i: usize| -> OpResult<Option<Option<i64>>> {
            match optional(inputs, i) {
                None => Ok(Some(None)),
                Some(f) => f
                    .value
                    .as_ref()
                    .map(|v| known_scalar_int(OP, "scalar input", v).map(Some))
                    .transpose(),
            }
        };
        let axis = match self.axis_attr {
            Some(a) => Some(a),
            None => known(2)?.map(|a| a.unwrap_or(-2)),
        };
        match (axis, known(1)?) {
            (Some(axis), Some(length)) => Ok(Some(self.geometry(&dims, axis, length)?)),
            _ => Ok(None),
        }
    }

    fn out_dims(p: &Geometry, dims: &[usize]) -> Axes {
        let mut out = Axes::from_slice(dims);
        out[p.axis] = p.out_len;
        *out.last_mut().unwrap_or(&mut 0) = p.out_channels;
        out
    }
}

impl Operator for Dft {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a float type".into(),
                actual: x.dtype,
            });
        }
        check_int_input(OP, inputs, 1)?;
        check_int_input(OP, inputs, 2)?;
        match (self.geometry_for(inputs)?, x.concrete()) {
            (Some(p), Some(dims)) => Ok(vec![Fact::known(x.dtype, &Self::out_dims(&p, &dims))]),
            _ => {
                let mut dims = vec![Dim::Unknown; x.rank()];
                if let Some(last) = dims.last_mut() {
                    *last = Dim::Known(if self.inverse && self.onesided { 1 } else { 2 });
                }
                Ok(vec![Fact::new(x.dtype, dims)])
            }
        }
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_only(OP, dtype, device)?;
        Ok(Box::new(*self))
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let Some(p) = self.geometry_for(inputs)? else {
            return Ok(0);
        };
        Self::work_len(&p)
            .and_then(|len| len.checked_mul(std::mem::size_of::<Complex>()))
            .ok_or_else(|| OpError::shape(OP, format!("a transform of length {} is too long", p.n)))
    }

    fn is_data_dependent(&self) -> bool {
        self.has_size_inputs
    }
}

impl Kernel for Dft {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = io.input(0);
        let scalar = |i: usize| -> OpResult<Option<i64>> {
            let t = io.input(i);
            t.is_defined()
                .then(|| scalar_int(OP, "scalar input", t))
                .transpose()
        };
        let axis = match self.axis_attr {
            Some(a) => a,
            None => scalar(2)?.unwrap_or(-2),
        };
        let p = self.geometry(x.dims(), axis, scalar(1)?)?;
        let out = io.output(0);
        if out.dims() != Self::out_dims(&p, x.dims()).as_slice() {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output has dims {:?}, expected {:?}",
                    out.dims(),
                    Self::out_dims(&p, x.dims())
                ),
            ));
        }
        let mut guard = io
            .scratch
            .ok_or_else(|| OpError::kernel(OP, "needs planned scratch"))?
            .write_bytes(OP)?;
        let work: &mut [Complex] = scratch_as(OP, guard.bytes())?;
        with_floats(OP, x, |x| {
            with_float_output(OP, out, |mut y| self.transform(&p, &x, &mut y, work))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::OpRun;
    use crate::Attr;
    use strata_core::Tensor;

    /// DFT (opset 17) along `axis` of `x` with `dims`; returns the output's dims and values.
    fn dft(
        (inverse, onesided, axis): (bool, bool, i64),
        x: &[f32],
        dims: &[usize],
    ) -> OpResult<(Vec<usize>, Vec<f32>)> {
        let out = OpRun::new(OP, 17)
            .attrs(&[
                ("inverse", Attr::Int(inverse.into())),
                ("onesided", Attr::Int(onesided.into())),
                ("axis", Attr::Int(axis)),
            ])
            .run(&[Tensor::from_slice(x, dims)?])?;
        Ok((out[0].dims().to_vec(), out[0].to_vec::<f32>()?))
    }

    fn op(inverse: bool, onesided: bool) -> (bool, bool, i64) {
        (inverse, onesided, 1)
    }

    #[test]
    fn forward_onesided_and_inverse_real() {
        // x = [1, 2, 3, 4]: X = [10, -2+2i, -2, -2-2i].
        let (dims, v) = dft(op(false, false), &[1.0, 2.0, 3.0, 4.0], &[1, 4, 1]).unwrap();
        assert_eq!(dims, vec![1, 4, 2]);
        assert_eq!(v, vec![10.0, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0]);
        let (dims, v) = dft(op(false, true), &[1.0, 2.0, 3.0, 4.0], &[1, 4, 1]).unwrap();
        assert_eq!(dims, vec![1, 3, 2]);
        assert_eq!(v, vec![10.0, 0.0, -2.0, 2.0, -2.0, 0.0]);
        // The inverse real FFT of those 3 bins restores the 4 samples.
        let bins = [10.0, 0.0, -2.0, 2.0, -2.0, 0.0];
        let (dims, v) = dft(op(true, true), &bins, &[1, 3, 2]).unwrap();
        assert_eq!(dims, vec![1, 4, 1]);
        for (a, b) in v.iter().zip([1.0, 2.0, 3.0, 4.0]) {
            assert!((a - b).abs() < 1e-6, "{v:?}");
        }
        // The complex inverse of the full spectrum, scaled by 1/n.
        let full = [10.0, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0];
        let (_, v) = dft(op(true, false), &full, &[1, 4, 2]).unwrap();
        for (a, b) in v.iter().zip([1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 4.0, 0.0]) {
            assert!((a - b).abs() < 1e-6, "{v:?}");
        }
    }

    #[test]
    fn lines_along_a_middle_axis_of_odd_length() {
        // Two lines of length 3 along axis 1 of [1, 3, 2, 1]; X_0 = sum, and for x = [1, 0, 0]
        // every bin is 1.
        let x = [1.0, 1.0, 0.0, 2.0, 0.0, 3.0];
        let (dims, v) = dft(op(false, false), &x, &[1, 3, 2, 1]).unwrap();
        assert_eq!(dims, vec![1, 3, 2, 2]);
        // Line 0 = [1, 0, 0]: flat. Line 1 = [1, 2, 3]: X_0 = 6, X_1 = -1.5 + 0.866i.
        let expected = [
            1.0, 0.0, 6.0, 0.0, 1.0, 0.0, -1.5, 0.8660254, 1.0, 0.0, -1.5, -0.8660254,
        ];
        for (a, b) in v.iter().zip(expected) {
            assert!((a - b).abs() < 1e-5, "{v:?}");
        }
    }

    #[test]
    fn bad_axis_and_channels_are_errors() {
        assert!(dft((false, false, -1), &[1.0, 2.0], &[1, 2, 1]).is_err());
        assert!(dft(op(false, false), &[1.0; 6], &[1, 2, 3]).is_err());
    }
}
