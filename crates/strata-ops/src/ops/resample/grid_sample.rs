//! GridSample (opsets 16, 20, 22): samples `X` (N, C, D1..Dr) at the normalized points of
//! `grid` (N, H1..Hr, r), whose last axis lists coordinates innermost-axis first (x, y, z).
//! Modes nearest (round half to even), linear and cubic (Keys, a = -0.75), named
//! bilinear/bicubic before opset 20; padding zeros, border or reflection; `align_corners`.
//! Any number of spatial axes (opset 16 only defines 2-D; the arithmetic is the same). Float
//! and integer images (integers round half to even on store).
//!
//! Interpolation is separable: per sample point each axis gets up to four (index, weight) taps,
//! computed once and applied to every channel.

use smallvec::SmallVec;
use strata_core::{Device, Tensor};

use super::sample::{dispatch_sample, is_sampled, Sample};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_supported;
use crate::support::strided::advance_index;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "GridSample";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

#[derive(Debug, Clone, Copy)]
pub struct GridSample {
    mode: Mode,
    padding: Padding,
    align_corners: bool,
}

/// Up to four taps per axis: input index and weight (weight 0 for zero padding).
type AxisTaps = SmallVec<[(usize, f64); 4]>;

impl GridSample {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let modern = ctx.opset >= 20;
        let default = if modern { "linear" } else { "bilinear" };
        let mode = match (a.string_or("mode", default)?.as_str(), modern) {
            ("nearest", _) => Mode::Nearest,
            ("bilinear", false) | ("linear", true) => Mode::Linear,
            ("bicubic", false) | ("cubic", true) => Mode::Cubic,
            (other, _) => {
                return Err(OpError::attribute(
                    OP,
                    "mode",
                    format!("unknown mode {other:?} for opset {}", ctx.opset),
                ))
            }
        };
        let padding = match a.string_or("padding_mode", "zeros")?.as_str() {
            "zeros" => Padding::Zeros,
            "border" => Padding::Border,
            "reflection" => Padding::Reflection,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "padding_mode",
                    format!("unknown padding mode {other:?}"),
                ))
            }
        };
        let align_corners = match a.int_or("align_corners", 0)? {
            0 => false,
            1 => true,
            v => {
                return Err(OpError::attribute(
                    OP,
                    "align_corners",
                    format!("must be 0 or 1, got {v}"),
                ))
            }
        };
        Ok(Box::new(GridSample {
            mode,
            padding,
            align_corners,
        }))
    }

    /// Maps a normalized coordinate in [-1, 1] to a pixel coordinate of an axis of `len`.
    fn denormalize(&self, n: f64, len: usize) -> f64 {
        let len = len as f64;
        if self.align_corners {
            (n + 1.0) / 2.0 * (len - 1.0)
        } else {
            ((n + 1.0) * len - 1.0) / 2.0
        }
    }

    /// The coordinate range that counts as inside the axis.
    fn bounds(&self, len: usize) -> (f64, f64) {
        if self.align_corners {
            (0.0, len as f64 - 1.0)
        } else {
            (-0.5, len as f64 - 0.5)
        }
    }

    /// The taps of one axis of `len` at pixel coordinate `x`.
    fn taps(&self, x: f64, len: usize) -> AxisTaps {
        let (lo, hi) = self.bounds(len);
        let mut x = if self.mode == Mode::Nearest {
            x.round_ties_even()
        } else {
            x
        };
        if x < lo || x > hi {
            match self.padding {
                Padding::Border => x = x.clamp(0.0, len as f64 - 1.0),
                Padding::Reflection => x = reflect(x, lo, hi),
                Padding::Zeros => {}
            }
        }
        let mut taps = AxisTaps::new();
        // Out-of-range float coordinates saturate; every index is bounds-checked in `fetch`.
        let at = |i: f64| i as i64;
        match self.mode {
            Mode::Nearest => taps.push(self.fetch(at(x.trunc()), len, 1.0)),
            Mode::Linear => {
                let x0 = x.floor();
                let f = x - x0;
                taps.push(self.fetch(at(x0), len, 1.0 - f));
                taps.push(self.fetch(at(x0).saturating_add(1), len, f));
            }
            Mode::Cubic => {
                let x0 = x.floor();
                let t = x - x0;
                let w = cubic_weights(t);
                for (k, wk) in w.into_iter().enumerate() {
                    let i = at(x0).saturating_add(k as i64 - 1);
                    taps.push(self.fetch(i, len, wk));
                }
            }
        }
        taps
    }

    /// Index `i` of an axis of `len` under the padding mode, with its weight.
    fn fetch(&self, i: i64, len: usize, weight: f64) -> (usize, f64) {
        let last = len as i64 - 1;
        match self.padding {
            Padding::Zeros if (0..=last).contains(&i) => (i as usize, weight),
            Padding::Zeros => (0, 0.0),
            Padding::Border => (i.clamp(0, last) as usize, weight),
            Padding::Reflection => {
                let (lo, hi) = self.bounds(len);
                let r = reflect(i as f64, lo, hi) as i64;
                (r.clamp(0, last) as usize, weight)
            }
        }
    }
}

