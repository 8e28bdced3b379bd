//! The operator registry: (domain, op type) → constructor. Import asks it for every node and
//! collects everything it cannot build into one error (I4).

use crate::operator::{Constructor, OpContext, OpTable};
use crate::ops::{
    activation, attention, cast, convolution, generator, indexing, linalg, llm, loss, math,
    microsoft, ml, normalization, pooling, quantization, recurrent, reduce, resample, selection,
    shape, signal, text,
};
use crate::{OpError, OpResult, Operator};

/// The operator families of the default ONNX domain, each a list of tables (`OPS` in the family's
/// `mod.rs`), so families register independently.
const ONNX_FAMILIES: &[&[OpTable]] = &[
    activation::OPS,
    attention::OPS,
    cast::OPS,
    convolution::OPS,
    generator::OPS,
    indexing::OPS,
    linalg::OPS,
    loss::OPS,
    math::OPS,
    normalization::OPS,
    pooling::OPS,
    quantization::OPS,
    recurrent::OPS,
    reduce::OPS,
    resample::OPS,
    selection::OPS,
    shape::OPS,
    signal::OPS,
    text::OPS,
    microsoft::ONNX_DOMAIN_OPS,
];

/// The operator families of strata's language-model domain (`strata.llm`).
const LLM_FAMILIES: &[&[OpTable]] = &[llm::OPS];

/// The operator families of onnxruntime's `com.microsoft` domain.
const MICROSOFT_FAMILIES: &[&[OpTable]] = &[microsoft::OPS, quantization::MICROSOFT_OPS];

/// The operator families of the `ai.onnx.ml` domain.
const ML_FAMILIES: &[&[OpTable]] = &[ml::OPS, text::ML_OPS];

fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

fn constructor(domain: &str, op_type: &str) -> Option<Constructor> {
    let families = if is_default_domain(domain) {
        ONNX_FAMILIES
    } else if domain == "ai.onnx.ml" {
        ML_FAMILIES
    } else if domain == llm::DOMAIN {
        LLM_FAMILIES
    } else if domain == "com.microsoft" {
        MICROSOFT_FAMILIES
    } else {
        return None;
    };
    families
        .iter()
        .flat_map(|family| family.iter())
        .flat_map(|table| table.iter())
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
        match text::movement_inputs(ctx.op_type).filter(|_| is_default_domain(ctx.domain)) {
            Some(data) => text::TextMovement::wrap(op, data),
            None => op,
        },
    )
}

/// The op types of the default domain that strata implements.
pub fn supported_ops() -> impl Iterator<Item = &'static str> {
    ONNX_FAMILIES
        .iter()
        .flat_map(|family| family.iter())
        .flat_map(|table| table.iter())
        .map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attributes;

    #[test]
    fn every_op_type_is_registered_once() {
        let mut names: Vec<&str> = supported_ops().collect();
        let total = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), total, "an op type appears in two tables");
        assert!(is_supported("", "Conv") && is_supported("ai.onnx", "Conv"));
        assert!(!is_supported("com.microsoft", "Conv"));
        assert!(is_supported("com.microsoft", "MatMulNBits"));
        assert!(is_supported("", "SimplifiedLayerNormalization"));
        assert!(!is_supported("", "MatMulNBits"));
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
