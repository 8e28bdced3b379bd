//! Writing ONNX models from Rust, for our own tests, built-in models and benchmarks.
//!
//! ```
//! use strata_core::DType;
//! use strata_onnx::{Attrs, Dim, ModelBuilder};
//!
//! let bytes = ModelBuilder::new("relu_conv")
//!     .opset(17)
//!     .input("x", DType::F32, &[Dim::sym("N"), Dim::Known(3), Dim::Known(8), Dim::Known(8)])
//!     .initializer_f32("w", &[0.5; 3 * 3 * 3 * 3], &[3, 3, 3, 3])
//!     .node("Conv", &["x", "w"], &["y"], Attrs::new().ints("pads", &[1, 1, 1, 1]))
//!     .node("Relu", &["y"], &["z"], Attrs::new())
//!     .output("z", DType::F32, &[Dim::sym("N"), Dim::Known(3), Dim::Known(8), Dim::Known(8)])
//!     .to_bytes()?;
//! let model = strata_onnx::load_model_bytes(bytes.into(), "relu_conv")?;
//! assert_eq!(model.graph.unwrap().node[0].name(), "Conv_0");
//! # Ok::<(), strata_onnx::OnnxError>(())
//! ```
//!
//! The builder writes what it is told and does not check the graph, so tests can build invalid
//! models on purpose. Misuse it cannot express (a dtype ONNX has no type for, a tensor attribute
//! that cannot be read) is remembered and returned by `to_model`, `to_bytes` or `save`.

mod attrs;
mod layout;
mod value_info;

use std::path::Path;

use prost::Message;
use strata_core::{DType, Element, Tensor};

pub use attrs::Attrs;
/// The dims of builder inputs and outputs: strata-ops' `Dim`, re-exported.
pub use strata_ops::Dim;

use crate::error::{OnnxError, Result};
use crate::external::relative_location;
use crate::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto,
};
use crate::tensor_proto::tensor_to_proto;
use value_info::{elem_type, fixed, tensor_value_info};

/// The default-domain opset used when [`ModelBuilder::opset`] is not called.
pub const DEFAULT_OPSET: i64 = 17;

/// A model under construction. Every method takes and returns the builder, for chaining.
#[derive(Debug, Clone)]
pub struct ModelBuilder {
    name: String,
    opsets: Vec<(String, i64)>,
    ir_version: Option<i64>,
    doc_string: Option<String>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    value_infos: Vec<ValueInfoProto>,
    initializers: Vec<TensorProto>,
    nodes: Vec<NodeProto>,
    initializers_as_inputs: bool,
    external_threshold: Option<usize>,
    external_file: Option<String>,
    align_initializers: bool,
    error: Option<String>,
}

impl ModelBuilder {
    /// An empty model (and graph) called `name`, default-domain opset [`DEFAULT_OPSET`].
    pub fn new(name: &str) -> Self {
        ModelBuilder {
            name: name.to_string(),
            opsets: vec![(String::new(), DEFAULT_OPSET)],
            ir_version: None,
            doc_string: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            value_infos: Vec::new(),
            initializers: Vec::new(),
            nodes: Vec::new(),
            initializers_as_inputs: false,
            external_threshold: None,
            external_file: None,
            align_initializers: true,
            error: None,
        }
    }

    /// The default-domain (`ai.onnx`) opset version.
    pub fn opset(self, version: i64) -> Self {
        self.opset_domain("", version)
    }

    /// The opset version of `domain` (e.g. `com.microsoft`), added or replaced.
    pub fn opset_domain(mut self, domain: &str, version: i64) -> Self {
        match self.opsets.iter_mut().find(|(d, _)| d == domain) {
            Some(entry) => entry.1 = version,
            None => self.opsets.push((domain.to_string(), version)),
        }
        self
    }

    /// The IR version; by default the one that introduced the default-domain opset.
    pub fn ir_version(mut self, version: i64) -> Self {
        self.ir_version = Some(version);
        self
    }

    /// The model's doc string (it precedes the graph in the file, so its length also shifts
    /// where every initializer lands).
    pub fn doc_string(mut self, text: &str) -> Self {
        self.doc_string = Some(text.to_string());
        self
    }

    /// A graph input with `dtype` and `dims`.
    pub fn input(mut self, name: &str, dtype: DType, dims: &[Dim]) -> Self {
        if let Some(info) = self.value_info_for(name, dtype, Some(dims)) {
            self.inputs.push(info);
        }
        self
    }

    /// A graph input of unknown rank.
    pub fn input_unranked(mut self, name: &str, dtype: DType) -> Self {
        if let Some(info) = self.value_info_for(name, dtype, None) {
            self.inputs.push(info);
        }
        self
    }

