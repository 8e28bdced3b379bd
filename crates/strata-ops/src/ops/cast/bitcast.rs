//! BitCast (opset 26): the same bytes read as another dtype of the same width. Runs in place
//! for free; otherwise one copy per element width.

use std::fmt;
use std::marker::PhantomData;

use strata_core::{DType, Device};

use crate::ops::cast::cast::{dtype_from_onnx_code, onnx_type_name};
use crate::support::broadcast::{expanded, zip1, Walk};
use crate::support::inputs::exact_inputs;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct BitCast {
    to: DType,
}

impl BitCast {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let code = ctx
            .attrs
            .int("to")?
            .ok_or_else(|| OpError::attribute("BitCast", "to", "is required"))?;
        let to = dtype_from_onnx_code(code).ok_or_else(|| OpError::Unsupported {
            op_type: format!("BitCast to {}", onnx_type_name(code)),
            domain: ctx.domain.to_string(),
            opset: ctx.opset,
        })?;
        Ok(Box::new(BitCast { to }))
    }
}

impl Operator for BitCast {
    fn op_type(&self) -> &str {
        "BitCast"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [x] = exact_inputs("BitCast", inputs)?;
        if x.dtype.is_quantized() || x.dtype.size_in_bytes() != self.to.size_in_bytes() {
            return Err(OpError::DType {
                op: "BitCast".into(),
                index: 0,
                expected: format!("a {}-byte type like {}", self.to.size_in_bytes(), self.to),
                actual: x.dtype,
            });
        }
        Ok(vec![Fact::new(self.to, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = exact_inputs::<1>("BitCast", inputs)?[0].dtype;
        Ok(match (device, self.to.size_in_bytes()) {
            (Device::Cpu, 1) => Box::new(Reinterpret::<u8>(PhantomData)),
            (Device::Cpu, 2) => Box::new(Reinterpret::<u16>(PhantomData)),
            (Device::Cpu, 4) => Box::new(Reinterpret::<u32>(PhantomData)),
            (Device::Cpu, 8) => Box::new(Reinterpret::<u64>(PhantomData)),
            _ => return Err(OpError::no_kernel("BitCast", dtype, device)),
        })
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

/// Copies elements of width `size_of::<T>()` without interpreting them.
struct Reinterpret<T>(PhantomData<fn(T) -> T>);

impl<T> fmt::Debug for Reinterpret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Reinterpret({} bytes)", std::mem::size_of::<T>())
    }
}

impl<T: bytemuck::Pod> Kernel for Reinterpret<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        if io.in_place == Some(0) {
            // The bytes already are the output.
            return Ok(());
        }
        let (x, out) = (io.input(0), io.output(0));
        let dims = out.dims();
        let walk = Walk::new("BitCast", dims, [&expanded("BitCast", x, dims)?])?;
        let r = x.read_raw::<T>("BitCast")?;
        let mut w = out.write_raw::<T>("BitCast")?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel("BitCast", "output is not contiguous"))?;
        zip1(&walk, r.storage_data(), data, |v| v);
        Ok(())
    }
}

/// The table of this family's bit reinterpretation operator.
pub const OPS: &[(&str, crate::Constructor)] = &[("BitCast", BitCast::build)];

#[cfg(test)]
mod tests {
    use crate::support::test_util::{run_op, run_op_in_place};
    use crate::{Attr, OpError};
    use strata_core::Tensor;

    #[test]
    fn reinterprets_bits() {
        let x = Tensor::from_slice(&[1.0f32, -2.5], &[2]).unwrap();
        let to_i32 = [("to", Attr::Int(6))];
        let y = run_op("BitCast", 26, &to_i32, std::slice::from_ref(&x)).unwrap();
        let want = [1.0f32.to_bits() as i32, (-2.5f32).to_bits() as i32];
        assert_eq!(y[0].to_vec::<i32>().unwrap(), want);
        let y = run_op_in_place("BitCast", 26, &to_i32, std::slice::from_ref(&x)).unwrap();
        assert_eq!(y[0].to_vec::<i32>().unwrap(), want);
        let to_i64 = [("to", Attr::Int(7))];
        let err = run_op("BitCast", 26, &to_i64, &[x]).unwrap_err();
        assert!(matches!(err, OpError::DType { .. }), "{err}");
    }
}
