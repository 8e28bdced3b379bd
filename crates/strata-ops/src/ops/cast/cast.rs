//! Cast and CastLike between every dtype strata holds: plain floats, integers and bool, the
//! float8 formats (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), float4 E2M1 and int4/uint4/int2/uint2.
//!
//! - Floats to integers truncate toward zero and saturate at the integer's range (NaN gives 0),
//!   as Rust's `as` does; to int4/uint4/int2/uint2 the integer then wraps to the low bits, as the
//!   ONNX reference (ml_dtypes) does.
//! - To f16/bf16 and the float8/float4 formats: round to nearest even. `saturate` (opset 19+,
//!   default 1) clamps out-of-range values of the float8 targets to their largest value instead
//!   of infinity/NaN; E2M1 always saturates. E8M0 follows `round_mode` (opset 24+, default "up").
//! - Low-precision sources convert through their exact f32 value.
//! - Anything to bool is `x != 0` (NaN is true).
//!
//! - To and from strings: see `text::cast`.
//!
//! Cast-1 names the target type as a string; later opsets use the data type code.

use num_traits::AsPrimitive;
use strata_core::{
    bf16, decode_e8m0, encode_e8m0, f16, DType, Device, E8m0Rounding, Element, MiniFloat,
};

use crate::ops::math::unary::map_kernel;
use crate::support::inputs::exact_inputs;
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
        8 => DType::String,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        12 => DType::U32,
        13 => DType::U64,
        16 => DType::BF16,
        17 => DType::F8E4M3FN,
        18 => DType::F8E4M3FNUZ,
        19 => DType::F8E5M2,
        20 => DType::F8E5M2FNUZ,
        21 => DType::U4,
        22 => DType::I4,
        23 => DType::F4E2M1,
        24 => DType::F8E8M0,
        25 => DType::U2,
        26 => DType::I2,
        _ => return None,
    })
}

/// The attributes that shape conversions to low-precision floats.
#[derive(Debug, Clone, Copy)]
struct Rounding {
    /// Clamp out-of-range float8 results to the largest finite value (`saturate`).
    saturate: bool,
    /// How values round to E8M0 (`round_mode`).
    e8m0: E8m0Rounding,
}

impl Rounding {
    fn from_attrs(op: &str, ctx: &OpContext) -> OpResult<Self> {
        let saturate = match ctx.attrs.int_or("saturate", 1)? {
            0 => false,
            1 => true,
            other => {
                return Err(OpError::attribute(
                    op,
                    "saturate",
                    format!("must be 0 or 1, got {other}"),
                ))
            }
        };
        let mode = ctx.attrs.string_or("round_mode", "up")?;
        let e8m0 = E8m0Rounding::parse(&mode).ok_or_else(|| {
            OpError::attribute(
                op,
                "round_mode",
                format!("must be \"up\", \"down\" or \"nearest\", got {mode:?}"),
            )
        })?;
        Ok(Rounding { saturate, e8m0 })
    }
}

#[derive(Debug)]
pub struct Cast {
    /// The target dtype; `None` for CastLike, which takes it from input 1.
    to: Option<DType>,
    rounding: Rounding,
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
        Ok(Box::new(Cast {
            to: Some(to),
            rounding: Rounding::from_attrs("Cast", ctx)?,
        }))
    }

    pub fn build_like(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Cast {
            to: None,
            rounding: Rounding::from_attrs("CastLike", ctx)?,
        }))
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
            Some(to) => Ok((exact_inputs::<1>("Cast", inputs)?[0], to)),
            None => {
                let [x, like] = exact_inputs("CastLike", inputs)?;
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
        let name = self.name();
        let kernel = if device != Device::Cpu {
            None
        } else if x.dtype.is_string() || to.is_string() {
            let rounding = self.rounding;
            crate::ops::text::text_cast_kernel(name, x.dtype, to, |from| {
                cast_kernel(name, from, to, rounding)
            })
        } else {
            cast_kernel(name, x.dtype, to, self.rounding)
        };
        kernel.ok_or_else(|| {
            OpError::no_kernel(
                self.name(),
                if to.is_quantized() { to } else { x.dtype },
                device,
            )
        })
    }
}

/// The kernel converting `from` to `to`: a reader turning each stored source element into a
/// value (itself, or a decoded low-precision float), composed with the target's writer.
fn cast_kernel(
    name: &'static str,
    from: DType,
    to: DType,
    rounding: Rounding,
) -> Option<Box<dyn Kernel>> {
    if let Some(format) = MiniFloat::of(from) {
        return to_target(name, to, rounding, move |code: u8| format.decode(code));
    }
    match from {
        DType::F8E8M0 => to_target(name, to, rounding, decode_e8m0),
        // Sub-byte integers are held one per byte (sign-extended when signed).
        DType::I4 | DType::I2 => to_target(name, to, rounding, |x: i8| x),
        DType::U4 | DType::U2 => to_target(name, to, rounding, |x: u8| x),
        // Bool sources are u8 bytes of 0 or 1, so they convert like u8.
        _ => dispatch_plain!(from, S => to_target(name, to, rounding, |x: S| x), _ => None),
    }
}

/// A value a source element is read as, convertible to every target by `as`-style casts.
trait CastValue:
    Copy
    + Send
    + Sync
    + 'static
    + AsPrimitive<f32>
    + AsPrimitive<f64>
    + AsPrimitive<f16>
    + AsPrimitive<bf16>
    + AsPrimitive<i8>
    + AsPrimitive<i16>
    + AsPrimitive<i32>
    + AsPrimitive<i64>
    + AsPrimitive<u8>
    + AsPrimitive<u16>
    + AsPrimitive<u32>
    + AsPrimitive<u64>
{
}

