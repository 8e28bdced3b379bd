//! NonZero: the indices of non-zero elements, `[rank, count]` int64. Its output size depends on
//! the input's values, so unless the input is constant it runs on the dynamic path: the runtime
//! infers the count from the actual input and allocates the output when the node runs.

use strata_core::{DType, Device, Tensor};

use crate::support::inputs::required;
use crate::support::kernel_choice::cpu_plain;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct NonZero;

impl NonZero {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(NonZero))
    }
}

/// Whether each element of `t` (in logical order) is non-zero; -0.0 counts as zero.
fn nonzero_mask(t: &Tensor) -> OpResult<Vec<bool>> {
    Ok(match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.into_iter().map(|v| v != 0.0).collect(),
        DType::F64 => t.to_vec::<f64>()?.into_iter().map(|v| v != 0.0).collect(),
        DType::F16 => t
            .to_vec::<strata_core::f16>()?
            .into_iter()
            .map(|v| v.to_f32() != 0.0)
            .collect(),
        DType::BF16 => t
            .to_vec::<strata_core::bf16>()?
            .into_iter()
            .map(|v| v.to_f32() != 0.0)
            .collect(),
        DType::I8 | DType::U8 | DType::Bool => t
            .read_raw::<u8>("NonZero")?
            .to_vec()?
            .into_iter()
            .map(|v| v != 0)
            .collect(),
        DType::I16 | DType::U16 => t
            .read_raw::<u16>("NonZero")?
            .to_vec()?
            .into_iter()
            .map(|v| v != 0)
            .collect(),
        DType::I32 | DType::U32 => t
            .read_raw::<u32>("NonZero")?
            .to_vec()?
            .into_iter()
            .map(|v| v != 0)
            .collect(),
        DType::I64 | DType::U64 => t
            .read_raw::<u64>("NonZero")?
            .to_vec()?
            .into_iter()
            .map(|v| v != 0)
            .collect(),
        other => return Err(OpError::no_kernel("NonZero", other, Device::Cpu)),
    })
}

/// Writes the `[rank, count]` coordinates of the set entries of `mask` (row-major over `dims`).
fn write_indices(mask: &[bool], dims: &[usize], out: &mut [i64]) {
    let count = mask.iter().filter(|&&m| m).count();
    let set = mask
        .iter()
        .enumerate()
        .filter(|(_, &m)| m)
        .map(|(flat, _)| flat);
    for (column, flat) in set.enumerate() {
        let mut rest = flat;
        for axis in (0..dims.len()).rev() {
            out[axis * count + column] = (rest % dims[axis]) as i64;
            rest /= dims[axis];
        }
    }
}

impl Operator for NonZero {
    fn op_type(&self) -> &str {
        "NonZero"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required("NonZero", inputs, 0)?;
        let rank = x.rank();
        match &x.value {
            Some(v) => {
                let mask = nonzero_mask(v)?;
                let count = mask.iter().filter(|&&m| m).count();
                let mut out = vec![0i64; rank * count];
                write_indices(&mask, v.dims(), &mut out);
                Ok(vec![Fact::constant(Tensor::from_slice(
                    &out,
                    &[rank, count],
                )?)])
            }
            None => Ok(vec![Fact::new(
                DType::I64,
                vec![Dim::Known(rank), Dim::Unknown],
            )]),
        }
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_plain("NonZero", inputs[0].dtype, device)?;
        Ok(Box::new(NonZeroKernel))
    }

    fn is_data_dependent(&self) -> bool {
        true
    }
}

#[derive(Debug)]
struct NonZeroKernel;

impl Kernel for NonZeroKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x, out) = (io.input(0), io.output(0));
        let mask = nonzero_mask(x)?;
        let count = mask.iter().filter(|&&m| m).count();
        if out.dims() != [x.rank(), count] {
            return Err(OpError::kernel(
                "NonZero",
                format!(
                    "output has dims {:?}, expected [{}, {count}]",
                    out.dims(),
                    x.rank()
                ),
            ));
        }
        let mut w = out.write::<i64>()?;
        let data = w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel("NonZero", "output is not contiguous"))?;
        write_indices(&mask, x.dims(), data);
        Ok(())
    }
}
