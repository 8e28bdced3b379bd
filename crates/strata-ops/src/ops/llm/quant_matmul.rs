//! QuantMatMul: `Y = X · Wᵀ (+ B)` with `W (n, k)` in any GGUF weight type, read in place from
//! the mapped file, `X (..., k)` f32 and an optional f32 bias `B (n)` (Qwen2's q/k/v
//! projections). The product runs on `kernels::quant`, parallel over output rows on the intra-op
//! pool. Weights in the legacy GGML formats (q4_0 … q8_0) always take the integer dot against
//! 8-bit activations, for prefill as for decode: that is how llama.cpp computes every product
//! with them, so logits match its numbers; the other types dequantize each weight row once.

use strata_core::{DType, Device, QUANT_BLOCK};

use crate::kernels::quant::{quant_matmul_with, Isa, Q8Block, QuantMatrix, Strategy};
use crate::kernels::KernelResult;
use crate::support::inputs::{optional, required};
use crate::support::kernel_choice::cpu_only;
use crate::{Dim, Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QuantMatMul";

#[derive(Clone, Copy, Debug)]
pub struct QuantMatMul;

impl QuantMatMul {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QuantMatMul))
    }
}

/// `(rows of X, k, n, weight dtype)` from concrete facts.
fn geometry(inputs: &[&Fact]) -> OpResult<(usize, usize, usize, DType)> {
    let x = required(OP, inputs, 0)?.concrete_or_err(OP)?;
    let w = required(OP, inputs, 1)?;
    let wd = w.concrete_or_err(OP)?;
    let k = x.last().copied().unwrap_or(1);
    let m = strata_core::shape::checked_numel(&x[..x.len().saturating_sub(1)])?;
    Ok((m, k, wd[0], w.dtype))
}

impl Operator for QuantMatMul {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let w = required(OP, inputs, 1)?;
        if x.dtype != DType::F32 {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "float32".into(),
                actual: x.dtype,
            });
        }
        if w.rank() != 2 || x.rank() == 0 {
            return Err(OpError::shape(
                OP,
                format!(
                    "X {:?} must have a rank and W {:?} must be 2-D (n, k)",
                    x.dims, w.dims
                ),
            ));
        }
        let (n, k) = (&w.dims[0], &w.dims[1]);
        if let (Some(xk), Some(wk)) = (x.dims[x.rank() - 1].known(), k.known()) {
            if xk != wk {
                return Err(OpError::shape(
                    OP,
                    format!("X has {xk} features but W {:?} takes {wk}", w.dims),
                ));
            }
        }
        if let Some(bias) = optional(inputs, 2) {
            let fits = bias.dtype == DType::F32
                && bias.rank() == 1
                && match (bias.dims[0].known(), n.known()) {
                    (Some(b), Some(n)) => b == n,
                    _ => true,
                };
            if !fits {
                return Err(OpError::shape(
                    OP,
                    format!(
                        "the bias must be float32 ({n:?}), got {} {:?}",
                        bias.dtype, bias.dims
                    ),
                ));
            }
        }
        let mut dims: Vec<Dim> = x.dims[..x.rank() - 1].to_vec();
        dims.push(n.clone());
        Ok(vec![Fact::new(DType::F32, dims)])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let w = required(OP, inputs, 1)?;
        cpu_only(OP, w.dtype, device)?;
        Ok(Box::new(QuantMatMulKernel))
    }

    fn scratch_bytes(&self, inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        let (m, k, _, dtype) = geometry(inputs)?;
        // One block of slack to align the activation blocks inside the byte buffer.
        Ok((activation_blocks(dtype, m, k) + 1) * std::mem::size_of::<Q8Block>())
    }
}

/// The product's strategy for `dtype` weights (see the module docs).
fn strategy(dtype: DType) -> Strategy {
    if Strategy::IntDot.supports(dtype) {
        Strategy::IntDot
    } else {
        Strategy::Dequant
    }
}