impl<T> CastValue for T where
    T: Copy
        + Send
        + Sync
        + 'static
        + AsPrimitive<f32>
        + AsPrimitive<f64>
        + AsPrimitive<f16>
        + AsPrimitive<bf16>
        + AsPrimitive<i8>
        + AsPrimitive<i16>
        + AsPrimitive<i32>
        + AsPrimitive<i64>
        + AsPrimitive<u8>
        + AsPrimitive<u16>
        + AsPrimitive<u32>
        + AsPrimitive<u64>
{
}

/// The kernel writing `to` from source elements `S`, each read as a value by `read`.
fn to_target<S, V>(
    name: &'static str,
    to: DType,
    rounding: Rounding,
    read: impl Fn(S) -> V + Copy + Send + Sync + 'static,
) -> Option<Box<dyn Kernel>>
where
    S: Element,
    V: CastValue,
{
    let Rounding { saturate, e8m0 } = rounding;
    if let Some(format) = MiniFloat::of(to) {
        return Some(map_kernel(name, move |x: S| {
            format.encode(read(x).as_(), saturate)
        }));
    }
    Some(match to {
        // Float -0.0 == 0.0 and NaN != 0.0, as IEEE comparison gives.
        DType::Bool => map_kernel(name, move |x: S| {
            let value: f64 = read(x).as_();
            u8::from(value != 0.0)
        }),
        DType::F8E8M0 => map_kernel(name, move |x: S| encode_e8m0(read(x).as_(), saturate, e8m0)),
        DType::I4 => map_kernel(name, move |x: S| wrap_signed(read(x).as_(), 4)),
        DType::I2 => map_kernel(name, move |x: S| wrap_signed(read(x).as_(), 2)),
        DType::U4 => map_kernel(name, move |x: S| wrap_unsigned(read(x).as_(), 4)),
        DType::U2 => map_kernel(name, move |x: S| wrap_unsigned(read(x).as_(), 2)),
        _ => {
            return dispatch_arith!(to, D => Some(map_kernel(name, move |x: S| -> D {
                read(x).as_()
            })), _ => None)
        }
    })
}

/// The low `bits` bits of `value` as a signed integer, sign-extended into an i8.
fn wrap_signed(value: i64, bits: u32) -> i8 {
    let shift = 8 - bits;
    ((value as i8) << shift) >> shift
}

/// The low `bits` bits of `value`.
fn wrap_unsigned(value: i64, bits: u32) -> u8 {
    (value as u8) & ((1u8 << bits) - 1)
}

/// The table of this family's conversion operators.
pub const OPS: &[(&str, crate::Constructor)] =
    &[("Cast", Cast::build), ("CastLike", Cast::build_like)];

#[cfg(test)]
mod tests {
    use crate::support::test_util::run_op;
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
        // COMPLEX64: a type strata cannot hold.
        let err = run_op("Cast", 21, &[("to", Attr::Int(14))], &[x]).unwrap_err();
        assert!(matches!(err, OpError::Unsupported { .. }), "{err}");
    }

    #[test]
    fn to_and_from_float8_with_and_without_saturation() {
        let x = Tensor::from_slice(&[0.478_925_47f32, 1e6, f32::NAN, -1e-7], &[4]).unwrap();
        let y = cast(x.clone(), 17);
        assert_eq!(y.dtype(), DType::F8E4M3FN);
        assert_eq!(y.to_vec::<u8>().unwrap(), [0x2F, 0x7E, 0x7F, 0x80]);
        let back = cast(y, 1).to_vec::<f32>().unwrap();
        assert_eq!(&back[..2], [0.46875, 448.0]);
        assert!(back[2].is_nan());
        let unsaturated = run_op(
            "Cast",
            19,
            &[("to", Attr::Int(19)), ("saturate", Attr::Int(0))],
            &[x],
        )
        .unwrap();
        // E5M2: 0.4789 rounds up to 0.5; 1e6 overflows to infinity without saturation.
        assert_eq!(
            unsaturated[0].to_vec::<u8>().unwrap(),
            [0x38, 0x7C, 0x7E, 0x80]
        );
        let halves = Tensor::from_slice(&[f16::from_f32(3.0)], &[1]).unwrap();
        assert_eq!(cast(halves, 23).to_vec::<u8>().unwrap(), [5]);
    }

    #[test]
    fn sub_byte_integers_wrap_and_widen() {
        let x = Tensor::from_slice(&[-9.0f32, 7.9, 15.0, -3.0], &[4]).unwrap();
        let i4 = cast(x.clone(), 22);
        assert_eq!(i4.dtype(), DType::I4);
        assert_eq!(i4.to_vec::<i8>().unwrap(), [7, 7, -1, -3]);
        assert_eq!(cast(x.clone(), 25).to_vec::<u8>().unwrap(), [3, 3, 3, 1]);
        assert_eq!(cast(i4, 7).to_vec::<i64>().unwrap(), [7, 7, -1, -3]);
        let e8m0 = cast(Tensor::from_slice(&[1.1f32, 0.25], &[2]).unwrap(), 24);
        assert_eq!(e8m0.to_vec::<u8>().unwrap(), [128, 125]);
        assert_eq!(cast(e8m0, 1).to_vec::<f32>().unwrap(), [2.0, 0.25]);
    }

    #[test]
    fn bad_rounding_attributes_are_errors() {
        let x = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        for attrs in [
            vec![("to", Attr::Int(17)), ("saturate", Attr::Int(2))],
            vec![
                ("to", Attr::Int(24)),
                ("round_mode", Attr::String("odd".into())),
            ],
        ] {
            let err = run_op("Cast", 24, &attrs, std::slice::from_ref(&x)).unwrap_err();
            assert!(matches!(err, OpError::Attribute { .. }), "{err}");
        }
    }
}
