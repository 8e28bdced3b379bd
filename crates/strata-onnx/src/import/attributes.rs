//! ONNX node attributes decoded into strata-ops `Attributes` (old files that leave an
//! attribute's type unset get it from whichever field is filled).

use std::sync::Arc;

use strata_ops::{Attr, Attributes};

use crate::proto::{attribute_proto::AttributeType, AttributeProto, NodeProto};
use crate::{tensor_from_proto, WeightSource};

pub(crate) fn attributes(node: &NodeProto) -> std::result::Result<Attributes, String> {
    let mut attrs = Attributes::new(node.op_type.as_deref().unwrap_or(""));
    for a in &node.attribute {
        let name = a.name.clone().unwrap_or_default();
        let text = |b: &bytes::Bytes| String::from_utf8_lossy(b).into_owned();
        let kind = a
            .r#type
            .and_then(|t| AttributeType::try_from(t).ok())
            .unwrap_or_else(|| infer_attribute_type(a));
        let value = match kind {
            AttributeType::Float => Attr::Float(a.f.unwrap_or(0.0)),
            AttributeType::Int => Attr::Int(a.i.unwrap_or(0)),
            AttributeType::String => Attr::String(a.s.as_ref().map(text).unwrap_or_default()),
            AttributeType::Floats => Attr::Floats(a.floats.clone()),
            AttributeType::Ints => Attr::Ints(a.ints.clone()),
            AttributeType::Strings => Attr::Strings(a.strings.iter().map(text).collect()),
            AttributeType::Tensor => {
                let tp =
                    a.t.as_ref()
                        .ok_or_else(|| format!("attribute {name:?} has no tensor"))?;
                Attr::Tensor(
                    tensor_from_proto(tp, &WeightSource::in_memory()).map_err(|e| e.to_string())?,
                )
            }
            AttributeType::Graph => Attr::Graph(Arc::new(a.g.clone().unwrap_or_default())),
            other => return Err(format!("attribute {name:?} has unsupported type {other:?}")),
        };
        attrs.insert(&name, value);
    }
    Ok(attrs)
}

/// Attribute type for old files that leave `type` unset: whichever field is filled.
fn infer_attribute_type(a: &AttributeProto) -> AttributeType {
    if a.f.is_some() {
        AttributeType::Float
    } else if a.i.is_some() {
        AttributeType::Int
    } else if a.s.is_some() {
        AttributeType::String
    } else if a.t.is_some() {
        AttributeType::Tensor
    } else if a.g.is_some() {
        AttributeType::Graph
    } else if !a.floats.is_empty() {
        AttributeType::Floats
    } else if !a.strings.is_empty() {
        AttributeType::Strings
    } else {
        AttributeType::Ints
    }
}