/// Reflects `x` at the borders until it lies in [lo, hi].
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 || !x.is_finite() {
        return lo;
    }
    let (dx, from_low) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (dx / range).trunc();
    let r = dx - n * range;
    let even = n % 2.0 == 0.0;
    if even == from_low {
        lo + r
    } else {
        hi - r
    }
}

/// Keys cubic weights (a = -0.75) of the taps at -1, 0, 1, 2 for fraction `t` in [0, 1).
fn cubic_weights(t: f64) -> [f64; 4] {
    let a = -0.75;
    let near = |d: f64| ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
    let far = |d: f64| ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

impl Operator for GridSample {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let grid = required(OP, inputs, 1)?;
        for (i, f, ok, expected) in [
            (0, x, is_sampled(x.dtype), "a float or integer type"),
            (1, grid, grid.dtype.is_float(), "a float type"),
        ] {
            if !ok {
                return Err(OpError::DType {
                    op: OP.into(),
                    index: i,
                    expected: expected.into(),
                    actual: f.dtype,
                });
            }
        }
        let r = x.rank();
        if r < 3 || grid.rank() != r {
            return Err(OpError::shape(
                OP,
                format!(
                    "X {:?} needs rank 3 or more and grid {:?} the same rank",
                    x.dims, grid.dims
                ),
            ));
        }
        if let Some(k) = grid.dims[r - 1].known() {
            if k != r - 2 {
                return Err(OpError::shape(
                    OP,
                    format!("grid's last dim is {k}, expected {} coordinates", r - 2),
                ));
            }
        }
        if let (Some(a), Some(b)) = (x.dims[0].known(), grid.dims[0].known()) {
            if a != b {
                return Err(OpError::shape(
                    OP,
                    format!("batch of X ({a}) and grid ({b}) differ"),
                ));
            }
        }
        let n = if x.dims[0] == Dim::Unknown {
            grid.dims[0].clone()
        } else {
            x.dims[0].clone()
        };
        let mut dims = vec![n, x.dims[1].clone()];
        dims.extend(grid.dims[1..r - 1].iter().cloned());
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_supported(OP, dtype, device, is_sampled(dtype))?;
        Ok(Box::new(*self))
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let grid = required(OP, inputs, 1)?;
        Ok(grid.numel().map_or(0, |n| n * std::mem::size_of::<f64>()))
    }
}

impl Kernel for GridSample {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, grid, out) = (io.input(0), io.input(1), io.output(0));
        let r = x.rank();
        let fits = r >= 3
            && grid.rank() == r
            && grid.dims()[0] == x.dims()[0]
            && grid.dims()[r - 1] == r - 2
            && out.dims().len() == r
            && out.dims()[..2] == x.dims()[..2]
            && out.dims()[2..] == grid.dims()[1..r - 1]
            && out.dtype() == x.dtype();
        if !fits {
            return Err(OpError::kernel(
                OP,
                format!(
                    "X {:?}, grid {:?} and output {:?} do not fit",
                    x.dims(),
                    grid.dims(),
                    out.dims()
                ),
            ));
        }
        if out.numel() == 0 {
            return Ok(());
        }
        // The grid as f64 coordinates, in planned scratch when there is enough.
        let len = grid.numel();
        let mut guard = match io.scratch {
            Some(s) if s.numel() >= len * std::mem::size_of::<f64>() => Some(s.write_bytes(OP)?),
            _ => None,
        };
        let mut owned = Vec::new();
        let coords: &mut [f64] = match guard.as_mut() {
            Some(g) => bytemuck::try_cast_slice_mut(&mut g.bytes()[..len * 8])
                .map_err(|e| OpError::kernel(OP, format!("scratch is misaligned: {e}")))?,
            None => {
                owned.resize(len, 0.0);
                &mut owned
            }
        };
        dispatch_sample!(grid.dtype(), G => load_all::<G>(grid, coords),
            _ => Err(OpError::kernel(OP, format!("grid must be float, got {}", grid.dtype()))))?;
        dispatch_sample!(x.dtype(), T => self.sample::<T>(x, coords, out),
            _ => Err(OpError::kernel(OP, format!("no kernel for dtype {}", x.dtype()))))
    }
}

/// Loads a tensor (any layout) into `dst` as row-major f64 values.
fn load_all<T: Sample>(t: &Tensor, dst: &mut [f64]) -> OpResult<()> {
    let r = t.read::<T>()?;
    match r.as_slice() {
        Some(s) => dst.iter_mut().zip(s).for_each(|(d, v)| *d = v.load()),
        None => dst
            .iter_mut()
            .zip(r.to_vec()?)
            .for_each(|(d, v)| *d = v.load()),
    }
    Ok(())
}

