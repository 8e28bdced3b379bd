//! DequantizeLinear (opsets 10–25): `y = (x - zero_point) * scale`, per tensor, per axis
//! (opset 13+) or blocked (`block_size`, opset 21+). `x` is any quantized integer type
//! (8/16/32-bit, int4/uint4/int2/uint2), a float8 format or float4 E2M1; float8/float4 inputs
//! take no zero point (a given one is ignored, as the ONNX reference does). The output has the
//! scale's type, or `output_dtype` (opset 23+).

use num_traits::AsPrimitive;
use strata_core::{DType, Device, Element};

use crate::ops::cast::cast::{dtype_from_onnx_code, onnx_type_name};
use crate::ops::quantization::params::ParamIndex;
use crate::ops::quantization::values::{scratch, take_f64, whole_inputs_scratch_bytes};
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::support::scratch::scratch_as;
use crate::{dispatch_float, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "DequantizeLinear";

#[derive(Debug, Clone, Copy)]
pub struct DequantizeLinear {
    axis: i64,
    block_size: i64,
    output_dtype: Option<DType>,
}

impl DequantizeLinear {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let output_dtype = match ctx.attrs.int("output_dtype")? {
            None | Some(0) => None,
            Some(code) => match dtype_from_onnx_code(code) {
                Some(dtype) if dtype.is_float() => Some(dtype),
                _ => {
                    return Err(OpError::attribute(
                        OP,
                        "output_dtype",
                        format!("must be a float type, got {}", onnx_type_name(code)),
                    ))
                }
            },
        };
        Ok(Box::new(DequantizeLinear {
            axis: ctx.attrs.int_or("axis", 1)?,
            block_size: ctx.attrs.int_or("block_size", 0)?,
            output_dtype,
        }))
    }
}

/// Whether `dtype` is a type DequantizeLinear reads.
fn is_quantized_input(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::U8 | DType::I8 | DType::U16 | DType::I16 | DType::I32
    ) || dtype.is_sub_byte_int()
        || (dtype.is_low_precision_float() && dtype != DType::F8E8M0)
}

impl Operator for DequantizeLinear {
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
        if !is_quantized_input(x.dtype) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a quantized type (8/16/32/4/2-bit integer, float8, float4)".into(),
                actual: x.dtype,
            });
        }
        if !scale.dtype.is_float() {
            return Err(OpError::DType {
                op: OP.into(),
                index: 1,
                expected: "a float scale".into(),
                actual: scale.dtype,
            });
        }
        if let Some(zp) = optional(inputs, 2) {
            if zp.dtype != x.dtype {
                return Err(OpError::DType {
                    op: OP.into(),
                    index: 2,
                    expected: format!("{} like the input", x.dtype),
                    actual: zp.dtype,
                });
            }
        }
        if let (Some(x_dims), Some(s_dims)) = (x.concrete(), scale.concrete()) {
            ParamIndex::new(OP, "scale", &x_dims, &s_dims, self.axis, self.block_size)?;
        }
        let dtype = self.output_dtype.unwrap_or(scale.dtype);
        Ok(vec![Fact::new(dtype, x.dims.clone())])
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
        let x = required(OP, inputs, 0)?;
        cpu_only(OP, x.dtype, device)?;
        Ok(Box::new(*self))
    }
}

impl Kernel for DequantizeLinear {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, scale, zero_point, out) = (io.input(0), io.input(1), io.input(2), io.output(0));
        if self.block_size == 0 && super::per_tensor::dequantize(x, scale, zero_point, out)? {
            return Ok(());
        }
        let mut guard = scratch(OP, io)?;
        let mut work: &mut [f64] = scratch_as(OP, guard.bytes())?;
        let scale_at = ParamIndex::new(
            OP,
            "scale",
            x.dims(),
            scale.dims(),
            self.axis,
            self.block_size,
        )?;
        // Float8/float4 values carry no zero point.
        let zero_points = if zero_point.is_defined() && !x.dtype().is_low_precision_float() {
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
        let value = |i: usize| {
            let p = scale_at.index(i);
            let zp = zero_points.as_ref().map_or(0.0, |(at, z)| z[at.index(i)]);
            // (x - zp) is exact; the product of two f32 values is exact in f64 and rounds once.
            ((xs[i] - zp) * scales[p]) as f32
        };
        dispatch_float!(out.dtype(), D => write_floats::<D>(out, xs.len(), value), _ => Err(
            OpError::kernel(OP, format!("cannot write {} output", out.dtype()))
        ))
    }
}

