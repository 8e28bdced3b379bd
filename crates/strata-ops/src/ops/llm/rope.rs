//! Rope: rotary position embedding with ggml's rounding. Inputs `X (1, seq, heads·head_dim)`
//! f32, the tables `cos` and `sin (max_position, rotary_dim / 2)` f32 and `positions (1, seq)`
//! int64; output like `X`. Attributes `num_heads`, `rotary_embedding_dim` (0: the whole head)
//! and `neox`: 0 rotates adjacent pairs `(2i, 2i+1)` (llama), 1 rotates `(i, i + rotary_dim/2)`
//! (qwen2, GPT-NeoX). Channels past `rotary_embedding_dim` are copied. Each rotation is one
//! fused multiply-add and one product, as ggml's C compiles (see
//! [`super::ggml_math::rotate`]); the tables are what ggml's `rope_cache_init` computes.

use strata_core::{DType, Device};

use super::ggml_math::rotate;
use super::{check_f32, contiguous_f32, contiguous_f32_mut, positive_attr};
use crate::support::inputs::exact_inputs;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "Rope";

#[derive(Clone, Copy, Debug)]
pub struct Rope {
    heads: usize,
    /// Channels rotated per head (0 until the head size is known: all of them).
    rotary_dim: usize,
    neox: bool,
}

impl Rope {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let heads = positive_attr(ctx, OP, "num_heads")?;
        let rotary_dim = ctx.attrs.int("rotary_embedding_dim")?.unwrap_or(0);
        let rotary_dim = usize::try_from(rotary_dim)
            .ok()
            .filter(|d| d.is_multiple_of(2))
            .ok_or_else(|| {
                OpError::attribute(
                    OP,
                    "rotary_embedding_dim",
                    format!("must be even and non-negative, got {rotary_dim}"),
                )
            })?;
        let neox = match ctx.attrs.int("neox")?.unwrap_or(0) {
            0 => false,
            1 => true,
            v => {
                return Err(OpError::attribute(
                    OP,
                    "neox",
                    format!("must be 0 or 1, got {v}"),
                ))
            }
        };
        Ok(Box::new(Rope {
            heads,
            rotary_dim,
            neox,
        }))
    }

    /// `(head_dim, rotary_dim)` for rows of `width` channels.
    fn dims(&self, width: usize) -> OpResult<(usize, usize)> {
        if !width.is_multiple_of(self.heads) {
            return Err(OpError::shape(
                OP,
                format!("{width} channels do not split into {} heads", self.heads),
            ));
        }
        let head_dim = width / self.heads;
        let rotary = if self.rotary_dim == 0 {
            head_dim
        } else {
            self.rotary_dim
        };
        if rotary > head_dim || !rotary.is_multiple_of(2) {
            return Err(OpError::shape(
                OP,
                format!("rotary_embedding_dim {rotary} does not fit heads of {head_dim}"),
            ));
        }
        Ok((head_dim, rotary))
    }
}

impl Operator for Rope {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [x, cos, sin, positions] = exact_inputs(OP, inputs)?;
        for (i, f) in [x, cos, sin].into_iter().enumerate() {
            check_f32(OP, f, i)?;
        }
        if positions.dtype != DType::I64 {
            return Err(OpError::DType {
                op: OP.into(),
                index: 3,
                expected: "int64".into(),
                actual: positions.dtype,
            });
        }
        if x.rank() != 3 || positions.rank() != 2 || cos.rank() != 2 || sin.rank() != 2 {
            return Err(OpError::shape(
                OP,
                format!(
                    "X {:?} must be (1, seq, width), positions {:?} (1, seq), the tables 2-D",
                    x.dims, positions.dims
                ),
            ));
        }
        if let Some(width) = x.dims[2].known() {
            self.dims(width)?;
        }
        Ok(vec![x.clone()])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, DType::F32, device)?;
        Ok(Box::new(RopeKernel(*self)))
    }
}

#[derive(Debug)]
struct RopeKernel(Rope);

