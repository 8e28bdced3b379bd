//! com.microsoft FastGelu: the tanh approximation of GELU,
//! `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`, of `X + bias` when the optional bias (a vector
//! along the last axis) is given.

use super::biased_activation::{BiasInput, BiasedActivation, GeluForm};
use crate::{OpContext, OpResult, Operator};

pub(crate) fn build(_ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    BiasedActivation {
        op: "FastGelu",
        form: GeluForm::Tanh,
        bias: BiasInput::Optional,
    }
    .boxed()
}
