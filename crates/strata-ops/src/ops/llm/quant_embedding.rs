//! QuantEmbedding: rows of a (possibly block-quantized) table by id, dequantized to f32.
//! Inputs `table (vocab, dim)` in any GGUF weight type and `ids (..., )` int64; output
//! `ids.dims + [dim]` f32. An id outside the table is an error naming it.

use strata_core::{DType, Device};

use crate::kernels::quant::embedding_lookup;
use crate::support::inputs::exact_inputs;
use crate::support::kernel_choice::cpu_only;
use crate::{Fact, Kernel, KernelIo, OpContext, OpError, OpResult, Operator};

const OP: &str = "QuantEmbedding";

#[derive(Clone, Copy, Debug)]
pub struct QuantEmbedding;

impl QuantEmbedding {
    pub fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(QuantEmbedding))
    }
}

impl Operator for QuantEmbedding {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let [table, ids] = exact_inputs(OP, inputs)?;
        if table.rank() != 2 {
            return Err(OpError::shape(
                OP,
                format!("the table must be 2-D (vocab, dim), got {:?}", table.dims),
            ));
        }
        if ids.dtype != DType::I64 {
            return Err(OpError::DType {
                op: OP.into(),
                index: 1,
                expected: "int64".into(),
                actual: ids.dtype,
            });
        }
        let mut dims = ids.dims.clone();
        dims.push(table.dims[1].clone());
        Ok(vec![Fact::new(DType::F32, dims)])
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>> {
        cpu_only(OP, DType::F32, device)?;
        Ok(Box::new(QuantEmbeddingKernel))
    }
}

#[derive(Debug)]
struct QuantEmbeddingKernel;

impl Kernel for QuantEmbeddingKernel {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()> {
        let (table, ids, out) = (io.input(0), io.input(1), io.output(0));
        let &[rows, cols] = table.dims() else {
            return Err(OpError::shape(OP, "the table must be 2-D"));
        };
        let bytes = table.read_bytes(OP)?;
        let matrix = super::quant_matmul::weight_matrix(table.dtype(), rows, cols, bytes.bytes())?;
        let ids = ids.read::<i64>()?;
        let ids = ids
            .as_slice()
            .ok_or_else(|| OpError::kernel(OP, "ids are not contiguous"))?;
        let mut out = out.write::<f32>()?;
        let out = out
            .as_mut_slice()
            .ok_or_else(|| OpError::kernel(OP, "the output is not contiguous"))?;
        embedding_lookup(&matrix, ids, out)?;
        Ok(())
    }
}
