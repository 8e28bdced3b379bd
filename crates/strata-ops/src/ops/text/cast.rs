//! Cast and CastLike to and from strings, as the ONNX spec describes them.
//!
//! - Text to numbers: plain ("3.14", "1000") and scientific ("1e-5", "1E8") literals, and "INF",
//!   "+INF", "-INF", "NaN" in any case; surrounding whitespace is ignored. Integer targets take
//!   integer literals exactly and truncate the others ("100.5" gives 100), then the usual
//!   conversion rules of Cast apply (saturation, rounding, `x != 0` for bool). A string that is
//!   not a number is an error naming it (the spec leaves it undefined).
//! - Numbers to text: the plain shortest representation that reads back to the same value in
//!   the source type ("0.1", "1", "0.0000001"), "INF" / "-INF" / "NaN" for the special
//!   values, and "True" / "False" for bool (as the ONNX reference).

use std::fmt;

use strata_core::{bf16, f16, DType, Device, Tensor};

use super::common::{text_input, TextOutputs};
use crate::{Kernel, KernelIo, OpError, OpResult};

/// The kernel for a cast with text on either side; `numeric_cast(from)` builds the ordinary cast
/// kernel from `from` to the target, which parsed text goes through.
pub fn text_cast_kernel(
    name: &'static str,
    from: DType,
    to: DType,
    numeric_cast: impl Fn(DType) -> Option<Box<dyn Kernel>>,
) -> Option<Box<dyn Kernel>> {
    match (from.is_string(), to.is_string()) {
        (true, true) => Some(format_kernel(name)),
        (true, false) => {
            let integer = to.is_signed_int() || to.is_unsigned_int() || to.is_sub_byte_int();
            let parsed = if integer { DType::I64 } else { DType::F64 };
            Some(Box::new(ParseText {
                name,
                integer,
                then: numeric_cast(parsed)?,
            }))
        }
        (false, true) => formattable(from).then(|| format_kernel(name)),
        (false, false) => None,
    }
}

/// Numbers (or text) to text, made when the node runs.
fn format_kernel(name: &'static str) -> Box<dyn Kernel> {
    TextOutputs::boxed(name, move |inputs| {
        let x = inputs
            .first()
            .copied()
            .ok_or_else(|| OpError::MissingInput {
                op: name.to_string(),
                index: 0,
            })?;
        let text = format_all(name, x)?;
        Ok(vec![Tensor::from_strings(x.dims(), text)?])
    })
}

fn formattable(dtype: DType) -> bool {
    dtype.is_float() || dtype.is_signed_int() || dtype.is_unsigned_int() || dtype == DType::Bool
}

/// Text to numbers: parse into i64 or f64, then the ordinary cast writes the output.
struct ParseText {
    name: &'static str,
    integer: bool,
    then: Box<dyn Kernel>,
}

impl fmt::Debug for ParseText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ParseText({}, integer: {})", self.name, self.integer)
    }
}

fn parse_float(op: &str, text: &str) -> OpResult<f64> {
    text.trim()
        .parse::<f64>()
        .map_err(|_| OpError::kernel(op, format!("cannot read {text:?} as a number")))
}

impl Kernel for ParseText {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let x = text_input(self.name, io.inputs, 0)?;
        let words = x.strings()?;
        let parsed = if self.integer {
            let values = words
                .iter()
                .map(|w| match w.trim().parse::<i64>() {
                    Ok(v) => Ok(v),
                    // Saturating truncation toward zero (NaN gives 0), like float-to-int casts.
                    Err(_) => parse_float(self.name, w).map(|f| f as i64),
                })
                .collect::<OpResult<Vec<i64>>>()?;
            Tensor::from_slice(&values, x.dims())?
        } else {
            let values = words
                .iter()
                .map(|w| parse_float(self.name, w))
                .collect::<OpResult<Vec<f64>>>()?;
            Tensor::from_slice(&values, x.dims())?
        };
        self.then.run(&KernelIo {
            inputs: &[&parsed],
            outputs: io.outputs,
            scratch: io.scratch,
            in_place: None,
            threads: io.threads,
        })
    }
}

/// Special values as the spec spells them; the rest in Rust's shortest round-trip form.
fn float_text<F: Into<f64> + fmt::Display + Copy>(x: F) -> String {
    let wide: f64 = x.into();
    if wide.is_nan() {
        "NaN".into()
    } else if wide.is_infinite() {
        if wide > 0.0 { "INF" } else { "-INF" }.into()
    } else {
        x.to_string()
    }
}

