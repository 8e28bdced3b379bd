//! The operator interface: what every operator tells the runtime at plan time (shape and dtype
//! inference, scratch needs, in-place capability) and the kernel it hands over, chosen once per
//! (op, dtype, device) and cached on the node (D1).
//!
//! Abilities only some operators or kernels have are capabilities, asked for by the pass that
//! needs them (`op.capabilities().epilogue`, `kernel.capabilities().makes_outputs`); operators
//! without them do nothing. A new capability is a new field, defaulting to absent, so adding one
//! touches only the operators that have it.

use std::fmt;

use strata_core::{Device, Tensor};

use crate::kernels::Activation;
use crate::{Attributes, Fact, OpResult};

/// An operator instance with its validated attributes.
pub trait Operator: Send + Sync + fmt::Debug {
    /// The ONNX op type, e.g. `"Conv"`.
    fn op_type(&self) -> &str;

    /// Output facts from input facts (absent optional inputs are `Fact::absent()`). May set
    /// `value` on outputs computable from facts alone (e.g. `Shape`), which drives constant
    /// propagation of shape computations.
    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>>;

    /// Picks the kernel for these input facts on `device`. Called once at plan time.
    fn kernel(
        &self,
        inputs: &[&Fact],
        outputs: &[&Fact],
        device: Device,
    ) -> OpResult<Box<dyn Kernel>>;

    /// Scratch bytes the kernel needs for these (concrete) facts; planned as a short-lived
    /// arena entry.
    fn scratch_bytes(&self, _inputs: &[&Fact], _outputs: &[&Fact]) -> OpResult<usize> {
        Ok(0)
    }

    /// An input whose memory output 0 may reuse when that input dies at this node and has the
    /// same size (element-wise ops, reshapes). The kernel must then handle `KernelIo::in_place`.
    fn in_place_input(&self) -> Option<usize> {
        None
    }

    /// When output 0 is its inputs laid end to end (Concat along an axis with only 1s before
    /// it), the element offset of each input in it: the memory planner may then place the
    /// inputs there, where their producers write them, and the kernel must skip an input it
    /// finds already in place. `None` (the default) when it is not so for these facts.
    fn places_inputs_in_output(&self, _inputs: &[&Fact], _output: &Fact) -> Option<Vec<usize>> {
        None
    }

    /// Whether this op's output shapes depend on the *values* of non-constant inputs (e.g.
    /// NonZero). Such outputs are allocated at run time.
    fn is_data_dependent(&self) -> bool {
        false
    }

    /// Abilities beyond this common interface that passes ask for (epilogue fusion, BatchNorm
    /// folding); none by default.
    fn capabilities(&self) -> OpCapabilities<'_> {
        OpCapabilities::default()
    }
}

/// A compiled kernel: runs one node given bound tensors. Must not allocate on the heap in
/// steady state (scratch space comes planned in `io.scratch`).
pub trait Kernel: Send + Sync + fmt::Debug {
    fn run(&self, io: &KernelIo<'_>) -> OpResult<()>;

    /// Abilities beyond `run` that the runtime asks for (making its own outputs); none by
    /// default.
    fn capabilities(&self) -> KernelCapabilities<'_> {
        KernelCapabilities::default()
    }
}

/// The tensors a kernel works on. Outputs are pre-bound with their final dims; missing optional
/// inputs are undefined tensors.
pub struct KernelIo<'a> {
    pub inputs: &'a [&'a Tensor],
    pub outputs: &'a [&'a Tensor],
    /// Planned scratch bytes (`U8` tensor), when `scratch_bytes` asked for some.
    pub scratch: Option<&'a Tensor>,
    /// When set, output 0 shares memory with this input: read it through the output.
    pub in_place: Option<usize>,
    /// Intra-op threads the kernel may use.
    pub threads: usize,
}

impl<'a> KernelIo<'a> {
    pub fn input(&self, index: usize) -> &'a Tensor {
        self.inputs.get(index).copied().unwrap_or(&UNDEFINED)
    }

    pub fn output(&self, index: usize) -> &'a Tensor {
        self.outputs.get(index).copied().unwrap_or(&UNDEFINED)
    }
}

static UNDEFINED: std::sync::LazyLock<Tensor> = std::sync::LazyLock::new(Tensor::undefined);

/// Everything a constructor needs to know about the node.
pub struct OpContext<'a> {
    pub op_type: &'a str,
    pub domain: &'a str,
    /// The opset version imported for the node's domain.
    pub opset: i64,
    pub attrs: &'a Attributes,
    /// How many inputs and outputs the node lists (optional ones left empty included).
    pub num_inputs: usize,
    pub num_outputs: usize,
}

/// Builds an operator from its node's context.
pub type Constructor = fn(&OpContext) -> OpResult<Box<dyn Operator>>;

/// One table of (op type, constructor) pairs; a family lists its tables and the registry reads
/// the families.
pub type OpTable = &'static [(&'static str, Constructor)];

