//! Trilu: keeps the upper (`j - i >= k`) or lower (`j - i <= k`) triangle of the last two axes
//! and zeroes the rest. Each row is one kept run (`memcpy`) and zero fill, for any dtype.

use strata_core::Device;

use crate::support::axes::{check_int_input, read_optional_ints};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("Trilu", Trilu::build)];

#[derive(Debug, Clone, Copy)]
pub struct Trilu {
    upper: bool,
}

impl Trilu {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Trilu {
            upper: ctx.attrs.int_or("upper", 1)? != 0,
        }))
    }
}

impl Operator for Trilu {
    fn op_type(&self) -> &str {
        "Trilu"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("Trilu", inputs, 0)?;
        check_int_input("Trilu", inputs, 1)?;
        if x.rank() < 2 {
            return Err(OpError::shape(
                "Trilu",
                format!("input must have rank 2 or more, got {:?}", x.dims),
            ));
        }
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("Trilu", required("Trilu", inputs, 0)?.dtype, device)?;
        Ok(Box::new(*self))
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

/// The kept column range of row `i` in a row of `cols`.
fn kept(upper: bool, i: usize, k: i64, cols: usize) -> (usize, usize) {
    let edge = i as i64 + k;
    if upper {
        (edge.clamp(0, cols as i64) as usize, cols)
    } else {
        (0, (edge + 1).clamp(0, cols as i64) as usize)
    }
}

impl Kernel for Trilu {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let k = match read_optional_ints("Trilu", io.inputs, 1)? {
            Some(k) => match k.as_slice() {
                &[k] => k,
                other => {
                    return Err(OpError::kernel(
                        "Trilu",
                        format!("k must hold one value, got {other:?}"),
                    ))
                }
            },
            None => 0,
        };
        let dims = out.dims();
        if dims != x.dims() || dims.len() < 2 || !out.is_contiguous() {
            return Err(OpError::kernel(
                "Trilu",
                format!("output {dims:?} does not match input {:?}", x.dims()),
            ));
        }
        let (rows, cols) = (dims[dims.len() - 2], dims[dims.len() - 1]);
        let elem = x.dtype().size_in_bytes();
        let row_bytes = cols * elem;
        let mut w = out.write_bytes("Trilu")?;
        let dst = &mut w.bytes()[out.storage_offset() * elem..][..out.numel() * elem];
        let in_place = io.in_place == Some(0);
        if !in_place && !x.is_contiguous() {
            return Err(OpError::kernel("Trilu", "input is not contiguous"));
        }
        let r = if in_place {
            None
        } else {
            Some(x.read_bytes("Trilu")?)
        };
        let src = r.as_ref().map(|r| &r.bytes()[x.storage_offset() * elem..]);
        for (n, row) in dst.chunks_exact_mut(row_bytes.max(1)).enumerate() {
            if row_bytes == 0 {
                break;
            }
            let (lo, hi) = kept(self.upper, n % rows.max(1), k, cols);
            let (lo, hi) = (lo * elem, hi.max(lo) * elem);
            if let Some(src) = src {
                row[lo..hi].copy_from_slice(&src[n * row_bytes + lo..n * row_bytes + hi]);
            }
            row[..lo].fill(0);
            row[hi..].fill(0);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(upper: bool, x: &Tensor, k: Option<i64>) -> Vec<i32> {
        let kt = k.map_or_else(Tensor::undefined, |k| Tensor::scalar(k).unwrap());
        let o = Tensor::zeros(x.dims(), x.dtype()).unwrap();
        Trilu { upper }
            .run(&KernelIo {
                inputs: &[x, &kt],
                outputs: &[&o],
                scratch: None,
                in_place: None,
                threads: 1,
            })
            .unwrap();
        o.to_vec::<i32>().unwrap()
    }

    #[test]
    fn triangles_with_offsets() {
        let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
        assert_eq!(run(true, &x, None), vec![1, 2, 3, 0, 5, 6]);
        assert_eq!(run(true, &x, Some(1)), vec![0, 2, 3, 0, 0, 6]);
        assert_eq!(run(true, &x, Some(-5)), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(run(false, &x, None), vec![1, 0, 0, 4, 5, 0]);
        assert_eq!(run(false, &x, Some(-1)), vec![0, 0, 0, 4, 0, 0]);
        assert_eq!(run(false, &x, Some(7)), vec![1, 2, 3, 4, 5, 6]);
        let b = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6, 7, 8], &[2, 2, 2]).unwrap();
        assert_eq!(run(true, &b, None), vec![1, 2, 0, 4, 5, 6, 0, 8]);
    }
}