fn format_all(op: &str, x: &Tensor) -> OpResult<Vec<String>> {
    fn each<T: strata_core::Element>(x: &Tensor, f: impl Fn(T) -> String) -> OpResult<Vec<String>> {
        Ok(x.to_vec::<T>()?.into_iter().map(f).collect())
    }
    match x.dtype() {
        DType::String => Ok(x.strings()?.into_iter().map(String::from).collect()),
        DType::F32 => each(x, float_text::<f32>),
        DType::F64 => each(x, float_text::<f64>),
        DType::F16 => each(x, |v: f16| float_text(v.to_f32())),
        DType::BF16 => each(x, |v: bf16| float_text(v.to_f32())),
        DType::I8 => each(x, |v: i8| v.to_string()),
        DType::I16 => each(x, |v: i16| v.to_string()),
        DType::I32 => each(x, |v: i32| v.to_string()),
        DType::I64 => each(x, |v: i64| v.to_string()),
        DType::U8 => each(x, |v: u8| v.to_string()),
        DType::U16 => each(x, |v: u16| v.to_string()),
        DType::U32 => each(x, |v: u32| v.to_string()),
        DType::U64 => each(x, |v: u64| v.to_string()),
        DType::Bool => Ok(x
            .to_bools()?
            .into_iter()
            .map(|b| if b { "True" } else { "False" }.to_string())
            .collect()),
        other => Err(OpError::no_kernel(op, other, Device::Cpu)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::MemoryKind;

    /// Runs a parse kernel into a fresh output (for tests).
    fn parse_into(kernel: &dyn Kernel, x: &Tensor, to: DType) -> OpResult<Tensor> {
        let out = Tensor::empty(x.dims(), to, Device::Cpu, MemoryKind::Default)?;
        kernel.run(&KernelIo {
            inputs: &[x],
            outputs: &[&out],
            scratch: None,
            in_place: None,
            threads: 1,
        })?;
        Ok(out)
    }

    /// A stand-in for the numeric cast: i64/f64 straight to i32/f32.
    #[derive(Debug)]
    struct Narrow;

    impl Kernel for Narrow {
        fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
            let (x, out) = (io.input(0), io.output(0));
            match x.dtype() {
                DType::I64 => {
                    let v: Vec<i32> = x.to_vec::<i64>()?.into_iter().map(|v| v as i32).collect();
                    out.write::<i32>()?
                        .as_mut_slice()
                        .unwrap()
                        .copy_from_slice(&v);
                }
                _ => {
                    let v: Vec<f32> = x.to_vec::<f64>()?.into_iter().map(|v| v as f32).collect();
                    out.write::<f32>()?
                        .as_mut_slice()
                        .unwrap()
                        .copy_from_slice(&v);
                }
            }
            Ok(())
        }
    }

    fn narrow(_: DType) -> Option<Box<dyn Kernel>> {
        Some(Box::new(Narrow))
    }

    #[test]
    fn text_to_numbers() {
        let x = Tensor::from_strings(&[5], ["2.5", " 1E8 ", "-inf", "NaN", "+INF"]).unwrap();
        let k = text_cast_kernel("Cast", DType::String, DType::F32, narrow).unwrap();
        let y = parse_into(k.as_ref(), &x, DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(y[..3], [2.5, 1e8, f32::NEG_INFINITY]);
        assert!(y[3].is_nan() && y[4] == f32::INFINITY);
        let n = Tensor::from_strings(&[2], ["100.5", "-7"]).unwrap();
        let k = text_cast_kernel("Cast", DType::String, DType::I32, narrow).unwrap();
        let y = parse_into(k.as_ref(), &n, DType::I32).unwrap();
        assert_eq!(y.to_vec::<i32>().unwrap(), [100, -7]);
        let bad = Tensor::from_strings(&[1], ["Hello"]).unwrap();
        let err = parse_into(k.as_ref(), &bad, DType::I32)
            .unwrap_err()
            .to_string();
        assert!(err.contains("Hello"), "{err}");
    }

    #[test]
    fn numbers_to_text() {
        let k = text_cast_kernel("Cast", DType::F32, DType::String, narrow).unwrap();
        let x =
            Tensor::from_slice(&[0.1f32, 1.0, 1e-7, f32::NEG_INFINITY, f32::NAN], &[5]).unwrap();
        let y = k
            .capabilities()
            .makes_outputs
            .unwrap()
            .make_outputs(&[&x], 1)
            .unwrap()
            .remove(0);
        // Shortest text that reads back to the same f32 (not the f64 widening's digits).
        assert_eq!(
            y.strings().unwrap(),
            ["0.1", "1", "0.0000001", "-INF", "NaN"]
        );
        let b = Tensor::from_bools(&[true, false], &[2]).unwrap();
        let k = text_cast_kernel("Cast", DType::Bool, DType::String, narrow).unwrap();
        let y = k
            .capabilities()
            .makes_outputs
            .unwrap()
            .make_outputs(&[&b], 1)
            .unwrap()
            .remove(0);
        assert_eq!(y.strings().unwrap(), ["True", "False"]);
        assert!(text_cast_kernel("Cast", DType::F8E5M2, DType::String, narrow).is_none());
    }
}
