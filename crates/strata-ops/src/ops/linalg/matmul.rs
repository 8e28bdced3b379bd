//! MatMul: numpy-style matrix product with broadcast batch dims, through the GEMM kernel.
//! f32 and f64 compute natively; f16 and bf16 are widened to f32 in planned scratch and each
//! output element is rounded once.
//!
//! The graph optimizer may fuse a bias, a residual and activations into a MatMul
//! ([`Steps`]). With a constant 2-D B and an A of any rank (the batch dims stack into the
//! rows of one tall product), B is packed once at plan time and the steps run on each finished
//! tile of the product while it is in cache.

use std::marker::PhantomData;

use strata_core::{bf16, f16, DType, Device, Element};

use super::matmul_epilogue::{read_operands, Steps};
use crate::kernels::gemm::{gemm_prepacked_with, Epilogue};
use crate::kernels::{batched_matmul, GemmFloat, Prepacked};
use crate::support::inputs::exact_inputs;
use crate::support::numeric::Real;
use crate::support::scratch::{carve, scratch_as};
use crate::{
    broadcast_dims, Dim, EpilogueStep, Fact, Fused, FusesEpilogue, Kernel, KernelCapabilities,
    KernelIo, OpCapabilities, OpContext, OpError, OpResult, Operator,
};

#[derive(Debug, Clone, Copy, Default)]
pub struct MatMul {
    /// Work fused in by the graph optimizer, applied to the product's rows in order.
    steps: Steps,
}

/// Products with at most this many rows stream B (the skinny path), so B is not prepacked for
/// them.
const SKINNY_ROWS: usize = 4;

impl MatMul {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(MatMul::default()))
    }
}

/// Bias, residual and activations, up to [`super::matmul_epilogue::MAX_STEPS`] of them.
impl FusesEpilogue for MatMul {
    fn fuse(&self, step: EpilogueStep) -> Option<Fused> {
        let (steps, operand_slot) = self.steps.push(step)?;
        Some(Fused {
            op: Box::new(MatMul { steps }),
            operand_slot,
        })
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

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            epilogue: Some(self),
            ..OpCapabilities::default()
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let operands = self.steps.operands();
        if inputs.len() != 2 + operands {
            return Err(OpError::InputCount {
                op: "MatMul".into(),
                expected: (2 + operands).to_string(),
                actual: inputs.len(),
            });
        }
        let [a, b] = exact_inputs("MatMul", &inputs[..2])?;
        if a.dtype != b.dtype {
            return Err(OpError::DType {
                op: "MatMul".into(),
                index: 1,
                expected: a.dtype.to_string(),
                actual: b.dtype,
            });
        }
        let out = matmul_dims(&a.dims, &b.dims)?;
        for (k, f) in inputs[2..].iter().enumerate() {
            if f.dtype != a.dtype {
                return Err(OpError::DType {
                    op: "MatMul".into(),
                    index: 2 + k,
                    expected: a.dtype.to_string(),
                    actual: f.dtype,
                });
            }
        }
        Ok(vec![Fact::new(a.dtype, out)])
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
        outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let steps = self.steps;
        match (inputs[0].dtype, device) {
            (DType::F32, Device::Cpu) => Ok(Box::new(MatMulKernel::<f32> {
                steps,
                packed_b: prepack_b(inputs, outputs)?,
            })),
            (DType::F64, Device::Cpu) => Ok(Box::new(MatMulKernel::<f64> {
                steps,
                packed_b: prepack_b(inputs, outputs)?,
            })),
            (DType::F16, Device::Cpu) => Ok(Box::new(WidenedMatMulKernel::<f16> {
                steps,
                _h: PhantomData,
            })),
            (DType::BF16, Device::Cpu) => Ok(Box::new(WidenedMatMulKernel::<bf16> {
                steps,
                _h: PhantomData,
            })),
            (dtype, device) => Err(OpError::no_kernel("MatMul", dtype, device)),
        }
    }
}

/// A constant 2-D B (a linear layer's weights) packed once for the products, when A has rank
/// 2 or more and the planned row count (A's rows over all its batch dims) is past the skinny
/// path's. Held by the kernel in Persistent memory, shared by every context.
fn prepack_b<T: Element + GemmFloat>(
    inputs: &[&Fact],
    outputs: &[&Fact],
) -> OpResult<Option<Prepacked<T>>> {
    let (Some(b), Some(out)) = (inputs[1].value.as_ref(), outputs.first()) else {
        return Ok(None);
    };
    let rows = out
        .dims
        .split_last()
        .and_then(|(_, lead)| lead.iter().map(Dim::known).product::<Option<usize>>());
    if b.rank() != 2 || inputs[0].rank() < 2 || !matches!(rows, Some(m) if m > SKINNY_ROWS) {
        return Ok(None);
    }
    let read = b.read::<T>()?;
    let Some(values) = read.as_slice() else {
        return Ok(None);
    };
    let (k, n) = (b.dims()[0], b.dims()[1]);
    // Runs read the packed copy only (`packed_inputs`): the plan frees the original.
    Ok(Some(Prepacked::b(k, n, values, (n as isize, 1))?))
}

#[derive(Debug)]
struct MatMulKernel<T> {
    steps: Steps,
    /// B packed at plan time, when it is a constant matrix.
    packed_b: Option<Prepacked<T>>,
}

