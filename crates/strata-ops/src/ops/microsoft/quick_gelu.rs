//! com.microsoft QuickGelu: `x · sigmoid(alpha · x)` (attribute `alpha`, 1.702 by default).

use super::biased_activation::{BiasInput, BiasedActivation, GeluForm};
use crate::{OpContext, OpResult, Operator};

pub(crate) fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    let alpha = ctx.attrs.float_or("alpha", 1.702)?;
    BiasedActivation {
        op: "QuickGelu",
        form: GeluForm::Sigmoid { alpha },
        bias: BiasInput::None,
    }
    .boxed()
}
