//! ONNX RotaryEmbedding (opset 23): rotates the first `rotary_embedding_dim` features of each
//! head (all of them when 0) by per-position angles given as cos/sin caches, pairing feature
//! `i` with `i + dim/2` (or, `interleaved`, `2i` with `2i + 1`). Input is 4-D `(batch, heads,
//! seq, head_size)` or 3-D `(batch, seq, hidden)` split by `num_heads`. The caches are
//! `(max_position, dim/2)` indexed by `position_ids (batch, seq)`, or `(batch, seq, dim/2)`
//! without position ids. f32, f64, f16, bf16 (16-bit types compute in f32).

use std::marker::PhantomData;

use strata_core::{DType, Device};

use crate::cpu_float_kernel;
use crate::support::inputs::{optional, required};
use crate::support::numeric::Real;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "RotaryEmbedding";

#[derive(Clone, Copy, Debug)]
pub struct RotaryEmbedding {
    interleaved: bool,
    /// 0: the whole head.
    rotary_dim: usize,
    num_heads: Option<usize>,
}

/// Sizes of one call, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    batch: usize,
    heads: usize,
    seq: usize,
    head_size: usize,
    rotary_dim: usize,
    /// 3-D input `(batch, seq, heads * head_size)`.
    packed: bool,
}

impl RotaryEmbedding {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let interleaved = match ctx.attrs.int_or("interleaved", 0)? {
            0 => false,
            1 => true,
            v => {
                return Err(OpError::attribute(
                    OP,
                    "interleaved",
                    format!("must be 0 or 1, got {v}"),
                ))
            }
        };
        let non_negative = |name: &str| -> OpResult<Option<usize>> {
            ctx.attrs
                .int(name)?
                .map(|v| {
                    usize::try_from(v).map_err(|_| {
                        OpError::attribute(OP, name, format!("must not be negative, got {v}"))
                    })
                })
                .transpose()
        };
        let rotary_dim = non_negative("rotary_embedding_dim")?.unwrap_or(0);
        let num_heads = non_negative("num_heads")?.filter(|&n| n > 0);
        Ok(Box::new(RotaryEmbedding {
            interleaved,
            rotary_dim,
            num_heads,
        }))
    }

    /// Validates the input's and caches' dims (`positions`: the position_ids dims when given).
    fn geometry(
        &self,
        x: &[usize],
        cos: &[usize],
        sin: &[usize],
        positions: Option<&[usize]>,
    ) -> OpResult<Geometry> {
        let shape_err = |m: String| OpError::shape(OP, m);
        let (batch, heads, seq, head_size, packed) = match *x {
            [b, h, s, d] => (b, h, s, d, false),
            [b, s, hidden] => {
                let h = self.num_heads.ok_or_else(|| {
                    OpError::attribute(OP, "num_heads", "a 3-D input needs a positive num_heads")
                })?;
                if !hidden.is_multiple_of(h) {
                    return Err(shape_err(format!(
                        "hidden size {hidden} is not a multiple of num_heads {h}"
                    )));
                }
                (b, h, s, hidden / h, true)
            }
            _ => return Err(shape_err(format!("input must be 3-D or 4-D, got {x:?}"))),
        };
        let rotary_dim = if self.rotary_dim == 0 {
            head_size
        } else {
            self.rotary_dim
        };
        if rotary_dim > head_size || !rotary_dim.is_multiple_of(2) {
            return Err(OpError::attribute(
                OP,
                "rotary_embedding_dim",
                format!("{rotary_dim} must be even and at most the head size {head_size}"),
            ));
        }
        let half = rotary_dim / 2;
        let cache_ok = |c: &[usize]| match positions {
            Some(_) => c.len() == 2 && c[1] == half,
            None => c == [batch, seq, half],
        };
        if !cache_ok(cos) || !cache_ok(sin) || cos != sin {
            return Err(shape_err(format!(
                "cos_cache {cos:?} / sin_cache {sin:?} must be {} with last dim {half}",
                if positions.is_some() {
                    "(max_position, dim/2)".to_string()
                } else {
                    format!("{:?}", [batch, seq, half])
                }
            )));
        }
        if let Some(p) = positions.filter(|p| *p != [batch, seq]) {
            return Err(shape_err(format!(
                "position_ids {p:?} must be (batch, seq) = {:?}",
                [batch, seq]
            )));
        }
        Ok(Geometry {
            batch,
            heads,
            seq,
            head_size,
            rotary_dim,
            packed,
        })
    }
}

