//! Loading a model (from a path or from bytes) into a plan, keeping what onnxruntime reports
//! about it: metadata and the declared inputs and outputs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use strata_onnx::proto::ModelProto;
use strata_onnx::{OnnxError, WeightSource};
use strata_ops::Dim;
use strata_runtime::{InferencePlan, OptimizationProfile, PlanConfig};

/// Where the model came from; kept so that a profiling plan can be built later.
#[derive(Clone)]
pub enum Source {
    Path(PathBuf),
    Bytes(bytes::Bytes),
}

/// onnxruntime's `ModelMetadata` fields.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    pub producer_name: String,
    pub graph_name: String,
    pub domain: String,
    pub description: String,
    pub graph_description: String,
    pub version: i64,
    pub custom: BTreeMap<String, String>,
}

/// How to build the plan: the runtime's config plus dims fixed by name
/// (onnxruntime's `add_free_dimension_override_by_name`).
#[derive(Clone, Debug)]
pub struct Options {
    pub config: PlanConfig,
    pub dim_overrides: BTreeMap<String, usize>,
}

impl Source {
    fn name(&self) -> String {
        match self {
            Source::Path(path) => path.display().to_string(),
            Source::Bytes(_) => "<model bytes>".to_string(),
        }
    }

    fn decode(&self) -> Result<ModelProto, OnnxError> {
        match self {
            Source::Path(path) => Ok(strata_onnx::open_model(path)?.0),
            Source::Bytes(bytes) => strata_onnx::load_model_bytes(bytes.clone(), &self.name()),
        }
    }

    fn weights(&self) -> WeightSource {
        match self {
            Source::Path(path) => WeightSource::for_model_file(path),
            Source::Bytes(_) => WeightSource::in_memory(),
        }
    }

    /// Decodes, imports and plans the model.
    pub fn load(&self, options: &Options) -> Result<(Arc<InferencePlan>, Metadata), OnnxError> {
        let model = self.decode()?;
        let graph = strata_onnx::import_model(&model, &self.weights(), &self.name())?;
        let mut config = options.config.clone();
        if !options.dim_overrides.is_empty() {
            config.profile = Some(fix_overridden_dims(
                &graph,
                config.profile.take().unwrap_or_default(),
                &options.dim_overrides,
            )?);
        }
        let plan = InferencePlan::build(graph, config)?;
        Ok((plan, metadata(&model)))
    }
}

/// Inputs whose every symbolic dim has an override (and no range of their own) get a fixed
/// range: the plan is then static for them, as onnxruntime's overrides make it.
fn fix_overridden_dims(
    graph: &strata_runtime::Graph,
    mut profile: OptimizationProfile,
    overrides: &BTreeMap<String, usize>,
) -> Result<OptimizationProfile, OnnxError> {
    for id in graph.runtime_inputs() {
        let value = graph.value(id);
        if profile.range(&value.name).is_some() {
            continue;
        }
        let dims: Option<Vec<usize>> = value
            .fact
            .dims
            .iter()
            .map(|d| match d {
                Dim::Known(v) => Some(*v),
                Dim::Sym(name) => overrides.get(name).copied(),
                Dim::Unknown => None,
            })
            .collect();
        let symbolic = value.fact.dims.iter().any(|d| matches!(d, Dim::Sym(_)));
        if let (Some(dims), true) = (dims, symbolic) {
            profile = profile.with_input(&value.name, &dims, &dims, &dims)?;
        }
    }
    Ok(profile)
}

fn metadata(model: &ModelProto) -> Metadata {
    let graph = model.graph.as_ref();
    Metadata {
        producer_name: model.producer_name.clone().unwrap_or_default(),
        graph_name: graph.and_then(|g| g.name.clone()).unwrap_or_default(),
        domain: model.domain.clone().unwrap_or_default(),
        description: model.doc_string.clone().unwrap_or_default(),
        graph_description: graph.and_then(|g| g.doc_string.clone()).unwrap_or_default(),
        version: model.model_version.unwrap_or(i64::MAX),
        custom: model
            .metadata_props
            .iter()
            .map(|p| {
                (
                    p.key.clone().unwrap_or_default(),
                    p.value.clone().unwrap_or_default(),
                )
            })
            .collect(),
    }
}
