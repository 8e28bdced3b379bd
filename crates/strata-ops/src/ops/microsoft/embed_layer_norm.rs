//! com.microsoft EmbedLayerNormalization: BERT's embedding layer in one node. For every token
//! `(b, s)`: `word[input_ids] + position[position_ids or s] (+ segment[segment_ids])`, then
//! LayerNorm over the hidden axis with gamma and beta. Inputs: input_ids `(B, S)` int32,
//! segment_ids (optional), word, position and segment (optional) embedding tables `(rows, H)`,
//! gamma, beta, mask `(B, S)` int32 (optional), position_ids `(B, S)` or `(1, S)` (optional).
//! Outputs: `(B, S, H)`, mask_index `(B)` int32 (the count of ones in each mask row, 0 without
//! a mask) and, optionally, the embedding sum before the norm. Ids outside a table are errors.

use std::marker::PhantomData;

use strata_core::{DType, Device};

use super::access::{
    contiguous, contiguous_mut, optional_slice, optional_slice_mut, read_optional, write_optional,
};
use super::norm_rows::normalize_row;
use crate::cpu_float_kernel;
use crate::support::inputs::{optional, required};
use crate::support::numeric::{Real, WideFloat};
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "EmbedLayerNormalization";

#[derive(Debug, Clone, Copy)]
pub(crate) struct EmbedLayerNorm {
    epsilon: f32,
    num_outputs: usize,
}

pub(crate) fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    if ctx.num_outputs > 3 {
        return Err(OpError::shape(
            OP,
            format!("at most 3 outputs, the node lists {}", ctx.num_outputs),
        ));
    }
    Ok(Box::new(EmbedLayerNorm {
        epsilon: ctx.attrs.float_or("epsilon", 1e-12)?,
        num_outputs: ctx.num_outputs.max(1),
    }))
}

impl Operator for EmbedLayerNorm {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let ids = required(OP, inputs, 0)?;
        let word = required(OP, inputs, 2)?;
        let dtype_err = |index: usize, expected: &str, actual: DType| OpError::DType {
            op: OP.into(),
            index,
            expected: expected.into(),
            actual,
        };
        for index in [0, 1, 7, 8] {
            if let Some(f) = optional(inputs, index).filter(|f| f.dtype != DType::I32) {
                return Err(dtype_err(index, "int32", f.dtype));
            }
        }
        if !word.dtype.is_float() {
            return Err(dtype_err(2, "a float type", word.dtype));
        }
        required(OP, inputs, 3)?;
        required(OP, inputs, 5)?;
        required(OP, inputs, 6)?;
        for index in [3, 4, 5, 6] {
            if let Some(f) = optional(inputs, index).filter(|f| f.dtype != word.dtype) {
                return Err(dtype_err(index, "the word embedding's dtype", f.dtype));
            }
        }
        if ids.rank() != 2 || word.rank() != 2 {
            return Err(OpError::shape(
                OP,
                format!("input_ids must be (batch, seq) and word_embedding (vocab, hidden), got {:?} and {:?}", ids.dims, word.dims),
            ));
        }
        let hidden = word.dims[1].clone();
        let mut out = vec![
            Fact::new(
                word.dtype,
                vec![ids.dims[0].clone(), ids.dims[1].clone(), hidden.clone()],
            ),
            Fact::new(DType::I32, vec![ids.dims[0].clone()]),
        ];
        if self.num_outputs > 2 {
            out.push(out[0].clone());
        }
        out.truncate(self.num_outputs);
        Ok(out)
    }

    fn kernel(
        &self,
        inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let dtype = required(OP, inputs, 2)?.dtype;
        cpu_float_kernel!(OP, dtype, device, T => EmbedKernel::<T> { op: *self, _t: PhantomData })
    }
}

#[derive(Debug)]
struct EmbedKernel<T> {
    op: EmbedLayerNorm,
    _t: PhantomData<T>,
}

/// Row `id` of a `(rows, hidden)` table, or an error naming the table.
fn table_row<'a, T>(table: &'a [T], hidden: usize, id: i64, what: &str) -> OpResult<&'a [T]> {
    let rows = table.len().checked_div(hidden).unwrap_or(0);
    usize::try_from(id)
        .ok()
        .filter(|&r| r < rows)
        .map(|r| &table[r * hidden..(r + 1) * hidden])
        .ok_or_else(|| {
            OpError::kernel(
                OP,
                format!("{what} id {id} is outside the table of {rows} rows"),
            )
        })
}

