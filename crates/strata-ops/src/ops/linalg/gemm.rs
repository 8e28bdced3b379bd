//! Gemm: Y = alpha · op(A) · op(B) + beta · C, with transposes as strides (no copies) and C
//! broadcast to [M, N].

use strata_core::{DType, Device, Element};

use crate::kernels::gemm::{gemm_prepacked_with, Epilogue, FusedAct, FusedEpilogue};
use crate::kernels::{gemm, gemm_prepacked, Activation, GemmFloat, Prepacked};
use crate::support::strided::for_each_broadcast;
use crate::{
    broadcast_dims, Dim, EpilogueStep, Fact, Fused, FusesEpilogue, Kernel, KernelCapabilities,
    KernelIo, OpCapabilities, OpContext, OpError, OpResult, Operator,
};

#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
    /// An activation fused in by the graph optimizer, applied after `beta * C` is added.
    post: Activation,
}

/// The kernel applies one activation to the finished output (bias already fused as C).
impl FusesEpilogue for Gemm {
    fn fuse(&self, step: EpilogueStep) -> Option<Fused> {
        match step {
            EpilogueStep::Activation(post) if self.post == Activation::None => Some(Fused {
                op: Box::new(Gemm { post, ..*self }),
                operand_slot: None,
            }),
            _ => None,
        }
    }
}

impl Gemm {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let a = ctx.attrs;
        Ok(Box::new(Gemm {
            alpha: a.float_or("alpha", 1.0)?,
            beta: a.float_or("beta", 1.0)?,
            trans_a: a.int_or("transA", 0)? != 0,
            trans_b: a.int_or("transB", 0)? != 0,
            post: Activation::None,
        }))
    }

    fn mnk(&self, a: &[Dim], b: &[Dim]) -> OpResult<(Dim, Dim)> {
        if a.len() != 2 || b.len() != 2 {
            return Err(OpError::shape(
                "Gemm",
                format!("A and B must be matrices, got {a:?} and {b:?}"),
            ));
        }
        let (m, ka) = if self.trans_a {
            (&a[1], &a[0])
        } else {
            (&a[0], &a[1])
        };
        let (kb, n) = if self.trans_b {
            (&b[1], &b[0])
        } else {
            (&b[0], &b[1])
        };
        if let (Dim::Known(x), Dim::Known(y)) = (ka, kb) {
            if x != y {
                return Err(OpError::shape(
                    "Gemm",
                    format!(
                        "inner dims differ: A {a:?} (transA {}) and B {b:?} (transB {})",
                        self.trans_a, self.trans_b
                    ),
                ));
            }
        }
        Ok((m.clone(), n.clone()))
    }
}

/// Gemm on 8-bit operands (`alpha` and `beta` 1, no fused activation): com.microsoft QGemm.
/// The caller checks that C, if any, is int32 at `a_scale · b_scale`.
impl crate::HasQLinearForm for Gemm {
    fn qlinear(&self) -> Option<Box<dyn Operator>> {
        if self.post != Activation::None || self.alpha != 1.0 || self.beta != 1.0 {
            return None;
        }
        Some(Box::new(
            crate::ops::quantization::microsoft::qgemm::QGemm::with_attrs(
                self.alpha,
                self.trans_a,
                self.trans_b,
            ),
        ))
    }

    fn weight_channel_axis(&self) -> Option<usize> {
        // Per-column scales of B run along N.
        Some(if self.trans_b { 0 } else { 1 })
    }
}

impl Operator for Gemm {
    fn op_type(&self) -> &str {
        "Gemm"
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let (a, b) = match inputs {
            [a, b, ..] if a.is_defined() && b.is_defined() => (a, b),
            _ => {
                return Err(OpError::InputCount {
                    op: "Gemm".into(),
                    expected: "2 or 3".into(),
                    actual: inputs.len(),
                })
            }
        };
        let (m, n) = self.mnk(&a.dims, &b.dims)?;
        let out = vec![m, n];
        if let Some(c) = inputs.get(2).filter(|c| c.is_defined()) {
            let joint = broadcast_dims("Gemm", &c.dims, &out)?;
            if joint.len() != 2 {
                return Err(OpError::shape(
                    "Gemm",
                    format!("C {:?} does not broadcast to [M, N] {out:?}", c.dims),
                ));
            }
        }
        Ok(vec![Fact::new(a.dtype, out)])
    }

    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities {
            epilogue: Some(self),
            qlinear: Some(self),
            ..OpCapabilities::default()
        }
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        match (inputs[0].dtype, device) {
            (DType::F32, Device::Cpu) => Ok(Box::new(GemmKernel::<f32> {
                op: *self,
                packed_b: self.prepack_b(inputs, outputs)?,
            })),
            (DType::F64, Device::Cpu) => Ok(Box::new(GemmKernel::<f64> {
                op: *self,
                packed_b: self.prepack_b(inputs, outputs)?,
            })),
            (dtype, device) => Err(OpError::no_kernel("Gemm", dtype, device)),
        }
    }
}

impl Gemm {
    /// A constant B (the weights of a fully connected layer) packed once for the products (R1:
    /// held by the kernel in Persistent memory, shared by every context; the plan then frees
    /// the original). Batch-1 products stream the packed slivers, larger ones use them as the
    /// driver's B panels.
    fn prepack_b<T: Element + GemmFloat>(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
    ) -> OpResult<Option<Prepacked<T>>> {
        let Some(b) = inputs[1].value.as_ref() else {
            return Ok(None);
        };
        if b.rank() != 2 {
            return Ok(None);
        }
        let read = b.read::<T>()?;
        let Some(values) = read.as_slice() else {
            return Ok(None);
        };
        let (rows_b, cols_b) = (b.dims()[0], b.dims()[1]);
        let (k, n, strides) = if self.trans_b {
            (cols_b, rows_b, (1, cols_b as isize))
        } else {
            (rows_b, cols_b, (cols_b as isize, 1))
        };
        Ok(Some(Prepacked::b(k, n, values, strides)?))
    }
}

