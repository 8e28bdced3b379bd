//! Conversions and bounds: `to_dtype` (Cast; block-quantized sources are dequantized by their
//! block decoder first), `clamp` and `clamp_` (Clip).

use strata_core::dtype::block::dequantize_row;
use strata_core::{DType, DispatchKey, DispatchTable, Tensor};

use crate::eager::call::{dense_cpu, first, route, OnnxCall};
use crate::ops::cast::cast::dtype_from_onnx_code;
use crate::{OpError, OpResult};

type CastImp = fn(&Tensor, DType) -> OpResult<Tensor>;

/// `to_dtype`: dense tensors through Cast, block-quantized ones through their block decoder.
const TO_DTYPE: DispatchTable<CastImp> = dense_cpu("to_dtype", cast_dense as CastImp).kernel(
    DispatchKey::Quantized,
    DispatchKey::Cpu,
    dequantize_then_cast as CastImp,
);

const CLAMP: DispatchTable<fn()> = dense_cpu("clamp", (|| ()) as fn());

/// The ONNX type code of `dtype` (Cast's `to`).
fn onnx_code(dtype: DType) -> OpResult<i64> {
    (1..=26)
        .find(|&code| dtype_from_onnx_code(code) == Some(dtype))
        .ok_or_else(|| OpError::DType {
            op: "to_dtype".into(),
            index: 0,
            expected: "a dtype ONNX Cast can produce".into(),
            actual: dtype,
        })
}

/// The Cast kernel converting a dense tensor.
pub(crate) fn cast_dense(t: &Tensor, dtype: DType) -> OpResult<Tensor> {
    if t.dtype() == dtype {
        return Ok(t.contiguous()?.detached(t.device(), t.memory_kind())?);
    }
    let call = OnnxCall::new("Cast", 21).int("to", onnx_code(dtype)?);
    first(call.run_cpu(&[t], 1)?, "Cast")
}

/// Block-quantized data: decoded to f32 by the block decoder, then cast.
fn dequantize_then_cast(t: &Tensor, dtype: DType) -> OpResult<Tensor> {
    let t = t.contiguous()?;
    let out = Tensor::empty(
        t.dims(),
        DType::F32,
        t.device(),
        crate::eager::call::OUTPUT_KIND,
    )?;
    {
        let src = t.read_bytes("to_dtype")?;
        let mut dst = out.write::<f32>()?;
        let dst = dst
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel("to_dtype", "output is not contiguous"))?;
        dequantize_row(t.dtype(), src.bytes(), dst)?;
    }
    if dtype == DType::F32 {
        Ok(out)
    } else {
        cast_dense(&out, dtype)
    }
}

/// A 0-d tensor of `dtype` holding `value`.
pub(crate) fn scalar_of(value: f64, dtype: DType) -> OpResult<Tensor> {
    let t = Tensor::scalar(value)?;
    if dtype == DType::F64 {
        Ok(t)
    } else {
        cast_dense(&t, dtype)
    }
}

/// Conversions and bounds on tensors.
pub trait EagerConvert {
    /// This tensor converted to `dtype` (a copy even when the dtype already matches).
    fn to_dtype(&self, dtype: DType) -> OpResult<Tensor>;
    /// Elements limited to `[min, max]` (either bound optional).
    fn clamp(&self, min: Option<f64>, max: Option<f64>) -> OpResult<Tensor>;
    /// `clamp` in place; bumps the version counter once (not in inference mode).
    fn clamp_(&self, min: Option<f64>, max: Option<f64>) -> OpResult<&Tensor>;
}

fn clip_inputs(t: &Tensor, min: Option<f64>, max: Option<f64>) -> OpResult<[Tensor; 2]> {
    let bound = |b: Option<f64>| match b {
        Some(v) => scalar_of(v, t.dtype()),
        None => Ok(Tensor::undefined()),
    };
    Ok([bound(min)?, bound(max)?])
}

impl EagerConvert for Tensor {
    fn to_dtype(&self, dtype: DType) -> OpResult<Tensor> {
        route(&TO_DTYPE, &[self])?(self, dtype)
    }

    fn clamp(&self, min: Option<f64>, max: Option<f64>) -> OpResult<Tensor> {
        route(&CLAMP, &[self])?;
        let [lo, hi] = clip_inputs(self, min, max)?;
        first(
            OnnxCall::new("Clip", 13).run_cpu(&[self, &lo, &hi], 1)?,
            "Clip",
        )
    }

    fn clamp_(&self, min: Option<f64>, max: Option<f64>) -> OpResult<&Tensor> {
        route(&CLAMP, &[self])?;
        let [lo, hi] = clip_inputs(self, min, max)?;
        if !self.is_contiguous() {
            let out = self.clamp(min, max)?;
            self.copy_from(&out)?;
            return Ok(self);
        }
        OnnxCall::new("Clip", 13).run_in_place_cpu(&[self, &lo, &hi])?;
        Ok(self)
    }
}
