//! Where: `condition ? X : Y` with three-way numpy broadcasting, for every dtype including bool.
//! The output may reuse X's memory.

use std::fmt;
use std::marker::PhantomData;

use strata_core::{DType, Device};

use crate::support::broadcast::{expanded, zip2_assign_mid, zip3, Walk};
use crate::support::inputs::exact_inputs;
use crate::support::kernel_choice::cpu_only;
use crate::{broadcast_dims, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct Where;

impl Where {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(Where))
    }
}

fn three_inputs<'a>(inputs: &[&'a Fact]) -> OpResult<[&'a Fact; 3]> {
    let [c, x, y] = exact_inputs("Where", inputs)?;
    if c.dtype != DType::Bool {
        return Err(OpError::DType {
            op: "Where".into(),
            index: 0,
            expected: "bool".into(),
            actual: c.dtype,
        });
    }
    if x.dtype != y.dtype {
        return Err(OpError::DType {
            op: "Where".into(),
            index: 2,
            expected: x.dtype.to_string(),
            actual: y.dtype,
        });
    }
    Ok([c, x, y])
}

impl Operator for Where {
    fn op_type(&self) -> &str {
        "Where"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [c, x, y] = three_inputs(inputs)?;
        let dims = broadcast_dims("Where", &c.dims, &x.dims)?;
        let dims = broadcast_dims("Where", &dims, &y.dims)?;
        Ok(vec![Fact::new(x.dtype, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let [_, x, _] = three_inputs(inputs)?;
        cpu_only("Where", x.dtype, device)?;
        // Where moves elements without interpreting them: one kernel per element width.
        if x.dtype.is_quantized() {
            return Err(OpError::no_kernel("Where", x.dtype, device));
        }
        Ok(match x.dtype.size_in_bytes() {
            1 => Box::new(WhereKernel::<u8>(PhantomData)),
            2 => Box::new(WhereKernel::<u16>(PhantomData)),
            4 => Box::new(WhereKernel::<u32>(PhantomData)),
            8 => Box::new(WhereKernel::<u64>(PhantomData)),
            _ => return Err(OpError::no_kernel("Where", x.dtype, device)),
        })
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(1)
    }
}

struct WhereKernel<T>(PhantomData<fn(T) -> T>);

impl<T> fmt::Debug for WhereKernel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WhereKernel")
    }
}

impl<T: bytemuck::Pod> Kernel for WhereKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (c, x, y, out) = (io.input(0), io.input(1), io.input(2), io.output(0));
        let dims = out.dims();
        let lc = expanded("Where", c, dims)?;
        let ly = expanded("Where", y, dims)?;
        // Elements are read as raw bits of their width, so the dtypes must agree exactly.
        if x.dtype() != out.dtype() || y.dtype() != out.dtype() {
            return Err(OpError::kernel(
                "Where",
                "X, Y and the output differ in dtype",
            ));
        }
        let pick = |c: u8, x: T, y: T| if c != 0 { x } else { y };
        if io.in_place == Some(1) {
            // X's memory is the output's: read X through the output guard.
            if x.numel() != out.numel() {
                return Err(OpError::kernel("Where", "in place over a smaller X"));
            }
            let walk = Walk::new("Where", dims, [&lc, &ly])?;
            let (rc, ry) = (c.read::<u8>()?, y.read_raw::<T>("Where")?);
            let mut w = out.write_raw::<T>("Where")?;
            let data = w
                .as_mut_slice()
                .ok_or_else(|| OpError::kernel("Where", "output is not contiguous"))?;
            zip2_assign_mid(&walk, rc.storage_data(), data, ry.storage_data(), pick);
            return Ok(());
        }
        let lx = expanded("Where", x, dims)?;
        let walk = Walk::new("Where", dims, [&lc, &lx, &ly])?;
        let (rc, rx, ry) = (
            c.read::<u8>()?,
            x.read_raw::<T>("Where")?,
            y.read_raw::<T>("Where")?,
        );
        let mut w = out.write_raw::<T>("Where")?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel("Where", "output is not contiguous"))?;
        zip3(
            &walk,
            rc.storage_data(),
            rx.storage_data(),
            ry.storage_data(),
            data,
            pick,
        );
        Ok(())
    }
}

/// The table of this family's selection operator.
pub const OPS: &[(&str, crate::Constructor)] = &[("Where", Where::build)];

#[cfg(test)]
mod tests {
    use crate::support::test_util::{run_op, run_op_in_place};
    use crate::OpError;
    use strata_core::Tensor;

    #[test]
    fn three_way_broadcast() {
        let c = Tensor::from_bools(&[true, false], &[2, 1]).unwrap();
        let x = Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap();
        let y = Tensor::from_slice(&[-1i64], &[]).unwrap();
        let out = run_op("Where", 16, &[], &[c, x, y]).unwrap();
        assert_eq!(out[0].dims(), &[2, 3]);
        assert_eq!(out[0].to_vec::<i64>().unwrap(), [1, 2, 3, -1, -1, -1]);
    }

    #[test]
    fn in_place_over_x() {
        let c = Tensor::from_bools(&[true, false, true], &[3]).unwrap();
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let y = Tensor::from_slice(&[9.0f32], &[1]).unwrap();
        let out = run_op_in_place("Where", 16, &[], &[c, x, y]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [1.0, 9.0, 3.0]);
    }

    #[test]
    fn condition_must_be_bool() {
        let x = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        let err = run_op("Where", 16, &[], &[x.clone(), x.clone(), x]).unwrap_err();
        assert!(matches!(err, OpError::DType { index: 0, .. }), "{err}");
    }
}
