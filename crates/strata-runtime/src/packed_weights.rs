//! Letting go of weights their reader has packed (R1, memory). A kernel that packed a constant
//! input when it was built (`KernelCapabilities::packed_inputs`: a MatMul or Gemm weight in the
//! GEMM's panel layout) reads only its packed copy when it runs, so keeping the original too
//! would hold the weight twice. When that kernel's node is the constant's only reader (and it is
//! no graph output), the plan swaps the constant for a placeholder of the same dtype and dims
//! over one element (a zero-stride view): a copied weight is freed right away, before the next
//! kernel packs its own, so the peak stays near one copy of the weights. Dims and dtype stay
//! known for later specializations.

use strata_core::{Result as CoreResult, Tensor};
use strata_ops::{Fact, Kernel};

use crate::graph::{NodeId, ValueSource};
use crate::{Graph, ValueId};

/// A tensor of `t`'s dtype and dims over a single zeroed element.
fn placeholder(t: &Tensor) -> CoreResult<Tensor> {
    let rank = t.dims().len();
    let one = Tensor::zeros(&vec![1; rank], t.dtype())?;
    let layout = one.layout().expand(t.dims())?;
    Tensor::from_storage(one.storage()?.clone(), layout, t.dtype())
}

/// After `node`'s kernel was built: swaps each constant it packed, and nobody else reads, for a
/// placeholder in the graph and in `facts` (the specialization the kernels were chosen with).
/// Returns how many were swapped.
pub(crate) fn release_packed_inputs(
    graph: &mut Graph,
    consumers: &[Vec<NodeId>],
    node: usize,
    kernel: &dyn Kernel,
    facts: Option<&mut [Fact]>,
) -> usize {
    let packed = kernel.capabilities().packed_inputs;
    let mut facts = facts;
    let mut released = 0;
    for &slot in packed {
        let Some(Some(value)) = graph.nodes[node].inputs.get(slot).copied() else {
            continue;
        };
        let ValueSource::Initializer(t) = &graph.values[value.0].source else {
            continue;
        };
        let only_reader = matches!(consumers[value.0].as_slice(), [only] if only.0 == node);
        let read_once = graph.nodes[node]
            .inputs
            .iter()
            .filter(|v| **v == Some(value))
            .count()
            == 1;
        if !only_reader || !read_once || graph.outputs.contains(&value) || t.numel() <= 1 {
            continue;
        }
        let Ok(stand_in) = placeholder(t) else {
            continue;
        };
        swap(graph, value, &stand_in);
        if let Some(fact) = facts.as_deref_mut().and_then(|f| f.get_mut(value.0)) {
            if fact.value.is_some() {
                fact.value = Some(stand_in.clone());
            }
        }
        released += 1;
    }
    released
}

fn swap(graph: &mut Graph, value: ValueId, stand_in: &Tensor) {
    let v = &mut graph.values[value.0];
    v.source = ValueSource::Initializer(stand_in.clone());
    if v.fact.value.is_some() {
        v.fact.value = Some(stand_in.clone());
    }
}
