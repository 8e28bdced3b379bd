//! The operator registry: (domain, op type) → constructor. Import asks it for every node and
//! collects everything it cannot build into one error (I4).

use crate::ops::{
    batchnorm::BatchNorm,
    concat::Concat,
    constant::Constant,
    conv::Conv,
    flatten::Flatten,
    gather::Gather,
    gemm::Gemm,
    identity::Identity,
    matmul::MatMul,
    nonzero::NonZero,
    pool::{GlobalPool, Pool, PoolKind},
    reshape::Reshape,
    shape::Shape,
    squeeze::Squeeze,
    transpose::Transpose,
};
use crate::{Attributes, OpError, OpResult, Operator};

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

/// The operator tables of the default ONNX domain: this file's core list plus one table per
/// operator family module (`pub const OPS` in that module), so families register independently.
const ONNX_FAMILIES: &[&[(&str, Constructor)]] = &[
    CORE_OPS,
    crate::ops::reduce::OPS,
    crate::ops::argminmax::OPS,
    crate::ops::cumsum::OPS,
    crate::ops::topk::OPS,
    crate::ops::expand::OPS,
    crate::ops::tile::OPS,
    crate::ops::slice::OPS,
    crate::ops::split::OPS,
    crate::ops::pad::OPS,
    crate::ops::gather_elements::OPS,
    crate::ops::gather_nd::OPS,
    crate::ops::scatter::OPS,
    crate::ops::range::OPS,
    crate::ops::onehot::OPS,
    crate::ops::trilu::OPS,
    crate::ops::compress::OPS,
    crate::ops::eyelike::OPS,
    crate::ops::depth_space::OPS,
    crate::ops::constant_of_shape::OPS,
    crate::ops::size::OPS,
    crate::ops::elementwise::OPS,
    crate::ops::unary::OPS,
    crate::ops::activation::OPS,
    crate::ops::bitcast::OPS,
    crate::ops::bitwise::OPS,
    crate::ops::cast::OPS,
    crate::ops::clip::OPS,
    crate::ops::compare::OPS,
    crate::ops::float_class::OPS,
    crate::ops::logical::OPS,
    crate::ops::pow::OPS,
    crate::ops::variadic::OPS,
    crate::ops::where_op::OPS,
    crate::ops::attention::OPS,
    crate::ops::loss::OPS,
    crate::ops::normalization::OPS,
    crate::ops::quant::OPS,
    crate::ops::recurrent::OPS,
    crate::ops::resample::OPS,
    crate::ops::signal::OPS,
    crate::ops::spatial::OPS,
    crate::ops::selection::OPS,
    crate::ops::linalg::OPS,
    crate::ops::dropout::OPS,
    crate::ops::softmax::OPS,
    crate::ops::ngram::OPS,
    crate::ops::text::OPS,
];

/// The operator tables of the `ai.onnx.ml` domain.
const ML_FAMILIES: &[&[(&str, Constructor)]] = &[crate::ops::ml::OPS, crate::ops::text::ML_OPS];

/// The first operators: arithmetic, activations, CNN and transformer building blocks.
const CORE_OPS: &[(&str, Constructor)] = &[
    ("BatchNormalization", BatchNorm::build),
    ("Concat", Concat::build),
    ("Constant", Constant::build),
    ("Conv", Conv::build),
    ("Gemm", Gemm::build),
    ("MaxPool", |c| Pool::build(PoolKind::Max, c)),
    ("AveragePool", |c| Pool::build(PoolKind::Average, c)),
    ("LpPool", |c| Pool::build(PoolKind::Lp, c)),
    ("GlobalAveragePool", |c| {
        GlobalPool::build(PoolKind::Average, c)
    }),
    ("GlobalMaxPool", |c| GlobalPool::build(PoolKind::Max, c)),
    ("GlobalLpPool", |c| GlobalPool::build(PoolKind::Lp, c)),
    ("MatMul", MatMul::build),
    ("NonZero", NonZero::build),
    ("Flatten", Flatten::build),
    ("Gather", Gather::build),
    ("Identity", Identity::build),
    ("Reshape", Reshape::build),
    ("Shape", Shape::build),
    ("Squeeze", Squeeze::build_squeeze),
    ("Unsqueeze", Squeeze::build_unsqueeze),
    ("Transpose", Transpose::build),
];

fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

fn constructor(domain: &str, op_type: &str) -> Option<Constructor> {
    let families = if is_default_domain(domain) {
        ONNX_FAMILIES
    } else if domain == "ai.onnx.ml" {
        ML_FAMILIES
    } else {
        return None;
    };
    families
        .iter()
        .flat_map(|family| family.iter())
        .find(|(name, _)| *name == op_type)
        .map(|(_, c)| *c)
}

/// Whether an operator exists for (domain, op type).
pub fn is_supported(domain: &str, op_type: &str) -> bool {
    constructor(domain, op_type).is_some()
}

/// Builds the operator for a node, validating its attributes.
pub fn build_operator(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
    let build = constructor(ctx.domain, ctx.op_type).ok_or_else(|| OpError::Unsupported {
        op_type: ctx.op_type.to_string(),
        domain: ctx.domain.to_string(),
        opset: ctx.opset,
    })?;
    let op = build(ctx)?;
    // Operators that only move elements also move text, through their own int64 kernels.
    Ok(
        match crate::ops::text::movement_inputs(ctx.op_type)
            .filter(|_| is_default_domain(ctx.domain))
        {
            Some(data) => crate::ops::text::TextMovement::wrap(op, data),
            None => op,
        },
    )
}

/// The op types of the default domain that strata implements.
pub fn supported_ops() -> impl Iterator<Item = &'static str> {
    ONNX_FAMILIES
        .iter()
        .flat_map(|family| family.iter())
        .map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_type_is_registered_once() {
        let mut names: Vec<&str> = supported_ops().collect();
        let total = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), total, "an op type appears in two tables");
        assert!(is_supported("", "Conv") && is_supported("ai.onnx", "Conv"));
        assert!(!is_supported("com.microsoft", "Conv"));
    }

    #[test]
    fn unknown_ops_name_domain_and_opset() {
        let attrs = Attributes::new("Nope");
        let err = build_operator(&OpContext {
            op_type: "Nope",
            domain: "",
            opset: 13,
            attrs: &attrs,
            num_inputs: 0,
            num_outputs: 1,
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("Nope") && err.to_string().contains("13"),
            "{err}"
        );
    }
}
