//! ONNX → strata graph IR (I1, I4): opsets, initializers (zero-copy where aligned), inputs with
//! symbolic dims, nodes with validated attributes, and one error listing every unsupported op.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use strata_core::Tensor;
use strata_ops::{build_operator, is_supported, Attr, Attributes, Dim, OpContext};
use strata_runtime::{Graph, InferencePlan, PlanConfig, ValueId};

use crate::control_flow::{control_flow_op, is_control_flow, outer_references};
use crate::proto::{
    attribute_proto::AttributeType, tensor_shape_proto::dimension, type_proto, GraphProto,
    ModelProto, NodeProto, ValueInfoProto,
};
use crate::sequences::{is_sequence_op, lower_sequence_op};
use crate::{dtype_from_onnx, open_model, tensor_from_proto, OnnxError, Result, WeightSource};

/// Loads an ONNX model file and builds its plan: the one call most users need.
pub fn load(path: impl AsRef<Path>, config: PlanConfig) -> Result<Arc<InferencePlan>> {
    let graph = load_graph(path)?;
    Ok(InferencePlan::build(graph, config)?)
}

/// Loads an ONNX model file into a graph (weights mapped, not copied, where aligned).
pub fn load_graph(path: impl AsRef<Path>) -> Result<Graph> {
    let path = path.as_ref();
    let (model, _bytes) = open_model(path)?;
    import_model(
        &model,
        &WeightSource::for_model_file(path),
        &path.display().to_string(),
    )
}

/// Imports a decoded model; `source` names it in errors.
pub fn import_model(model: &ModelProto, weights: &WeightSource, source: &str) -> Result<Graph> {
    let model_err = |message: String| OnnxError::Model {
        path: source.to_string(),
        message,
    };
    let opsets = opset_versions(model);
    let graph_proto = model
        .graph
        .as_ref()
        .ok_or_else(|| model_err("the model has no graph".into()))?;
    check_supported(graph_proto, &opsets)?;
    let ctx = ImportContext {
        opsets: &opsets,
        weights,
        source,
    };
    let (graph, captures) = import_graph(graph_proto, &ctx, None)?;
    debug_assert!(captures.is_empty(), "the main graph has no outer scope");
    Ok(graph)
}

/// What every graph of a model is imported with.
pub(crate) struct ImportContext<'a> {
    pub opsets: &'a HashMap<String, i64>,
    pub weights: &'a WeightSource,
    /// Names the model in errors.
    pub source: &'a str,
}

impl ImportContext<'_> {
    fn model_err(&self, message: String) -> OnnxError {
        OnnxError::Model {
            path: self.source.to_string(),
            message,
        }
    }
}

/// Imports one graph. A subgraph (`outer` set) reads outer values by name: each becomes an
/// extra graph input after its formal ones, and its name is returned among the captures, in
/// input order, for the node that runs the subgraph to pass in.
pub(crate) fn import_graph(
    graph_proto: &GraphProto,
    ctx: &ImportContext,
    outer: Option<&Scope>,
) -> Result<(Graph, Vec<String>)> {
    let mut b = GraphBuilder {
        graph: Graph::new(),
        ids: HashMap::new(),
        sequences: HashMap::new(),
        outer,
        captures: Vec::new(),
    };
    for tp in &graph_proto.initializer {
        let name = tp.name.clone().unwrap_or_default();
        let tensor = tensor_from_proto(tp, ctx.weights)?;
        let id = b
            .graph
            .add_initializer(&name, tensor)
            .map_err(|e| ctx.model_err(e.to_string()))?;
        b.ids.insert(name, id);
    }
    for input in &graph_proto.input {
        let name = input.name.clone().unwrap_or_default();
        // Older IR versions list initializers among the inputs: they stay constants.
        if b.ids.contains_key(&name) {
            continue;
        }
        // A subgraph's inputs get their types from the node that runs it.
        let (dtype, dims) = match outer {
            None => input_type(input).map_err(|m| ctx.model_err(m))?,
            Some(_) => (strata_core::DType::F32, Vec::new()),
        };
        let id = b
            .graph
            .add_input(&name, dtype, dims)
            .map_err(|e| ctx.model_err(e.to_string()))?;
        b.ids.insert(name, id);
    }
    let scope = Scope {
        names: defined_names(graph_proto),
        parent: outer,
    };
    for node in topological_nodes(graph_proto).map_err(|m| ctx.model_err(m))? {
        add_node(&mut b, node, ctx, &scope)?;
    }
    let mut outputs = Vec::with_capacity(graph_proto.output.len());
    for o in &graph_proto.output {
        let name = o.name.clone().unwrap_or_default();
        let id = b
            .resolve(&name)
            .ok_or_else(|| ctx.model_err(format!("graph output {name:?} is never produced")))?;
        outputs.push(id);
    }
    if outer.is_some() {
        outputs = b
            .outputs_from_nodes(outputs)
            .map_err(|e| ctx.model_err(e.to_string()))?;
    }
    b.graph.set_outputs(&outputs);
    Ok((b.graph, b.captures))
}

