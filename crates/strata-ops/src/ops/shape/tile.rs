//! Tile: repeats the input `repeats[i]` times along each axis. The output is viewed as
//! `[r0, d0, r1, d1, ...]` and the input as the same dims with stride 0 on every repeat axis,
//! so one run-merging strided copy writes every tile (rows of the last axis by `memcpy`).

use smallvec::SmallVec;
use strata_core::Device;

use crate::support::axes::{check_int_input, contiguous_strides, known_ints, read_ints};
use crate::support::copy_runs::{copy_strided, StridedBytes};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("Tile", Tile::build)];

#[derive(Debug, Clone, Copy)]
pub struct Tile;

impl Tile {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Tile))
    }
}

fn check_repeats(repeats: &[i64], rank: usize) -> OpResult<()> {
    if repeats.len() != rank || repeats.iter().any(|&r| r < 0) {
        return Err(OpError::shape(
            "Tile",
            format!("repeats {repeats:?} must be {rank} non-negative values, one per input axis"),
        ));
    }
    Ok(())
}

impl Operator for Tile {
    fn op_type(&self) -> &str {
        "Tile"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Tile", inputs, 0)?;
        required("Tile", inputs, 1)?;
        check_int_input("Tile", inputs, 1)?;
        let dims = match known_ints("Tile", inputs, 1)? {
            Some(r) => {
                check_repeats(&r, x.rank())?;
                x.dims
                    .iter()
                    .zip(&r)
                    .map(|(d, &r)| match d {
                        _ if r == 1 => Ok(d.clone()),
                        Dim::Known(d) => d
                            .checked_mul(r as usize)
                            .map(Dim::Known)
                            .ok_or_else(|| OpError::shape("Tile", "the output dims overflow")),
                        _ => Ok(Dim::Unknown),
                    })
                    .collect::<OpResult<Vec<_>>>()?
            }
            None => vec![Dim::Unknown; x.rank()],
        };
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("Tile", required("Tile", inputs, 0)?.dtype, device)?;
        Ok(Box::new(Tile))
    }
}

impl Kernel for Tile {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let repeats = read_ints("Tile", io.input(1))?;
        check_repeats(&repeats, x.rank())?;
        let dims = x.dims();
        if out.rank() != dims.len()
            || out
                .dims()
                .iter()
                .zip(dims)
                .zip(&repeats)
                .any(|((&o, &d), &r)| o != d * r as usize)
        {
            return Err(OpError::kernel(
                "Tile",
                format!(
                    "output {:?} is not {dims:?} tiled by {repeats:?}",
                    out.dims()
                ),
            ));
        }
        if out.numel() == 0 {
            return Ok(());
        }
        if !out.is_contiguous() {
            return Err(OpError::kernel("Tile", "output is not contiguous"));
        }
        let out_strides = contiguous_strides(out.dims());
        let mut split: SmallVec<[usize; 16]> = SmallVec::new();
        let mut src_strides: SmallVec<[isize; 16]> = SmallVec::new();
        let mut dst_strides: SmallVec<[isize; 16]> = SmallVec::new();
        for (axis, (&d, &r)) in dims.iter().zip(&repeats).enumerate() {
            let o = out_strides[axis] as isize;
            split.extend([r as usize, d]);
            src_strides.extend([0, x.strides()[axis]]);
            dst_strides.extend([o * d as isize, o]);
        }
        let input = x.read_bytes("Tile")?;
        let mut output = out.write_bytes("Tile")?;
        copy_strided(
            StridedBytes {
                offset: x.storage_offset(),
                strides: &src_strides,
            },
            input.bytes(),
            StridedBytes {
                offset: out.storage_offset(),
                strides: &dst_strides,
            },
            output.bytes(),
            &split,
            x.dtype().size_in_bytes(),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(x: &Tensor, repeats: &[i64]) -> OpResult<Tensor> {
        let r = Tensor::from_slice(repeats, &[repeats.len()]).unwrap();
        let facts = [Fact::constant(x.clone()), Fact::constant(r.clone())];
        let out = Tile.infer(&[&facts[0], &facts[1]])?.remove(0);
        let o = Tensor::zeros(&out.concrete().unwrap(), x.dtype())?;
        Tile.run(&KernelIo {
            inputs: &[x, &r],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    #[test]
    fn tiles_each_axis() {
        let x = Tensor::from_slice(&[1u16, 2, 3, 4], &[2, 2]).unwrap();
        let y = run(&x, &[2, 1]).unwrap();
        assert_eq!(y.dims(), &[4, 2]);
        assert_eq!(y.to_vec::<u16>().unwrap(), vec![1, 2, 3, 4, 1, 2, 3, 4]);
        let y = run(&x, &[1, 3]).unwrap();
        assert_eq!(
            y.to_vec::<u16>().unwrap(),
            vec![1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4]
        );
        let y = run(&x, &[0, 2]).unwrap();
        assert_eq!(y.dims(), &[0, 4]);
        assert!(run(&x, &[2]).is_err());
        assert!(run(&x, &[-1, 1]).is_err());
    }
}
