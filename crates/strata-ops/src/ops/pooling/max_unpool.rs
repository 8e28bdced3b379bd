//! MaxUnpool (opsets 9, 11, 22): the partial inverse of MaxPool. Every value of `X` is written at
//! its index from `I` (flat over the whole `N × C × spatial` tensor MaxPool read, i.e. the shape
//! inferred from `kernel_shape`, `strides` and `pads`: `(in - 1) * stride - pads + kernel`); the
//! rest of the output is zero. With the optional `output_shape` input the output takes that shape
//! and the inferred block sits at its origin, padded with zeros, as the ONNX reference does (and
//! its conformance data expects; onnxruntime instead reads the indices as flat into the larger
//! output). The output dims then depend on that input's values: known at plan time when it is a
//! constant, otherwise the node runs on the dynamic path. f16, bf16, f32, f64 values; int64
//! indices (an index outside the inferred tensor is an error).

use strata_core::{DType, Device};

use crate::support::axes::Axes;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_supported;
use crate::{int_values, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "MaxUnpool";

#[derive(Debug, Clone)]
pub struct MaxUnpool {
    kernel_shape: Vec<usize>,
    strides: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
}

impl MaxUnpool {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        let kernel_shape = a
            .usizes("kernel_shape")?
            .ok_or_else(|| OpError::attribute(OP, "kernel_shape", "is required"))?;
        if kernel_shape.is_empty() || kernel_shape.contains(&0) {
            return Err(OpError::attribute(
                OP,
                "kernel_shape",
                format!("needs one value >= 1 per spatial axis, got {kernel_shape:?}"),
            ));
        }
        let spatial = kernel_shape.len();
        let strides = a.usizes("strides")?;
        if let Some(s) = &strides {
            if s.len() != spatial || s.contains(&0) {
                return Err(OpError::attribute(
                    OP,
                    "strides",
                    format!("needs {spatial} values >= 1, got {s:?}"),
                ));
            }
        }
        let pads = a.usizes("pads")?;
        if let Some(p) = &pads {
            if p.len() != 2 * spatial {
                return Err(OpError::attribute(
                    OP,
                    "pads",
                    format!("needs {} values, got {p:?}", 2 * spatial),
                ));
            }
        }
        Ok(Box::new(MaxUnpool {
            kernel_shape,
            strides,
            pads,
        }))
    }

    /// The output dim of spatial axis `a` for input extent `input`, before `output_shape`.
    fn inferred_extent(&self, a: usize, input: usize) -> OpResult<usize> {
        if input == 0 {
            return Ok(0);
        }
        let spatial = self.kernel_shape.len();
        let stride = self.strides.as_ref().map_or(1, |s| s[a]);
        let (begin, end) = self
            .pads
            .as_ref()
            .map_or((0, 0), |p| (p[a], p[a + spatial]));
        // In i128: every term is model data.
        let extent = (input as i128 - 1) * stride as i128 + self.kernel_shape[a] as i128
            - begin as i128
            - end as i128;
        usize::try_from(extent)
            .ok()
            .filter(|&e| e > 0)
            .ok_or_else(|| {
                OpError::shape(
                    OP,
                    format!(
                        "spatial axis {a}: input extent {input} unpools to {extent}, not a size"
                    ),
                )
            })
    }

    fn check_rank(&self, rank: usize) -> OpResult<()> {
        let spatial = self.kernel_shape.len();
        if rank == spatial + 2 {
            return Ok(());
        }
        Err(OpError::shape(
            OP,
            format!(
                "X has rank {rank} but kernel_shape {:?} needs rank {}",
                self.kernel_shape,
                spatial + 2
            ),
        ))
    }

    /// The dims MaxPool read (what the indices are flat into), where `x` is known.
    fn inferred_dims(&self, x: &[Dim]) -> OpResult<Vec<Dim>> {
        self.check_rank(x.len())?;
        let mut dims = x[..2].to_vec();
        for (a, d) in x[2..].iter().enumerate() {
            dims.push(match d.known() {
                Some(v) => Dim::Known(self.inferred_extent(a, v)?),
                None => Dim::Unknown,
            });
        }
        Ok(dims)
    }

    /// [`Self::inferred_dims`] for concrete dims, inline (the kernel must not allocate).
    fn inferred_concrete(&self, x: &[usize]) -> OpResult<Axes> {
        self.check_rank(x.len())?;
        let mut dims: Axes = x[..2].iter().copied().collect();
        for (a, &d) in x[2..].iter().enumerate() {
            dims.push(self.inferred_extent(a, d)?);
        }
        Ok(dims)
    }
}

