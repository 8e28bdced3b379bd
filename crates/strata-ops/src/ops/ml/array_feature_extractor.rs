//! ArrayFeatureExtractor (ai.onnx.ml opset 1): selects columns of the last axis of X by the
//! (flattened) int64 indices Y. The output is `[X.dims[..-1], len(Y)]`, and `[1, len(Y)]` for a
//! 1-D X (as onnxruntime and the ONNX reference do). Negative indices count from the end, as in
//! the reference's numpy indexing; out-of-range ones are errors. Elements move as raw words, so
//! every fixed-size dtype shares one kernel.

use strata_core::{DType, Device, Tensor};

use crate::ops::indexing::gather_elements::{resolve_index, with_indices, Indices};
use crate::support::axes::check_int_input;
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "ArrayFeatureExtractor";

#[derive(Debug, Clone, Copy)]
pub struct ArrayFeatureExtractor;

impl ArrayFeatureExtractor {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(ArrayFeatureExtractor))
    }
}

/// Data whose elements can be moved as raw words of 1, 2, 4 or 8 bytes.
fn check_data_dtype(dtype: DType) -> OpResult<()> {
    let movable = !dtype.is_quantized() && matches!(dtype.size_in_bytes(), 1 | 2 | 4 | 8);
    if movable {
        Ok(())
    } else {
        Err(OpError::DType {
            op: OP.into(),
            index: 0,
            expected: "a fixed-size numeric or bool type".into(),
            actual: dtype,
        })
    }
}

impl Operator for ArrayFeatureExtractor {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let y = required(OP, inputs, 1)?;
        check_data_dtype(x.dtype)?;
        check_int_input(OP, inputs, 1)?;
        let selected = y.numel().map_or(Dim::Unknown, Dim::Known);
        let dims = match x.dims.as_slice() {
            [] => {
                return Err(OpError::shape(
                    OP,
                    "X must have at least one dimension, got a scalar",
                ))
            }
            [_] => vec![Dim::Known(1), selected],
            [outer @ .., _] => {
                let mut dims = outer.to_vec();
                dims.push(selected);
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
        let x = required(OP, inputs, 0)?;
        check_data_dtype(x.dtype)?;
        cpu_plain(OP, x.dtype, device)?;
        Ok(Box::new(*self))
    }
}

/// Copies the selected columns of every row of `x` (rows of `n`) into `y` (rows of `k`).
fn extract<T: bytemuck::Pod>(x: &Tensor, y: &Tensor, idx: Indices<'_>, k: usize) -> OpResult<()> {
    let r = x.read_raw::<T>(OP)?;
    let src = r
        .as_slice()
        .ok_or_else(|| OpError::kernel(OP, "X is not contiguous"))?;
    let mut w = y.write_raw::<T>(OP)?;
    let dst = w
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
    let n = x.dims().last().copied().unwrap_or(1);
    let last_axis = x.rank().saturating_sub(1);
    if k == 0 {
        return Ok(());
    }
    if n == 0 {
        // Rows of nothing have no column to select.
        if dst.is_empty() {
            return Ok(());
        }
        return Err(OpError::kernel(OP, "cannot select from an empty last axis"));
    }
    for (row, out_row) in src.chunks_exact(n).zip(dst.chunks_exact_mut(k)) {
        for (j, o) in out_row.iter_mut().enumerate() {
            *o = row[resolve_index(OP, idx.get(j), n, last_axis)?];
        }
    }
    Ok(())
}

impl Kernel for ArrayFeatureExtractor {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, indices, y) = (io.input(0), io.input(1), io.output(0));
        let k = indices.numel();
        let rows_match = match x.dims() {
            [] => false,
            [_] => y.dims() == [1, k],
            [outer @ .., _] => y.dims().split_last() == Some((&k, outer)),
        };
        if !rows_match || x.dtype() != y.dtype() {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output {} {:?} does not fit X {} {:?} and {k} indices",
                    y.dtype(),
                    y.dims(),
                    x.dtype(),
                    x.dims()
                ),
            ));
        }
        with_indices(OP, indices, |idx| match x.dtype().size_in_bytes() {
            1 => extract::<u8>(x, y, idx, k),
            2 => extract::<u16>(x, y, idx, k),
            4 => extract::<u32>(x, y, idx, k),
            8 => extract::<u64>(x, y, idx, k),
            _ => check_data_dtype(x.dtype()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(x: &Tensor, idx: &Tensor) -> OpResult<Tensor> {
        let op = ArrayFeatureExtractor;
        let facts = [Fact::constant(x.clone()), Fact::constant(idx.clone())];
        let fy = op.infer(&[&facts[0], &facts[1]])?.remove(0);
        let y = Tensor::zeros(&fy.concrete().unwrap(), fy.dtype)?;
        op.kernel(&[&facts[0], &facts[1]], &[&fy], Device::Cpu)?
            .run(&KernelIo {
                inputs: &[x, idx],
                outputs: &[&y],
                scratch: None,
                in_place: None,
                threads: 1,
            })?;
        Ok(y)
    }

    #[test]
    fn selects_last_axis_columns_per_row() {
        let x = Tensor::from_slice(&[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]).unwrap();
        let idx = Tensor::from_slice(&[2i64, 0, -1], &[3]).unwrap();
        let y = run(&x, &idx).unwrap();
        assert_eq!(y.dims(), &[2, 3]);
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![2.0, 0.0, 2.0, 5.0, 3.0, 5.0]
        );
        // A 1-D X gives one row; 2-D indices are flattened.
        let x = Tensor::from_slice(&[10i64, 11, 12], &[3]).unwrap();
        let idx = Tensor::from_slice(&[1i64, 1, 0, 2], &[2, 2]).unwrap();
        let y = run(&x, &idx).unwrap();
        assert_eq!(y.dims(), &[1, 4]);
        assert_eq!(y.to_vec::<i64>().unwrap(), vec![11, 11, 10, 12]);
        // Leading dims are kept.
        let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6, 7, 8], &[2, 2, 2]).unwrap();
        let idx = Tensor::from_slice(&[1i64], &[1]).unwrap();
        let y = run(&x, &idx).unwrap();
        assert_eq!(y.dims(), &[2, 2, 1]);
        assert_eq!(y.to_vec::<i32>().unwrap(), vec![2, 4, 6, 8]);
    }

    #[test]
    fn out_of_range_indices_and_scalars_are_errors() {
        let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 2]).unwrap();
        let idx = Tensor::from_slice(&[2i64], &[1]).unwrap();
        assert!(run(&x, &idx).unwrap_err().to_string().contains("index 2"));
        let idx = Tensor::from_slice(&[-3i64], &[1]).unwrap();
        assert!(run(&x, &idx).is_err());
        let s = Tensor::from_slice(&[1.0f32], &[]).unwrap();
        let idx = Tensor::from_slice(&[0i64], &[1]).unwrap();
        assert!(run(&s, &idx).unwrap_err().to_string().contains("scalar"));
        let fidx = Tensor::from_slice(&[0.0f32], &[1]).unwrap();
        assert!(matches!(run(&x, &fidx).unwrap_err(), OpError::DType { .. }));
    }
}
