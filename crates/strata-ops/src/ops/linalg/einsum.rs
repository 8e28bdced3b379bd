//! Einsum (opset 12+) for f32, f64, f16 and bf16 (the 16-bit types computed in f32): transposes,
//! diagonals, sums, broadcast `...` dims and contractions, the contractions through the GEMM
//! (one product per batch index). The schedule (see `einsum_schedule`) is made once for the planned
//! dims; all working buffers are planned scratch.

use std::marker::PhantomData;

use smallvec::SmallVec;

use strata_core::{DType, Device, Element};

use super::einsum_schedule::{Equation, Schedule, View};
use crate::kernels::{gemm, Float, GemmFloat};
use crate::support::numeric::Real;
use crate::support::strided::StridedWalk;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "Einsum";

/// Per-label (or per-buffer) lists: inline for the sizes equations use, so runs stay off the
/// heap.
type Labels<T> = SmallVec<[T; 12]>;

#[derive(Debug, Clone)]
pub struct Einsum {
    equation: Equation,
}

impl Einsum {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let text = ctx
            .attrs
            .string("equation")?
            .ok_or_else(|| OpError::attribute(OP, "equation", "is required"))?;
        let equation = Equation::parse(&text)?;
        if ctx.num_inputs != equation.input_count() {
            return Err(OpError::InputCount {
                op: OP.into(),
                expected: format!("{} (the equation's terms)", equation.input_count()),
                actual: ctx.num_inputs,
            });
        }
        Ok(Box::new(Einsum { equation }))
    }

    fn schedule_for(&self, inputs: &[&Fact]) -> OpResult<Option<Schedule>> {
        let mut dims = Vec::with_capacity(inputs.len());
        for f in inputs {
            match f.concrete() {
                Some(d) => dims.push(d),
                None => return Ok(None),
            }
        }
        let refs: Vec<&[usize]> = dims.iter().map(Vec::as_slice).collect();
        self.equation.schedule(&refs).map(Some)
    }
}

impl Operator for Einsum {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        if inputs.len() != self.equation.input_count() || inputs.iter().any(|f| !f.is_defined()) {
            return Err(OpError::InputCount {
                op: OP.into(),
                expected: self.equation.input_count().to_string(),
                actual: inputs.iter().filter(|f| f.is_defined()).count(),
            });
        }
        let dtype = inputs[0].dtype;
        if !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a floating-point type".into(),
                actual: dtype,
            });
        }
        if let Some((index, f)) = inputs.iter().enumerate().find(|(_, f)| f.dtype != dtype) {
            return Err(OpError::DType {
                op: OP.into(),
                index,
                expected: dtype.to_string(),
                actual: f.dtype,
            });
        }
        match self.schedule_for(inputs)? {
            Some(plan) => Ok(vec![Fact::known(dtype, &plan.out_dims)]),
            None => Err(OpError::shape(
                OP,
                format!(
                    "needs known input dims, got {:?}",
                    inputs.iter().map(|f| &f.dims).collect::<Vec<&Vec<Dim>>>()
                ),
            )),
        }
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let Some(plan) = self.schedule_for(inputs)? else {
            return Ok(0);
        };
        let wide = match inputs[0].dtype {
            DType::F64 => 8,
            _ => 4,
        };
        plan.scratch_len()?
            .checked_mul(wide)
            .ok_or_else(|| OpError::shape(OP, "scratch size overflows"))
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let plan = self
            .schedule_for(inputs)?
            .ok_or_else(|| OpError::shape(OP, "needs known input dims at plan time"))?;
        let dtype = inputs.first().map_or(DType::F32, |f| f.dtype);
        match (dtype, device) {
            (DType::F32, Device::Cpu) => Ok(Box::new(EinsumKernel::<f32>::new(plan))),
            (DType::F64, Device::Cpu) => Ok(Box::new(EinsumKernel::<f64>::new(plan))),
            (DType::F16, Device::Cpu) => Ok(Box::new(EinsumKernel::<strata_core::f16>::new(plan))),
            (DType::BF16, Device::Cpu) => {
                Ok(Box::new(EinsumKernel::<strata_core::bf16>::new(plan)))
            }
            (dtype, device) => Err(OpError::no_kernel(OP, dtype, device)),
        }
    }
}

#[derive(Debug)]
struct EinsumKernel<T> {
    plan: Schedule,
    _t: PhantomData<T>,
}

impl<T> EinsumKernel<T> {
    fn new(plan: Schedule) -> Self {
        EinsumKernel {
            plan,
            _t: PhantomData,
        }
    }
}

