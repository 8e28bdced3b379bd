//! MelWeightMatrix (opset 17): the `[dft_length / 2 + 1, num_mel_bins]` matrix of triangular
//! filters, evenly spaced on the mel scale between `lower_edge_hertz` and `upper_edge_hertz`,
//! that maps a one-sided spectrum to mel bins, in `output_datatype` (default float). Filter
//! edges snap to spectrum bins as the ONNX reference does (`floor((dft_length + 1) * hz /
//! sample_rate)`). All five inputs are scalars; the output size is a value, so the matrix is
//! built at plan time from constants or on the runtime's dynamic path.

use strata_core::{DType, Device, Tensor};

use super::values::{is_storable, known_scalar_int, read_f64, scalar_int, to_tensor};
use crate::ops::cast::cast::dtype_from_onnx_code;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "MelWeightMatrix";

#[derive(Debug, Clone, Copy)]
pub struct MelWeightMatrix {
    dtype: DType,
}

/// The validated scalar inputs.
struct Params {
    mel_bins: usize,
    dft_length: usize,
    sample_rate: usize,
    lower_hz: f64,
    upper_hz: f64,
}

fn positive(what: &str, v: i64) -> OpResult<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| OpError::shape(OP, format!("{what} must be positive, got {v}")))
}

fn scalar_f64(what: &str, t: &Tensor) -> OpResult<f64> {
    match read_f64(OP, t)?.as_slice() {
        &[v] => Ok(v),
        other => Err(OpError::shape(
            OP,
            format!("{what} must hold one value, got {other:?}"),
        )),
    }
}

impl Params {
    /// From the five inputs; `int` reads an integer scalar (plan-time or run-time).
    fn read(
        tensors: [&Tensor; 5],
        int: impl Fn(&str, &Tensor) -> OpResult<i64>,
    ) -> OpResult<Params> {
        let p = Params {
            mel_bins: positive("num_mel_bins", int("num_mel_bins", tensors[0])?)?,
            dft_length: positive("dft_length", int("dft_length", tensors[1])?)?,
            sample_rate: positive("sample_rate", int("sample_rate", tensors[2])?)?,
            lower_hz: scalar_f64("lower_edge_hertz", tensors[3])?,
            upper_hz: scalar_f64("upper_edge_hertz", tensors[4])?,
        };
        if !(0.0 <= p.lower_hz && p.lower_hz < p.upper_hz) {
            return Err(OpError::shape(
                OP,
                format!(
                    "need 0 <= lower_edge_hertz < upper_edge_hertz, got {} and {}",
                    p.lower_hz, p.upper_hz
                ),
            ));
        }
        Ok(p)
    }

    fn dims(&self) -> [usize; 2] {
        [self.dft_length / 2 + 1, self.mel_bins]
    }

    /// The matrix, row-major `[spectrum bin, mel bin]`.
    fn matrix(&self) -> Vec<f64> {
        let [rows, cols] = self.dims();
        let to_mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / 10f64.ln();
        let (low, high) = (to_mel(self.lower_hz), to_mel(self.upper_hz));
        let step = (high - low) / (cols + 2) as f64;
        // Edge i of the triangles, as a spectrum bin.
        let edges: Vec<usize> = (0..cols + 2)
            .map(|i| {
                let hz = 700.0 * ((i as f64 * step + low) / 2595.0 * 10f64.ln()).exp_m1();
                let bin = ((self.dft_length + 1) as f64 * hz / self.sample_rate as f64).floor();
                bin.max(0.0) as usize
            })
            .collect();
        let mut out = vec![0.0; rows * cols];
        let mut set = |row: usize, col: usize, v: f64| {
            if row < rows {
                out[row * cols + col] = v;
            }
        };
        for i in 0..cols {
            let (lower, center, upper) = (edges[i], edges[i + 1], edges[i + 2]);
            if center == lower {
                set(center, i, 1.0);
            } else {
                for j in lower..=center {
                    set(j, i, (j - lower) as f64 / (center - lower) as f64);
                }
            }
            for j in center..upper {
                set(j, i, (upper - j) as f64 / (upper - center) as f64);
            }
        }
        out
    }
}

impl MelWeightMatrix {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let code = ctx.attrs.int_or("output_datatype", 1)?;
        let dtype = dtype_from_onnx_code(code)
            .filter(|&d| is_storable(d))
            .ok_or_else(|| {
                OpError::attribute(
                    OP,
                    "output_datatype",
                    format!("type code {code} is not a numeric type"),
                )
            })?;
        Ok(Box::new(MelWeightMatrix { dtype }))
    }
}

impl Operator for MelWeightMatrix {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let facts = [0, 1, 2, 3, 4].map(|i| required(OP, inputs, i));
        let mut values = Vec::with_capacity(5);
        for f in facts {
            values.push(f?.value.as_ref());
        }
        match values.as_slice() {
            &[Some(a), Some(b), Some(c), Some(d), Some(e)] => {
                let p = Params::read([a, b, c, d, e], |what, t| known_scalar_int(OP, what, t))?;
                Ok(vec![Fact::constant(to_tensor(
                    OP,
                    &p.matrix(),
                    &p.dims(),
                    self.dtype,
                )?)])
            }
            _ => Ok(vec![Fact::new(
                self.dtype,
                vec![Dim::Unknown, Dim::Unknown],
            )]),
        }
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, self.dtype, device)?;
        Ok(Box::new(*self))
    }

    fn is_data_dependent(&self) -> bool {
        true
    }
}

impl Kernel for MelWeightMatrix {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let tensors = [0, 1, 2, 3, 4].map(|i| io.input(i));
        let p = Params::read(tensors, |what, t| scalar_int(OP, what, t))?;
        let out = io.output(0);
        if out.dims() != p.dims() {
            return Err(OpError::kernel(
                OP,
                format!("output has dims {:?}, expected {:?}", out.dims(), p.dims()),
            ));
        }
        out.copy_from(&to_tensor(OP, &p.matrix(), &p.dims(), self.dtype)?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(mel: i64, dft: i64, rate: i64, low: f32, high: f32) -> OpResult<Tensor> {
        let ints = |v: i64| Fact::constant(Tensor::from_slice(&[v], &[]).unwrap());
        let floats = |v: f32| Fact::constant(Tensor::from_slice(&[v], &[]).unwrap());
        let facts = [ints(mel), ints(dft), ints(rate), floats(low), floats(high)];
        let refs: Vec<&Fact> = facts.iter().collect();
        let out = MelWeightMatrix { dtype: DType::F32 }.infer(&refs)?;
        Ok(out[0].value.clone().unwrap())
    }

    #[test]
    fn triangles_peak_at_their_centers() {
        let m = matrix(2, 16, 16, 0.0, 8.0).unwrap();
        assert_eq!(m.dims(), &[9, 2]);
        let v = m.to_vec::<f32>().unwrap();
        // Every filter reaches 1 at its center bin and stays within [0, 1].
        for col in 0..2 {
            let peak = (0..9).map(|r| v[r * 2 + col]).fold(0.0f32, f32::max);
            assert_eq!(peak, 1.0);
        }
        assert!(v.iter().all(|&x| (0.0..=1.0).contains(&x)));
    }

    #[test]
    fn bad_scalars_are_errors() {
        assert!(matrix(0, 16, 16, 0.0, 8.0).is_err());
        assert!(matrix(2, 16, 16, 8.0, 1.0).is_err());
    }
}