/// A graph being imported: its values by name, and (for subgraphs) the outer scope.
pub(crate) struct GraphBuilder<'s> {
    pub graph: Graph,
    ids: HashMap<String, ValueId>,
    /// Sequence values resolved while importing: the values of their tensors, in order.
    sequences: HashMap<String, Vec<ValueId>>,
    outer: Option<&'s Scope<'s>>,
    captures: Vec<String>,
}

impl GraphBuilder<'_> {
    /// Names `id` (a node output) for the nodes that follow.
    pub fn define(&mut self, name: &str, id: ValueId) {
        if !name.is_empty() {
            self.ids.insert(name.to_string(), id);
        }
    }

    /// The tensors of the sequence value `name`, if it is one.
    pub fn sequence(&self, name: &str) -> Option<Vec<ValueId>> {
        self.sequences.get(name).cloned()
    }

    pub fn set_sequence(&mut self, name: &str, items: Vec<ValueId>) {
        self.sequences.insert(name.to_string(), items);
    }

    /// The value named `name`: defined here, or captured from an outer graph.
    pub fn resolve(&mut self, name: &str) -> Option<ValueId> {
        if let Some(&id) = self.ids.get(name) {
            return Some(id);
        }
        if !self.outer.is_some_and(|s| s.defines(name)) {
            return None;
        }
        let id = self
            .graph
            .add_input(name, strata_core::DType::F32, Vec::new())
            .ok()?;
        self.ids.insert(name.to_string(), id);
        self.captures.push(name.to_string());
        Some(id)
    }

    /// Subgraph outputs must be node outputs, each listed once, for the runtime to bind them:
    /// an input, a constant or a repeated value goes through an Identity node.
    fn outputs_from_nodes(
        &mut self,
        outputs: Vec<ValueId>,
    ) -> strata_runtime::Result<Vec<ValueId>> {
        let mut seen = std::collections::HashSet::new();
        let mut result = Vec::with_capacity(outputs.len());
        for (k, id) in outputs.into_iter().enumerate() {
            let from_node = matches!(
                self.graph.value(id).source,
                strata_runtime::ValueSource::Node(..)
            );
            if from_node && seen.insert(id) {
                result.push(id);
                continue;
            }
            let identity = build_operator(&OpContext {
                op_type: "Identity",
                domain: "",
                opset: 1,
                attrs: &Attributes::new("Identity"),
                num_inputs: 1,
                num_outputs: 1,
            })?;
            let name = format!("{}:output{k}", self.graph.value(id).name);
            let out =
                self.graph
                    .add_node(&name, Arc::from(identity), &[Some(id)], &[name.as_str()])?;
            result.push(out[0]);
        }
        Ok(result)
    }
}

/// The names an enclosing graph defines, for its subgraphs to capture.
pub(crate) struct Scope<'a> {
    names: HashSet<String>,
    parent: Option<&'a Scope<'a>>,
}

impl Scope<'_> {
    fn defines(&self, name: &str) -> bool {
        self.names.contains(name) || self.parent.is_some_and(|p| p.defines(name))
    }
}

