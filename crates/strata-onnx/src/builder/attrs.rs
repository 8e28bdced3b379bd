//! Node attributes for the model builder.

use bytes::Bytes;
use strata_core::Tensor;

use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, GraphProto};
use crate::tensor_proto::tensor_to_proto;

/// A node's attributes, built by chaining: `Attrs::new().ints("kernel_shape", &[3, 3]).int("group", 1)`.
///
/// A failure (a tensor ONNX cannot hold) is kept and reported when the model is written.
#[derive(Debug, Clone, Default)]
pub struct Attrs {
    pub(crate) list: Vec<AttributeProto>,
    pub(crate) error: Option<String>,
}

impl Attrs {
    pub fn new() -> Self {
        Attrs::default()
    }

    pub fn int(self, name: &str, value: i64) -> Self {
        self.push(name, AttributeType::Int, |a| a.i = Some(value))
    }

    pub fn ints(self, name: &str, values: &[i64]) -> Self {
        self.push(name, AttributeType::Ints, |a| a.ints = values.to_vec())
    }

    pub fn float(self, name: &str, value: f32) -> Self {
        self.push(name, AttributeType::Float, |a| a.f = Some(value))
    }

    pub fn floats(self, name: &str, values: &[f32]) -> Self {
        self.push(name, AttributeType::Floats, |a| a.floats = values.to_vec())
    }

    pub fn string(self, name: &str, value: &str) -> Self {
        self.push(name, AttributeType::String, |a| {
            a.s = Some(Bytes::copy_from_slice(value.as_bytes()))
        })
    }

    pub fn strings(self, name: &str, values: &[&str]) -> Self {
        self.push(name, AttributeType::Strings, |a| {
            a.strings = values
                .iter()
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect();
        })
    }

    /// A tensor attribute (e.g. `Constant`'s `value`), stored as `raw_data`.
    pub fn tensor(mut self, name: &str, value: &Tensor) -> Self {
        match tensor_to_proto("", value) {
            Ok(t) => self.push(name, AttributeType::Tensor, |a| a.t = Some(t)),
            Err(err) => {
                self.error
                    .get_or_insert_with(|| format!("attribute '{name}': {err}"));
                self
            }
        }
    }

    /// A subgraph attribute (the bodies of `If`, `Loop`, `Scan`); build one with
    /// [`crate::ModelBuilder::to_model`] and take its `graph`.
    pub fn graph(self, name: &str, value: GraphProto) -> Self {
        self.push(name, AttributeType::Graph, |a| a.g = Some(value))
    }

    fn push(
        mut self,
        name: &str,
        kind: AttributeType,
        set: impl FnOnce(&mut AttributeProto),
    ) -> Self {
        let mut attr = AttributeProto {
            name: Some(name.to_string()),
            r#type: Some(kind as i32),
            ..Default::default()
        };
        set(&mut attr);
        self.list.push(attr);
        self
    }
}
