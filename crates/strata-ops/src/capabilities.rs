//! Optional abilities of an operator or a kernel, beyond what every one of them has. A pass that
//! needs one asks for it (`op.capabilities().epilogue`, `kernel.capabilities().makes_outputs`);
//! operators without it do nothing. A new capability is a new field here, defaulting to absent,
//! so adding one touches only the operators that have it.

use std::fmt;

use strata_core::Tensor;

use crate::kernels::Activation;
use crate::{OpResult, Operator};

/// What an operator offers the graph passes beyond [`Operator`]'s common interface.
#[derive(Clone, Copy, Default)]
pub struct OpCapabilities<'a> {
    /// It can apply work to its output while writing it, so the optimizer can drop the node
    /// that would do that work in a second pass over memory.
    pub epilogue: Option<&'a dyn FusesEpilogue>,
    /// It is an inference-mode BatchNormalization, which the optimizer may fold into the weights
    /// of a convolution that feeds it.
    pub batch_norm: Option<InferenceBatchNorm>,
}

impl fmt::Debug for OpCapabilities<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpCapabilities")
            .field("epilogue", &self.epilogue.is_some())
            .field("batch_norm", &self.batch_norm)
            .finish()
    }
}

/// One step an operator applies to its output as it writes it. Steps compose in the order they
/// are fused: a convolution fused with `Bias` then `Activation(Relu)` computes `relu(conv + b)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EpilogueStep {
    /// An element-wise activation.
    Activation(Activation),
    /// Adds a bias broadcast along the output's channel (last axis for Gemm/MatMul, axis 1 for
    /// convolutions), read from a tensor the fused node takes as an extra input.
    Bias,
    /// Adds a tensor of the output's shape (a residual connection), read from an extra input.
    Residual,
}

impl EpilogueStep {
    /// Whether the step reads a tensor, which the fused node then takes as an input.
    pub fn reads_tensor(self) -> bool {
        matches!(self, EpilogueStep::Bias | EpilogueStep::Residual)
    }
}

/// An operator with one more epilogue step fused in.
pub struct Fused {
    pub op: Box<dyn Operator>,
    /// For a step that reads a tensor: the input slot the fused operator reads it from. The
    /// optimizer puts the tensor there, filling any skipped optional slot with an absent input.
    pub operand_slot: Option<usize>,
}

/// The ability to apply [`EpilogueStep`]s to an operator's output as it is written.
pub trait FusesEpilogue: Send + Sync {
    /// This operator with `step` applied after the steps it already applies, or `None` when its
    /// kernels cannot do that step (after the ones already fused).
    fn fuse(&self, step: EpilogueStep) -> Option<Fused>;
}

/// What the optimizer needs to fold an inference-mode BatchNormalization into the weights and
/// bias of the convolution before it (the statistics are the node's inputs 1..5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InferenceBatchNorm {
    pub epsilon: f32,
}

/// What a kernel offers the runtime beyond [`crate::Kernel::run`].
#[derive(Clone, Copy, Default)]
pub struct KernelCapabilities<'a> {
    /// It makes its own outputs instead of writing into planned memory.
    pub makes_outputs: Option<&'a dyn MakesOutputs>,
}

impl fmt::Debug for KernelCapabilities<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelCapabilities")
            .field("makes_outputs", &self.makes_outputs.is_some())
            .finish()
    }
}

/// A kernel whose outputs are known only by running it — control flow, where the taken branch or
/// the trip count decides the dims — or that have no planned memory (text). The runtime asks for
/// this on data-dependent nodes and on constant folding before inferring dims and calling `run`.
pub trait MakesOutputs: Send + Sync {
    /// Runs on `inputs` (undefined tensors for omitted optional inputs) and returns fresh outputs.
    fn make_outputs(&self, inputs: &[&Tensor], threads: usize) -> OpResult<Vec<Tensor>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{build_operator, Attributes, OpContext};

    fn op(op_type: &str) -> Box<dyn Operator> {
        build_operator(&OpContext {
            op_type,
            domain: "",
            opset: 17,
            attrs: &Attributes::new(op_type),
            num_inputs: 3,
            num_outputs: 1,
        })
        .unwrap()
    }

    #[test]
    fn conv_fuses_one_activation_and_nothing_that_reads_a_tensor() {
        let conv = op("Conv");
        let epilogue = conv.capabilities().epilogue.expect("Conv fuses epilogues");
        assert!(epilogue.fuse(EpilogueStep::Residual).is_none());
        assert!(epilogue.fuse(EpilogueStep::Bias).is_none());
        let fused = epilogue
            .fuse(EpilogueStep::Activation(Activation::Relu))
            .expect("Conv fuses Relu");
        assert_eq!(fused.operand_slot, None);
        assert_eq!(fused.op.op_type(), "Conv");
        let again = fused.op.capabilities().epilogue.unwrap();
        assert!(again
            .fuse(EpilogueStep::Activation(Activation::Sigmoid))
            .is_none());
        assert!(conv.capabilities().batch_norm.is_none());
    }

    #[test]
    fn inference_batch_norm_reports_its_epsilon_and_others_have_no_capabilities() {
        let bn = op("BatchNormalization");
        assert_eq!(
            bn.capabilities().batch_norm,
            Some(InferenceBatchNorm { epsilon: 1e-5 })
        );
        assert!(bn.capabilities().epilogue.is_none());
        let add = op("Add");
        assert!(add.capabilities().epilogue.is_none() && add.capabilities().batch_norm.is_none());
    }
}
