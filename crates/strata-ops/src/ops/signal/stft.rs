//! STFT (opset 17): the short-time Fourier transform of `signal` `[batch, length, 1 | 2]`.
//! Frames of `frame_length` samples (input 3, else the window's length) start every
//! `frame_step` samples; each is multiplied by `window` (ones when absent) and transformed.
//! Output `[batch, frames, bins, 2]` with `frames = 1 + (length - frame_length) / frame_step`
//! and `bins = frame_length / 2 + 1` when `onesided` (the default) else `frame_length`.
//! Computed in f64, one frame at a time in planned scratch. The output dims come from input
//! values (frame_step, frame_length).

use strata_core::{DType, Device, Tensor};

use super::fft::{Complex, Fft};
use super::values::{
    known_scalar_int, scalar_int, with_float_output, with_floats, Floats, FloatsMut,
};
use crate::support::axes::check_int_input;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::{carve, scratch_as};
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "STFT";

#[derive(Debug, Clone, Copy)]
pub struct Stft {
    onesided: bool,
}

/// The geometry of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Frames {
    batch: usize,
    length: usize,
    channels: usize,
    step: usize,
    frame: usize,
    count: usize,
    bins: usize,
}

impl Frames {
    fn out_dims(&self) -> [usize; 4] {
        [self.batch, self.count, self.bins, 2]
    }
}

impl Stft {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Stft {
            onesided: ctx.attrs.int_or("onesided", 1)? != 0,
        }))
    }

    /// Validates the arguments; `window_len` is the window's length when one is given.
    fn frames(
        &self,
        dims: &[usize],
        step: i64,
        window_len: Option<usize>,
        frame_length: Option<i64>,
    ) -> OpResult<Frames> {
        let &[batch, length, channels] = dims else {
            return Err(OpError::shape(
                OP,
                format!("signal must be [batch, length, 1 or 2], got {dims:?}"),
            ));
        };
        if !(channels == 1 || channels == 2) {
            return Err(OpError::shape(
                OP,
                format!("signal must be [batch, length, 1 or 2], got {dims:?}"),
            ));
        }
        let step = usize::try_from(step)
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| {
                OpError::shape(OP, format!("frame_step must be positive, got {step}"))
            })?;
        let frame = match (frame_length, window_len) {
            (Some(f), w) => {
                let f = usize::try_from(f).ok().filter(|&f| f > 0).ok_or_else(|| {
                    OpError::shape(OP, format!("frame_length must be positive, got {f}"))
                })?;
                if w.is_some_and(|w| w != f) {
                    return Err(OpError::shape(
                        OP,
                        format!("window has {w:?} values for frame_length {f}"),
                    ));
                }
                f
            }
            (None, Some(w)) if w > 0 => w,
            _ => {
                return Err(OpError::shape(
                    OP,
                    "needs frame_length or a non-empty window",
                ))
            }
        };
        if frame > length {
            return Err(OpError::shape(
                OP,
                format!("frame_length {frame} exceeds the signal's {length} samples"),
            ));
        }
        Ok(Frames {
            batch,
            length,
            channels,
            step,
            frame,
            count: 1 + (length - frame) / step,
            bins: if self.onesided { frame / 2 + 1 } else { frame },
        })
    }

    /// Complex values of scratch one run needs: a frame buffer and the FFT's tables.
    fn work_len(f: &Frames) -> Option<usize> {
        f.frame.checked_add(Fft::work_len(f.frame)?)
    }

    /// Transforms every windowed frame of `x` into `out`, with `work` as scratch.
    fn transform(
        f: &Frames,
        x: &Floats<'_>,
        window: Option<&Floats<'_>>,
        out: &mut FloatsMut<'_>,
        work: &mut [Complex],
    ) -> OpResult<()> {
        let mut rest = work;
        let buf = carve(OP, &mut rest, f.frame)?;
        let mut fft = Fft::new(f.frame, false, rest)
            .ok_or_else(|| OpError::kernel(OP, "scratch is smaller than planned"))?;
        let mut at_out = 0;
        let stop = crate::run_control::stop_token();
        for b in 0..f.batch {
            for frame in 0..f.count {
                stop.poll(b * f.count + frame, OP)?;
                for (k, slot) in buf.iter_mut().enumerate() {
                    let at = (b * f.length + frame * f.step + k) * f.channels;
                    let w = window.map_or(1.0, |w| w.get(k));
                    let im = if f.channels == 2 { x.get(at + 1) } else { 0.0 };
                    *slot = Complex::new(x.get(at) * w, im * w);
                }
                fft.run(buf);
                for v in &buf[..f.bins] {
                    out.set(at_out, v.re);
                    out.set(at_out + 1, v.im);
                    at_out += 2;
                }
            }
        }
        Ok(())
    }

    /// The frames for known input facts, when the dims and every size argument are known.
    fn frames_for(&self, inputs: &[&Fact]) -> OpResult<Option<Frames>> {
        let x = required(OP, inputs, 0)?;
        let frame_length = match optional(inputs, 3) {
            None => Some(None),
            Some(f) => f
                .value
                .as_ref()
                .map(|v| known_scalar_int(OP, "frame_length", v).map(Some))
                .transpose()?,
        };
        let step = required(OP, inputs, 1)?
            .value
            .as_ref()
            .map(|v| known_scalar_int(OP, "frame_step", v))
            .transpose()?;
        match (x.concrete(), step, frame_length) {
            (Some(dims), Some(step), Some(frame_length)) => Ok(Some(self.frames(
                &dims,
                step,
                window_len(inputs)?,
                frame_length,
            )?)),
            _ => Ok(None),
        }
    }
}

