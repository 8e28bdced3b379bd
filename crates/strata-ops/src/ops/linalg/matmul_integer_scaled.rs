//! ScaledMatMulInteger (strata-internal, made by the optimizer): the dynamic-quantization
//! tail `MatMulInteger → Cast(float) → Mul(scale) [→ Add(bias)]` as one product whose
//! write-back converts each int32 sum to f32, multiplies it by the scale (one, or one per
//! column) and adds the bias (one per column): the same f32 operations in the same order as the
//! three nodes, so the results are theirs bit for bit, without the int32 and two float
//! intermediates. Inputs: A, B, a_zero_point, b_zero_point (as MatMulInteger), scale (f32, one
//! value or one per column), bias (optional, f32, one per column). B is packed at plan time when
//! it is a constant.

use std::sync::Arc;

use strata_core::{DType, Device, Tensor};

use crate::kernels::igemm::{Epilogue, PackedB, Requant};
use crate::ops::linalg::integer_matmul_kernel::{b_dims, int_matmul, matmul_mkn};
use crate::ops::linalg::matmul::matmul_dims;
use crate::ops::linalg::matmul_integer::int_matmul_scratch_bytes;
use crate::ops::quantization::int_params::{prepack_matrix, zero_points_into};
use crate::ops::quantization::integer_operands::check_operand;
use crate::ops::quantization::values::scratch;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::scratch_as;
use crate::{Fact, Kernel, KernelCapabilities, KernelIo, OpError, OpResult, Operator};

const OP: &str = "ScaledMatMulInteger";

#[derive(Debug, Clone, Default)]
pub struct ScaledMatMulInteger {
    packed: Option<Arc<PackedB>>,
}

impl ScaledMatMulInteger {
    pub fn new() -> Self {
        ScaledMatMulInteger::default()
    }
}

/// A float operand that must hold one value or `n` (`None` when `n` is unknown yet).
fn check_per_column(what: &str, t: &Fact, n: Option<usize>, allow_one: bool) -> OpResult<()> {
    if t.dtype != DType::F32 {
        return Err(OpError::shape(
            OP,
            format!("{what} must be float, got {}", t.dtype),
        ));
    }
    let ok = match (t.numel(), n) {
        (Some(1), _) => allow_one,
        (Some(len), Some(n)) => {
            len == n && t.rank() <= 1 || (t.rank() == 2 && t.dims[0].known() == Some(1) && len == n)
        }
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(OpError::shape(
            OP,
            format!(
                "{what} must hold {} one per column ({n:?}), got dims {:?}",
                if allow_one { "one value or" } else { "" },
                t.dims
            ),
        ))
    }
}

impl Operator for ScaledMatMulInteger {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let a = required(OP, inputs, 0)?;
        let b = required(OP, inputs, 1)?;
        check_operand(OP, a, 0, optional(inputs, 2), 2)?;
        check_operand(OP, b, 1, optional(inputs, 3), 3)?;
        let n = b.dims.last().and_then(|d| d.known());
        check_per_column("scale", required(OP, inputs, 4)?, n, true)?;
        if let Some(bias) = optional(inputs, 5) {
            check_per_column("bias", bias, n, false)?;
        }
        Ok(vec![Fact::new(DType::F32, matmul_dims(&a.dims, &b.dims)?)])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        int_matmul_scratch_bytes(OP, required(OP, inputs, 0)?, required(OP, inputs, 1)?)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, required(OP, inputs, 0)?.dtype, device)?;
        Ok(Box::new(ScaledMatMulInteger {
            packed: prepack_matrix(OP, required(OP, inputs, 1)?)?,
        }))
    }
}

/// A contiguous f32 input with one value or `n`.
fn per_column<'t>(
    what: &str,
    t: &'t Tensor,
    n: usize,
    allow_one: bool,
) -> OpResult<strata_core::ReadGuard<'t, f32>> {
    let len = t.numel();
    if t.dtype() != DType::F32 || !(len == n || (allow_one && len == 1)) {
        return Err(OpError::shape(
            OP,
            format!(
                "{what} must be float with one value per column ({n}), got {} {:?}",
                t.dtype(),
                t.dims()
            ),
        ));
    }
    Ok(t.read::<f32>()?)
}