impl<T> Kernel for EinsumKernel<T>
where
    T: Element + Real,
    T::Wide: GemmFloat + bytemuck::Pod,
{
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let plan = &self.plan;
        let inputs = plan.contractions.len() + 1;
        let not_contiguous = || OpError::kernel(OP, "operands must be contiguous");
        let out = io.output(0);
        if out.dims() != plan.out_dims.as_slice() {
            return Err(OpError::kernel(
                OP,
                format!(
                    "output bound with dims {:?}, planned {:?}",
                    out.dims(),
                    plan.out_dims
                ),
            ));
        }
        let mut guard = match io.scratch {
            Some(s) => s.write_bytes(OP)?,
            None => return Err(OpError::kernel(OP, "needs planned scratch")),
        };
        let bytes = guard.bytes();
        let whole = bytes.len() / std::mem::size_of::<T::Wide>() * std::mem::size_of::<T::Wide>();
        let mut rest: &mut [T::Wide] = bytemuck::try_cast_slice_mut(&mut bytes[..whole])
            .map_err(|e| OpError::kernel(OP, format!("scratch: {e}")))?;
        // Carve every planned buffer off the scratch.
        let mut buffers: Labels<&mut [T::Wide]> = Labels::new();
        for &len in &plan.buffers {
            if rest.len() < len {
                return Err(OpError::kernel(OP, "scratch is smaller than planned"));
            }
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
            buffers.push(head);
            rest = tail;
        }
        for (i, buffer) in buffers.iter_mut().take(inputs).enumerate() {
            let x = io.input(i);
            let r = x.read::<T>()?;
            let src = r.as_slice().ok_or_else(not_contiguous)?;
            if src.len() != buffer.len() {
                return Err(OpError::kernel(
                    OP,
                    format!("input {i} has dims {:?}, not the planned ones", x.dims()),
                ));
            }
            for (d, &v) in buffer.iter_mut().zip(src) {
                *d = v.widen();
            }
        }
        for c in &plan.contractions {
            let (bs, m, k, n) = c.shape;
            // Every buffer a step reads was made before the ones it writes.
            let (done, packed_a) = split(&mut buffers, c.packed_a);
            gather(done[c.a.buffer], plan, &c.a, &c.a_order, c.a_keep, packed_a);
            let (done, packed_b) = split(&mut buffers, c.packed_b);
            gather(done[c.b.buffer], plan, &c.b, &c.b_order, c.b_keep, packed_b);
            let (done, product) = split(&mut buffers, c.out);
            let (packed_a, packed_b) = (&*done[c.packed_a], &*done[c.packed_b]);
            product.fill(<T::Wide as Float>::ZERO);
            if m == 0 || n == 0 || k == 0 {
                continue;
            }
            let stride =
                |v: usize| isize::try_from(v).map_err(|_| OpError::kernel(OP, "stride overflows"));
            let (ks, ns) = (stride(k)?, stride(n)?);
            for bi in 0..bs {
                gemm(
                    m,
                    n,
                    k,
                    &packed_a[bi * m * k..][..m * k],
                    (ks, 1),
                    &packed_b[bi * k * n..][..k * n],
                    (ns, 1),
                    &mut product[bi * m * n..][..m * n],
                    (ns, 1),
                    <T::Wide as Float>::ONE,
                    <T::Wide as Float>::ZERO,
                    io.threads,
                )?;
            }
        }
        let last = buffers.len() - 1;
        let (done, result) = split(&mut buffers, last);
        let keep = plan.out_dims.len();
        gather(
            done[plan.last.buffer],
            plan,
            &plan.last,
            &plan.last_order,
            keep,
            result,
        );
        let result = &*buffers[last];
        let mut wo = out.write::<T>()?;
        for (d, &v) in wo
            .as_mut_slice()
            .ok_or_else(not_contiguous)?
            .iter_mut()
            .zip(result.iter())
        {
            *d = T::narrow(v);
        }
        Ok(())
    }
}

/// The buffers before `i` (to read) and buffer `i` (to write).
fn split<'s, 'b, W>(buffers: &'s mut [&'b mut [W]], i: usize) -> (&'s [&'b mut [W]], &'s mut [W]) {
    let (done, rest) = buffers.split_at_mut(i);
    (done, &mut *rest[0])
}