impl Kernel for RopeKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (x_t, y_t) = (io.input(0), io.output(0));
        let width = x_t.dims().last().copied().unwrap_or(0);
        let (head_dim, rotary) = self.0.dims(width)?;
        let half = rotary / 2;
        let (cos_t, sin_t) = (io.input(1), io.input(2));
        if cos_t.dims() != sin_t.dims() || cos_t.dims().get(1) != Some(&half) {
            return Err(OpError::shape(
                OP,
                format!(
                    "cos {:?} and sin {:?} must both be (max_position, {half})",
                    cos_t.dims(),
                    sin_t.dims()
                ),
            ));
        }
        let max_position = cos_t.dims()[0];
        let (x, cos, sin) = (
            x_t.read::<f32>()?,
            cos_t.read::<f32>()?,
            sin_t.read::<f32>()?,
        );
        let (x, cos, sin) = (
            contiguous_f32(OP, &x)?,
            contiguous_f32(OP, &cos)?,
            contiguous_f32(OP, &sin)?,
        );
        let positions = io.input(3).read::<i64>()?;
        let positions = positions
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "positions are not contiguous"))?;
        let mut y_w = y_t.write::<f32>()?;
        let y = contiguous_f32_mut(OP, &mut y_w)?;
        if width == 0 || x.len() != positions.len() * width || y.len() != x.len() {
            return Err(OpError::shape(
                OP,
                format!(
                    "X {:?}, Y {:?} and {} positions do not agree",
                    x_t.dims(),
                    y_t.dims(),
                    positions.len()
                ),
            ));
        }
        for ((x, y), &p) in x
            .chunks_exact(width)
            .zip(y.chunks_exact_mut(width))
            .zip(positions)
        {
            let p = usize::try_from(p)
                .ok()
                .filter(|&p| p < max_position)
                .ok_or_else(|| {
                    OpError::kernel(
                        OP,
                        format!("position {p} is outside the tables ({max_position})"),
                    )
                })?;
            let (cos, sin) = (
                &cos[p * half..(p + 1) * half],
                &sin[p * half..(p + 1) * half],
            );
            rotate_heads(x, y, head_dim, cos, sin, self.0.neox);
        }
        Ok(())
    }
}

/// Every head of one position, with FMA instructions when the CPU has them (see
/// [`super::ggml_math::has_fma`]).
fn rotate_heads(x: &[f32], y: &mut [f32], head_dim: usize, cos: &[f32], sin: &[f32], neox: bool) {
    #[cfg(target_arch = "x86_64")]
    if super::ggml_math::has_fma() {
        // SAFETY: FMA was detected.
        unsafe { rotate_heads_fma(x, y, head_dim, cos, sin, neox) };
        return;
    }
    rotate_heads_any(x, y, head_dim, cos, sin, neox);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn rotate_heads_fma(
    x: &[f32],
    y: &mut [f32],
    head_dim: usize,
    cos: &[f32],
    sin: &[f32],
    neox: bool,
) {
    rotate_heads_any(x, y, head_dim, cos, sin, neox);
}

#[inline(always)]
fn rotate_heads_any(
    x: &[f32],
    y: &mut [f32],
    head_dim: usize,
    cos: &[f32],
    sin: &[f32],
    neox: bool,
) {
    for (x, y) in x.chunks_exact(head_dim).zip(y.chunks_exact_mut(head_dim)) {
        rotate_head(x, y, cos, sin, neox);
    }
}

/// One head: pairs `(2i, 2i+1)` or `(i, i + half)` turned by table entry `i`, the channels
/// past the rotary ones copied.
#[inline(always)]
fn rotate_head(x: &[f32], y: &mut [f32], cos: &[f32], sin: &[f32], neox: bool) {
    let half = cos.len();
    for i in 0..half {
        let (a, b) = if neox {
            (i, i + half)
        } else {
            (2 * i, 2 * i + 1)
        };
        (y[a], y[b]) = rotate(x[a], x[b], cos[i], sin[i]);
    }
    y[2 * half..].copy_from_slice(&x[2 * half..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain rotation in f64, for the pairing and table indexing.
    fn reference(x: &[f32], cos: &[f32], sin: &[f32], neox: bool) -> Vec<f64> {
        let half = cos.len();
        let mut y: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
        for i in 0..half {
            let (a, b) = if neox {
                (i, i + half)
            } else {
                (2 * i, 2 * i + 1)
            };
            let (c, s) = (f64::from(cos[i]), f64::from(sin[i]));
            let (x0, x1) = (f64::from(x[a]), f64::from(x[b]));
            y[a] = x0 * c - x1 * s;
            y[b] = x0 * s + x1 * c;
        }
        y
    }

    #[test]
    fn rotates_normal_and_neox_pairs_with_partial_rotary_dims() {
        // head sizes that are not multiples of any vector width, rotary dims below the head.
        for (head_dim, rotary) in [(6, 6), (10, 4), (18, 18), (64, 32), (80, 80)] {
            let half = rotary / 2;
            let x: Vec<f32> = (0..head_dim)
                .map(|i| (i as f32 * 0.731).sin() * 3.0)
                .collect();
            let cos: Vec<f32> = (0..half).map(|i| (i as f32 * 0.37).cos()).collect();
            let sin: Vec<f32> = (0..half).map(|i| (i as f32 * 0.37).sin()).collect();
            for neox in [false, true] {
                let mut y = vec![0.0; head_dim];
                rotate_head(&x, &mut y, &cos, &sin, neox);
                let want = reference(&x, &cos, &sin, neox);
                for (i, (&got, &want)) in y.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "head {head_dim} rotary {rotary} neox {neox} channel {i}: {got} vs {want}"
                    );
                }
                assert_eq!(&y[rotary..], &x[rotary..], "unrotated channels are copied");
            }
        }
    }
}