/// The requested output dims, checked against the inferred ones: same rank, no smaller anywhere.
fn requested_dims(values: &[i64], inferred: &[Dim]) -> OpResult<Vec<usize>> {
    if values.len() != inferred.len() {
        return Err(OpError::shape(
            OP,
            format!(
                "output_shape {values:?} must have {} entries (the rank of X)",
                inferred.len()
            ),
        ));
    }
    values
        .iter()
        .zip(inferred)
        .map(|(&v, inf)| {
            let v = usize::try_from(v)
                .map_err(|_| OpError::shape(OP, format!("output_shape {values:?} is negative")))?;
            match inf.known() {
                Some(i) if v < i => Err(OpError::shape(
                    OP,
                    format!(
                        "output_shape {values:?} is smaller than the unpooled dims {inferred:?}"
                    ),
                )),
                _ => Ok(v),
            }
        })
        .collect()
}

impl Operator for MaxUnpool {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let indices = required(OP, inputs, 1)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a floating-point type".into(),
                actual: x.dtype,
            });
        }
        if indices.dtype != DType::I64 {
            return Err(OpError::DType {
                op: OP.into(),
                index: 1,
                expected: DType::I64.to_string(),
                actual: indices.dtype,
            });
        }
        let inferred = self.inferred_dims(&x.dims)?;
        let mismatch = indices.rank() != x.rank()
            || x.dims
                .iter()
                .zip(&indices.dims)
                .any(|(a, b)| matches!((a.known(), b.known()), (Some(a), Some(b)) if a != b));
        if mismatch {
            return Err(OpError::shape(
                OP,
                format!(
                    "indices dims {:?} must equal X dims {:?}",
                    indices.dims, x.dims
                ),
            ));
        }
        let dims = match optional(inputs, 2) {
            None => inferred,
            Some(shape) => {
                if shape.dtype != DType::I64 || shape.rank() != 1 {
                    return Err(OpError::shape(
                        OP,
                        format!("output_shape must be a 1-d int64 tensor, got {:?}", shape),
                    ));
                }
                match &shape.value {
                    Some(v) => requested_dims(&int_values(OP, v)?, &inferred)?
                        .into_iter()
                        .map(Dim::Known)
                        .collect(),
                    // Known only when the node runs.
                    None => vec![Dim::Unknown; x.rank()],
                }
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
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_supported(
            OP,
            dtype,
            device,
            matches!(dtype.size_in_bytes(), 2 | 4 | 8),
        )?;
        Ok(Box::new(MaxUnpoolKernel { op: self.clone() }))
    }
}

#[derive(Debug)]
struct MaxUnpoolKernel {
    op: MaxUnpool,
}

impl Kernel for MaxUnpoolKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, indices, out) = (io.input(0), io.input(1), io.output(0));
        if indices.dims() != x.dims() {
            return Err(OpError::shape(
                OP,
                format!(
                    "indices dims {:?} must equal X dims {:?}",
                    indices.dims(),
                    x.dims()
                ),
            ));
        }
        let inferred = self.op.inferred_concrete(x.dims())?;
        let out_dims = out.dims();
        if out_dims.len() != inferred.len() || out_dims.iter().zip(&inferred).any(|(o, i)| o < i) {
            return Err(OpError::kernel(
                OP,
                format!("output bound with dims {out_dims:?}, unpooled dims are {inferred:?}"),
            ));
        }
        let ri = indices.read::<i64>()?;
        let idx = ri
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "indices are not contiguous"))?;
        // Values are moved, never computed on: scatter them as raw bits of their width.
        match x.dtype().size_in_bytes() {
            2 => scatter::<u16>(x, idx, &inferred, out),
            4 => scatter::<u32>(x, idx, &inferred, out),
            8 => scatter::<u64>(x, idx, &inferred, out),
            _ => Err(OpError::no_kernel(OP, x.dtype(), Device::Cpu)),
        }
    }
}

