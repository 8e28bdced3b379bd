//! Cast and CastLike between every plain dtype (floats, integers, bool). Floats to integers
//! truncate toward zero and saturate at the integer's range (NaN gives 0), as Rust's `as` does;
//! f32/f64 to f16/bf16 round to nearest even; anything to bool is `x != 0` (NaN is true).
//! Types strata cannot hold (string, float8, int4, ...) are unsupported.

use num_traits::AsPrimitive;
use strata_core::{DType, Device, Element};

use super::unary::{map_kernel, one_input};
use crate::{
    dispatch_arith, dispatch_plain, Attr, Fact, Kernel, OpContext, OpError, OpResult, Operator,
};

/// The ONNX `TensorProto.DataType` name of a code, for messages.
pub(crate) fn onnx_type_name(code: i64) -> &'static str {
    match code {
        1 => "FLOAT",
        2 => "UINT8",
        3 => "INT8",
        4 => "UINT16",
        5 => "INT16",
        6 => "INT32",
        7 => "INT64",
        8 => "STRING",
        9 => "BOOL",
        10 => "FLOAT16",
        11 => "DOUBLE",
        12 => "UINT32",
        13 => "UINT64",
        14 => "COMPLEX64",
        15 => "COMPLEX128",
        16 => "BFLOAT16",
        17 => "FLOAT8E4M3FN",
        18 => "FLOAT8E4M3FNUZ",
        19 => "FLOAT8E5M2",
        20 => "FLOAT8E5M2FNUZ",
        21 => "UINT4",
        22 => "INT4",
        23 => "FLOAT4E2M1",
        24 => "FLOAT8E8M0",
        25 => "UINT2",
        26 => "INT2",
        _ => "an unknown type",
    }
}

/// The strata dtype of an ONNX data type code, if it has one.
pub fn dtype_from_onnx_code(code: i64) -> Option<DType> {
    Some(match code {
        1 => DType::F32,
        2 => DType::U8,
        3 => DType::I8,
        4 => DType::U16,
        5 => DType::I16,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        _ => return None,
    })
}

#[derive(Debug)]
pub struct Cast {
    /// The target dtype; `None` for CastLike, which takes it from input 1.
    to: Option<DType>,
}

impl Cast {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let code = match ctx.attrs.get("to") {
            Some(Attr::Int(code)) => *code,
            // Cast-1 names the type as a string.
            Some(Attr::String(name)) => (1..=26)
                .find(|&c| onnx_type_name(c).eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    OpError::attribute("Cast", "to", format!("unknown type {name:?}"))
                })?,
            Some(other) => {
                return Err(OpError::attribute(
                    "Cast",
                    "to",
                    format!("expected a type code, got {other:?}"),
                ))
            }
            None => return Err(OpError::attribute("Cast", "to", "is required")),
        };
        let to = dtype_from_onnx_code(code).ok_or_else(|| OpError::Unsupported {
            op_type: format!("Cast to {}", onnx_type_name(code)),
            domain: ctx.domain.to_string(),
            opset: ctx.opset,
        })?;
        Ok(Box::new(Cast { to: Some(to) }))
    }

    pub fn build_like(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Cast { to: None }))
    }

    fn name(&self) -> &'static str {
        if self.to.is_some() {
            "Cast"
        } else {
            "CastLike"
        }
    }

    /// Input 0 and the target dtype.
    fn source_and_target<'a>(&self, inputs: &[&'a Fact]) -> OpResult<(&'a Fact, DType)> {
        match self.to {
            Some(to) => Ok((one_input("Cast", inputs)?, to)),
            None => {
                let [x, like] = super::elementwise::two_inputs("CastLike", inputs)?;
                Ok((x, like.dtype))
            }
        }
    }
}

