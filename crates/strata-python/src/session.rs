//! The native session: a plan, its context pool, and the calls `strata.InferenceSession` makes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use strata_core::Tensor;
use strata_ops::Dim;
use strata_runtime::{InferencePlan, IoInfo, OptimizationProfile, PlanConfig, RuntimeError};

use crate::convert::{feed_to_tensor, onnx_type_name, output_to_numpy};
use crate::errors::{self, raise, Kind};
use crate::model::{Metadata, Options, Source};
use crate::pool::ContextPool;
use crate::report;

/// An input's `(min, opt, max)` dims, as `SessionOptions.set_optimization_profile` stores them.
type DimRange = (Vec<usize>, Vec<usize>, Vec<usize>);

/// A loaded model, runnable from many threads at once.
#[pyclass(module = "strata._strata", frozen)]
pub struct Session {
    source: Source,
    options: Options,
    pool: ContextPool,
    metadata: Metadata,
    /// A second plan with per-node timing on, built on the first `profile` call when the
    /// session's own plan does not time its nodes.
    profiling: Mutex<Option<Arc<InferencePlan>>>,
}

#[pymethods]
impl Session {
    /// Loads `model` (a path or the bytes of an ONNX file). `threads` 0 means one per core;
    /// `profile` maps input names to `(min, opt, max)` dims; `dim_overrides` fixes symbolic dims
    /// by name.
    #[new]
    #[pyo3(signature = (model, threads=0, optimize=true, profiling=false, profile=None, dim_overrides=None))]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        threads: usize,
        optimize: bool,
        profiling: bool,
        profile: Option<BTreeMap<String, DimRange>>,
        dim_overrides: Option<BTreeMap<String, usize>>,
    ) -> PyResult<Self> {
        let source = if let Ok(bytes) = model.cast::<PyBytes>() {
            Source::Bytes(bytes::Bytes::copy_from_slice(bytes.as_bytes()))
        } else {
            Source::Path(model.extract::<PathBuf>()?)
        };
        let mut config = PlanConfig::default().with_profiling(profiling);
        config.optimize = optimize;
        if threads > 0 {
            config = config.with_threads(threads);
        }
        if let Some(ranges) = profile {
            let mut built = OptimizationProfile::new();
            for (name, (min, opt, max)) in ranges {
                built = built
                    .with_input(&name, &min, &opt, &max)
                    .map_err(|e| errors::runtime(&e))?;
            }
            config = config.with_profile(built);
        }
        let options = Options {
            config,
            dim_overrides: dim_overrides.unwrap_or_default(),
        };
        let (plan, metadata) = py
            .detach(|| source.load(&options))
            .map_err(|e| errors::onnx(&e))?;
        Ok(Session {
            source,
            options,
            pool: ContextPool::new(plan),
            metadata,
            profiling: Mutex::new(None),
        })
    }

    /// `[(name, type, shape)]` of the inputs; shape entries are ints, dim names, or None.
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        io_list(py, self.pool.plan().inputs())
    }

    /// `[(name, type, shape)]` of the outputs.
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        io_list(py, self.pool.plan().outputs())
    }

    /// The model's metadata as a dict of onnxruntime's `ModelMetadata` fields.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = &self.metadata;
        let dict = PyDict::new(py);
        dict.set_item("producer_name", &m.producer_name)?;
        dict.set_item("graph_name", &m.graph_name)?;
        dict.set_item("domain", &m.domain)?;
        dict.set_item("description", &m.description)?;
        dict.set_item("graph_description", &m.graph_description)?;
        dict.set_item("version", m.version)?;
        dict.set_item("custom_metadata_map", m.custom.clone())?;
        Ok(dict)
    }

    /// Runs the model on `feed` (input name → array) and returns the outputs named in
    /// `output_names` (all of them for None), in that order. The GIL is released while the
    /// model runs; concurrent calls each run on a context of their own.
    #[pyo3(signature = (output_names, feed))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        feed: &Bound<'py, PyDict>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let plan = self.pool.plan();
        let fetch = output_indices(plan, output_names)?;
        let feeds = collect_feeds(plan, feed)?;
        let mut ctx = self.pool.take().map_err(|e| errors::runtime(&e))?;
        // A rejected feed leaves the context as it was; a failed run may not.
        let ran = py.detach(|| -> Result<Result<(), RuntimeError>, RuntimeError> {
            for (index, tensor) in &feeds {
                ctx.set_input_at(*index, tensor)?;
            }
            Ok(ctx.execute())
        });
        match ran {
            Err(rejected) => {
                self.pool.give(ctx);
                return Err(errors::runtime(&rejected));
            }
            Ok(Err(failed)) => {
                self.pool.discard(ctx);
                return Err(errors::runtime(&failed));
            }
            Ok(Ok(())) => {}
        }
        let outputs = fetch
            .iter()
            .map(|&i| {
                let view = ctx.output_at(i).map_err(|e| errors::runtime(&e))?;
                output_to_numpy(py, &view)
            })
            .collect::<PyResult<Vec<_>>>();
        self.pool.give(ctx);
        outputs
    }

    /// The static memory plan (arena, lower bound, no-reuse sum) and bytes in use by memory
    /// kind; see `strata.InferenceSession.memory_plan`.
    fn memory_plan<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        report::memory_plan(py, &self.pool)
    }

    /// Per-node time summed over the runs of every idle context (empty unless the session was
    /// created with profiling on).
    fn node_timings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        report::pooled_node_timings(py, &self.pool)
    }

    /// Runs `feed` `warmup + runs` times on a fresh profiling context; latency and time per
    /// operator.
    fn profile<'py>(
        &self,
        py: Python<'py>,
        feed: &Bound<'py, PyDict>,
        runs: usize,
        warmup: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let plan = self.profiling_plan(py)?;
        let feeds = collect_feeds(&plan, feed)?;
        let timed = py
            .detach(|| report::time_runs(&plan, &feeds, runs.max(1), warmup))
            .map_err(|e| errors::runtime(&e))?;
        report::profile_dict(py, &timed)
    }

    /// Contexts alive in the pool: more than one means calls have overlapped.
    fn context_count(&self) -> usize {
        self.pool.created()
    }

    /// Intra-op threads per call.
    fn threads(&self) -> usize {
        self.pool.plan().config().threads
    }

    /// Whether this session's own contexts time every node.
    fn profiling_enabled(&self) -> bool {
        self.pool.plan().config().profiling
    }
}