/// Zeroes `out`, then writes `x[e]` at the output position of flat index `idx[e]` of the
/// `inferred` tensor (later duplicates win, as in the reference).
fn scatter<T: bytemuck::Pod + Default>(
    x: &strata_core::Tensor,
    idx: &[i64],
    inferred: &[usize],
    out: &strata_core::Tensor,
) -> OpResult<()> {
    let rx = x.read_raw::<T>(OP)?;
    let mut wo = out.write_raw::<T>(OP)?;
    let out_dims = out.dims();
    let not_contiguous = || OpError::kernel(OP, "operands must be contiguous");
    let xs = rx.as_slice().ok_or_else(not_contiguous)?;
    let ys = wo.as_mut_slice().ok_or_else(not_contiguous)?;
    ys.fill(T::default());
    let inferred_len: usize = inferred.iter().product();
    let same_shape = out_dims == inferred;
    for (e, (&value, &i)) in xs.iter().zip(idx).enumerate() {
        let flat = usize::try_from(i)
            .ok()
            .filter(|&f| f < inferred_len)
            .ok_or_else(|| {
                OpError::shape(
                    OP,
                    format!("index {i} (element {e}) is outside the unpooled tensor {inferred:?}"),
                )
            })?;
        let target = if same_shape {
            flat
        } else {
            // Unravel over the inferred dims and ravel over the (larger) output dims.
            let (mut rest, mut target, mut stride) = (flat, 0, 1);
            for (&inf, &o) in inferred.iter().zip(out_dims).rev() {
                target += rest % inf * stride;
                rest /= inf;
                stride *= o;
            }
            target
        };
        ys[target] = value;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::{assert_close, run_checked};
    use crate::{Attr, Attributes};
    use strata_core::{f16, Tensor};

    fn pool_2x2() -> Vec<(&'static str, Attr)> {
        vec![
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("strides", Attr::Ints(vec![2, 2])),
        ]
    }

    fn unpool(
        attrs: &[(&str, Attr)],
        x: (&[usize], &[f32]),
        indices: &[i64],
        output_shape: Option<&[i64]>,
    ) -> OpResult<(Vec<usize>, Vec<f32>)> {
        let mut inputs = vec![
            Tensor::from_slice(x.1, x.0)?,
            Tensor::from_slice(indices, x.0)?,
        ];
        if let Some(s) = output_shape {
            inputs.push(Tensor::from_slice(s, &[s.len()])?);
        }
        let out = run_checked(OP, 22, attrs, &inputs, true)?;
        Ok((out.dims().to_vec(), out.to_vec::<f32>()?))
    }

    #[test]
    fn scatters_into_the_inferred_shape() {
        // The ONNX example: 2x2 pooled from 4x4 with kernel 2, stride 2.
        let (dims, out) = unpool(
            &pool_2x2(),
            (&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]),
            &[5, 7, 13, 15],
            None,
        )
        .unwrap();
        assert_eq!(dims, [1, 1, 4, 4]);
        #[rustfmt::skip]
        let expected = [
            0.0, 0.0, 0.0, 0.0,
            0.0, 1.0, 0.0, 2.0,
            0.0, 0.0, 0.0, 0.0,
            0.0, 3.0, 0.0, 4.0,
        ];
        assert_close(&out, &expected, "output");
    }

    #[test]
    fn output_shape_pads_the_inferred_block_with_zeros() {
        let (dims, out) = unpool(
            &pool_2x2(),
            (&[1, 1, 2, 2], &[5.0, 6.0, 7.0, 8.0]),
            &[5, 7, 13, 15],
            Some(&[1, 1, 5, 5]),
        )
        .unwrap();
        assert_eq!(dims, [1, 1, 5, 5]);
        #[rustfmt::skip]
        let expected = [
            0.0, 0.0, 0.0, 0.0, 0.0,
            0.0, 5.0, 0.0, 6.0, 0.0,
            0.0, 0.0, 0.0, 0.0, 0.0,
            0.0, 7.0, 0.0, 8.0, 0.0,
            0.0, 0.0, 0.0, 0.0, 0.0,
        ];
        assert_close(&out, &expected, "output");
        // Indices are flat over batch and channels too: channel 1 of a 1-d [1, 2, 2] tensor.
        let attrs = [("kernel_shape", Attr::Ints(vec![1]))];
        let (dims, out) =
            unpool(&attrs, (&[1, 2, 1], &[9.0, 4.0]), &[1, 0], Some(&[1, 3, 2])).unwrap();
        assert_eq!(dims, [1, 3, 2]);
        assert_close(&out, &[4.0, 0.0, 9.0, 0.0, 0.0, 0.0], "output");
    }

    #[test]
    fn pads_shrink_the_output_and_f16_moves_bits() {
        // 1-d: (2 - 1) * 2 + 3 - 1 - 1 = 3.
        let attrs = [
            ("kernel_shape", Attr::Ints(vec![3])),
            ("strides", Attr::Ints(vec![2])),
            ("pads", Attr::Ints(vec![1, 1])),
        ];
        let x: Vec<f16> = [-1.5f32, 2.25].iter().map(|&v| f16::from_f32(v)).collect();
        let inputs = [
            Tensor::from_slice(&x, &[1, 1, 2]).unwrap(),
            Tensor::from_slice(&[2i64, 0], &[1, 1, 2]).unwrap(),
        ];
        let out = run_checked(OP, 11, &attrs, &inputs, false).unwrap();
        assert_eq!(out.dims(), [1, 1, 3]);
        let expected: Vec<f16> = [2.25f32, 0.0, -1.5]
            .iter()
            .map(|&v| f16::from_f32(v))
            .collect();
        assert_eq!(out.to_vec::<f16>().unwrap(), expected);
    }

    #[test]
    fn a_runtime_output_shape_leaves_dims_to_the_dynamic_path() {
        let a = Attributes::new(OP).with("kernel_shape", Attr::Ints(vec![2, 2]));
        let op = MaxUnpool::build(&OpContext {
            op_type: OP,
            domain: "",
            opset: 22,
            attrs: &a,
            num_inputs: 3,
            num_outputs: 1,
        })
        .unwrap();
        let facts = [
            Fact::known(DType::F32, &[1, 1, 2, 2]),
            Fact::known(DType::I64, &[1, 1, 2, 2]),
            Fact::known(DType::I64, &[4]),
        ];
        let refs: Vec<&Fact> = facts.iter().collect();
        let out = op.infer(&refs).unwrap().remove(0);
        assert_eq!(out.dims, vec![Dim::Unknown; 4]);
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let x = (&[1, 1, 2, 2][..], &[1.0f32, 2.0, 3.0, 4.0][..]);
        let err = unpool(&pool_2x2(), x, &[5, 7, 13, 16], None).unwrap_err();
        assert!(err.to_string().contains("index 16 (element 3)"), "{err}");
        let err = unpool(&pool_2x2(), x, &[-1, 7, 13, 15], None).unwrap_err();
        assert!(err.to_string().contains("index -1"), "{err}");
        let err = unpool(&pool_2x2(), x, &[5, 7, 13, 15], Some(&[1, 1, 3, 5])).unwrap_err();
        assert!(err.to_string().contains("smaller than"), "{err}");
        let err = unpool(&pool_2x2(), x, &[5, 7, 13, 15], Some(&[1, 1, 4])).unwrap_err();
        assert!(err.to_string().contains("4 entries"), "{err}");
        // Pads that leave nothing.
        let attrs = [
            ("kernel_shape", Attr::Ints(vec![2, 2])),
            ("pads", Attr::Ints(vec![2, 2, 2, 2])),
        ];
        let err = unpool(&attrs, x, &[0, 0, 0, 0], None).unwrap_err();
        assert!(err.to_string().contains("not a size"), "{err}");
        // Rank and attribute errors.
        let attrs = [("kernel_shape", Attr::Ints(vec![2]))];
        let err = unpool(&attrs, x, &[0, 0, 0, 0], None).unwrap_err();
        assert!(err.to_string().contains("needs rank 3"), "{err}");
        for attrs in [
            vec![("strides", Attr::Ints(vec![2, 2]))],
            vec![("kernel_shape", Attr::Ints(vec![2, 0]))],
            vec![
                ("kernel_shape", Attr::Ints(vec![2, 2])),
                ("pads", Attr::Ints(vec![0, 0])),
            ],
        ] {
            let err = unpool(&attrs, x, &[0, 0, 0, 0], None).unwrap_err();
            assert!(matches!(err, OpError::Attribute { .. }), "{err}");
        }
        // Indices must be int64.
        let inputs = [
            Tensor::from_slice(x.1, x.0).unwrap(),
            Tensor::from_slice(&[0i32; 4], x.0).unwrap(),
        ];
        let err = run_checked(OP, 22, &pool_2x2(), &inputs, false).unwrap_err();
        assert!(matches!(err, OpError::DType { index: 1, .. }), "{err}");
    }
}