/// What an operator offers the graph passes beyond [`Operator`]'s common interface.
#[derive(Clone, Copy, Default)]
pub struct OpCapabilities<'a> {
    /// It can apply work to its output while writing it, so the optimizer can drop the node
    /// that would do that work in a second pass over memory.
    pub epilogue: Option<&'a dyn FusesEpilogue>,
    /// It is an inference-mode BatchNormalization, which the optimizer may fold into the weights
    /// of a convolution that feeds it.
    pub batch_norm: Option<InferenceBatchNorm>,
    /// It is an element-wise activation that a producer's epilogue can apply instead.
    pub activation: Option<&'a dyn FusableActivation>,
    /// It has a QLinear form the QDQ pass may run `DequantizeLinear → op → QuantizeLinear` as
    /// (an operator whose form depends on its attributes, such as Conv).
    pub qlinear: Option<&'a dyn HasQLinearForm>,
    /// It is a QuantizeLinear or DequantizeLinear with these parameters.
    pub linear_quantization: Option<LinearQuantization>,
    /// It normalizes rows (LayerNorm or RMS norm) with these parameters: a residual Add before
    /// it may be fused in (SkipLayerNormalization).
    pub row_norm: Option<RowNorm>,
    /// Its trailing outputs are optional: a graph that reads none of them gets the operator
    /// without them (Dropout's mask), so they are neither planned nor written.
    pub trailing_outputs: Option<&'a dyn DropsTrailingOutputs>,
    /// Its output 0 is always this input, unchanged (Identity, Dropout outside training): its
    /// readers may read that input instead, and the node goes.
    pub forwards_input: Option<usize>,
}

/// An operator whose last outputs may be left out.
pub trait DropsTrailingOutputs {
    /// The operator computing only its first `keep` outputs, or `None` when they cannot go.
    fn keep_outputs(&self, keep: usize) -> Option<std::sync::Arc<dyn Operator>>;
}

impl fmt::Debug for OpCapabilities<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpCapabilities")
            .field("epilogue", &self.epilogue.is_some())
            .field("batch_norm", &self.batch_norm)
            .field("activation", &self.activation.is_some())
            .field("qlinear", &self.qlinear.is_some())
            .field("linear_quantization", &self.linear_quantization)
            .field("row_norm", &self.row_norm)
            .field("trailing_outputs", &self.trailing_outputs.is_some())
            .field("forwards_input", &self.forwards_input)
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

/// An element-wise operator that is one of the [`Activation`]s epilogues apply.
pub trait FusableActivation: Send + Sync {
    /// The activation this node computes on input facts `inputs` (constant inputs carry their
    /// values), or `None` when it cannot be written as one (Clip bounds that are computed, say).
    fn activation(&self, inputs: &[&Fact]) -> Option<Activation>;
}

/// A row normalization's parameters: inputs are X, scale, then (centered) an optional bias.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowNorm {
    /// The first normalized axis, as the attribute gives it (may be negative).
    pub axis: i64,
    pub epsilon: f32,
    /// LayerNorm (subtracts the mean) rather than RMS norm.
    pub centered: bool,
}

/// What the optimizer needs to fold an inference-mode BatchNormalization into the weights and
/// bias of the convolution before it (the statistics are the node's inputs 1..5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InferenceBatchNorm {
    pub epsilon: f32,
}

/// The QLinear operator computing an operator on 8-bit tensors: its inputs are, for each of the
/// float op's data inputs, the triple (quantized x, scale, zero point), then the output's
/// (scale, zero point), then (QLinearConv) an int32 bias.
pub trait HasQLinearForm: Send + Sync {
    /// The QLinear operator with this operator's attributes, or `None` when this instance has
    /// no such form (an activation fused in, say).
    fn qlinear(&self) -> Option<Box<dyn Operator>>;

    /// The axis of the weight (input 1) that per-channel weight scales may run along in the
    /// QLinear form; `None` for per-tensor weights only.
    fn weight_channel_axis(&self) -> Option<usize> {
        None
    }
}

/// The parameters of a QuantizeLinear or DequantizeLinear node that decide how its scale maps
/// onto elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearQuantization {
    /// The axis a 1-D scale runs along.
    pub axis: i64,
    /// Elements per scale along the axis (0: not blocked).
    pub block_size: i64,
}

/// What a kernel offers the runtime beyond [`crate::Kernel::run`].
#[derive(Clone, Copy, Default)]
pub struct KernelCapabilities<'a> {
    /// It makes its own outputs instead of writing into planned memory.
    pub makes_outputs: Option<&'a dyn MakesOutputs>,
    /// It keeps state across runs in each execution context (a language model's KV cache).
    pub context_state: Option<&'a dyn UsesContextState>,
    /// Input slots whose constant value it copied into its own layout when it was built (packed
    /// weights) and never reads at run time: the plan frees such a weight once every reader
    /// packed it, and binds an undefined tensor in its place.
    pub packed_inputs: &'a [usize],
}