/// Writes into `out` (contiguous over the first `keep` labels of `order`) the view's elements,
/// summed over the remaining labels of `order`. Labels of `order` the view lacks broadcast.
fn gather<W: GemmFloat>(
    src: &[W],
    plan: &Schedule,
    view: &View,
    order: &[usize],
    keep: usize,
    out: &mut [W],
) {
    let sizes: Labels<usize> = order.iter().map(|&l| plan.sizes[l]).collect();
    let strides: Labels<isize> = order
        .iter()
        .map(|l| {
            view.labels
                .iter()
                .position(|x| x == l)
                .map_or(0, |i| view.strides[i] as isize)
        })
        .collect();
    let (outer_sizes, inner_sizes) = sizes.split_at(keep);
    let (outer_strides, inner_strides) = strides.split_at(keep);
    let bases = StridedWalk::new(outer_sizes, [outer_strides], [0]);
    for (slot, [base]) in out.iter_mut().zip(bases) {
        let sum = StridedWalk::new(inner_sizes, [inner_strides], [base]);
        *slot = sum.fold(W::ZERO, |acc, [offset]| acc + src[offset as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::OpRun;
    use crate::{Attr, Attributes};
    use strata_core::Tensor;

    fn build(equation: &str, inputs: usize) -> OpResult<Box<dyn Operator>> {
        let attrs = Attributes::new(OP).with("equation", Attr::String(equation.into()));
        Einsum::build(&OpContext {
            op_type: OP,
            domain: "",
            opset: 12,
            attrs: &attrs,
            num_inputs: inputs,
            num_outputs: 1,
        })
    }

    /// Runs the operator through infer / scratch / kernel.
    fn run(equation: &str, inputs: &[Tensor]) -> OpResult<Tensor> {
        let mut out = OpRun::new(OP, 12)
            .attrs(&[("equation", Attr::String(equation.into()))])
            .run(inputs)?;
        Ok(out.remove(0))
    }

    fn t(data: &[f32], dims: &[usize]) -> Tensor {
        Tensor::from_slice(data, dims).unwrap()
    }

    #[test]
    fn matmul_transpose_sum_and_inner_product() {
        let a = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
        let b = t(&[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
        let y = run("ij,jk->ik", &[a.clone(), b]).unwrap();
        assert_eq!(y.dims(), &[2, 2]);
        assert_eq!(y.to_vec::<f32>().unwrap(), [4.0, 5.0, 10.0, 11.0]);
        let y = run("ij->ji", std::slice::from_ref(&a)).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let y = run("ij -> i", std::slice::from_ref(&a)).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [6.0, 15.0]);
        // Implicit output "ij,ij" sums everything: 1+4+9+16+25+36.
        let y = run("ij,ij", &[a.clone(), a]).unwrap();
        assert_eq!(
            (y.dims().len(), y.to_vec::<f32>().unwrap()),
            (0, vec![91.0])
        );
        let s = Tensor::from_slice(&[2.5f32], &[]).unwrap();
        assert_eq!(run("->", &[s]).unwrap().to_vec::<f32>().unwrap(), [2.5]);
    }

    #[test]
    fn batched_diagonal_broadcast_and_three_operands_in_f64() {
        // "...ii->...i": the diagonals of two 2x2 matrices.
        let x =
            Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 2, 2]).unwrap();
        let y = run("...ii->...i", std::slice::from_ref(&x)).unwrap();
        assert_eq!(y.to_vec::<f64>().unwrap(), [1.0, 4.0, 5.0, 8.0]);
        // Trace per batch.
        let y = run("bii->b", std::slice::from_ref(&x)).unwrap();
        assert_eq!(y.to_vec::<f64>().unwrap(), [5.0, 13.0]);
        // Batch matmul against itself: [[1,2],[3,4]]^2 = [[7,10],[15,22]], second [[67,78],[91,106]].
        let y = run("bij,bjk->bik", &[x.clone(), x.clone()]).unwrap();
        assert_eq!(
            y.to_vec::<f64>().unwrap(),
            [7.0, 10.0, 15.0, 22.0, 67.0, 78.0, 91.0, 106.0]
        );
        // Broadcast ellipsis: [1, 2] against [2, 2] rows, summed over i.
        let v = Tensor::from_slice(&[1.0f64, -1.0], &[1, 2]).unwrap();
        let m = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 5.0], &[2, 2]).unwrap();
        let y = run("...i,...i->...", &[v.clone(), m.clone()]).unwrap();
        assert_eq!(y.to_vec::<f64>().unwrap(), [-1.0, -2.0]);
        // Three operands: v^T M v with v = [1, -1] -> 1 - 2 - 3 + 5 = 1.
        let v1 = Tensor::from_slice(&[1.0f64, -1.0], &[2]).unwrap();
        let y = run("i,ij,j->", &[v1.clone(), m, v1]).unwrap();
        assert_eq!(y.to_vec::<f64>().unwrap(), [1.0]);
    }

    #[test]
    fn bfloat16_computes_in_f32() {
        use strata_core::bf16;
        let a: Vec<bf16> = [1.0f32, 2.0, 3.0, 4.0].map(bf16::from_f32).to_vec();
        let x = Tensor::from_slice(&a, &[2, 2]).unwrap();
        let y = run("ij->i", &[x]).unwrap();
        let v: Vec<f32> = y
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert_eq!(v, [3.0, 7.0]);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert!(build("ij,jk->ik", 1).is_err());
        let attrs = Attributes::new(OP);
        let ctx = OpContext {
            op_type: OP,
            domain: "",
            opset: 12,
            attrs: &attrs,
            num_inputs: 1,
            num_outputs: 1,
        };
        assert!(Einsum::build(&ctx).is_err());
        let a = t(&[1.0; 6], &[2, 3]);
        let err = run("ij,jk->ik", &[a.clone(), a.clone()]).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
        let ints = Tensor::from_slice(&[1i32, 2], &[2]).unwrap();
        assert!(matches!(run("i->", &[ints]), Err(OpError::DType { .. })));
        let mixed = Tensor::from_slice(&[1.0f64; 3], &[3]).unwrap();
        assert!(matches!(
            run("ij,j->i", &[a, mixed]),
            Err(OpError::DType { index: 1, .. })
        ));
    }
}
