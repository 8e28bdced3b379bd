//! Embedding lookup from a (possibly quantized) table: each id's row dequantized to f32.

use strata_core::dtype::block::dequantize_row;

use super::QuantMatrix;
use crate::kernels::error::{KernelError, KernelResult};

const OP: &str = "EmbeddingLookup";

/// Writes row `ids[t]` of `table` (dequantized) to `out[t·cols..(t+1)·cols]`. An id outside
/// the table is an error naming it.
pub fn embedding_lookup(table: &QuantMatrix<'_>, ids: &[i64], out: &mut [f32]) -> KernelResult<()> {
    let cols = table.cols();
    if out.len() != ids.len().saturating_mul(cols) {
        return Err(KernelError::BufferLength {
            op: OP,
            buffer: "output",
            expected: ids.len().saturating_mul(cols),
            actual: out.len(),
        });
    }
    for (&id, row) in ids.iter().zip(out.chunks_exact_mut(cols.max(1))) {
        let j = usize::try_from(id)
            .ok()
            .filter(|&j| j < table.rows())
            .ok_or_else(|| KernelError::InvalidParam {
                op: OP,
                param: "id",
                reason: format!("{id} is outside the table's {} rows", table.rows()),
            })?;
        dequantize_row(table.dtype(), table.row(j), row).map_err(|e| {
            KernelError::InvalidParam {
                op: OP,
                param: "table",
                reason: e.to_string(),
            }
        })?;
    }
    Ok(())
}
