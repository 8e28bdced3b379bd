//! AffineGrid (opset 20): the sampling grid GridSample takes, from a batch of affine matrices
//! `theta` (N, 2, 3) or (N, 3, 4) and the target `size` (N, C, H, W) or (N, C, D, H, W).
//! Output (N, H, W, 2) or (N, D, H, W, 3): theta times the homogeneous normalized coordinates
//! (x, y[, z], 1) of every output pixel, `align_corners` choosing pixel corners or centers.
//!
//! Per batch this is one matrix product, base (P x r+1) times theta^T (r+1 x r), on the
//! project's GEMM; the base grid lives in planned scratch. Output dims come from the values of
//! `size`, so without a constant `size` the runtime sizes the output when the node runs.

use smallvec::SmallVec;
use strata_core::{DType, Device, Tensor};

use crate::kernels::gemm::{gemm, GemmFloat};
use crate::support::axes::{check_int_input, known_ints, read_ints};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_supported;
use crate::support::strided::advance_index;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "AffineGrid";

#[derive(Debug, Clone, Copy)]
pub struct AffineGrid {
    align_corners: bool,
}

impl AffineGrid {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let align_corners = match ctx.attrs.int_or("align_corners", 0)? {
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
        Ok(Box::new(AffineGrid { align_corners }))
    }

    /// Normalized coordinate of pixel `i` of an axis of `len`.
    fn coordinate(&self, i: usize, len: usize) -> f64 {
        if self.align_corners {
            if len <= 1 {
                -1.0
            } else {
                -1.0 + 2.0 * i as f64 / (len - 1) as f64
            }
        } else {
            -1.0 + (2 * i + 1) as f64 / len as f64
        }
    }
}

/// Validates `size` against theta's dims (when known) and returns (N, spatial dims).
fn check_size(size: &[i64], theta: Option<&[usize]>) -> OpResult<(usize, Vec<usize>)> {
    let dims: Vec<usize> = size
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| OpError::shape(OP, format!("size {size:?} has a negative dim")))?;
    if !(dims.len() == 4 || dims.len() == 5) {
        return Err(OpError::shape(
            OP,
            format!("size {size:?} must be (N, C, H, W) or (N, C, D, H, W)"),
        ));
    }
    let r = dims.len() - 2;
    if let Some(t) = theta {
        if t != [dims[0], r, r + 1] {
            return Err(OpError::shape(
                OP,
                format!(
                    "theta {t:?} does not fit size {size:?}: expected [N, {r}, {}]",
                    r + 1
                ),
            ));
        }
    }
    Ok((dims[0], dims[2..].to_vec()))
}