/// Every value name a graph defines itself: inputs, initializers and node outputs.
fn defined_names(g: &GraphProto) -> HashSet<String> {
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
fn opset_versions(model: &ModelProto) -> HashMap<String, i64> {
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

/// One error naming every unsupported op type with its nodes and opset (I4).
fn check_supported(graph: &GraphProto, opsets: &HashMap<String, i64>) -> Result<()> {
    let mut missing: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    collect_unsupported(graph, &mut missing);
    if missing.is_empty() {
        return Ok(());
    }
    let ops = missing
        .into_iter()
        .map(|((domain, op_type), nodes)| {
            let opset = opsets.get(&domain).copied().unwrap_or(1);
            let qualified = if domain.is_empty() {
                op_type
            } else {
                format!("{domain}::{op_type}")
            };
            format!("{qualified} (opset {opset}; nodes {})", nodes.join(", "))
        })
        .collect();
    Err(OnnxError::UnsupportedOperators { ops })
}

/// Unsupported (domain, op type) → node names, in `graph` and its subgraphs.
fn collect_unsupported(graph: &GraphProto, missing: &mut BTreeMap<(String, String), Vec<String>>) {
    for (i, node) in graph.node.iter().enumerate() {
        let op_type = node.op_type.as_deref().unwrap_or("");
        let domain = node_domain(node);
        for sub in node.attribute.iter().filter_map(|a| a.g.as_ref()) {
            collect_unsupported(sub, missing);
        }
        let control = domain.is_empty() && (is_control_flow(op_type) || is_sequence_op(op_type));
        if !control && !is_supported(domain, op_type) {
            let name = node
                .name
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| format!("#{i}"));
            missing
                .entry((domain.to_string(), op_type.to_string()))
                .or_default()
                .push(name);
        }
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

/// The graph's nodes in an order where every value is produced before it is read.
fn topological_nodes(graph: &GraphProto) -> std::result::Result<Vec<&NodeProto>, String> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, node) in graph.node.iter().enumerate() {
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            if producer.insert(out.as_str(), i).is_some() {
                return Err(format!("value {out:?} is produced by more than one node"));
            }
        }
    }
    let n = graph.node.len();
    // Subgraphs read outer values by name: those are dependencies too.
    let deps: Vec<Vec<String>> = graph
        .node
        .iter()
        .map(|node| {
            let mut d = node.input.clone();
            d.extend(outer_references(node));
            d
        })
        .collect();
    let mut state = vec![0u8; n]; // 0 new, 1 visiting, 2 done
    let mut order = Vec::with_capacity(n);
    for start in 0..n {
        let mut stack = vec![(start, 0usize)];
        while let Some(&mut (i, ref mut next)) = stack.last_mut() {
            if *next == 0 {
                if state[i] == 2 {
                    stack.pop();
                    continue;
                }
                state[i] = 1;
            }
            let inputs = &deps[i];
            if let Some(input) = inputs.get(*next) {
                *next += 1;
                if let Some(&p) = producer.get(input.as_str()) {
                    match state[p] {
                        0 => stack.push((p, 0)),
                        1 => return Err(format!("the graph has a cycle through value {input:?}")),
                        _ => {}
                    }
                }
            } else {
                state[i] = 2;
                order.push(&graph.node[i]);
                stack.pop();
            }
        }
    }
    Ok(order)
}

fn add_node(
    b: &mut GraphBuilder,
    node: &NodeProto,
    ctx: &ImportContext,
    scope: &Scope,
) -> Result<()> {
    let op_type = node.op_type.as_deref().unwrap_or("");
    let domain = node_domain(node);
    let name = node.name.clone().unwrap_or_default();
    let node_err = |message: String| OnnxError::Node {
        node: name.clone(),
        op: op_type.to_string(),
        message,
    };
    let attrs = attributes(node).map_err(node_err)?;
    let opset = ctx.opsets.get(domain).copied().unwrap_or(1);
    let op_err = |source| OnnxError::operator(&name, op_type, source);
    if domain.is_empty() && is_sequence_op(op_type) {
        return lower_sequence_op(b, node, &attrs);
    }
    if let Some(seq) = node.input.iter().find(|n| b.sequence(n).is_some()) {
        return Err(op_err(strata_ops::OpError::Unsupported {
            op_type: format!("{op_type} reading the sequence {seq:?}"),
            domain: domain.to_string(),
            opset,
        }));
    }
    let (op, captures): (Arc<dyn strata_ops::Operator>, Vec<String>) =
        if domain.is_empty() && is_control_flow(op_type) {
            control_flow_op(node, opset, &attrs, ctx, scope)?
        } else {
            let op = build_operator(&OpContext {
                op_type,
                domain,
                opset,
                attrs: &attrs,
                num_inputs: node.input.len(),
                num_outputs: node.output.len(),
            })
            .map_err(op_err)?;
            (Arc::from(op), Vec::new())
        };
    let inputs = node
        .input
        .iter()
        .chain(&captures)
        .map(|input| {
            if input.is_empty() {
                Ok(None)
            } else {
                b.resolve(input)
                    .map(Some)
                    .ok_or_else(|| node_err(format!("reads {input:?}, which nothing produces")))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let outputs: Vec<&str> = node.output.iter().map(String::as_str).collect();
    let out_ids = b
        .graph
        .add_node(&name, op, &inputs, &outputs)
        .map_err(|e| node_err(e.to_string()))?;
    for (out, id) in node.output.iter().zip(out_ids) {
        if !out.is_empty() {
            b.ids.insert(out.clone(), id);
        }
    }
    Ok(())
}

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
fn infer_attribute_type(a: &crate::proto::AttributeProto) -> AttributeType {
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

/// Reads an `.pb` TensorProto file (the ONNX test-data format) as a tensor.
pub fn read_tensor_pb(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let tp = crate::open_tensor(path)?;
    tensor_from_proto(&tp, &WeightSource::for_model_file(path))
}

/// Builds a plan from ONNX bytes held in memory (no external data); `source` names them in
/// errors.
pub fn load_bytes(bytes: Vec<u8>, source: &str, config: PlanConfig) -> Result<Arc<InferencePlan>> {
    let model = crate::load_model_bytes(bytes::Bytes::from(bytes), source)?;
    let graph = import_model(&model, &WeightSource::in_memory(), source)?;
    Ok(InferencePlan::build(graph, config)?)
}
