//! com.microsoft BiasGelu: `gelu(A + B)` with the exact (erf) GELU, B a vector along A's last
//! axis (onnxruntime's fusion of a MatMul's bias Add with the Gelu after it).

use super::biased_activation::{BiasInput, BiasedActivation, GeluForm};
use crate::{OpContext, OpResult, Operator};

pub(crate) fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    BiasedActivation {
        op: "BiasGelu",
        form: GeluForm::Erf,
        bias: BiasInput::Required,
    }
    .boxed()
}
