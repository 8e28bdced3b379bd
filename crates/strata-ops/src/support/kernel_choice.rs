//! The checks every operator's kernel selection starts with: the device (every kernel here runs
//! on the CPU) and, for ops that address elements one by one, the dtype. Both answer with
//! [`OpError::NoKernel`] naming the op, dtype and device; a selection that finds no kernel for a
//! dtype later answers with [`OpError::no_kernel`] itself; ops with one kernel generic over the
//! float dtypes select it with [`cpu_float_kernel!`](crate::cpu_float_kernel).

use strata_core::{DType, Device};

use crate::{OpError, OpResult};

/// Ok on the CPU; `NoKernel { op, dtype, device }` on any other device.
#[inline]
pub(crate) fn cpu_only(op: &str, dtype: DType, device: Device) -> OpResult<()> {
    cpu_supported(op, dtype, device, true)
}

/// Ok on the CPU when the op's kernels handle `dtype` (`supported`, the op's own rule);
/// `NoKernel { op, dtype, device }` otherwise.
#[inline]
pub(crate) fn cpu_supported(
    op: &str,
    dtype: DType,
    device: Device,
    supported: bool,
) -> OpResult<()> {
    if device == Device::Cpu && supported {
        Ok(())
    } else {
        Err(OpError::no_kernel(op, dtype, device))
    }
}

/// [`cpu_only`] for ops that address elements one by one: block-quantized dtypes are rejected.
#[inline]
pub(crate) fn cpu_plain(op: &str, dtype: DType, device: Device) -> OpResult<()> {
    cpu_supported(op, dtype, device, !dtype.is_quantized())
}

/// The kernel selection of an op with one kernel generic over the float dtypes: [`cpu_only`],
/// then `Ok(Box::new($kernel))` with `$t` the element type of `$dtype` (f32, f64, f16, bf16),
/// or `NoKernel` for any other dtype. Expands to an expression of type
/// `OpResult<Box<dyn Kernel>>` and returns early from the enclosing function off the CPU.
#[macro_export]
macro_rules! cpu_float_kernel {
    ($op:expr, $dtype:expr, $device:expr, $t:ident => $kernel:expr) => {{
        let (op, dtype, device) = ($op, $dtype, $device);
        $crate::support::kernel_choice::cpu_only(op, dtype, device)?;
        $crate::dispatch_float!(dtype, $t => Ok(Box::new($kernel) as Box<dyn $crate::Kernel>),
            _ => Err($crate::OpError::no_kernel(op, dtype, device)))
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_cpu_and_plain_dtypes_pass() {
        assert!(cpu_only("Op", DType::F32, Device::Cpu).is_ok());
        let err = cpu_only("Op", DType::F32, Device::Cuda(0)).unwrap_err();
        assert!(
            matches!(&err, OpError::NoKernel { op, dtype: DType::F32, device: Device::Cuda(0) } if op == "Op"),
            "{err}"
        );
        assert!(cpu_supported("Op", DType::F32, Device::Cpu, true).is_ok());
        assert!(cpu_supported("Op", DType::F32, Device::Cpu, false).is_err());
        assert!(cpu_plain("Op", DType::I64, Device::Cpu).is_ok());
        assert!(matches!(
            cpu_plain("Op", DType::Q8_0, Device::Cpu),
            Err(OpError::NoKernel { .. })
        ));
    }
}