impl Session {
    fn profiling_plan(&self, py: Python<'_>) -> PyResult<Arc<InferencePlan>> {
        if self.pool.plan().config().profiling {
            return Ok(self.pool.plan().clone());
        }
        let mut slot = self.profiling.lock();
        if let Some(plan) = slot.as_ref() {
            return Ok(plan.clone());
        }
        let mut options = self.options.clone();
        options.config.profiling = true;
        let (plan, _) = py
            .detach(|| self.source.load(&options))
            .map_err(|e| errors::onnx(&e))?;
        *slot = Some(plan.clone());
        Ok(plan)
    }
}

fn io_list<'py>(py: Python<'py>, list: &[IoInfo]) -> PyResult<Bound<'py, PyList>> {
    let rows = PyList::empty(py);
    for info in list {
        let shape = PyList::empty(py);
        for (axis, dim) in info.dims.iter().enumerate() {
            match dim {
                Dim::Known(d) => shape.append(*d)?,
                // The importer names a dim the model left blank `{input}_dim{axis}`;
                // onnxruntime reports those as None.
                Dim::Sym(name) if *name == format!("{}_dim{axis}", info.name) => {
                    shape.append(py.None())?
                }
                Dim::Sym(name) => shape.append(name)?,
                Dim::Unknown => shape.append(py.None())?,
            }
        }
        rows.append((&info.name, onnx_type_name(info.dtype), shape))?;
    }
    Ok(rows)
}

/// Positions of the requested outputs; an unknown name is an `InvalidArgument` listing the
/// model's outputs.
fn output_indices(plan: &InferencePlan, names: Option<Vec<String>>) -> PyResult<Vec<usize>> {
    let outputs = plan.outputs();
    match names {
        None => Ok((0..outputs.len()).collect()),
        Some(names) => names
            .iter()
            .map(|name| {
                outputs.iter().position(|o| &o.name == name).ok_or_else(|| {
                    errors::runtime(&RuntimeError::UnknownOutput {
                        name: name.clone(),
                        available: outputs.iter().map(|o| o.name.clone()).collect(),
                    })
                })
            })
            .collect(),
    }
}

/// Every input of `plan` as a tensor from `feed`: unknown names and missing inputs are errors
/// (a pooled context would otherwise reuse an input left from an earlier call).
fn collect_feeds(plan: &InferencePlan, feed: &Bound<'_, PyDict>) -> PyResult<Vec<(usize, Tensor)>> {
    let inputs = plan.inputs();
    let mut feeds: Vec<(usize, Tensor)> = Vec::with_capacity(inputs.len());
    for (key, value) in feed.iter() {
        let name: String = key.extract()?;
        let index = inputs.iter().position(|i| i.name == name).ok_or_else(|| {
            errors::runtime(&RuntimeError::UnknownInput {
                name: name.clone(),
                available: inputs.iter().map(|i| i.name.clone()).collect(),
            })
        })?;
        feeds.push((index, feed_to_tensor(&value, &inputs[index])?));
    }
    if feeds.len() < inputs.len() {
        let missing: Vec<&str> = inputs
            .iter()
            .enumerate()
            .filter(|(i, _)| !feeds.iter().any(|(f, _)| f == i))
            .map(|(_, info)| info.name.as_str())
            .collect();
        let given: Vec<String> = feed
            .keys()
            .iter()
            .map(|k| k.str().map(|s| s.to_string()).unwrap_or_default())
            .collect();
        return Err(raise(
            Kind::MissingInput,
            format!(
                "Required inputs ({}) are missing from input feed ({})",
                python_list(&missing),
                python_list(&given)
            ),
        ));
    }
    Ok(feeds)
}

/// `['a', 'b']`, as Python prints a list of names.
fn python_list<S: AsRef<str>>(names: &[S]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{}'", n.as_ref())).collect();
    format!("[{}]", quoted.join(", "))
}
