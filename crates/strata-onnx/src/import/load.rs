//! The public entry points: ONNX files or bytes to a graph or a ready plan, and test-data tensors.

use std::path::Path;
use std::sync::Arc;

use strata_core::{MappedFileBytes, Tensor};
use strata_runtime::{Graph, InferencePlan, PlanConfig};

use super::context::{opset_versions, ImportContext};
use super::importer::{check_supported, import_graph};
use crate::proto::ModelProto;
use crate::{map_model_file, tensor_from_proto, OnnxError, Result, WeightSource};

/// Loads an ONNX model file and builds its plan: the one call most users need.
pub fn load(path: impl AsRef<Path>, config: PlanConfig) -> Result<Arc<InferencePlan>> {
    let graph = load_graph(path)?;
    Ok(InferencePlan::build(graph, config)?)
}

/// Loads an ONNX model file into a graph (weights mapped, not copied, where aligned).
pub fn load_graph(path: impl AsRef<Path>) -> Result<Graph> {
    let path = path.as_ref();
    let source = path.display().to_string();
    let mut weights = WeightSource::for_model_file(path);
    let bytes = match map_model_file(path)? {
        Some(map) => {
            weights = weights.with_model_map(map.clone());
            bytes::Bytes::from_owner(MappedFileBytes(map))
        }
        None => bytes::Bytes::new(),
    };
    let model = crate::load_model_bytes(bytes, &source)?;
    import_model(&model, &weights, &source)
}

/// Imports a decoded model; `source` names it in errors.
pub fn import_model(model: &ModelProto, weights: &WeightSource, source: &str) -> Result<Graph> {
    let model_err = |message: String| OnnxError::Model {
        path: source.to_string(),
        message,
    };
    let opsets = opset_versions(model).map_err(model_err)?;
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