impl Operator for RotaryEmbedding {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = required(OP, inputs, 0)?;
        let (cos, sin) = (required(OP, inputs, 1)?, required(OP, inputs, 2)?);
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 0,
                expected: "a float type".into(),
                actual: x.dtype,
            });
        }
        for (index, f) in [(1, cos), (2, sin)] {
            if f.dtype != x.dtype {
                return Err(OpError::DType {
                    op: OP.into(),
                    index,
                    expected: format!("{} like the input", x.dtype),
                    actual: f.dtype,
                });
            }
        }
        let positions = optional(inputs, 3);
        if let Some(p) = positions.filter(|p| p.dtype != DType::I64) {
            return Err(OpError::DType {
                op: OP.into(),
                index: 3,
                expected: "int64".into(),
                actual: p.dtype,
            });
        }
        if let (Some(xd), Some(cd), Some(sd)) = (x.concrete(), cos.concrete(), sin.concrete()) {
            match positions.map(|p| p.concrete()) {
                Some(None) => {}
                p => {
                    self.geometry(&xd, &cd, &sd, p.flatten().as_deref())?;
                }
            }
        } else if !(x.rank() == 3 || x.rank() == 4) {
            return Err(OpError::shape(
                OP,
                format!("input must be 3-D or 4-D, got {:?}", x.dims),
            ));
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
        cpu_float_kernel!(OP, dtype, device, T => RotaryKernel::<T> {
            op: *self,
            _t: PhantomData,
        })
    }
}

#[derive(Debug)]
struct RotaryKernel<T> {
    op: RotaryEmbedding,
    _t: PhantomData<T>,
}

/// Rotates one head row: `x` in, `out` out (same length), with the row's `cos` / `sin`.
/// Where the heads of one position lie: `[B, S, H, D]` (`packed`) or `[B, H, S, D]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadLayout {
    pub seq: usize,
    pub heads: usize,
    pub head_size: usize,
    pub packed: bool,
}

/// Rotates every head of position `s` of batch `b` with one cache row (`cos`, `sin`).
pub(crate) fn rotate_heads<T: Real>(
    x: &[T],
    out: &mut [T],
    layout: HeadLayout,
    (b, s): (usize, usize),
    (cos, sin): (&[T], &[T]),
    interleaved: bool,
) {
    let HeadLayout {
        seq,
        heads,
        head_size: d,
        packed,
    } = layout;
    for h in 0..heads {
        let at = if packed {
            ((b * seq + s) * heads + h) * d
        } else {
            ((b * heads + h) * seq + s) * d
        };
        rotate_row(&x[at..at + d], &mut out[at..at + d], cos, sin, interleaved);
    }
}

pub(crate) fn rotate_row<T: Real>(x: &[T], out: &mut [T], cos: &[T], sin: &[T], interleaved: bool) {
    let half = cos.len();
    for i in 0..half {
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (c, s) = (cos[i].widen(), sin[i].widen());
        let (x1, x2) = (x[a].widen(), x[b].widen());
        out[a] = T::narrow(c * x1 - s * x2);
        out[b] = T::narrow(s * x1 + c * x2);
    }
    out[2 * half..].copy_from_slice(&x[2 * half..]);
}