fn window_len(inputs: &[&Fact]) -> OpResult<Option<usize>> {
    match optional(inputs, 2) {
        None => Ok(None),
        Some(w) => match w.dims.as_slice() {
            [Dim::Known(n)] => Ok(Some(*n)),
            [_] => Err(OpError::shape(OP, "the window's length is not known")),
            other => Err(OpError::shape(
                OP,
                format!("window must be 1-D, got {other:?}"),
            )),
        },
    }
}

impl Operator for Stft {
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
        check_int_input(OP, inputs, 3)?;
        match self.frames_for(inputs)? {
            Some(f) => Ok(vec![Fact::known(x.dtype, &f.out_dims())]),
            _ => Ok(vec![Fact::new(
                x.dtype,
                vec![
                    x.dims.first().cloned().unwrap_or(Dim::Unknown),
                    Dim::Unknown,
                    Dim::Unknown,
                    Dim::Known(2),
                ],
            )]),
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
        let Some(f) = self.frames_for(inputs)? else {
            return Ok(0);
        };
        Self::work_len(&f)
            .and_then(|len| len.checked_mul(std::mem::size_of::<Complex>()))
            .ok_or_else(|| OpError::shape(OP, format!("frames of {} are too long", f.frame)))
    }

    fn is_data_dependent(&self) -> bool {
        true
    }
}

impl Kernel for Stft {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = io.input(0);
        let window: Option<&Tensor> = Some(io.input(2)).filter(|t| t.is_defined());
        if window.is_some_and(|w| w.rank() != 1) {
            return Err(OpError::shape(OP, "window must be 1-D"));
        }
        let frame_length = Some(io.input(3))
            .filter(|t| t.is_defined())
            .map(|t| scalar_int(OP, "frame_length", t))
            .transpose()?;
        let f = self.frames(
            x.dims(),
            scalar_int(OP, "frame_step", io.input(1))?,
            window.map(|w| w.numel()),
            frame_length,
        )?;
        let out = io.output(0);
        if out.dims() != f.out_dims() {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output has dims {:?}, expected {:?}",
                    out.dims(),
                    f.out_dims()
                ),
            ));
        }
        let mut guard = io
            .scratch
            .ok_or_else(|| OpError::kernel(OP, "needs planned scratch"))?
            .write_bytes(OP)?;
        let work: &mut [Complex] = scratch_as(OP, guard.bytes())?;
        with_floats(OP, x, |x| {
            with_float_output(OP, out, |mut y| match window {
                Some(w) => with_floats(OP, w, |w| Self::transform(&f, &x, Some(&w), &mut y, work)),
                None => Self::transform(&f, &x, None, &mut y, work),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::OpRun;

    fn stft(x: &[f32], step: i64, window: Option<&[f32]>, frame: Option<i64>) -> OpResult<Tensor> {
        let x = Tensor::from_slice(x, &[1, x.len(), 1])?;
        let step = Tensor::from_slice(&[step], &[])?;
        let window = match window {
            Some(w) => Tensor::from_slice(w, &[w.len()])?,
            None => Tensor::undefined(),
        };
        let frame = match frame {
            Some(f) => Tensor::from_slice(&[f], &[])?,
            None => Tensor::undefined(),
        };
        let mut out = OpRun::new(OP, 17)
            .constant_inputs()
            .run(&[x, step, window, frame])?;
        Ok(out.remove(0))
    }

    #[test]
    fn frames_are_windowed_and_transformed() {
        // Length 6, frames of 4 every 2 samples: frames [0..4] and [2..6].
        let x = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0];
        let out = stft(&x, 2, None, Some(4)).unwrap();
        assert_eq!(out.dims(), &[1, 2, 3, 2]);
        let v = out.to_vec::<f32>().unwrap();
        // Frame 0 is constant: all energy in bin 0. Frame 1 is [1, 1, 0, 0]: X = [2, 1-i, 0].
        assert_eq!(&v[..6], &[4.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        assert!(
            (v[6] - 2.0).abs() < 1e-6 && (v[8] - 1.0).abs() < 1e-6 && (v[9] + 1.0).abs() < 1e-6
        );
        // A window zeroing the last two samples makes frame 0 match frame 1's input.
        let out = stft(&x, 2, Some(&[1.0, 1.0, 0.0, 0.0]), None).unwrap();
        let w = out.to_vec::<f32>().unwrap();
        assert!((w[0] - 2.0).abs() < 1e-6 && (w[2] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert!(stft(&[1.0; 4], 0, None, Some(2)).is_err());
        assert!(stft(&[1.0; 4], 1, None, Some(5)).is_err());
        assert!(stft(&[1.0; 4], 1, Some(&[1.0; 3]), Some(2)).is_err());
        assert!(stft(&[1.0; 4], 1, None, None).is_err());
    }
}