impl GridSample {
    fn sample<T: Sample>(&self, x: &Tensor, grid: &[f64], out: &Tensor) -> OpResult<()> {
        let dims = x.dims();
        let spatial = &dims[2..];
        let r = spatial.len();
        let (batch, channels) = (dims[0], dims[1]);
        let points: usize = out.dims()[2..].iter().product();
        let xr = x.read::<T>()?;
        let src = xr.storage_data();
        let strides = x.strides();
        let base = x.storage_offset() as isize;
        let mut ow = out.write::<T>()?;
        let dst = ow
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
        let mut axes: SmallVec<[AxisTaps; 4]> = SmallVec::new();
        let mut tap: SmallVec<[usize; 4]> = SmallVec::from_elem(0, r);
        let mut tap_counts: SmallVec<[usize; 4]> = SmallVec::new();
        for n in 0..batch {
            for p in 0..points {
                let coords = &grid[(n * points + p) * r..(n * points + p + 1) * r];
                axes.clear();
                for (a, &len) in spatial.iter().enumerate() {
                    // The grid lists the innermost axis first.
                    let x = self.denormalize(coords[r - 1 - a], len);
                    axes.push(self.taps(x, len));
                }
                tap_counts.clear();
                tap_counts.extend(axes.iter().map(|a| a.len()));
                for c in 0..channels {
                    let plane = base + n as isize * strides[0] + c as isize * strides[1];
                    let mut acc = 0.0f64;
                    tap.fill(0);
                    loop {
                        let mut w = 1.0;
                        let mut offset = plane;
                        for a in 0..r {
                            let (i, wa) = axes[a][tap[a]];
                            w *= wa;
                            offset += i as isize * strides[a + 2];
                        }
                        if w != 0.0 {
                            acc += w * src[offset as usize].load();
                        }
                        if !advance_index(&mut tap, &tap_counts) {
                            break;
                        }
                    }
                    dst[(n * channels + c) * points + p] = T::store(acc);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::run_constant;
    use crate::{Attr, Attributes};

    fn sample(attrs: Attributes, grid: &[f32], points: usize) -> OpResult<Vec<f32>> {
        // X = [[0, 1], [2, 3]] (1x1x2x2).
        let x = Tensor::from_slice(&[0.0f32, 1., 2., 3.], &[1, 1, 2, 2]).unwrap();
        let g = Tensor::from_slice(grid, &[1, 1, points, 2]).unwrap();
        Ok(run_constant("GridSample", 20, attrs, &[Some(x), Some(g)])?.to_vec::<f32>()?)
    }

    #[test]
    fn linear_samples_centers_and_midpoints() {
        // Without align_corners the pixel centers sit at -0.5 and 0.5.
        let y = sample(
            Attributes::new("GridSample"),
            &[-0.5, -0.5, 0.5, 0.5, 0.0, 0.0, 0.0, -0.5],
            4,
        )
        .unwrap();
        assert_eq!(y, vec![0.0, 3.0, 1.5, 0.5]);
        // Outside the image zero padding fades towards 0: x = 1.0 is pixel 1.5.
        let y = sample(Attributes::new("GridSample"), &[1.0, -0.5], 1).unwrap();
        assert_eq!(y, vec![0.5]);
    }

    #[test]
    fn padding_modes_and_nearest() {
        let border =
            Attributes::new("GridSample").with("padding_mode", Attr::String("border".into()));
        assert_eq!(sample(border, &[3.0, -0.5], 1).unwrap(), vec![1.0]);
        let nearest = Attributes::new("GridSample")
            .with("mode", Attr::String("nearest".into()))
            .with("align_corners", Attr::Int(1));
        // align_corners: x = 0 is pixel 0.5, rounded half to even: 0.
        assert_eq!(sample(nearest, &[0.0, 1.0], 1).unwrap(), vec![2.0]);
        assert_eq!(reflect(-1.5, -0.5, 1.5), 0.5);
        assert_eq!(reflect(2.0, -0.5, 1.5), 1.0);
        let w = cubic_weights(0.25);
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let bad = Attributes::new("GridSample").with("mode", Attr::String("bicubic".into()));
        // "bicubic" is the pre-20 spelling.
        assert!(sample(bad, &[0.0, 0.0], 1).is_err());
        let x = Tensor::from_slice(&[0.0f32; 4], &[1, 1, 2, 2]).unwrap();
        let g = Tensor::from_slice(&[0.0f32; 3], &[1, 1, 1, 3]).unwrap();
        let err = run_constant(
            "GridSample",
            20,
            Attributes::new("GridSample"),
            &[Some(x), Some(g)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("GridSample"), "{err}");
    }
}
