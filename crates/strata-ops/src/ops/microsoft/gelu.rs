//! com.microsoft Gelu: the exact GELU, `0.5 x (1 + erf(x / √2))`, on one input.

use super::biased_activation::{BiasInput, BiasedActivation, GeluForm};
use crate::{OpContext, OpResult, Operator};

pub(crate) fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    BiasedActivation {
        op: "Gelu",
        form: GeluForm::Erf,
        bias: BiasInput::None,
    }
    .boxed()
}
