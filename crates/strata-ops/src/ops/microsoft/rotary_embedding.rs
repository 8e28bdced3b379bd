//! com.microsoft RotaryEmbedding: rotates the first `rotary_embedding_dim` features of every
//! head (the whole head when 0) by the angle of its position, pairing feature `i` with
//! `i + dim/2` (or, `interleaved`, `2i` with `2i + 1`) — the rotation of ONNX RotaryEmbedding,
//! whose row kernel it reuses, with onnxruntime's inputs: input `(B, S, hidden)` or
//! `(B, heads, S, head_size)`, position_ids `(B, S)` or `(1)` (a start offset: token `s` is at
//! `offset + s`), and cos/sin caches `(max_position, dim/2)`. Packed batching is refused.

use std::marker::PhantomData;

use strata_core::{DType, Device};

use super::access::{contiguous, contiguous_mut};
use crate::cpu_float_kernel;
use crate::ops::attention::rotary_embedding::{rotate_heads, HeadLayout};
use crate::support::inputs::required;
use crate::support::numeric::Real;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "RotaryEmbedding";

#[derive(Debug, Clone, Copy)]
pub(crate) struct MsRotaryEmbedding {
    interleaved: bool,
    /// 0: the head size.
    rotary_dim: usize,
    /// 0: from the caches.
    num_heads: usize,
}

pub(crate) fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    let a = ctx.attrs;
    let flag = |name: &str| -> OpResult<bool> {
        match a.int_or(name, 0)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(OpError::attribute(
                OP,
                name,
                format!("must be 0 or 1, got {v}"),
            )),
        }
    };
    if flag("is_packed_batching")? {
        return Err(OpError::attribute(
            OP,
            "is_packed_batching",
            "packed batching is not supported",
        ));
    }
    let count = |name: &str| -> OpResult<usize> {
        let v = a.int_or(name, 0)?;
        usize::try_from(v)
            .map_err(|_| OpError::attribute(OP, name, format!("must not be negative, got {v}")))
    };
    Ok(Box::new(MsRotaryEmbedding {
        interleaved: flag("interleaved")?,
        rotary_dim: count("rotary_embedding_dim")?,
        num_heads: count("num_heads")?,
    }))
}

/// Sizes of one call.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    batch: usize,
    heads: usize,
    seq: usize,
    head_size: usize,
    half: usize,
    /// 3-D input `(B, S, hidden)`; else `(B, heads, S, head_size)`.
    packed: bool,
}

impl MsRotaryEmbedding {
    fn geometry(&self, x: &[usize], cos: &[usize], sin: &[usize]) -> OpResult<Geometry> {
        let err = |m: String| OpError::shape(OP, m);
        if cos.len() != 2 || cos != sin {
            return Err(err(format!(
                "cos_cache {cos:?} and sin_cache {sin:?} must be equal (max_position, dim/2)"
            )));
        }
        let half = cos[1];
        let (batch, seq, heads, head_size, packed) = match *x {
            [b, s, hidden] => {
                let head_size = if self.num_heads > 0 {
                    if !hidden.is_multiple_of(self.num_heads) {
                        return Err(err(format!(
                            "hidden {hidden} is not a multiple of num_heads {}",
                            self.num_heads
                        )));
                    }
                    hidden / self.num_heads
                } else if self.rotary_dim == 0 {
                    2 * half
                } else {
                    return Err(OpError::attribute(
                        OP,
                        "num_heads",
                        "needed with rotary_embedding_dim",
                    ));
                };
                if head_size == 0 || !hidden.is_multiple_of(head_size) {
                    return Err(err(format!(
                        "hidden {hidden} is not a multiple of the head size {head_size}"
                    )));
                }
                (b, s, hidden / head_size, head_size, true)
            }
            [b, n, s, h] => (b, s, n, h, false),
            _ => return Err(err(format!("input must be 3-D or 4-D, got {x:?}"))),
        };
        let rotary = if self.rotary_dim == 0 {
            head_size
        } else {
            self.rotary_dim
        };
        if rotary != 2 * half || rotary > head_size {
            return Err(err(format!(
                "the caches rotate {} features; rotary_embedding_dim {rotary} and head size {head_size} disagree",
                2 * half
            )));
        }
        Ok(Geometry {
            batch,
            heads,
            seq,
            head_size,
            half,
            packed,
        })
    }
}

