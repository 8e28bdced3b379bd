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

/// The newest opset strata knows per domain. A model importing a newer one, or any version
/// below one, is refused rather than run under rules strata does not follow. Domains not listed
/// here (vendor ones such as `com.microsoft`) only need a positive version: their operators are
/// checked one by one.
const NEWEST_OPSETS: &[(&str, i64)] = &[
    ("", 28),
    ("ai.onnx.ml", 5),
    ("ai.onnx.preview", 1),
    ("ai.onnx.preview.training", 1),
];

/// Opset version per domain ("" for the default ONNX domain; opset 1 when none is declared), or
/// a message naming the domain and version strata does not know.
pub(crate) fn opset_versions(model: &ModelProto) -> Result<HashMap<String, i64>, String> {
    let mut opsets: HashMap<String, i64> = HashMap::new();
    for o in &model.opset_import {
        let declared = o.domain.clone().unwrap_or_default();
        let domain = if declared == "ai.onnx" {
            String::new()
        } else {
            declared
        };
        let version = o.version.unwrap_or(1);
        let newest = NEWEST_OPSETS
            .iter()
            .find(|(d, _)| *d == domain)
            .map(|&(_, newest)| newest);
        let shown = if domain.is_empty() {
            "ai.onnx"
        } else {
            domain.as_str()
        };
        if version < 1 || newest.is_some_and(|newest| version > newest) {
            let known = match newest {
                Some(newest) => format!("strata knows versions 1 to {newest}"),
                None => "versions start at 1".to_string(),
            };
            return Err(format!(
                "the model imports opset {version} of domain '{shown}'; {known}"
            ));
        }
        opsets.insert(domain, version);
    }
    opsets.entry(String::new()).or_insert(1);
    Ok(opsets)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::OperatorSetIdProto;

    fn model(opsets: &[(&str, i64)]) -> ModelProto {
        ModelProto {
            opset_import: opsets
                .iter()
                .map(|&(domain, version)| OperatorSetIdProto {
                    domain: Some(domain.into()),
                    version: Some(version),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn known_opsets_are_read() {
        let opsets = opset_versions(&model(&[("ai.onnx", 17), ("com.microsoft", 1)])).unwrap();
        assert_eq!(opsets[""], 17);
        assert_eq!(opsets["com.microsoft"], 1);
        assert_eq!(opset_versions(&model(&[])).unwrap()[""], 1);
    }

    #[test]
    fn unknown_opsets_name_domain_and_version() {
        for (domain, version, shown) in [
            ("", 0, "ai.onnx"),
            ("", 999, "ai.onnx"),
            ("ai.onnx.ml", 6, "ai.onnx.ml"),
            ("com.microsoft", -1, "com.microsoft"),
        ] {
            let message = opset_versions(&model(&[(domain, version)])).unwrap_err();
            assert!(
                message.contains(&format!("opset {version} of domain '{shown}'")),
                "{message}"
            );
        }
    }
}
