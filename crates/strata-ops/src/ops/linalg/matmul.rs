//! MatMul: numpy-style matrix product with broadcast batch dims, through the GEMM kernel.
//! f32 and f64 compute natively; f16 and bf16 are widened to f32 in planned scratch and each
//! output element is rounded once.

use std::marker::PhantomData;

use strata_core::{bf16, f16, DType, Device, Element};

use crate::kernels::{batched_matmul, GemmFloat};
use crate::support::inputs::exact_inputs;
use crate::support::numeric::Real;
use crate::support::scratch::{carve, scratch_as};
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
        let [a, b] = exact_inputs("MatMul", inputs)?;
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

    fn scratch_bytes(&self, inputs: &[&Fact], outputs: &[&Fact]) -> OpResult<usize> {
        if !matches!(inputs[0].dtype, DType::F16 | DType::BF16) {
            return Ok(0);
        }
        let counts = [inputs[0].numel(), inputs[1].numel(), outputs[0].numel()];
        counts
            .iter()
            .try_fold(0usize, |acc, n| acc.checked_add((*n)?))
            .and_then(|n| n.checked_mul(std::mem::size_of::<f32>()))
            .ok_or_else(|| {
                OpError::shape("MatMul", "the f32 working set size is unknown or overflows")
            })
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
            (DType::F16, Device::Cpu) => Ok(Box::new(WidenedMatMulKernel::<f16>(PhantomData))),
            (DType::BF16, Device::Cpu) => Ok(Box::new(WidenedMatMulKernel::<bf16>(PhantomData))),
            (dtype, device) => Err(OpError::no_kernel("MatMul", dtype, device)),
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

/// MatMul for 16-bit floats: operands widened to f32 in scratch, the f32 product, then one
/// rounding per output element.
#[derive(Debug)]
struct WidenedMatMulKernel<H>(PhantomData<H>);

impl<H: Element + Real<Wide = f32>> Kernel for WidenedMatMulKernel<H> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a, b, out) = (io.input(0), io.input(1), io.output(0));
        let not_contiguous = || OpError::kernel("MatMul", "operands must be contiguous");
        let (ra, rb) = (a.read::<H>()?, b.read::<H>()?);
        let mut wo = out.write::<H>()?;
        let mut guard = match io.scratch {
            Some(s) => s.write_bytes("MatMul")?,
            None => return Err(OpError::kernel("MatMul", "16-bit MatMul needs scratch")),
        };
        let mut rest: &mut [f32] = scratch_as("MatMul", guard.bytes())?;
        let mut widen = |src: &[H]| -> OpResult<&mut [f32]> {
            let dst = carve("MatMul", &mut rest, src.len())?;
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = v.widen();
            }
            Ok(dst)
        };
        let af = widen(ra.as_slice().ok_or_else(not_contiguous)?)?;
        let bf = widen(rb.as_slice().ok_or_else(not_contiguous)?)?;
        let out_h = wo.as_mut_slice().ok_or_else(not_contiguous)?;
        let out_f = carve("MatMul", &mut rest, out_h.len())?;
        batched_matmul(af, a.dims(), bf, b.dims(), out_f, io.threads)?;
        for (d, &v) in out_h.iter_mut().zip(out_f.iter()) {
            *d = H::narrow(v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use strata_core::{MemoryKind, Tensor};

    use super::*;

    /// Runs MatMul on `a` and `b` with the scratch it asks for.
    fn run(a: &Tensor, b: &Tensor) -> OpResult<Tensor> {
        let facts = [Fact::constant(a.clone()), Fact::constant(b.clone())];
        let refs: Vec<&Fact> = facts.iter().collect();
        let out_fact = MatMul.infer(&refs)?.remove(0);
        let dims = out_fact.concrete().unwrap();
        let out = Tensor::empty(&dims, out_fact.dtype, Device::Cpu, MemoryKind::Workspace)?;
        let bytes = MatMul.scratch_bytes(&refs, &[&out_fact])?;
        let scratch = Tensor::empty(&[bytes], DType::U8, Device::Cpu, MemoryKind::Workspace)?;
        let kernel = MatMul.kernel(&refs, &[&out_fact], Device::Cpu)?;
        kernel.run(&KernelIo {
            inputs: &[a, b],
            outputs: &[&out],
            scratch: (bytes > 0).then_some(&scratch),
            in_place: None,
            threads: 1,
        })?;
        Ok(out)
    }

    #[test]
    fn half_precision_products_widen_to_f32_and_round_once() {
        let a: Vec<f16> = [1.0f32, 2., 3., 4., 5., 6.].map(f16::from_f32).to_vec();
        let b: Vec<f16> = [0.5f32, -1., 0.25, 2., 1., 0.].map(f16::from_f32).to_vec();
        let y = run(
            &Tensor::from_slice(&a, &[2, 3]).unwrap(),
            &Tensor::from_slice(&b, &[3, 2]).unwrap(),
        )
        .unwrap();
        let got: Vec<f32> = y
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect();
        // [1 2 3; 4 5 6] · [0.5 -1; 0.25 2; 1 0]
        assert_eq!(got, vec![4.0, 3.0, 9.25, 6.0]);
        let a: Vec<bf16> = [1.0f32, 2.].map(bf16::from_f32).to_vec();
        let y = run(
            &Tensor::from_slice(&a, &[1, 2]).unwrap(),
            &Tensor::from_slice(&a, &[2, 1]).unwrap(),
        )
        .unwrap();
        assert_eq!(y.to_vec::<bf16>().unwrap()[0].to_f32(), 5.0);
    }

    #[test]
    fn a_16_bit_product_without_scratch_is_an_error() {
        let a = Tensor::from_slice(&[f16::ONE; 4], &[2, 2]).unwrap();
        let facts = [Fact::constant(a.clone()), Fact::constant(a.clone())];
        let refs: Vec<&Fact> = facts.iter().collect();
        let out_fact = MatMul.infer(&refs).unwrap().remove(0);
        let out = Tensor::zeros(&[2, 2], DType::F16).unwrap();
        let kernel = MatMul.kernel(&refs, &[&out_fact], Device::Cpu).unwrap();
        let io = KernelIo {
            inputs: &[&a, &a],
            outputs: &[&out],
            scratch: None,
            in_place: None,
            threads: 1,
        };
        assert!(kernel.run(&io).is_err());
    }
}
