//! MatMul: numpy-style matrix product with broadcast batch dims, through the GEMM kernel.

use std::marker::PhantomData;

use strata_core::{DType, Device, Element};

use crate::kernels::{batched_matmul, GemmFloat};
use crate::ops::elementwise::two_inputs;
use crate::{broadcast_dims, Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

#[derive(Debug)]
pub struct MatMul;

impl MatMul {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(MatMul))
    }
}

/// Output dims of MatMul over symbolic dims (rank-1 operands promoted and the axis dropped).
pub fn matmul_dims(a: &[Dim], b: &[Dim]) -> OpResult<Vec<Dim>> {
    if a.is_empty() || b.is_empty() {
        return Err(OpError::shape("MatMul", "operands must have rank >= 1"));
    }
    let a2: Vec<Dim> = if a.len() == 1 {
        vec![Dim::Known(1), a[0].clone()]
    } else {
        a.to_vec()
    };
    let b2: Vec<Dim> = if b.len() == 1 {
        vec![b[0].clone(), Dim::Known(1)]
    } else {
        b.to_vec()
    };
    let (ka, kb) = (&a2[a2.len() - 1], &b2[b2.len() - 2]);
    if let (Dim::Known(x), Dim::Known(y)) = (ka, kb) {
        if x != y {
            return Err(OpError::shape(
                "MatMul",
                format!("inner dims differ: {a:?} @ {b:?} ({x} vs {y})"),
            ));
        }
    }
    let mut out = broadcast_dims("MatMul", &a2[..a2.len() - 2], &b2[..b2.len() - 2])?;
    if a.len() > 1 {
        out.push(a2[a2.len() - 2].clone());
    }
    if b.len() > 1 {
        out.push(b2[b2.len() - 1].clone());
    }
    Ok(out)
}

impl Operator for MatMul {
    fn op_type(&self) -> &str {
        "MatMul"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [a, b] = two_inputs("MatMul", inputs)?;
        if a.dtype != b.dtype {
            return Err(OpError::DType {
                op: "MatMul".into(),
                index: 1,
                expected: a.dtype.to_string(),
                actual: b.dtype,
            });
        }
        Ok(vec![Fact::new(a.dtype, matmul_dims(&a.dims, &b.dims)?)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        match (inputs[0].dtype, device) {
            (DType::F32, Device::Cpu) => Ok(Box::new(MatMulKernel::<f32>(PhantomData))),
            (DType::F64, Device::Cpu) => Ok(Box::new(MatMulKernel::<f64>(PhantomData))),
            (dtype, device) => Err(OpError::NoKernel {
                op: "MatMul".into(),
                dtype,
                device,
            }),
        }
    }
}

#[derive(Debug)]
struct MatMulKernel<T>(PhantomData<T>);

impl<T: Element + GemmFloat> Kernel for MatMulKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a, b, out) = (io.input(0), io.input(1), io.output(0));
        let (ra, rb) = (a.read::<T>()?, b.read::<T>()?);
        let mut w = out.write::<T>()?;
        let not_contiguous = || OpError::kernel("MatMul", "operands must be contiguous");
        let (sa, sb) = (
            ra.as_slice().ok_or_else(not_contiguous)?,
            rb.as_slice().ok_or_else(not_contiguous)?,
        );
        let so = w.as_mut_slice().ok_or_else(not_contiguous)?;
        batched_matmul(sa, a.dims(), sb, b.dims(), so, io.threads)?;
        Ok(())
    }
}