impl<T: Real> Kernel for RotaryKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x_t, cos_t, sin_t) = (io.input(0), io.input(1), io.input(2));
        let pos_t = Some(io.input(3)).filter(|t| t.is_defined());
        let g = self.op.geometry(
            x_t.dims(),
            cos_t.dims(),
            sin_t.dims(),
            pos_t.map(|t| t.dims()),
        )?;
        let not_contiguous = || OpError::kernel(OP, "an input or output is not contiguous");
        let (x_r, cos_r, sin_r) = (x_t.read::<T>()?, cos_t.read::<T>()?, sin_t.read::<T>()?);
        let x = x_r.as_slice().ok_or_else(not_contiguous)?;
        let cos = cos_r.as_slice().ok_or_else(not_contiguous)?;
        let sin = sin_r.as_slice().ok_or_else(not_contiguous)?;
        let pos_r = pos_t.map(|t| t.read::<i64>()).transpose()?;
        let positions = pos_r
            .as_ref()
            .map(|r| r.as_slice().ok_or_else(not_contiguous))
            .transpose()?;
        let out_t = io.output(0);
        if out_t.dims() != x_t.dims() {
            return Err(OpError::kernel(
                OP,
                format!("output dims {:?} differ from the input's", out_t.dims()),
            ));
        }
        let mut out_w = out_t.write::<T>()?;
        let out = out_w.as_mut_slice().ok_or_else(not_contiguous)?;
        let half = g.rotary_dim / 2;
        let max_position = cos.len().checked_div(half).unwrap_or(0);
        let d = g.head_size;
        for b in 0..g.batch {
            for s in 0..g.seq {
                // The cache row for (b, s).
                let row = match positions {
                    Some(p) => {
                        let at = p[b * g.seq + s];
                        usize::try_from(at)
                            .ok()
                            .filter(|&r| r < max_position)
                            .ok_or_else(|| {
                                OpError::kernel(
                                    OP,
                                    format!(
                                        "position id {at} is outside the cache of {max_position}"
                                    ),
                                )
                            })?
                    }
                    None => b * g.seq + s,
                };
                let (c, sn) = (
                    &cos[row * half..(row + 1) * half],
                    &sin[row * half..(row + 1) * half],
                );
                let layout = HeadLayout {
                    seq: g.seq,
                    heads: g.heads,
                    head_size: d,
                    packed: g.packed,
                };
                rotate_heads(x, out, layout, (b, s), (c, sn), self.op.interleaved);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::test_util::OpRun;
    use crate::Attributes;
    use strata_core::Tensor;

    fn run(attrs: Attributes, inputs: &[&Tensor]) -> OpResult<Vec<f32>> {
        let inputs: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
        let out = OpRun::new(OP, 23)
            .attributes(&attrs)
            .constant_inputs()
            .run(&inputs)?;
        Ok(out[0].to_vec::<f32>()?)
    }

    #[test]
    fn rotates_halves_and_interleaved_pairs_by_position() {
        // One batch, one head, one position, head size 4; position 1 has angle 90°.
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 1, 4]).unwrap();
        let cos = Tensor::from_slice(&[1.0f32, 1.0, 0.0, 0.0], &[2, 2]).unwrap();
        let sin = Tensor::from_slice(&[0.0f32, 0.0, 1.0, 1.0], &[2, 2]).unwrap();
        let pos = Tensor::from_slice(&[1i64], &[1, 1]).unwrap();
        // Halves: (x0, x2) and (x1, x3) rotate by 90°: (-x2, x0), (-x3, x1).
        let y = run(Attributes::new(OP), &[&x, &cos, &sin, &pos]).unwrap();
        assert_eq!(y, vec![-3.0, -4.0, 1.0, 2.0]);
        // Interleaved: (x0, x1), (x2, x3).
        let attrs = Attributes::new(OP).with("interleaved", crate::Attr::Int(1));
        let y = run(attrs, &[&x, &cos, &sin, &pos]).unwrap();
        assert_eq!(y, vec![-2.0, 1.0, -4.0, 3.0]);
        // Position 0: the identity.
        let pos0 = Tensor::from_slice(&[0i64], &[1, 1]).unwrap();
        let y = run(Attributes::new(OP), &[&x, &cos, &sin, &pos0]).unwrap();
        assert_eq!(y, vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn partial_rotation_keeps_the_tail() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4]).unwrap();
        let cos = Tensor::from_slice(&[0.0f32], &[1, 1, 1]).unwrap();
        let sin = Tensor::from_slice(&[1.0f32], &[1, 1, 1]).unwrap();
        let attrs = Attributes::new(OP)
            .with("num_heads", crate::Attr::Int(1))
            .with("rotary_embedding_dim", crate::Attr::Int(2));
        assert_eq!(
            run(attrs, &[&x, &cos, &sin]).unwrap(),
            vec![-2.0, 1.0, 3.0, 4.0]
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 1, 4]).unwrap();
        let cos = Tensor::from_slice(&[1.0f32, 1.0], &[1, 2]).unwrap();
        let sin = cos.clone();
        // Position beyond the cache.
        let pos = Tensor::from_slice(&[5i64], &[1, 1]).unwrap();
        assert!(run(Attributes::new(OP), &[&x, &cos, &sin, &pos]).is_err());
        // 3-D input without num_heads.
        let x3 = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4]).unwrap();
        assert!(run(Attributes::new(OP), &[&x3, &cos, &sin, &pos]).is_err());
        // Odd rotary dim.
        let attrs = Attributes::new(OP).with("rotary_embedding_dim", crate::Attr::Int(3));
        let pos0 = Tensor::from_slice(&[0i64], &[1, 1]).unwrap();
        assert!(run(attrs, &[&x, &cos, &sin, &pos0]).is_err());
    }
}
