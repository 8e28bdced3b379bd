//! QuantizeLinear (opsets 10–25): `y = saturate(round(x / scale) + zero_point)`, per tensor,
//! per axis (opset 13+) or blocked (`block_size`, opset 21+). The output type is the zero
//! point's, else `output_dtype` (opset 21+), else uint8: any of uint8/int8/uint16/int16,
//! uint4/int4/uint2/int2, the float8 formats (with `saturate`, opset 19+) and float4 E2M1.
//! Integers round half to even; `precision` (opset 23+) rounds the quotient to f16/bf16.

use strata_core::{DType, Device};

use crate::ops::cast::cast::{dtype_from_onnx_code, onnx_type_name};
use crate::ops::quantization::params::ParamIndex;
use crate::ops::quantization::values::{
    scratch, take_f64, whole_inputs_scratch_bytes, write_quantized, QuantTarget,
};
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::scratch_as;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QuantizeLinear";

#[derive(Debug, Clone, Copy)]
pub struct QuantizeLinear {
    axis: i64,
    saturate: bool,
    block_size: i64,
    output_dtype: Option<DType>,
    /// The float type the quotient is rounded to (`precision`), when not f32.
    precision: Option<DType>,
}

impl QuantizeLinear {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let saturate = match ctx.attrs.int_or("saturate", 1)? {
            0 => false,
            1 => true,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "saturate",
                    format!("must be 0 or 1, got {other}"),
                ))
            }
        };
        let code_attr = |name: &str| -> OpResult<Option<DType>> {
            match ctx.attrs.int(name)? {
                None | Some(0) => Ok(None),
                Some(code) => dtype_from_onnx_code(code).map(Some).ok_or_else(|| {
                    OpError::attribute(
                        OP,
                        name,
                        format!("unsupported type {}", onnx_type_name(code)),
                    )
                }),
            }
        };
        let output_dtype = code_attr("output_dtype")?;
        if let Some(dtype) = output_dtype {
            if QuantTarget::of(dtype).is_none() {
                return Err(OpError::attribute(
                    OP,
                    "output_dtype",
                    format!("{dtype} is not a quantized type"),
                ));
            }
        }
        let precision = match code_attr("precision")? {
            None | Some(DType::F32) => None,
            Some(dtype @ (DType::F16 | DType::BF16)) => Some(dtype),
            Some(other) => {
                return Err(OpError::attribute(
                    OP,
                    "precision",
                    format!("must be a float type, got {other}"),
                ))
            }
        };
        Ok(Box::new(QuantizeLinear {
            axis: ctx.attrs.int_or("axis", 1)?,
            saturate,
            block_size: ctx.attrs.int_or("block_size", 0)?,
            output_dtype,
            precision,
        }))
    }

    fn output_dtype(&self, inputs: &[&Fact]) -> OpResult<DType> {
        let zero_point = optional(inputs, 2).map(|zp| zp.dtype);
        let dtype = match (zero_point, self.output_dtype) {
            (Some(zp), Some(attr)) if zp != attr => {
                return Err(OpError::attribute(
                    OP,
                    "output_dtype",
                    format!("{attr} disagrees with the zero point's type {zp}"),
                ))
            }
            (Some(zp), _) => zp,
            (None, attr) => attr.unwrap_or(DType::U8),
        };
        if QuantTarget::of(dtype).is_none() {
            return Err(OpError::DType {
                op: OP.into(),
                index: 2,
                expected: "a quantized type (8/16/4/2-bit integer, float8, float4)".into(),
                actual: dtype,
            });
        }
        Ok(dtype)
    }
}

impl Operator for QuantizeLinear {
    fn capabilities(&self) -> crate::OpCapabilities<'_> {
        crate::OpCapabilities {
            linear_quantization: Some(crate::LinearQuantization {
                axis: self.axis,
                block_size: self.block_size,
            }),
            ..crate::OpCapabilities::default()
        }
    }

    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let scale = required(OP, inputs, 1)?;
        if !scale.dtype.is_float() {
            return Err(OpError::DType {
                op: OP.into(),
                index: 1,
                expected: "a float scale".into(),
                actual: scale.dtype,
            });
        }
        if !(x.dtype.is_float() || x.dtype == DType::I32) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "float, float16, bfloat16 or int32".into(),
                actual: x.dtype,
            });
        }
        if let (Some(x_dims), Some(s_dims)) = (x.concrete(), scale.concrete()) {
            ParamIndex::new(OP, "scale", &x_dims, &s_dims, self.axis, self.block_size)?;
        }
        Ok(vec![Fact::new(self.output_dtype(inputs)?, x.dims.clone())])
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        // x, scale and zero point, each read whole as f64.
        whole_inputs_scratch_bytes(OP, inputs, &[0, 1, 2])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = self.output_dtype(inputs)?;
        cpu_only(OP, dtype, device)?;
        Ok(Box::new(*self))
    }
}