impl<T: Real> Kernel for EmbedKernel<T> {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let ids_t = io.input(0);
        let (batch, seq) = match *ids_t.dims() {
            [b, s] => (b, s),
            ref d => {
                return Err(OpError::kernel(
                    OP,
                    format!("input_ids must be 2-D, got {d:?}"),
                ))
            }
        };
        let word_t = io.input(2);
        let hidden = word_t.dims().get(1).copied().unwrap_or(0);
        let idr = ids_t.read::<i32>()?;
        let ids = contiguous(OP, "input_ids", &idr)?;
        let segr = read_optional::<i32>(io.input(1))?;
        let seg_ids = optional_slice(OP, "segment_ids", &segr)?;
        let (wr, pr) = (word_t.read::<T>()?, io.input(3).read::<T>()?);
        let (word, pos) = (
            contiguous(OP, "word_embedding", &wr)?,
            contiguous(OP, "position_embedding", &pr)?,
        );
        let ser = read_optional::<T>(io.input(4))?;
        let seg = optional_slice(OP, "segment_embedding", &ser)?;
        if seg.is_empty() != seg_ids.is_empty() {
            return Err(OpError::kernel(
                OP,
                "segment_ids and segment_embedding come together",
            ));
        }
        let (gr, br) = (io.input(5).read::<T>()?, io.input(6).read::<T>()?);
        let maskr = read_optional::<i32>(io.input(7))?;
        let mask = optional_slice(OP, "mask", &maskr)?;
        let posr = read_optional::<i32>(io.input(8))?;
        let pos_ids = optional_slice(OP, "position_ids", &posr)?;
        let tokens = batch * seq;
        let checks = [
            ("segment_ids", seg_ids.len(), [0, tokens]),
            ("mask", mask.len(), [0, tokens]),
            ("position_ids", pos_ids.len(), [0, tokens]),
        ];
        for (what, len, ok) in checks {
            if !(ok.contains(&len) || what == "position_ids" && len == seq) {
                return Err(OpError::kernel(
                    OP,
                    format!("{what} has {len} elements for input_ids ({batch}, {seq})"),
                ));
            }
        }
        let mut yw = io.output(0).write::<T>()?;
        let y = contiguous_mut(OP, "output", &mut yw)?;
        if y.len() != tokens * hidden {
            return Err(OpError::kernel(
                OP,
                format!("output has {} elements, need {}", y.len(), tokens * hidden),
            ));
        }
        for (t, row) in y.chunks_exact_mut(hidden.max(1)).enumerate().take(tokens) {
            let p = if pos_ids.is_empty() {
                (t % seq) as i64
            } else {
                i64::from(pos_ids[t % pos_ids.len()])
            };
            let w = table_row(word, hidden, i64::from(ids[t]), "word")?;
            let pe = table_row(pos, hidden, p, "position")?;
            let se = if seg.is_empty() {
                None
            } else {
                Some(table_row(seg, hidden, i64::from(seg_ids[t]), "segment")?)
            };
            for (j, o) in row.iter_mut().enumerate() {
                let mut v = w[j].widen() + pe[j].widen();
                if let Some(se) = se {
                    v = v + se[j].widen();
                }
                *o = T::narrow(v);
            }
        }
        let mut sum_w = write_optional::<T>(io.output(2))?;
        if let Some(sum) = optional_slice_mut(OP, "embedding_sum", &mut sum_w)? {
            sum.copy_from_slice(y);
        }
        let (gamma, beta) = (contiguous(OP, "gamma", &gr)?, contiguous(OP, "beta", &br)?);
        if gamma.len() != hidden || beta.len() != hidden {
            return Err(OpError::kernel(
                OP,
                format!("gamma and beta must have the hidden size {hidden}"),
            ));
        }
        let eps = <T::Wide as WideFloat>::lit(f64::from(self.op.epsilon));
        for row in y.chunks_exact_mut(hidden.max(1)) {
            normalize_row(row, gamma, beta, eps, true);
        }
        let mut mask_w = write_optional::<i32>(io.output(1))?;
        if let Some(mi) = optional_slice_mut(OP, "mask_index", &mut mask_w)? {
            for (b, out) in mi.iter_mut().enumerate().take(batch) {
                *out = if mask.is_empty() {
                    0
                } else {
                    mask[b * seq..(b + 1) * seq]
                        .iter()
                        .filter(|&&v| v == 1)
                        .count() as i32
                };
            }
        }
        Ok(())
    }
}
