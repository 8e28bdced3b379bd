//! Every model of the ONNX backend-test corpus (`../shared/onnx-tests`) decodes, and every
//! tensor in it whose dtype strata supports converts: initializers, `Constant`-style tensor
//! attributes, and the test-data inputs of tensor-typed graph inputs.

use std::path::{Path, PathBuf};

use strata_onnx::proto::type_proto::Value as TypeValue;
use strata_onnx::proto::{GraphProto, ModelProto};
use strata_onnx::{
    dtype_from_onnx, open_model, open_tensor, tensor_from_proto, OnnxError, WeightSource,
};

fn corpus() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/onnx-tests");
    dir.is_dir().then_some(dir)
}

fn models_under(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            models_under(&path, found);
        } else if path.file_name().is_some_and(|n| n == "model.onnx") {
            found.push(path);
        }
    }
}

#[derive(Default)]
struct Counts {
    converted: usize,
    unsupported: usize,
    failures: Vec<String>,
}

impl Counts {
    fn record(
        &mut self,
        what: &str,
        result: Result<strata_core::Tensor, OnnxError>,
    ) -> Option<strata_core::Tensor> {
        match result {
            Ok(tensor) => {
                self.converted += 1;
                Some(tensor)
            }
            Err(OnnxError::UnsupportedDataType { .. }) => {
                self.unsupported += 1;
                None
            }
            Err(err) => {
                self.failures.push(format!("{what}: {err}"));
                None
            }
        }
    }
}

/// Initializers and tensor attributes of `graph` and all its subgraphs.
fn convert_graph(graph: &GraphProto, weights: &WeightSource, model: &Path, counts: &mut Counts) {
    for tp in &graph.initializer {
        counts.record(
            &format!("{}: initializer {}", model.display(), tp.name()),
            tensor_from_proto(tp, weights),
        );
    }
    for node in &graph.node {
        for attr in &node.attribute {
            let what = format!(
                "{}: node {} attribute {}",
                model.display(),
                node.name(),
                attr.name()
            );
            for tp in attr.t.iter().chain(&attr.tensors) {
                counts.record(&what, tensor_from_proto(tp, weights));
            }
            for sub in attr.g.iter().chain(&attr.graphs) {
                convert_graph(sub, weights, model, counts);
            }
        }
    }
}

/// `input_j.pb` of every data set, for graph inputs that are tensors of a supported dtype:
/// the tensor must have that dtype and the declared rank and fixed dims.
fn convert_test_inputs(model: &ModelProto, path: &Path, counts: &mut Counts) {
    let Some(graph) = model.graph.as_ref() else {
        return;
    };
    let initializers: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let inputs: Vec<_> = graph
        .input
        .iter()
        .filter(|i| !initializers.contains(&i.name()))
        .collect();
    let Some(case_dir) = path.parent() else {
        return;
    };
    for set in std::fs::read_dir(case_dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
    {
        for (j, input) in inputs.iter().enumerate() {
            let Some(TypeValue::TensorType(ty)) =
                input.r#type.as_ref().and_then(|t| t.value.as_ref())
            else {
                continue;
            };
            let Some(dtype) = dtype_from_onnx(ty.elem_type()) else {
                continue;
            };
            let pb = set.join(format!("input_{j}.pb"));
            if !pb.exists() {
                continue;
            }
            let what = format!("{}", pb.display());
            let tensor = match open_tensor(&pb) {
                Ok(tp) => counts.record(
                    &what,
                    tensor_from_proto(&tp, &WeightSource::for_model_file(&pb)),
                ),
                Err(err) => {
                    counts.failures.push(format!("{what}: {err}"));
                    None
                }
            };
            let (Some(tensor), Some(shape)) = (tensor, ty.shape.as_ref()) else {
                continue;
            };
            let fixed_dims_match = shape.dim.len() == tensor.rank()
                && shape
                    .dim
                    .iter()
                    .zip(tensor.dims())
                    .all(|(d, &n)| match d.value {
                        Some(
                            strata_onnx::proto::tensor_shape_proto::dimension::Value::DimValue(v),
                        ) => v as usize == n,
                        _ => true,
                    });
            if tensor.dtype() != dtype || !fixed_dims_match {
                counts.failures.push(format!(
                    "{what}: {:?} {:?} does not match the declared input {ty:?}",
                    tensor.dtype(),
                    tensor.dims()
                ));
            }
        }
    }
}

#[test]
fn every_corpus_model_decodes_and_its_tensors_convert() {
    let Some(dir) = corpus() else {
        println!("skipped: no ONNX test corpus at ../shared/onnx-tests");
        return;
    };
    let mut models = Vec::new();
    models_under(&dir, &mut models);
    assert!(
        models.len() > 1000,
        "expected the full corpus, found {} models",
        models.len()
    );
    let mut counts = Counts::default();
    for path in &models {
        let model = match open_model(path) {
            Ok((model, _bytes)) => model,
            Err(err) => {
                counts.failures.push(format!("{}: {err}", path.display()));
                continue;
            }
        };
        if let Some(graph) = model.graph.as_ref() {
            convert_graph(
                graph,
                &WeightSource::for_model_file(path),
                path,
                &mut counts,
            );
        }
        convert_test_inputs(&model, path, &mut counts);
    }
    println!(
        "{} models: {} tensors converted, {} of unsupported dtypes, {} failures",
        models.len(),
        counts.converted,
        counts.unsupported,
        counts.failures.len()
    );
    assert!(
        counts.failures.is_empty(),
        "{} failures:\n{}",
        counts.failures.len(),
        counts.failures.join("\n")
    );
    assert!(
        counts.converted > 1000,
        "only {} tensors converted",
        counts.converted
    );
}