impl Kernel for QuantizeLinear {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, scale, zero_point, out) = (io.input(0), io.input(1), io.input(2), io.output(0));
        if self.precision.is_none()
            && self.block_size == 0
            && super::per_tensor::quantize(x, scale, zero_point, out)?
        {
            return Ok(());
        }
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [f64] = scratch_as(OP, guard.bytes())?;
        let target = QuantTarget::of(out.dtype()).ok_or_else(|| {
            OpError::kernel(OP, format!("{} is not a quantized type", out.dtype()))
        })?;
        let scale_at = ParamIndex::new(
            OP,
            "scale",
            x.dims(),
            scale.dims(),
            self.axis,
            self.block_size,
        )?;
        let zero_at = if zero_point.is_defined() {
            // A per-tensor zero point may be [] or [1] whatever the scale's form.
            let at = ParamIndex::new(
                OP,
                "zero point",
                x.dims(),
                zero_point.dims(),
                self.axis,
                self.block_size,
            )?;
            Some((at, &*take_f64(OP, zero_point, &mut work)?))
        } else {
            None
        };
        let xs = &*take_f64(OP, x, &mut work)?;
        let scales = &*take_f64(OP, scale, &mut work)?;
        // The quotient is rounded to the type numpy would compute it in.
        let round_to = self.precision.or_else(|| {
            (x.dtype() == scale.dtype() && matches!(x.dtype(), DType::F16 | DType::BF16))
                .then_some(x.dtype())
        });
        let saturate = self.saturate;
        let values = xs.iter().enumerate().map(|(i, &v)| {
            let p = scale_at.index(i);
            let mut scaled = (v as f32) / (scales[p] as f32);
            scaled = match round_to {
                Some(DType::F16) => strata_core::f16::from_f32(scaled).to_f32(),
                Some(DType::BF16) => strata_core::bf16::from_f32(scaled).to_f32(),
                _ => scaled,
            };
            let zp = zero_at.as_ref().map_or(0.0, |(at, z)| z[at.index(i)]);
            target.quantize(f64::from(scaled), zp, saturate)
        });
        write_quantized(OP, out, values)
    }
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_op;
    use crate::{Attr, OpError};
    use strata_core::{DType, Tensor};

    #[test]
    fn per_tensor_uint8_rounds_half_to_even() {
        let x = Tensor::from_slice(&[0.0f32, 2.0, 3.0, 1000.0, -254.0, -1000.0], &[6]).unwrap();
        let scale = Tensor::from_slice(&[2.0f32], &[]).unwrap();
        let zp = Tensor::from_slice(&[128u8], &[]).unwrap();
        let y = run_op("QuantizeLinear", 13, &[], &[x, scale, zp]).unwrap();
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [128, 129, 130, 255, 1, 0]);
    }

    #[test]
    fn per_axis_and_blocked_int4() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
        let scale = Tensor::from_slice(&[1.0f32, 0.5], &[2]).unwrap();
        let y = run_op(
            "QuantizeLinear",
            13,
            &[("axis", Attr::Int(0))],
            &[x.clone(), scale],
        )
        .unwrap();
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [1, 2, 6, 8]);
        let scale = Tensor::from_slice(&[1.0f32, 0.5], &[1, 2]).unwrap();
        let attrs = [
            ("axis", Attr::Int(0)),
            ("block_size", Attr::Int(2)),
            ("output_dtype", Attr::Int(22)),
        ];
        let y = run_op("QuantizeLinear", 21, &attrs, &[x, scale]).unwrap();
        assert_eq!(y[0].dtype(), DType::I4);
        assert_eq!(y[0].to_vec::<i8>().unwrap(), [1, 4, 3, 7]);
    }

    #[test]
    fn float8_output_with_saturation() {
        let x = Tensor::from_slice(&[1.0f32, 1e6], &[2]).unwrap();
        let scale = Tensor::from_slice(&[1.0f32], &[]).unwrap();
        let zp = Tensor::zeros(&[], DType::F8E4M3FN).unwrap();
        let y = run_op(
            "QuantizeLinear",
            19,
            &[],
            &[x.clone(), scale.clone(), zp.clone()],
        )
        .unwrap();
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [0x38, 0x7E]);
        let y = run_op(
            "QuantizeLinear",
            19,
            &[("saturate", Attr::Int(0))],
            &[x, scale, zp],
        )
        .unwrap();
        assert_eq!(y[0].to_vec::<u8>().unwrap(), [0x38, 0x7F]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let scale = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let err = run_op(
            "QuantizeLinear",
            13,
            &[("axis", Attr::Int(0))],
            &[x.clone(), scale],
        )
        .unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{err}");
        let scale = Tensor::from_slice(&[1.0f32], &[]).unwrap();
        let zp = Tensor::from_slice(&[0i32], &[]).unwrap();
        let err = run_op("QuantizeLinear", 13, &[], &[x.clone(), scale.clone(), zp]).unwrap_err();
        assert!(matches!(err, OpError::DType { .. }), "{err}");
        let zp = Tensor::from_slice(&[0u8], &[]).unwrap();
        let err = run_op(
            "QuantizeLinear",
            21,
            &[("output_dtype", Attr::Int(3))],
            &[x.clone(), scale, zp],
        )
        .unwrap_err();
        assert!(matches!(err, OpError::Attribute { .. }), "{err}");
        let err = run_op("QuantizeLinear", 13, &[], &[x]).unwrap_err();
        assert!(matches!(err, OpError::MissingInput { .. }), "{err}");
    }
}