impl Kernel for ScaledMatMulInteger {
    /// A constant B is packed at plan time and never read again: the plan may let it go.
    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            packed_inputs: if self.packed.is_some() { &[1] } else { &[] },
            ..KernelCapabilities::default()
        }
    }

    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a, b) = (io.input(0), io.input(1));
        let (m, _, n) = matmul_mkn(a.dims(), &b_dims(OP, b, self.packed.as_deref())?);
        let scale = per_column("scale", io.input(4), n, true)?;
        let scale = scale
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "scale is not contiguous"))?;
        let bias_tensor = io.inputs.get(5).filter(|t| t.is_defined());
        let bias_read = bias_tensor
            .map(|t| per_column("bias", t, n, false))
            .transpose()?;
        let bias = match &bias_read {
            Some(read) => Some(
                read.as_slice()
                    .ok_or_else(|| OpError::kernel(OP, "bias is not contiguous"))?,
            ),
            None => None,
        };
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [i32] = scratch_as(OP, guard.bytes())?;
        let a_zero = zero_points_into(OP, "a_zero_point", io.input(2), m, &mut work)?;
        let b_zero = zero_points_into(OP, "b_zero_point", io.input(3), n, &mut work)?;
        let epilogue = Epilogue {
            bias_i32: None,
            scale: Some(Requant {
                col: scale,
                row: None,
            }),
            zero_point: 0,
            bias_f32: bias,
        };
        int_matmul(
            OP,
            a,
            a_zero,
            b,
            b_zero,
            self.packed.as_deref(),
            io.output(0),
            &epilogue,
            &mut work,
            io.threads,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::rng::Rng;

    fn run(op: &ScaledMatMulInteger, inputs: &[Tensor], constant_b: bool) -> Vec<f32> {
        let facts: Vec<Fact> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| match (t.is_defined(), i == 1 && constant_b) {
                (false, _) => Fact::absent(),
                (true, true) => Fact::constant(t.clone()),
                (true, false) => Fact::known(t.dtype(), t.dims()),
            })
            .collect();
        let refs: Vec<&Fact> = facts.iter().collect();
        let out = op.infer(&refs).unwrap().remove(0);
        let kernel = op.kernel(&refs, &[&out], Device::Cpu).unwrap();
        let bytes = op.scratch_bytes(&refs, &[&out]).unwrap();
        let scratch = (bytes > 0).then(|| {
            Tensor::empty(
                &[bytes],
                DType::U8,
                Device::Cpu,
                strata_core::MemoryKind::Workspace,
            )
            .unwrap()
        });
        let y = Tensor::zeros(&out.concrete().unwrap(), DType::F32).unwrap();
        let input_refs: Vec<&Tensor> = inputs.iter().collect();
        kernel
            .run(&KernelIo {
                inputs: &input_refs,
                outputs: &[&y],
                scratch: scratch.as_ref(),
                in_place: None,
                threads: 2,
            })
            .unwrap();
        y.to_vec::<f32>().unwrap()
    }

    #[test]
    fn equals_matmul_integer_then_cast_scale_and_bias() {
        let mut rng = Rng::new(3);
        let (m, k, n) = (37, 45, 70);
        let a: Vec<u8> = (0..m * k).map(|_| rng.below(256) as u8).collect();
        let b: Vec<i8> = (0..k * n)
            .map(|_| (rng.below(256) as i32 - 128) as i8)
            .collect();
        let (az, bz) = (131u8, -3i8);
        let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.37 - 9.0).collect();
        let col_scale: Vec<f32> = (0..n).map(|j| 0.001 + j as f32 * 1e-5).collect();
        for (scale, with_bias, constant_b) in [
            (vec![0.0123f32], true, true),
            (col_scale.clone(), false, false),
        ] {
            let inputs = [
                Tensor::from_slice(&a, &[1, m, k]).unwrap(),
                Tensor::from_slice(&b, &[k, n]).unwrap(),
                Tensor::from_slice(&[az], &[]).unwrap(),
                Tensor::from_slice(&[bz], &[]).unwrap(),
                Tensor::from_slice(&scale, &[scale.len()]).unwrap(),
                if with_bias {
                    Tensor::from_slice(&bias, &[n]).unwrap()
                } else {
                    Tensor::undefined()
                },
            ];
            let got = run(&ScaledMatMulInteger::new(), &inputs, constant_b);
            for i in 0..m {
                for j in 0..n {
                    let acc: i32 = (0..k)
                        .map(|p| {
                            (i32::from(a[i * k + p]) - i32::from(az))
                                * (i32::from(b[p * n + j]) - i32::from(bz))
                        })
                        .sum();
                    let s = if scale.len() == 1 { scale[0] } else { scale[j] };
                    let mut want = acc as f32 * s;
                    if with_bias {
                        want += bias[j];
                    }
                    assert_eq!(got[i * n + j].to_bits(), want.to_bits(), "({i}, {j})");
                }
            }
        }
    }

    #[test]
    fn a_scale_of_the_wrong_length_is_refused() {
        let a = Fact::known(DType::U8, &[2, 3]);
        let b = Fact::known(DType::I8, &[3, 4]);
        let scale = Fact::known(DType::F32, &[3]);
        let op = ScaledMatMulInteger::new();
        assert!(op
            .infer(&[&a, &b, &Fact::absent(), &Fact::absent(), &scale])
            .is_err());
        let scale = Fact::known(DType::F32, &[4]);
        assert!(op
            .infer(&[&a, &b, &Fact::absent(), &Fact::absent(), &scale])
            .is_ok());
    }
}