impl fmt::Debug for KernelCapabilities<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelCapabilities")
            .field("makes_outputs", &self.makes_outputs.is_some())
            .field("context_state", &self.context_state.is_some())
            .field("packed_inputs", &self.packed_inputs)
            .finish()
    }
}

/// A kernel with state that lives in each execution context and persists from one run to the
/// next (a language model's KV cache). The context makes one state per such node when it is
/// created and runs the node through [`UsesContextState::run_with_state`] instead of
/// [`Kernel::run`]; many contexts thus share one plan, each with its own state.
pub trait UsesContextState: Send + Sync {
    /// A fresh state for a new context.
    fn new_state(&self) -> OpResult<Box<dyn ContextState>>;

    /// Runs the node with this context's state.
    fn run_with_state(&self, io: &KernelIo<'_>, state: &mut dyn ContextState) -> OpResult<()>;
}

/// The per-context state of a [`UsesContextState`] kernel.
pub trait ContextState: Send + fmt::Debug {
    /// Back to the state of a new context, releasing what it holds.
    fn reset(&mut self);

    /// Bytes of memory the state holds now.
    fn bytes(&self) -> usize;

    /// For the kernel to reach its own state type.
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
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
    fn conv_fuses_a_residual_then_one_activation() {
        let conv = op("Conv");
        let epilogue = conv.capabilities().epilogue.expect("Conv fuses epilogues");
        assert!(epilogue.fuse(EpilogueStep::Bias).is_none());
        let with_residual = epilogue
            .fuse(EpilogueStep::Residual)
            .expect("Conv fuses a residual");
        assert_eq!(with_residual.operand_slot, Some(3));
        let epilogue = with_residual.op.capabilities().epilogue.unwrap();
        assert!(
            epilogue.fuse(EpilogueStep::Residual).is_none(),
            "one residual"
        );
        let fused = epilogue
            .fuse(EpilogueStep::Activation(Activation::Relu))
            .expect("Conv fuses Relu after the residual");
        assert_eq!(fused.operand_slot, None);
        assert_eq!(fused.op.op_type(), "Conv");
        let again = fused.op.capabilities().epilogue.unwrap();
        assert!(again
            .fuse(EpilogueStep::Activation(Activation::Sigmoid))
            .is_none());
        // Nothing is added after the activation (that would change the order).
        assert!(again.fuse(EpilogueStep::Residual).is_none());
        assert!(conv.capabilities().batch_norm.is_none());
    }

    #[test]
    fn element_wise_activations_say_which_epilogue_they_are() {
        let f32_fact = Fact::known(strata_core::DType::F32, &[2, 3]);
        let activation = |op_type: &str, inputs: &[&Fact]| {
            op(op_type)
                .capabilities()
                .activation
                .and_then(|a| a.activation(inputs))
        };
        assert_eq!(activation("Relu", &[&f32_fact]), Some(Activation::Relu));
        assert_eq!(activation("Tanh", &[&f32_fact]), Some(Activation::Tanh));
        assert_eq!(
            activation("HardSigmoid", &[&f32_fact]),
            Some(Activation::HardSigmoid {
                alpha: 0.2,
                beta: 0.5
            })
        );
        let int_fact = Fact::known(strata_core::DType::I32, &[2, 3]);
        assert_eq!(activation("Relu", &[&int_fact]), None, "integer Relu");
        assert!(op("Exp").capabilities().activation.is_none());
        // Clip: constant bounds make an activation, a missing one is unbounded, a computed
        // one makes none.
        let lo = Fact::constant(Tensor::from_slice(&[0.0f32], &[]).unwrap());
        let hi = Fact::constant(Tensor::from_slice(&[6.0f32], &[]).unwrap());
        let computed = Fact::known(strata_core::DType::F32, &[]);
        assert_eq!(
            activation("Clip", &[&f32_fact, &lo, &hi]),
            Some(Activation::Clip { min: 0.0, max: 6.0 })
        );
        assert_eq!(
            activation("Clip", &[&f32_fact, &lo]),
            Some(Activation::Clip {
                min: 0.0,
                max: f32::INFINITY
            })
        );
        assert_eq!(activation("Clip", &[&f32_fact, &lo, &computed]), None);
    }

    #[test]
    fn gemm_fuses_one_activation() {
        let gemm = op("Gemm");
        let epilogue = gemm.capabilities().epilogue.expect("Gemm fuses epilogues");
        assert!(epilogue.fuse(EpilogueStep::Residual).is_none());
        let fused = epilogue
            .fuse(EpilogueStep::Activation(Activation::Relu))
            .unwrap();
        assert!(fused
            .op
            .capabilities()
            .epilogue
            .unwrap()
            .fuse(EpilogueStep::Activation(Activation::Relu))
            .is_none());
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
