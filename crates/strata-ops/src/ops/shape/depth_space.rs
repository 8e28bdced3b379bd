//! DepthToSpace (DCR and CRD modes) and SpaceToDepth: NCHW rearrangements that are a 6-D
//! reshape, a permutation and a reshape. The kernel copies the permuted 6-D view of the input
//! into the output directly, with no intermediate tensor.

use smallvec::SmallVec;
use strata_core::Device;

use crate::support::axes::contiguous_strides;
use crate::support::copy_runs::{copy_strided, StridedBytes};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[
    ("DepthToSpace", |c| DepthSpace::build(true, c)),
    ("SpaceToDepth", |c| DepthSpace::build(false, c)),
];

#[derive(Debug, Clone, Copy)]
pub struct DepthSpace {
    to_space: bool,
    block: usize,
    /// Channel-row-depth order (CRD) instead of depth-column-row (DCR).
    crd: bool,
}

impl DepthSpace {
    pub fn build(to_space: bool, ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let op = ctx.op_type;
        let b = ctx
            .attrs
            .int("blocksize")?
            .ok_or_else(|| OpError::attribute(op, "blocksize", "is required"))?;
        let block = usize::try_from(b)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| OpError::attribute(op, "blocksize", format!("{b} is not positive")))?;
        let crd = match ctx.attrs.string_or("mode", "DCR")?.as_str() {
            "DCR" => false,
            "CRD" => true,
            other => {
                return Err(OpError::attribute(
                    op,
                    "mode",
                    format!("unknown mode {other:?}"),
                ))
            }
        };
        Ok(Box::new(DepthSpace {
            to_space,
            block,
            crd,
        }))
    }

    fn name(&self) -> &'static str {
        if self.to_space {
            "DepthToSpace"
        } else {
            "SpaceToDepth"
        }
    }

    /// Output dims for NCHW input dims, checking divisibility.
    fn out_dims(&self, [n, c, h, w]: [usize; 4]) -> OpResult<[usize; 4]> {
        let b = self.block;
        // Dims are declared and the block size is an attribute: products are checked.
        let overflow = || OpError::shape(self.name(), "the output dims overflow");
        let bb = b.checked_mul(b).ok_or_else(overflow)?;
        if self.to_space {
            if c % bb != 0 {
                return Err(OpError::shape(
                    self.name(),
                    format!("{c} channels are not divisible by blocksize² = {bb}"),
                ));
            }
            let (h, w) = (h.checked_mul(b), w.checked_mul(b));
            Ok([n, c / bb, h.ok_or_else(overflow)?, w.ok_or_else(overflow)?])
        } else {
            if h % b != 0 || w % b != 0 {
                return Err(OpError::shape(
                    self.name(),
                    format!("spatial dims {h}x{w} are not divisible by blocksize {b}"),
                ));
            }
            Ok([n, c.checked_mul(bb).ok_or_else(overflow)?, h / b, w / b])
        }
    }

    /// The input as 6-D dims and the permutation that orders them like the output's 6-D view.
    fn six_d(&self, [n, c, h, w]: [usize; 4]) -> ([usize; 6], [usize; 6]) {
        let b = self.block;
        match (self.to_space, self.crd) {
            (true, false) => ([n, b, b, c / (b * b), h, w], [0, 3, 4, 1, 5, 2]),
            (true, true) => ([n, c / (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]),
            (false, false) => ([n, c, h / b, b, w / b, b], [0, 3, 5, 1, 2, 4]),
            (false, true) => ([n, c, h / b, b, w / b, b], [0, 1, 3, 5, 2, 4]),
        }
    }
}

impl Operator for DepthSpace {
    fn op_type(&self) -> &str {
        self.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(self.name(), inputs, 0)?;
        if x.rank() != 4 {
            return Err(OpError::shape(
                self.name(),
                format!("input must be NCHW (rank 4), got {:?}", x.dims),
            ));
        }
        let dims = match x.concrete() {
            Some(d) => self
                .out_dims([d[0], d[1], d[2], d[3]])?
                .into_iter()
                .map(Dim::Known)
                .collect(),
            None => {
                let mut dims = vec![x.dims[0].clone()];
                dims.extend(x.dims[1..].iter().map(|_| Dim::Unknown));
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
        cpu_plain(self.name(), required(self.name(), inputs, 0)?.dtype, device)?;
        Ok(Box::new(*self))
    }
}

impl Kernel for DepthSpace {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let d: [usize; 4] = x.dims().try_into().map_err(|_| {
            OpError::kernel(self.name(), format!("input {:?} is not NCHW", x.dims()))
        })?;
        let od = self.out_dims(d)?;
        if out.dims() != od || !x.is_contiguous() || !out.is_contiguous() {
            return Err(OpError::kernel(
                self.name(),
                format!("output {:?} should be {od:?} (both contiguous)", out.dims()),
            ));
        }
        let (six, perm) = self.six_d(d);
        let src_strides = contiguous_strides(&six);
        let dims: SmallVec<[usize; 8]> = perm.iter().map(|&p| six[p]).collect();
        let strides: SmallVec<[isize; 8]> = perm.iter().map(|&p| src_strides[p] as isize).collect();
        let dst_strides: SmallVec<[isize; 8]> = contiguous_strides(&dims)
            .iter()
            .map(|&s| s as isize)
            .collect();
        let input = x.read_bytes(self.name())?;
        let mut output = out.write_bytes(self.name())?;
        copy_strided(
            StridedBytes {
                offset: x.storage_offset(),
                strides: &strides,
            },
            input.bytes(),
            StridedBytes {
                offset: out.storage_offset(),
                strides: &dst_strides,
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
    use super::*;
    use strata_core::Tensor;

    fn run(op: DepthSpace, x: &Tensor) -> Tensor {
        let f = op.infer(&[&Fact::constant(x.clone())]).unwrap().remove(0);
        let o = Tensor::zeros(&f.concrete().unwrap(), x.dtype()).unwrap();
        op.run(&KernelIo {
            inputs: &[x],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })
        .unwrap();
        o
    }

    #[test]
    fn round_trips_and_modes() {
        let v: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let x = Tensor::from_slice(&v, &[1, 4, 2, 2]).unwrap();
        let op = |to_space, crd| DepthSpace {
            to_space,
            block: 2,
            crd,
        };
        let y = run(op(true, false), &x);
        assert_eq!(y.dims(), &[1, 1, 4, 4]);
        // DCR: channel c = (by * 2 + bx), so row 0 interleaves channels 0 and 1.
        assert_eq!(&y.to_vec::<f32>().unwrap()[..4], &[0., 4., 1., 5.]);
        let back = run(op(false, false), &y);
        assert_eq!(back.to_vec::<f32>().unwrap(), v);
        let y = run(op(true, true), &x);
        assert_eq!(run(op(false, true), &y).to_vec::<f32>().unwrap(), v);
        let bad = Tensor::zeros(&[1, 3, 2, 2], strata_core::DType::F32).unwrap();
        assert!(op(true, false).infer(&[&Fact::constant(bad)]).is_err());
    }
}