impl Operator for AffineGrid {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let theta = required(OP, inputs, 0)?;
        required(OP, inputs, 1)?;
        check_int_input(OP, inputs, 1)?;
        if !theta.dtype.is_float() || theta.rank() != 3 {
            return Err(OpError::shape(
                OP,
                format!("theta must be a rank-3 float tensor, got {:?}", theta),
            ));
        }
        let dims = match known_ints(OP, inputs, 1)? {
            Some(size) => {
                let (n, spatial) = check_size(&size, theta.concrete().as_deref())?;
                let mut dims = vec![Dim::Known(n)];
                dims.extend(spatial.iter().map(|&d| Dim::Known(d)));
                dims.push(Dim::Known(spatial.len()));
                dims
            }
            None => {
                let r = theta.dims[1].known().ok_or_else(|| {
                    OpError::shape(OP, "theta's second dim must be known (2 or 3)")
                })?;
                let mut dims = vec![theta.dims[0].clone()];
                dims.extend(std::iter::repeat_n(Dim::Unknown, r));
                dims.push(Dim::Known(r));
                dims
            }
        };
        Ok(vec![Fact::new(theta.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_supported(OP, dtype, device, matches!(dtype, DType::F32 | DType::F64))?;
        Ok(Box::new(*self))
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let theta = required(OP, inputs, 0)?;
        Ok(match known_ints(OP, inputs, 1)? {
            Some(size) => {
                let (_, spatial) = check_size(&size, None)?;
                let points: usize = spatial.iter().product();
                points * (spatial.len() + 1) * theta.dtype.size_in_bytes()
            }
            None => 0,
        })
    }
}

impl Kernel for AffineGrid {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (theta, out) = (io.input(0), io.output(0));
        let size = read_ints(OP, io.input(1))?;
        let (n, spatial) = check_size(&size, Some(theta.dims()))?;
        let r = spatial.len();
        let mut expected = vec![n];
        expected.extend(&spatial);
        expected.push(r);
        if out.dims() != expected.as_slice() || out.dtype() != theta.dtype() {
            return Err(OpError::kernel(
                OP,
                format!("output {:?} is not {expected:?}", out.dims()),
            ));
        }
        if out.numel() == 0 {
            return Ok(());
        }
        match theta.dtype() {
            DType::F32 => self.grid::<f32>(theta, &spatial, out, io),
            DType::F64 => self.grid::<f64>(theta, &spatial, out, io),
            other => Err(OpError::kernel(OP, format!("no kernel for dtype {other}"))),
        }
    }
}

impl AffineGrid {
    fn grid<T: GemmFloat + strata_core::Element + num_traits::FromPrimitive>(
        &self,
        theta: &Tensor,
        spatial: &[usize],
        out: &Tensor,
        io: &KernelIo<'_>,
    ) -> OpResult<()> {
        let r = spatial.len();
        let points: usize = spatial.iter().product();
        let base_len = points * (r + 1);
        let elem = std::mem::size_of::<T>();
        let mut guard = match io.scratch {
            Some(s) if s.numel() >= base_len * elem => Some(s.write_bytes(OP)?),
            _ => None,
        };
        // Without planned scratch (a caller that did not ask for it) the base grid is allocated.
        let mut owned = Vec::new();
        let base: &mut [T] = match guard.as_mut() {
            Some(g) => bytemuck::try_cast_slice_mut(&mut g.bytes()[..base_len * elem])
                .map_err(|e| OpError::kernel(OP, format!("scratch is misaligned: {e}")))?,
            None => {
                owned.resize(base_len, T::ZERO);
                &mut owned
            }
        };
        // Row p of the base grid: (x, y[, z], 1) of output pixel p, x along the last axis.
        let mut coord: SmallVec<[usize; 3]> = SmallVec::from_elem(0, r);
        for row in base.chunks_exact_mut(r + 1) {
            for (k, slot) in row[..r].iter_mut().enumerate() {
                let axis = r - 1 - k;
                let v = self.coordinate(coord[axis], spatial[axis]);
                *slot = T::from_f64(v).unwrap_or(T::ZERO);
            }
            row[r] = T::ONE;
            advance_index(&mut coord, spatial);
        }
        let tr = theta.read::<T>()?;
        let th = tr
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "theta is not contiguous"))?;
        let mut ow = out.write::<T>()?;
        let dst = ow
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
        let (mat, grid) = (r * (r + 1), points * r);
        for (theta_n, out_n) in th.chunks_exact(mat).zip(dst.chunks_exact_mut(grid)) {
            // out_n (P x r) = base (P x r+1) * theta_n^T; theta_n is r x (r+1) row-major.
            gemm(
                points,
                r,
                r + 1,
                base,
                ((r + 1) as isize, 1),
                theta_n,
                (1, (r + 1) as isize),
                out_n,
                (r as isize, 1),
                T::ONE,
                T::ZERO,
                io.threads,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_constant;
    use crate::{Attr, Attributes};
    use strata_core::Tensor;

    #[test]
    fn identity_theta_gives_the_base_grid() {
        let theta = Tensor::from_slice(&[1.0f32, 0., 0., 0., 1., 0.], &[1, 2, 3]).unwrap();
        let size = Tensor::from_slice(&[1i64, 1, 2, 2], &[4]).unwrap();
        let y = run_constant(
            "AffineGrid",
            20,
            Attributes::new("AffineGrid"),
            &[Some(theta.clone()), Some(size.clone())],
        )
        .unwrap();
        assert_eq!(y.dims(), &[1, 2, 2, 2]);
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![-0.5, -0.5, 0.5, -0.5, -0.5, 0.5, 0.5, 0.5]
        );
        // A shift by (1, 2) with corners aligned: x, y in {-1, 1}.
        let shift = Tensor::from_slice(&[1.0f32, 0., 1., 0., 1., 2.], &[1, 2, 3]).unwrap();
        let attrs = Attributes::new("AffineGrid").with("align_corners", Attr::Int(1));
        let y = run_constant("AffineGrid", 20, attrs, &[Some(shift), Some(size)]).unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![0., 1., 2., 1., 0., 3., 2., 3.]
        );
    }

    #[test]
    fn size_must_fit_theta() {
        let theta = Tensor::from_slice(&[0.0f32; 6], &[1, 2, 3]).unwrap();
        let size = Tensor::from_slice(&[1i64, 1, 2, 2, 2], &[5]).unwrap();
        let err = run_constant(
            "AffineGrid",
            20,
            Attributes::new("AffineGrid"),
            &[Some(theta), Some(size)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("AffineGrid"), "{err}");
    }
}