impl<T: Element + GemmFloat> Kernel for MatMulKernel<T> {
    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            packed_inputs: if self.packed_b.is_some() { &[1] } else { &[] },
            ..KernelCapabilities::default()
        }
    }

    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a, b, out) = (io.input(0), io.input(1), io.output(0));
        let ra = a.read::<T>()?;
        let mut w = out.write::<T>()?;
        let not_contiguous = || OpError::kernel("MatMul", "operands must be contiguous");
        let sa = ra.as_slice().ok_or_else(not_contiguous)?;
        let so = w.as_mut_slice().ok_or_else(not_contiguous)?;
        let n = out.dims().last().copied().unwrap_or(1);
        let k = a.dims().last().copied().unwrap_or(1);
        let m = so.len().checked_div(n).unwrap_or(0);
        read_operands!("MatMul", io, self.steps, 2, T, guards, operands);
        let lens: [usize; super::matmul_epilogue::MAX_STEPS] =
            std::array::from_fn(|i| operands.get(i).map_or(0, |o| o.len()));
        if !self.steps.operands_fit(&lens[..operands.len()], m, n) {
            return Err(OpError::kernel(
                "MatMul",
                "a fused bias or residual does not fit the output",
            ));
        }
        match &self.packed_b {
            // Even for a few rows (other input dims than planned): the plan may have let B's
            // original go (`packed_inputs`).
            Some(pb) if pb.depth() == k && pb.extent() == n => {
                let finish = |i: usize, j: usize, row: &mut [T]| {
                    self.steps.apply_row(operands, n, i, j, row)
                };
                let epilogue = (!self.steps.is_empty()).then_some(&finish as &Epilogue<'_, T>);
                gemm_prepacked_with(
                    pb,
                    m,
                    sa,
                    (k as isize, 1),
                    so,
                    (n as isize, 1),
                    (T::ONE, T::ZERO),
                    epilogue,
                    self.steps.fused(operands, n),
                    io.threads,
                )?;
            }
            // B is a constant, so only A can disagree with it; its original may be gone, so
            // say what is wrong rather than reading it.
            Some(pb) => {
                return Err(OpError::kernel(
                    "MatMul",
                    format!(
                        "A is {:?} and the constant B is {} x {}: A's last dim must be {}",
                        a.dims(),
                        pb.depth(),
                        pb.extent(),
                        pb.depth()
                    ),
                ));
            }
            None => {
                let rb = b.read::<T>()?;
                let sb = rb.as_slice().ok_or_else(not_contiguous)?;
                batched_matmul(sa, a.dims(), sb, b.dims(), so, io.threads)?;
                if !self.steps.is_empty() && n > 0 {
                    for (i, row) in so.chunks_exact_mut(n).enumerate() {
                        self.steps.apply_row(operands, n, i, 0, row);
                    }
                }
            }
        }
        Ok(())
    }
}

/// MatMul for 16-bit floats: operands widened to f32 in scratch, the f32 product, then one
/// rounding per output element.
#[derive(Debug)]
struct WidenedMatMulKernel<H> {
    steps: Steps,
    _h: PhantomData<H>,
}

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
        if !self.steps.is_empty() {
            self.apply_steps(io, out_f)?;
        }
        for (d, &v) in out_h.iter_mut().zip(out_f.iter()) {
            *d = H::narrow(v);
        }
        Ok(())
    }
}

impl<H: Element + Real<Wide = f32>> WidenedMatMulKernel<H> {
    /// The fused steps on the f32 product, operands widened element by element.
    fn apply_steps(&self, io: &KernelIo<'_>, out: &mut [f32]) -> OpResult<()> {
        let n = io.output(0).dims().last().copied().unwrap_or(1).max(1);
        read_operands!("MatMul", io, self.steps, 2, H, guards, operands);
        let mut next = 0;
        for step in self.steps.iter() {
            match step {
                EpilogueStep::Activation(act) => act.apply_all(out),
                EpilogueStep::Bias | EpilogueStep::Residual => {
                    let operand = operands[next];
                    next += 1;
                    let period = if step == EpilogueStep::Bias {
                        n
                    } else {
                        out.len()
                    };
                    if operand.len() != period {
                        return Err(OpError::kernel(
                            "MatMul",
                            "a fused bias or residual does not fit the output",
                        ));
                    }
                    for (i, v) in out.iter_mut().enumerate() {
                        *v += operand[i % period].widen();
                    }
                }
            }
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
        let out_fact = MatMul::default().infer(&refs)?.remove(0);
        let dims = out_fact.concrete().unwrap();
        let out = Tensor::empty(&dims, out_fact.dtype, Device::Cpu, MemoryKind::Workspace)?;
        let bytes = MatMul::default().scratch_bytes(&refs, &[&out_fact])?;
        let scratch = Tensor::empty(&[bytes], DType::U8, Device::Cpu, MemoryKind::Workspace)?;
        let kernel = MatMul::default().kernel(&refs, &[&out_fact], Device::Cpu)?;
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
        let out_fact = MatMul::default().infer(&refs).unwrap().remove(0);
        let out = Tensor::zeros(&[2, 2], DType::F16).unwrap();
        let kernel = MatMul::default()
            .kernel(&refs, &[&out_fact], Device::Cpu)
            .unwrap();
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
