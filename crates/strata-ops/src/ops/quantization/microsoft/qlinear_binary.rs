//! com.microsoft QLinearAdd and QLinearMul: numpy-broadcast element-wise sum or product of two
//! quantized tensors, requantized to C's parameters (inputs A, A_scale, A_zero_point, B,
//! B_scale, B_zero_point, C_scale, C_zero_point), computed in f32 as onnxruntime does:
//! Add `(a - za)·(sa/sc) + (b - zb)·(sb/sc)`, Mul `(a - za)(b - zb)·(sa·sb/sc)`, rounded half to
//! even, plus `zc`, saturated.

use strata_core::Device;

use super::qparams::{eight_bit, QParam};
use crate::support::broadcast::{expanded, zip2, Walk};
use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_only;
use crate::{broadcast_dims, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Arith {
    Add,
    Mul,
}

#[derive(Debug, Clone)]
pub struct QLinearBinary {
    name: &'static str,
    arith: Arith,
}

impl QLinearBinary {
    pub fn build_add(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearBinary {
            name: "QLinearAdd",
            arith: Arith::Add,
        }))
    }

    pub fn build_mul(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QLinearBinary {
            name: "QLinearMul",
            arith: Arith::Mul,
        }))
    }
}

impl Operator for QLinearBinary {
    fn op_type(&self) -> &str {
        self.name
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let a = eight_bit(self.name, inputs, 0)?;
        let b = eight_bit(self.name, inputs, 3)?;
        for index in [1, 4, 6] {
            required(self.name, inputs, index)?;
        }
        if a.dtype != b.dtype {
            return Err(OpError::DType {
                op: self.name.into(),
                index: 3,
                expected: a.dtype.to_string(),
                actual: b.dtype,
            });
        }
        Ok(vec![Fact::new(
            a.dtype,
            broadcast_dims(self.name, &a.dims, &b.dims)?,
        )])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(self.name, required(self.name, inputs, 0)?.dtype, device)?;
        Ok(Box::new(self.clone()))
    }
}

impl Kernel for QLinearBinary {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a_t, b_t, out) = (io.input(0), io.input(3), io.output(0));
        if a_t.dtype() != out.dtype() || b_t.dtype() != out.dtype() {
            return Err(OpError::kernel(
                self.name,
                "operands and output must share one 8-bit type",
            ));
        }
        let a = QParam::read(self.name, "A", io.input(1), io.input(2), a_t.dtype())?;
        let b = QParam::read(self.name, "B", io.input(4), io.input(5), b_t.dtype())?;
        let c = QParam::read(self.name, "C", io.input(6), io.input(7), out.dtype())?;
        let dims = out.dims();
        let (la, lb) = (
            expanded(self.name, a_t, dims)?,
            expanded(self.name, b_t, dims)?,
        );
        let walk = Walk::new(self.name, dims, [&la, &lb])?;
        let (za, zb) = (a.zero as f32, b.zero as f32);
        let (ra, rb, rab) = (
            a.scale / c.scale,
            b.scale / c.scale,
            a.scale * b.scale / c.scale,
        );
        let arith = self.arith;
        macro_rules! run_typed {
            ($t:ty) => {{
                let (ga, gb) = (a_t.read::<$t>()?, b_t.read::<$t>()?);
                let mut w = out.write::<$t>()?;
                let data = w
                    .as_mut_slice()
                    .ok_or_else(|| OpError::kernel(self.name, "output is not contiguous"))?;
                let (lo, hi) = (<$t>::MIN as f32, <$t>::MAX as f32);
                let zc = c.zero as f32;
                let f = |x: $t, y: $t| {
                    let (x, y) = (x as f32 - za, y as f32 - zb);
                    let v = match arith {
                        Arith::Add => x * ra + y * rb,
                        Arith::Mul => x * y * rab,
                    };
                    (crate::kernels::igemm::round_half_even(v) + zc).clamp(lo, hi) as $t
                };
                zip2(&walk, ga.storage_data(), gb.storage_data(), data, f);
            }};
        }
        match out.dtype() {
            strata_core::DType::U8 => run_typed!(u8),
            strata_core::DType::I8 => run_typed!(i8),
            dtype => {
                return Err(OpError::kernel(
                    self.name,
                    format!("cannot compute on {dtype}"),
                ))
            }
        }
        Ok(())
    }
}
