//! What importing a graph needs to know beyond the graph itself: the model's opsets, weights and
//! name, the names enclosing graphs define (for subgraphs to capture), and the declared types of
//! graph inputs.

use std::collections::{HashMap, HashSet};

use strata_ops::Dim;

use crate::proto::{
    tensor_shape_proto::dimension, type_proto, GraphProto, ModelProto, NodeProto, ValueInfoProto,
};
use crate::{dtype_from_onnx, OnnxError, WeightSource};

/// What every graph of a model is imported with.
pub(crate) struct ImportContext<'a> {
    pub opsets: &'a HashMap<String, i64>,
    pub weights: &'a WeightSource,
    /// Names the model in errors.
    pub source: &'a str,
}

impl ImportContext<'_> {
    pub fn model_err(&self, message: String) -> OnnxError {
        OnnxError::Model {
            path: self.source.to_string(),
            message,
        }
    }
}

/// The names an enclosing graph defines, for its subgraphs to capture.
pub(crate) struct Scope<'a> {
    pub names: HashSet<String>,
    pub parent: Option<&'a Scope<'a>>,
}

impl Scope<'_> {
    pub fn defines(&self, name: &str) -> bool {
        self.names.contains(name) || self.parent.is_some_and(|p| p.defines(name))
    }
}

/// Every value name a graph defines itself: inputs, initializers and node outputs.
pub(crate) fn defined_names(g: &GraphProto) -> HashSet<String> {
    let inputs = g.input.iter().filter_map(|i| i.name.clone());
    let inits = g.initializer.iter().filter_map(|t| t.name.clone());
    let outs = g.node.iter().flat_map(|n| n.output.iter().cloned());
    inputs
        .chain(inits)
        .chain(outs)
        .filter(|n| !n.is_empty())
        .collect()
}

/// Opset version per domain ("" for the default ONNX domain; opset 1 when none is declared).
pub(crate) fn opset_versions(model: &ModelProto) -> HashMap<String, i64> {
    let mut opsets: HashMap<String, i64> = model
        .opset_import
        .iter()
        .map(|o| {
            let domain = o.domain.clone().unwrap_or_default();
            (
                if domain == "ai.onnx" {
                    String::new()
                } else {
                    domain
                },
                o.version.unwrap_or(1),
            )
        })
        .collect();
    opsets.entry(String::new()).or_insert(1);
    opsets
}

pub(crate) fn node_domain(node: &NodeProto) -> &str {
    match node.domain.as_deref().unwrap_or("") {
        "ai.onnx" => "",
        d => d,
    }
}

/// The declared dtype and dims of a graph input; unnamed unknown dims get unique symbols.
pub(crate) fn input_type(
    input: &ValueInfoProto,
) -> std::result::Result<(strata_core::DType, Vec<Dim>), String> {
    let name = input.name.as_deref().unwrap_or("");
    let Some(type_proto::Value::TensorType(t)) =
        input.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err(format!(
            "input {name:?} is not a tensor (sequences, maps and optionals are not supported)"
        ));
    };
    let elem = t.elem_type.unwrap_or(0);
    let dtype = dtype_from_onnx(elem)
        .ok_or_else(|| format!("input {name:?} has unsupported element type {elem}"))?;
    let shape = t
        .shape
        .as_ref()
        .ok_or_else(|| format!("input {name:?} has no shape (unknown rank)"))?;
    let dims = shape
        .dim
        .iter()
        .enumerate()
        .map(|(axis, d)| match &d.value {
            Some(dimension::Value::DimValue(v)) if *v >= 0 => Dim::Known(*v as usize),
            Some(dimension::Value::DimParam(p)) if !p.is_empty() => Dim::Sym(p.clone()),
            _ => Dim::Sym(format!("{name}_dim{axis}")),
        })
        .collect();
    Ok((dtype, dims))
}