    /// A graph output with `dtype` and `dims`.
    pub fn output(mut self, name: &str, dtype: DType, dims: &[Dim]) -> Self {
        if let Some(info) = self.value_info_for(name, dtype, Some(dims)) {
            self.outputs.push(info);
        }
        self
    }

    /// A graph output with no shape (left to inference).
    pub fn output_unranked(mut self, name: &str, dtype: DType) -> Self {
        if let Some(info) = self.value_info_for(name, dtype, None) {
            self.outputs.push(info);
        }
        self
    }

    /// Type and shape of an intermediate value (`graph.value_info`).
    pub fn value_info(mut self, name: &str, dtype: DType, dims: &[Dim]) -> Self {
        if let Some(info) = self.value_info_for(name, dtype, Some(dims)) {
            self.value_infos.push(info);
        }
        self
    }

    /// An initializer holding a copy of `tensor`, as little-endian `raw_data`.
    pub fn initializer(mut self, name: &str, tensor: &Tensor) -> Self {
        match tensor_to_proto(name, tensor) {
            Ok(proto) => self.initializers.push(proto),
            Err(err) => self.fail(format!("initializer '{name}': {err}")),
        }
        self
    }

    /// An f32 initializer of `dims` from `values`.
    pub fn initializer_f32(self, name: &str, values: &[f32], dims: &[usize]) -> Self {
        self.initializer_values(name, values, dims)
    }

    /// An i64 initializer of `dims` from `values` (shapes, axes, indices).
    pub fn initializer_i64(self, name: &str, values: &[i64], dims: &[usize]) -> Self {
        self.initializer_values(name, values, dims)
    }

    /// An initializer of any element type from `values`.
    pub fn initializer_values<T: Element>(
        mut self,
        name: &str,
        values: &[T],
        dims: &[usize],
    ) -> Self {
        match Tensor::from_slice(values, dims) {
            Ok(tensor) => self.initializer(name, &tensor),
            Err(err) => {
                self.fail(format!("initializer '{name}': {err}"));
                self
            }
        }
    }

    /// An initializer written exactly as given (typed fields, external references, odd cases).
    pub fn initializer_proto(mut self, tensor: TensorProto) -> Self {
        self.initializers.push(tensor);
        self
    }

    /// A default-domain node; its name is generated (`{op}_{index}`). Use `""` for an omitted
    /// optional input.
    pub fn node(self, op_type: &str, inputs: &[&str], outputs: &[&str], attrs: Attrs) -> Self {
        let name = format!("{op_type}_{}", self.nodes.len());
        self.named_node(&name, op_type, inputs, outputs, attrs)
    }

    /// A default-domain node with an explicit name.
    pub fn named_node(
        self,
        name: &str,
        op_type: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Attrs,
    ) -> Self {
        self.domain_node(name, "", op_type, inputs, outputs, attrs)
    }

    /// A node of operator set `domain` (remember [`ModelBuilder::opset_domain`]).
    pub fn domain_node(
        mut self,
        name: &str,
        domain: &str,
        op_type: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Attrs,
    ) -> Self {
        if let Some(err) = attrs.error {
            self.fail(format!("node '{name}': {err}"));
        }
        self.nodes.push(NodeProto {
            name: Some(name.to_string()),
            op_type: Some(op_type.to_string()),
            domain: (!domain.is_empty()).then(|| domain.to_string()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs.list,
            ..Default::default()
        });
        self
    }

    /// Also lists every initializer as a graph input, as models of IR version < 4 must.
    pub fn initializers_as_inputs(mut self, yes: bool) -> Self {
        self.initializers_as_inputs = yes;
        self
    }

    /// Initializers of at least `threshold_bytes` go to a side file when saved (ONNX external
    /// data), each at a 4096-byte-aligned offset. [`ModelBuilder::save`] writes the file.
    pub fn external_data(mut self, threshold_bytes: usize) -> Self {
        self.external_threshold = Some(threshold_bytes);
        self
    }

    /// The side file's name, relative to the model's directory (default: `<model file>.data`).
    pub fn external_data_file(mut self, file_name: &str) -> Self {
        self.external_file = Some(file_name.to_string());
        self
    }

    /// Whether inline `raw_data` is padded (through each initializer's doc string) to start at
    /// a 64-byte-aligned file offset, so that a mapped model's weights are used in place. On by
    /// default; only initializers without a doc string of their own are padded.
    pub fn align_initializers(mut self, yes: bool) -> Self {
        self.align_initializers = yes;
        self
    }

    /// The model; an error if any initializer would go to external data (use `save`).
    pub fn to_model(&self) -> Result<ModelProto> {
        Ok(self.assemble(None)?.0)
    }

    /// The serialized model; an error if any initializer would go to external data.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.to_model()?.encode_to_vec())
    }