fn write_floats<D>(
    out: &strata_core::Tensor,
    len: usize,
    value: impl Fn(usize) -> f32,
) -> OpResult<()>
where
    D: Element,
    f32: AsPrimitive<D>,
{
    let mut write = out.write::<D>()?;
    let data = write
        .as_mut_slice()
        .ok_or_else(|| OpError::kernel(OP, "output is not contiguous"))?;
    if data.len() != len {
        return Err(OpError::kernel(
            OP,
            format!("output holds {} elements, input {len}", data.len()),
        ));
    }
    for (i, slot) in data.iter_mut().enumerate() {
        *slot = value(i).as_();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_op;
    use crate::{Attr, OpError};
    use strata_core::{f16, DType, Tensor};

    #[test]
    fn per_tensor_and_per_axis() {
        let x = Tensor::from_slice(&[0u8, 3, 128, 255], &[4]).unwrap();
        let scale = Tensor::from_slice(&[2.0f32], &[]).unwrap();
        let zp = Tensor::from_slice(&[128u8], &[]).unwrap();
        let y = run_op("DequantizeLinear", 13, &[], &[x, scale, zp]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), [-256.0, -250.0, 0.0, 254.0]);
        let x = Tensor::from_slice(&[1i8, 2, 3, 4], &[2, 2]).unwrap();
        let scale = Tensor::from_slice(&[1.0f32, 0.5], &[2]).unwrap();
        let zp = Tensor::from_slice(&[0i8, 2], &[2]).unwrap();
        let y = run_op("DequantizeLinear", 13, &[], &[x, scale, zp]).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), [1.0, 0.0, 3.0, 1.0]);
    }

    #[test]
    fn float8_input_and_output_dtype() {
        // E4M3FN 1.0 and -1.0.
        let e4m3 = Tensor::zeros(&[2], DType::F8E4M3FN).unwrap();
        {
            let mut w = e4m3.write::<u8>().unwrap();
            w.as_mut_slice().unwrap().copy_from_slice(&[0x38, 0xB8]);
        }
        let scale = Tensor::from_slice(&[3.0f32], &[]).unwrap();
        let y = run_op(
            "DequantizeLinear",
            23,
            &[("output_dtype", Attr::Int(10))],
            &[e4m3, scale],
        )
        .unwrap();
        assert_eq!(
            y[0].to_vec::<f16>().unwrap(),
            [f16::from_f32(3.0), f16::from_f32(-3.0)]
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        let scale = Tensor::from_slice(&[1.0f32], &[]).unwrap();
        let err = run_op("DequantizeLinear", 13, &[], &[x, scale.clone()]).unwrap_err();
        assert!(matches!(err, OpError::DType { index: 0, .. }), "{err}");
        let x = Tensor::from_slice(&[1u8], &[1]).unwrap();
        let zp = Tensor::from_slice(&[1i8], &[]).unwrap();
        let err = run_op("DequantizeLinear", 13, &[], &[x.clone(), scale, zp]).unwrap_err();
        assert!(matches!(err, OpError::DType { index: 2, .. }), "{err}");
        let scale = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let err = run_op(
            "DequantizeLinear",
            13,
            &[("axis", Attr::Int(0))],
            &[x, scale],
        )
        .unwrap_err();
        assert!(matches!(err, OpError::Shape { .. }), "{err}");
    }
}
