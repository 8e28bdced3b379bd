//! GatherND with `batch_dims`: each index tuple (the last axis of `indices`) picks a slice of
//! `data` after the batch dims; slices are contiguous and copied with one `memcpy` each.

use strata_core::Device;

use crate::ops::indexing::gather_elements::{resolve_index, with_indices};
use crate::support::axes::{check_int_input, contiguous_strides};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Constructor, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

pub const OPS: &[(&str, Constructor)] = &[("GatherND", GatherNd::build)];

#[derive(Debug, Clone, Copy)]
pub struct GatherNd {
    batch_dims: usize,
}

impl GatherNd {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let b = ctx.attrs.int_or("batch_dims", 0)?;
        Ok(Box::new(GatherNd {
            batch_dims: usize::try_from(b).map_err(|_| {
                OpError::attribute("GatherND", "batch_dims", format!("{b} is negative"))
            })?,
        }))
    }

    /// Checks ranks; returns the index tuple length.
    fn tuple_len(&self, data_rank: usize, indices: &[Dim]) -> OpResult<Option<usize>> {
        let b = self.batch_dims;
        let q = indices.len();
        if q < 1 || b >= q || b >= data_rank {
            return Err(OpError::attribute(
                "GatherND",
                "batch_dims",
                format!("{b} does not fit data rank {data_rank} and indices rank {q}"),
            ));
        }
        let last = indices[q - 1].known();
        if let Some(m) = last {
            if b + m > data_rank {
                return Err(OpError::shape(
                    "GatherND",
                    format!("index tuples of {m} with {b} batch dims exceed data rank {data_rank}"),
                ));
            }
        }
        Ok(last)
    }
}

impl Operator for GatherNd {
    fn op_type(&self) -> &str {
        "GatherND"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let data = required("GatherND", inputs, 0)?;
        let indices = required("GatherND", inputs, 1)?;
        check_int_input("GatherND", inputs, 1)?;
        let m = self.tuple_len(data.rank(), &indices.dims)?.ok_or_else(|| {
            OpError::shape(
                "GatherND",
                "the index tuple length (last indices dim) is unknown",
            )
        })?;
        let q = indices.rank();
        let mut dims = indices.dims[..q - 1].to_vec();
        dims.extend(data.dims[self.batch_dims + m..].iter().cloned());
        Ok(vec![Fact::new(data.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("GatherND", required("GatherND", inputs, 0)?.dtype, device)?;
        Ok(Box::new(*self))
    }
}

impl Kernel for GatherNd {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (data, indices, out) = (io.input(0), io.input(1), io.output(0));
        let (dd, id) = (data.dims(), indices.dims());
        let b = self.batch_dims;
        let q = id.len();
        if q == 0 || b >= q || b >= dd.len() || b + id[q - 1] > dd.len() || id[..b] != dd[..b] {
            return Err(OpError::kernel(
                "GatherND",
                format!("indices {id:?} do not fit data {dd:?} with {b} batch dims"),
            ));
        }
        let m = id[q - 1];
        let elem = data.dtype().size_in_bytes();
        let slice: usize = dd[b + m..].iter().product::<usize>() * elem;
        let batches: usize = dd[..b].iter().product();
        let per_batch: usize = id[b..q - 1].iter().product();
        let batch_bytes: usize = dd[b..].iter().product::<usize>() * elem;
        let expected = batches * per_batch * slice / elem.max(1);
        if out.numel() != expected || !data.is_contiguous() || !out.is_contiguous() {
            return Err(OpError::kernel(
                "GatherND",
                format!(
                    "output {:?} (expected {expected} elements) or data is not contiguous",
                    out.dims()
                ),
            ));
        }
        let strides = contiguous_strides(dd);
        let src = data.read_bytes("GatherND")?;
        let src = &src.bytes()[data.storage_offset() * elem..];
        let mut dst = out.write_bytes("GatherND")?;
        let dst = &mut dst.bytes()[out.storage_offset() * elem..];
        with_indices("GatherND", indices, |idx| {
            for t in 0..batches * per_batch {
                let mut at = (t / per_batch.max(1)) * batch_bytes;
                for k in 0..m {
                    let axis = b + k;
                    let i = resolve_index("GatherND", idx.get(t * m + k), dd[axis], axis)?;
                    at += i * strides[axis] * elem;
                }
                dst[t * slice..(t + 1) * slice].copy_from_slice(&src[at..at + slice]);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::Tensor;

    fn run(batch_dims: usize, data: &Tensor, idx: &Tensor) -> OpResult<Tensor> {
        let op = GatherNd { batch_dims };
        let facts = [Fact::constant(data.clone()), Fact::constant(idx.clone())];
        let f = op.infer(&[&facts[0], &facts[1]])?.remove(0);
        let o = Tensor::zeros(&f.concrete().unwrap(), data.dtype())?;
        op.run(&KernelIo {
            inputs: &[data, idx],
            outputs: &[&o],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(o)
    }

    #[test]
    fn elements_slices_and_batches() {
        let data = Tensor::from_slice(&[0i32, 1, 2, 3], &[2, 2]).unwrap();
        let idx = Tensor::from_slice(&[0i64, 0, 1, 1], &[2, 2]).unwrap();
        assert_eq!(
            run(0, &data, &idx).unwrap().to_vec::<i32>().unwrap(),
            vec![0, 3]
        );
        let idx = Tensor::from_slice(&[1i64, 0], &[2, 1]).unwrap();
        let y = run(0, &data, &idx).unwrap();
        assert_eq!(y.dims(), &[2, 2]);
        assert_eq!(y.to_vec::<i32>().unwrap(), vec![2, 3, 0, 1]);
        let data = Tensor::from_slice(&[0i32, 1, 2, 3, 4, 5, 6, 7], &[2, 2, 2]).unwrap();
        let idx = Tensor::from_slice(&[1i64, -2], &[2, 1]).unwrap();
        let y = run(1, &data, &idx).unwrap();
        assert_eq!(y.to_vec::<i32>().unwrap(), vec![2, 3, 4, 5]);
        let bad = Tensor::from_slice(&[2i64, 0], &[2, 1]).unwrap();
        let err = run(1, &data, &bad).unwrap_err();
        assert!(err.to_string().contains("index 2"), "{err}");
    }
}