impl Operator for Cast {
    fn op_type(&self) -> &str {
        self.name()
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let (x, to) = self.source_and_target(inputs)?;
        Ok(vec![Fact::new(to, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let (x, to) = self.source_and_target(inputs)?;
        let kernel = if device == Device::Cpu {
            cast_kernel(self.name(), x.dtype, to)
        } else {
            None
        };
        kernel.ok_or_else(|| OpError::NoKernel {
            op: self.name().into(),
            dtype: if to.is_quantized() { to } else { x.dtype },
            device,
        })
    }
}

/// The kernel converting `from` to `to`, one closure per pair.
fn cast_kernel(name: &'static str, from: DType, to: DType) -> Option<Box<dyn Kernel>> {
    dispatch_plain!(from, S => {
        if to == DType::Bool {
            return Some(to_bool::<S>(name));
        }
        // Bool sources are u8 bytes of 0 or 1, so they convert like u8.
        dispatch_arith!(to, D => Some(convert::<S, D>(name)), _ => None)
    }, _ => None)
}

fn convert<S, D>(name: &'static str) -> Box<dyn Kernel>
where
    S: Element + AsPrimitive<D>,
    D: Element,
{
    map_kernel(name, |x: S| x.as_())
}

fn to_bool<S: Element>(name: &'static str) -> Box<dyn Kernel> {
    let zero = S::zeroed();
    // Float -0.0 == 0.0 and NaN != 0.0, as IEEE comparison gives.
    map_kernel(name, move |x: S| (x != zero) as u8)
}

/// The table of this family's conversion operators.
pub const OPS: &[(&str, crate::Constructor)] =
    &[("Cast", Cast::build), ("CastLike", Cast::build_like)];

#[cfg(test)]
mod tests {
    use crate::ops::elementwise_test_util::run_op;
    use crate::{Attr, OpError};
    use strata_core::{bf16, f16, DType, Tensor};

    fn cast(x: Tensor, to: i64) -> Tensor {
        run_op("Cast", 21, &[("to", Attr::Int(to))], &[x])
            .unwrap()
            .remove(0)
    }

    #[test]
    fn float_to_int_truncates_and_saturates() {
        let x = Tensor::from_slice(&[-2.7f32, 2.7, 1e10, f32::NAN], &[4]).unwrap();
        assert_eq!(
            cast(x.clone(), 6).to_vec::<i32>().unwrap(),
            [-2, 2, i32::MAX, 0]
        );
        assert_eq!(cast(x.clone(), 2).to_vec::<u8>().unwrap(), [0, 2, 255, 0]);
        assert_eq!(cast(x, 9).to_bools().unwrap(), [true, true, true, true]);
    }

    #[test]
    fn between_float_widths_and_bool() {
        let x = Tensor::from_slice(&[1.0f64 / 3.0, -0.0, 65520.0], &[3]).unwrap();
        let h = cast(x.clone(), 10).to_vec::<f16>().unwrap();
        assert_eq!(h[0], f16::from_f64(1.0 / 3.0));
        assert!(h[2].is_infinite());
        let b = cast(x.clone(), 16).to_vec::<bf16>().unwrap();
        assert_eq!(b[0], bf16::from_f64(1.0 / 3.0));
        assert_eq!(cast(x, 9).to_bools().unwrap(), [true, false, true]);
        let flags = Tensor::from_bools(&[true, false], &[2]).unwrap();
        assert_eq!(cast(flags.clone(), 1).to_vec::<f32>().unwrap(), [1.0, 0.0]);
        assert_eq!(cast(flags, 7).to_vec::<i64>().unwrap(), [1, 0]);
        let big = Tensor::from_slice(&[u64::MAX], &[1]).unwrap();
        assert_eq!(cast(big, 7).to_vec::<i64>().unwrap(), [-1]);
    }

    #[test]
    fn cast_like_and_legacy_string_form() {
        let x = Tensor::from_slice(&[1.5f32], &[1]).unwrap();
        let like = Tensor::from_slice(&[0i64], &[1]).unwrap();
        let y = run_op("CastLike", 19, &[], &[x.clone(), like]).unwrap();
        assert_eq!(y[0].dtype(), DType::I64);
        let y = run_op(
            "Cast",
            1,
            &[("to", Attr::String("DOUBLE".into()))],
            std::slice::from_ref(&x),
        )
        .unwrap();
        assert_eq!(y[0].to_vec::<f64>().unwrap(), [1.5]);
        let err = run_op("Cast", 21, &[("to", Attr::Int(17))], &[x]).unwrap_err();
        assert!(matches!(err, OpError::Unsupported { .. }), "{err}");
    }
}