/// Products with more rows than this use the packed B as the driver's panels, and run the bias
/// and activation on each finished tile ([`GemmKernel::finish_in_epilogue`]).
const TILED_ROWS: usize = 4;

impl<T: Element + GemmFloat> GemmKernel<T> {
    /// The product with prepacked B and `C` a row of `n` (or absent): `beta * C` and the
    /// activation applied to each finished tile while it is in cache, instead of a copy of C
    /// before the product and a pass for the activation after it. Returns false (nothing
    /// done) for few rows or other shapes of C.
    #[allow(clippy::too_many_arguments)]
    fn finish_in_epilogue(
        &self,
        pb: &Prepacked<T>,
        c: &strata_core::Tensor,
        m: usize,
        n: usize,
        k: usize,
        sa: &[T],
        so: &mut [T],
        threads: usize,
    ) -> OpResult<bool> {
        if m <= TILED_ROWS || pb.extent() != n || pb.depth() != k {
            return Ok(false);
        }
        let rc = if c.is_defined() {
            let row = matches!(c.dims(), [x] | [1, x] if *x == n);
            if !row {
                return Ok(false);
            }
            Some(c.read::<T>()?)
        } else {
            None
        };
        let bias = match &rc {
            Some(r) => match r.as_slice() {
                Some(s) => s,
                None => return Ok(false),
            },
            None => &[],
        };
        let beta = T::from_f32(self.op.beta);
        let post = self.op.post;
        let finish = |_i: usize, j: usize, row: &mut [T]| {
            if !bias.is_empty() {
                let b = &bias[j..j + row.len()];
                row.iter_mut().zip(b).for_each(|(v, &b)| *v += beta * b);
            }
            post.apply_all(row);
        };
        let a_strides = if self.op.trans_a {
            (1, m as isize)
        } else {
            (k as isize, 1)
        };
        let needs = !bias.is_empty() || post != Activation::None;
        // The microkernels add the bias row and apply a simple activation in registers (a bias
        // scaled by beta != 1 takes the closure).
        let fused = FusedAct::of(post)
            .filter(|_| needs && (bias.is_empty() || beta == T::ONE))
            .map(|act| FusedEpilogue {
                residual: None,
                row_bias: None,
                col_bias: (!bias.is_empty()).then_some(bias),
                act,
            });
        gemm_prepacked_with(
            pb,
            m,
            sa,
            a_strides,
            so,
            (n as isize, 1),
            (T::from_f32(self.op.alpha), T::from_f32(0.0)),
            needs.then_some(&finish as &Epilogue<'_, T>),
            fused,
            threads,
        )?;
        Ok(true)
    }
}

#[derive(Debug)]
struct GemmKernel<T> {
    op: Gemm,
    /// B packed at plan time, when it is a constant.
    packed_b: Option<Prepacked<T>>,
}

impl<T: Element + GemmFloat> Kernel for GemmKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (a, b, c, out) = (io.input(0), io.input(1), io.input(2), io.output(0));
        let (m, n) = (out.dims()[0], out.dims()[1]);
        let k = if self.op.trans_a {
            a.dims()[0]
        } else {
            a.dims()[1]
        };
        let ra = a.read::<T>()?;
        let mut w = out.write::<T>()?;
        let not_contiguous = || OpError::kernel("Gemm", "operands must be contiguous");
        let sa = ra.as_slice().ok_or_else(not_contiguous)?;
        let so = w.as_mut_slice().ok_or_else(not_contiguous)?;
        if let Some(pb) = &self.packed_b {
            if self.finish_in_epilogue(pb, c, m, n, k, sa, so, io.threads)? {
                return Ok(());
            }
        }
        let beta = if c.is_defined() {
            let lc = c.layout().expand(out.dims())?;
            let rc = c.read::<T>()?;
            let data = rc.storage_data();
            let lo = out.layout();
            for_each_broadcast(lo, &lc, |i, _, pc| so[i] = data[pc]);
            T::from_f32(self.op.beta)
        } else {
            T::from_f32(0.0)
        };
        let a_strides = if self.op.trans_a {
            (1, m as isize)
        } else {
            (k as isize, 1)
        };
        let b_strides = if self.op.trans_b {
            (1, k as isize)
        } else {
            (n as isize, 1)
        };
        let alpha = T::from_f32(self.op.alpha);
        match &self.packed_b {
            // The packed B is all this kernel reads (the plan freed the original).
            Some(pb) => {
                if pb.extent() != n || pb.depth() != k {
                    return Err(OpError::kernel(
                        "Gemm",
                        format!(
                            "B was packed as {} x {}, the run needs {k} x {n}",
                            pb.depth(),
                            pb.extent()
                        ),
                    ));
                }
                gemm_prepacked(
                    pb,
                    m,
                    sa,
                    a_strides,
                    so,
                    (n as isize, 1),
                    alpha,
                    beta,
                    io.threads,
                )?
            }
            None => {
                let rb = b.read::<T>()?;
                gemm(
                    m,
                    n,
                    k,
                    sa,
                    a_strides,
                    rb.as_slice().ok_or_else(not_contiguous)?,
                    b_strides,
                    so,
                    (n as isize, 1),
                    alpha,
                    beta,
                    io.threads,
                )?
            }
        }
        self.op.post.apply_all(so);
        Ok(())
    }

    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            packed_inputs: if self.packed_b.is_some() { &[1] } else { &[] },
            ..KernelCapabilities::default()
        }
    }
}
