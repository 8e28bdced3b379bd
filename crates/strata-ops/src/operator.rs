//! The operator interface: what every operator tells the runtime at plan time (shape and dtype
//! inference, scratch needs, in-place capability) and the kernel it hands over, chosen once per
//! (op, dtype, device) and cached on the node (D1).

use std::fmt;

use strata_core::{Device, Tensor};

use crate::capabilities::{KernelCapabilities, OpCapabilities};
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