/// 8-bit activation blocks the product needs for `m` rows of `k`.
fn activation_blocks(dtype: DType, m: usize, k: usize) -> usize {
    match strategy(dtype) {
        Strategy::IntDot if k.is_multiple_of(QUANT_BLOCK) => m * (k / QUANT_BLOCK),
        _ => 0,
    }
}

/// The weight bytes of an `(n, k)` matrix, checked: exactly the bytes its type needs.
pub(super) fn weight_matrix(
    dtype: DType,
    rows: usize,
    cols: usize,
    bytes: &[u8],
) -> KernelResult<QuantMatrix<'_>> {
    let need = dtype
        .bytes_for(cols)
        .ok()
        .and_then(|row| row.checked_mul(rows))
        .unwrap_or(usize::MAX);
    QuantMatrix::new(dtype, rows, cols, bytes.get(..need).unwrap_or(bytes))
}

#[derive(Debug)]
struct QuantMatMulKernel;

impl Kernel for QuantMatMulKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x_t, w_t, y_t) = (io.input(0), io.input(1), io.output(0));
        let &[n, k] = w_t.dims() else {
            return Err(OpError::shape(OP, "W must be 2-D"));
        };
        let m = x_t.numel().checked_div(k).unwrap_or(0);
        if x_t.dims().last() != Some(&k) || y_t.numel() != m * n {
            return Err(OpError::shape(
                OP,
                format!(
                    "X {:?}, W {:?} and Y {:?} do not agree",
                    x_t.dims(),
                    w_t.dims(),
                    y_t.dims()
                ),
            ));
        }
        let w_bytes = w_t.read_bytes(OP)?;
        let w = weight_matrix(w_t.dtype(), n, k, w_bytes.bytes())?;
        let x = x_t.read::<f32>()?;
        let x = x
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "X is not contiguous"))?;
        let mut y_w = y_t.write::<f32>()?;
        let y = y_w
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "Y is not contiguous"))?;

        let need = activation_blocks(w.dtype(), m, k);
        let mut scratch_w = match io.scratch {
            Some(s) if need > 0 => Some(s.write_bytes(OP)?),
            _ => None,
        };
        let blocks: &mut [Q8Block] = match scratch_w.as_mut() {
            Some(bytes) => q8_blocks(bytes.bytes(), need)?,
            None if need == 0 => &mut [],
            None => return Err(OpError::kernel(OP, "no scratch for the activation blocks")),
        };
        quant_matmul_with(
            strategy(w.dtype()),
            Isa::detect(),
            &w,
            x,
            m,
            y,
            blocks,
            io.threads,
        )?;

        if io.inputs.len() > 2 && io.input(2).is_defined() {
            let bias = io.input(2).read::<f32>()?;
            let bias = bias
                .as_slice()
                .filter(|b| b.len() == n)
                .ok_or_else(|| OpError::shape(OP, format!("the bias must hold {n} values")))?;
            for row in y.chunks_exact_mut(n.max(1)) {
                row.iter_mut().zip(bias).for_each(|(y, b)| *y += b);
            }
        }
        Ok(())
    }
}

/// `count` activation blocks carved from the scratch bytes (aligned inside them).
fn q8_blocks(bytes: &mut [u8], count: usize) -> OpResult<&mut [Q8Block]> {
    let skip = bytes.as_ptr().align_offset(std::mem::align_of::<Q8Block>());
    let size = count * std::mem::size_of::<Q8Block>();
    if skip == usize::MAX || skip + size > bytes.len() {
        return Err(OpError::kernel(
            OP,
            format!(
                "scratch of {} bytes is too small for {count} blocks",
                bytes.len()
            ),
        ));
    }
    let bytes = &mut bytes[skip..skip + size];
    // SAFETY: the range is aligned for Q8Block and holds exactly `count` of them; Q8Block is
    // plain data (two f32 and 32 i8) for which every bit pattern is a valid value, and the
    // mutable borrow of the bytes is handed over to the returned slice.
    Ok(unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<Q8Block>(), count) })
}
