//! What the text operators share: input checks and a broadcasting walk over two string tensors.

use strata_core::{DType, StringBuffer, Tensor};

use std::fmt;

use crate::support::broadcast::{expanded, Row, Walk};
use crate::support::inputs::required;
use crate::{Fact, Kernel, KernelCapabilities, KernelIo, MakesOutputs, OpError, OpResult};

/// The kernel of an operator whose outputs are text: text has no planned memory, so the kernel
/// makes its outputs when it runs (`MakesOutputs`, which the runtime asks for on such nodes).
pub struct TextOutputs<F> {
    op: &'static str,
    make: F,
}

impl<F> TextOutputs<F>
where
    F: Fn(&[&Tensor]) -> OpResult<Vec<Tensor>> + Send + Sync + 'static,
{
    pub fn boxed(op: &'static str, make: F) -> Box<dyn Kernel> {
        Box::new(TextOutputs { op, make })
    }
}

impl<F> fmt::Debug for TextOutputs<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TextOutputs({})", self.op)
    }
}

impl<F> Kernel for TextOutputs<F>
where
    F: Fn(&[&Tensor]) -> OpResult<Vec<Tensor>> + Send + Sync,
{
    fn run(&self, _io: &KernelIo<'_>) -> OpResult<()> {
        Err(OpError::kernel(
            self.op,
            "text outputs are made by `MakesOutputs`, not into planned memory",
        ))
    }

    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities {
            makes_outputs: Some(self),
            ..Default::default()
        }
    }
}

impl<F> MakesOutputs for TextOutputs<F>
where
    F: Fn(&[&Tensor]) -> OpResult<Vec<Tensor>> + Send + Sync,
{
    fn make_outputs(&self, inputs: &[&Tensor], _threads: usize) -> OpResult<Vec<Tensor>> {
        (self.make)(inputs)
    }
}

/// Input `index` of a text operator's facts: present and a string.
pub fn text_fact<'a>(op: &str, inputs: &[&'a Fact], index: usize) -> OpResult<&'a Fact> {
    let fact = required(op, inputs, index)?;
    if !fact.dtype.is_string() {
        return Err(OpError::DType {
            op: op.to_string(),
            index,
            expected: "string".to_string(),
            actual: fact.dtype,
        });
    }
    Ok(fact)
}

/// Input `index` of a text kernel: present and a string tensor.
pub fn text_input<'a>(op: &str, inputs: &[&'a Tensor], index: usize) -> OpResult<&'a Tensor> {
    let tensor = inputs
        .get(index)
        .copied()
        .filter(|t| t.is_defined())
        .ok_or_else(|| OpError::MissingInput {
            op: op.to_string(),
            index,
        })?;
    if tensor.dtype() != DType::String {
        return Err(OpError::DType {
            op: op.to_string(),
            index,
            expected: "string".to_string(),
            actual: tensor.dtype(),
        });
    }
    Ok(tensor)
}

/// Calls `f(a_elem, b_elem)` for every element of the broadcast of `a` and `b` to `dims`, in
/// row-major order.
pub fn for_each_pair(
    op: &str,
    a: &Tensor,
    b: &Tensor,
    dims: &[usize],
    mut f: impl FnMut(&str, &str),
) -> OpResult<()> {
    let (la, lb) = (expanded(op, a, dims)?, expanded(op, b, dims)?);
    let (ta, tb) = (a.string_buffer()?, b.string_buffer()?);
    let walk = Walk::new(op, dims, [&la, &lb])?;
    fn element(buffer: &StringBuffer, start: usize, step: isize, i: usize) -> &str {
        let position = (start as isize + step * i as isize) as usize;
        // The walk stays inside the layouts, which were checked to fit their buffers.
        buffer.get(position).unwrap_or("")
    }
    for Row {
        len, start, step, ..
    } in walk.rows()
    {
        for i in 0..len {
            f(
                element(ta, start[0], step[0], i),
                element(tb, start[1], step[1], i),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_follow_numpy_broadcasting() {
        let a = Tensor::from_strings(&[2, 1], ["a", "b"]).unwrap();
        let b = Tensor::from_strings(&[3], ["x", "y", "z"]).unwrap();
        let mut seen = Vec::new();
        for_each_pair("T", &a, &b, &[2, 3], |x, y| seen.push(format!("{x}{y}"))).unwrap();
        assert_eq!(seen, ["ax", "ay", "az", "bx", "by", "bz"]);
        assert!(for_each_pair("T", &a, &b, &[4, 3], |_, _| {}).is_err());
    }
}