impl Operator for MsRotaryEmbedding {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let pos = required(OP, inputs, 1)?;
        let (cos, sin) = (required(OP, inputs, 2)?, required(OP, inputs, 3)?);
        if !x.dtype.is_float() || cos.dtype != x.dtype || sin.dtype != x.dtype {
            return Err(OpError::DType {
                op: OP.into(),
                index: 2,
                expected: "a float type, the same for input and caches".into(),
                actual: cos.dtype,
            });
        }
        if pos.dtype != DType::I64 {
            return Err(OpError::DType {
                op: OP.into(),
                index: 1,
                expected: "int64".into(),
                actual: pos.dtype,
            });
        }
        if let (Some(xd), Some(cd), Some(sd)) = (x.concrete(), cos.concrete(), sin.concrete()) {
            self.geometry(&xd, &cd, &sd)?;
        }
        Ok(vec![Fact::new(x.dtype, x.dims.clone())])
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 0)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => MsRotaryKernel::<T> { op: *self, _t: PhantomData })
    }
}

#[derive(Debug)]
struct MsRotaryKernel<T> {
    op: MsRotaryEmbedding,
    _t: PhantomData<T>,
}

impl<T: Real> Kernel for MsRotaryKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x_t, pos_t, cos_t, sin_t) = (io.input(0), io.input(1), io.input(2), io.input(3));
        let g = self.op.geometry(x_t.dims(), cos_t.dims(), sin_t.dims())?;
        let (xr, pr, cr, sr) = (
            x_t.read::<T>()?,
            pos_t.read::<i64>()?,
            cos_t.read::<T>()?,
            sin_t.read::<T>()?,
        );
        let x = contiguous(OP, "input", &xr)?;
        let pos = contiguous(OP, "position_ids", &pr)?;
        let (cos, sin) = (
            contiguous(OP, "cos_cache", &cr)?,
            contiguous(OP, "sin_cache", &sr)?,
        );
        let mut yw = io.output(0).write::<T>()?;
        let y = contiguous_mut(OP, "output", &mut yw)?;
        if y.len() != x.len() || x.len() != g.batch * g.seq * g.heads * g.head_size {
            return Err(OpError::kernel(OP, "input and output sizes disagree"));
        }
        let offset_form = pos.len() == 1;
        if !offset_form && pos.len() != g.batch * g.seq {
            return Err(OpError::kernel(
                OP,
                format!(
                    "position_ids has {} elements; need 1 or batch × seq = {}",
                    pos.len(),
                    g.batch * g.seq
                ),
            ));
        }
        let max_position = cos.len() / g.half.max(1);
        let d = g.head_size;
        for b in 0..g.batch {
            for s in 0..g.seq {
                let p = if offset_form {
                    pos[0].saturating_add(s as i64)
                } else {
                    pos[b * g.seq + s]
                };
                let row = usize::try_from(p)
                    .ok()
                    .filter(|&r| r < max_position)
                    .ok_or_else(|| {
                        OpError::kernel(
                            OP,
                            format!("position {p} is outside the cache of {max_position}"),
                        )
                    })?;
                let (c, sn) = (
                    &cos[row * g.half..(row + 1) * g.half],
                    &sin[row * g.half..(row + 1) * g.half],
                );
                let layout = HeadLayout {
                    seq: g.seq,
                    heads: g.heads,
                    head_size: d,
                    packed: g.packed,
                };
                rotate_heads(x, y, layout, (b, s), (c, sn), self.op.interleaved);
            }
        }
        Ok(())
    }
}