    /// Writes the model to `path`, and its external data (if any) beside it.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model.onnx".into());
        let location = self
            .external_file
            .clone()
            .unwrap_or_else(|| format!("{file_name}.data"));
        let relative = relative_location(&location).map_err(|reason| {
            OnnxError::builder(format!("external data file '{location}' {reason}"))
        })?;
        let (model, data) = self.assemble(Some(&location))?;
        if !data.is_empty() {
            let data_path = path.parent().unwrap_or(Path::new("")).join(relative);
            std::fs::write(&data_path, &data).map_err(|err| OnnxError::io(data_path, err))?;
        }
        std::fs::write(path, model.encode_to_vec()).map_err(|err| OnnxError::io(path, err))
    }

    /// The model and its external data (empty when nothing goes external). With no
    /// `external_location`, external data is an error.
    fn assemble(&self, external_location: Option<&str>) -> Result<(ModelProto, Vec<u8>)> {
        if let Some(message) = &self.error {
            return Err(OnnxError::builder(message.clone()));
        }
        let mut initializers = self.initializers.clone();
        let mut data = Vec::new();
        if let Some(threshold) = self.external_threshold {
            data = layout::move_to_external(&mut initializers, threshold, external_location)?;
        }
        let mut inputs = self.inputs.clone();
        if self.initializers_as_inputs {
            inputs.extend(
                initializers
                    .iter()
                    .map(|t| tensor_value_info(t.name(), t.data_type(), Some(&fixed(&t.dims)))),
            );
        }
        let opset = self
            .opsets
            .iter()
            .find(|(d, _)| d.is_empty())
            .map_or(DEFAULT_OPSET, |(_, v)| *v);
        let mut model = ModelProto {
            ir_version: Some(
                self.ir_version
                    .unwrap_or_else(|| ir_version_for_opset(opset)),
            ),
            opset_import: self
                .opsets
                .iter()
                .map(|(domain, version)| OperatorSetIdProto {
                    domain: Some(domain.clone()),
                    version: Some(*version),
                })
                .collect(),
            producer_name: Some("strata".into()),
            producer_version: Some(env!("CARGO_PKG_VERSION").into()),
            doc_string: self.doc_string.clone(),
            graph: Some(GraphProto {
                name: Some(self.name.clone()),
                node: self.nodes.clone(),
                initializer: initializers,
                input: inputs,
                output: self.outputs.clone(),
                value_info: self.value_infos.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        if self.align_initializers {
            layout::align_inline_raw_data(&mut model);
        }
        Ok((model, data))
    }

    fn value_info_for(
        &mut self,
        name: &str,
        dtype: DType,
        dims: Option<&[Dim]>,
    ) -> Option<ValueInfoProto> {
        match elem_type(name, dtype) {
            Ok(code) => Some(tensor_value_info(name, code, dims)),
            Err(message) => {
                self.fail(message);
                None
            }
        }
    }

    /// Keeps the first failure for `to_model`/`to_bytes`/`save` to report.
    fn fail(&mut self, message: String) {
        self.error.get_or_insert(message);
    }
}

/// The IR version released together with default-domain `opset` (onnx's VERSION_TABLE).
fn ir_version_for_opset(opset: i64) -> i64 {
    match opset {
        ..=8 => 3,
        9 => 4,
        10 => 5,
        11 => 6,
        12..=14 => 7,
        15..=18 => 8,
        19..=20 => 9,
        21..=22 => 10,
        23 => 11,
        24 => 12,
        25..=27 => 13,
        _ => 14,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use strata_core::{Device, MemoryKind};

    use super::*;
    use crate::proto::attribute_proto::AttributeType;
    use crate::proto::tensor_shape_proto::dimension::Value as DimValue;
    use crate::proto::type_proto::Value as TypeValue;
    use crate::{load_model_bytes, tensor_from_proto, WeightSource};

    fn decode(builder: &ModelBuilder) -> ModelProto {
        load_model_bytes(Bytes::from(builder.to_bytes().unwrap()), "test").unwrap()
    }

    fn dims_of(info: &ValueInfoProto) -> Option<Vec<Option<DimValue>>> {
        match info.r#type.as_ref()?.value.as_ref()? {
            TypeValue::TensorType(t) => t
                .shape
                .as_ref()
                .map(|s| s.dim.iter().map(|d| d.value.clone()).collect()),
            _ => None,
        }
    }

    #[test]
    fn models_round_trip_with_every_attribute_kind() {
        let constant = Tensor::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let body = ModelBuilder::new("body")
            .input("a", DType::F32, &[])
            .node("Identity", &["a"], &["b"], Attrs::new())
            .to_model()
            .unwrap();
        let attrs = Attrs::new()
            .int("axis", -1)
            .ints("pads", &[1, 2, 3, 4])
            .float("alpha", 0.25)
            .floats("scales", &[1.0, 2.5])
            .string("mode", "nearest")
            .strings("names", &["a", "bc"])
            .tensor("value", &constant)
            .graph("body", body.graph.unwrap());
        let builder = ModelBuilder::new("everything")
            .opset(13)
            .opset_domain("com.example", 2)
            .doc_string("a model")
            .input(
                "x",
                DType::F32,
                &[Dim::sym("N"), Dim::Known(3), Dim::Unknown],
            )
            .initializer_f32("w", &[0.5, -0.5, 1.5], &[3])
            .initializer_i64("shape", &[1, -1], &[2])
            .node("Custom", &["x", "", "w"], &["y"], attrs)
            .named_node("last", "Relu", &["y"], &["z"], Attrs::default())
            .domain_node(
                "ext",
                "com.example",
                "Thing",
                &["z"],
                &["out"],
                Attrs::new(),
            )
            .value_info("y", DType::F32, &[Dim::sym("N"), 3.into()])
            .output("out", DType::F32, &[Dim::sym("N"), Dim::Known(3)])
            .output_unranked("z", DType::F32);
        let model = decode(&builder);
        assert_eq!(
            (
                model.ir_version(),
                model.producer_name(),
                model.doc_string()
            ),
            (7, "strata", "a model")
        );
        let opsets: Vec<(&str, i64)> = model
            .opset_import
            .iter()
            .map(|o| (o.domain(), o.version()))
            .collect();
        assert_eq!(opsets, [("", 13), ("com.example", 2)]);
        let graph = model.graph.unwrap();
        assert_eq!(graph.name(), "everything");
        let names: Vec<&str> = graph.node.iter().map(|n| n.name()).collect();
        assert_eq!(names, ["Custom_0", "last", "ext"]);
        assert_eq!(graph.node[0].input, ["x", "", "w"]);
        assert_eq!(graph.node[2].domain(), "com.example");

        let attr = |name: &str| {
            graph.node[0]
                .attribute
                .iter()
                .find(|a| a.name() == name)
                .unwrap()
        };
        assert_eq!(
            (attr("axis").r#type(), attr("axis").i()),
            (AttributeType::Int, -1)
        );
        assert_eq!(
            (attr("pads").r#type(), attr("pads").ints.as_slice()),
            (AttributeType::Ints, &[1i64, 2, 3, 4][..])
        );
        assert_eq!(
            (attr("alpha").r#type(), attr("alpha").f()),
            (AttributeType::Float, 0.25)
        );
        assert_eq!(
            (attr("scales").r#type(), attr("scales").floats.as_slice()),
            (AttributeType::Floats, &[1.0f32, 2.5][..])
        );
        assert_eq!(
            (attr("mode").r#type(), attr("mode").s()),
            (AttributeType::String, &b"nearest"[..])
        );
        assert_eq!(attr("names").r#type(), AttributeType::Strings);
        assert_eq!(
            attr("names").strings,
            [Bytes::from_static(b"a"), Bytes::from_static(b"bc")]
        );
        assert_eq!(attr("value").r#type(), AttributeType::Tensor);
        let value = tensor_from_proto(
            attr("value").t.as_ref().unwrap(),
            &WeightSource::in_memory(),
        )
        .unwrap();
        assert_eq!(value.to_vec::<f32>().unwrap(), [1.0, 2.0]);
        assert_eq!(attr("body").r#type(), AttributeType::Graph);
        assert_eq!(
            attr("body").g.as_ref().unwrap().node[0].op_type(),
            "Identity"
        );

        assert_eq!(graph.input.len(), 1);
        assert_eq!(
            dims_of(&graph.input[0]).unwrap(),
            [
                Some(DimValue::DimParam("N".into())),
                Some(DimValue::DimValue(3)),
                None
            ]
        );
        assert_eq!(
            dims_of(&graph.output[1]),
            None,
            "unranked output has no shape"
        );
        assert_eq!(graph.value_info[0].name(), "y");
        let weights = WeightSource::in_memory();
        let w = tensor_from_proto(&graph.initializer[0], &weights).unwrap();
        assert_eq!(
            (w.dims(), w.to_vec::<f32>().unwrap()),
            (&[3usize][..], vec![0.5, -0.5, 1.5])
        );
        let shape = tensor_from_proto(&graph.initializer[1], &weights).unwrap();
        assert_eq!(shape.to_vec::<i64>().unwrap(), [1, -1]);
    }

    #[test]
    fn initializers_can_be_listed_as_inputs() {
        let builder = ModelBuilder::new("old")
            .opset(7)
            .input("x", DType::F32, &[Dim::Known(2)])
            .initializer_values("b", &[1u8, 2], &[2])
            .initializers_as_inputs(true);
        let model = decode(&builder);
        assert_eq!(model.ir_version(), 3);
        let graph = model.graph.unwrap();
        let inputs: Vec<&str> = graph.input.iter().map(|i| i.name()).collect();
        assert_eq!(inputs, ["x", "b"]);
        assert_eq!(
            dims_of(&graph.input[1]).unwrap(),
            [Some(DimValue::DimValue(2))]
        );
    }

    #[test]
    fn misuse_is_reported_when_writing() {
        let q = Tensor::empty(&[32], DType::Q4_0, Device::Cpu, MemoryKind::Default).unwrap();
        let cases = [
            ModelBuilder::new("m").initializer("q", &q),
            ModelBuilder::new("m").input("x", DType::Q8_0, &[]),
            ModelBuilder::new("m").node("Constant", &[], &["c"], Attrs::new().tensor("value", &q)),
            ModelBuilder::new("m").initializer_f32("w", &[1.0; 3], &[2, 2]),
            ModelBuilder::new("m")
                .initializer_f32("w", &[1.0; 4], &[4])
                .external_data(8),
        ];
        for builder in cases {
            assert!(
                matches!(builder.to_bytes(), Err(OnnxError::Builder { .. })),
                "{builder:?}"
            );
        }
        // Under the threshold nothing goes external, so bytes are fine.
        assert!(ModelBuilder::new("m")
            .initializer_f32("w", &[1.0; 4], &[4])
            .external_data(17)
            .to_bytes()
            .is_ok());
    }

    #[test]
    fn inline_raw_data_is_aligned_in_the_file() {
        // The model's doc string is taken, so the node's carries the first initializer's pad.
        let mut builder =
            ModelBuilder::new("aligned")
                .doc_string("x")
                .node("Relu", &["a"], &["b"], Attrs::new());
        for i in 0..12 {
            builder =
                builder.initializer_values(&format!("w{i}"), &vec![1u8; 3 + 37 * i], &[3 + 37 * i]);
        }
        builder = builder.initializer_f32("big", &vec![0.5; 3000], &[3000]);
        let offsets = |builder: &ModelBuilder| {
            let bytes = Bytes::from(builder.to_bytes().unwrap());
            let model = load_model_bytes(bytes.clone(), "t").unwrap();
            model
                .graph
                .unwrap()
                .initializer
                .iter()
                .map(|t| t.raw_data.as_ref().unwrap().as_ptr() as usize - bytes.as_ptr() as usize)
                .collect::<Vec<_>>()
        };
        assert!(
            offsets(&builder)
                .iter()
                .all(|o| o.is_multiple_of(layout::INLINE_ALIGN)),
            "{:?}",
            offsets(&builder)
        );
        let unaligned = offsets(&builder.clone().align_initializers(false));
        assert!(
            unaligned.iter().any(|o| !o.is_multiple_of(4)),
            "{unaligned:?}"
        );
        // With no node and no free model doc string, the first initializer has nothing to pad.
        let bare = ModelBuilder::new("bare")
            .doc_string("x")
            .initializer_f32("a", &[1.0], &[1])
            .initializer_f32("b", &[2.0], &[1]);
        assert_eq!(offsets(&bare)[1] % layout::INLINE_ALIGN, 0);
        let bare = ModelBuilder::new("bare").initializer_f32("a", &[1.0], &[1]);
        assert_eq!(
            offsets(&bare)[0] % layout::INLINE_ALIGN,
            0,
            "the model doc string carries it"
        );
        // The padding changes nothing else.
        let padded = decode(&builder);
        let initializer = &padded.graph.unwrap().initializer[12];
        assert_eq!(
            tensor_from_proto(initializer, &WeightSource::in_memory())
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![0.5; 3000]
        );
    }

    #[test]
    fn ir_versions_follow_the_opset() {
        assert_eq!(
            [1, 8, 9, 11, 13, 17, 19, 21, 23, 24, 25, 28].map(ir_version_for_opset),
            [3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14]
        );
        assert_eq!(
            decode(&ModelBuilder::new("m").opset(17).ir_version(9)).ir_version(),
            9
        );
    }
}
