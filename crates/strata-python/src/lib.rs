//! `strata._strata`: the native half of the `strata` Python package. The onnxruntime-shaped
//! surface (`InferenceSession`, `SessionOptions`, …) is Python in `python/strata`; this module
//! holds what must be fast or touch the runtime: loading plans, converting numpy arrays to and
//! from tensors, running on pooled execution contexts with the GIL released, and language
//! models (`LanguageModel`, generation one token per GIL release), and eager tensors
//! (`strata.Tensor` with PyTorch-named ops).

mod convert;
mod eager;
mod errors;
mod index;
mod llm;
mod model;
mod pool;
mod report;
mod session;
mod tensor;

use pyo3::prelude::*;

#[pymodule]
fn _strata(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<session::Session>()?;
    module.add_class::<llm::PyLanguageModel>()?;
    module.add_class::<llm::TokenStream>()?;
    module.add_function(wrap_pyfunction!(export_builtin_models, module)?)?;
    module.add_class::<tensor::PyTensor>()?;
    module.add_function(wrap_pyfunction!(tensor::tensor, module)?)?;
    module.add_function(wrap_pyfunction!(tensor::from_numpy, module)?)?;
    module.add_function(wrap_pyfunction!(tensor::zeros, module)?)?;
    eager::register(module)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Writes strata's built-in models (as `strata export DIR` does) into `dir`; returns their paths.
#[pyfunction]
fn export_builtin_models(py: Python<'_>, dir: std::path::PathBuf) -> PyResult<Vec<String>> {
    py.detach(|| {
        std::fs::create_dir_all(&dir).map_err(|e| strata_onnx::OnnxError::Io {
            path: dir.clone(),
            source: e,
        })?;
        strata_onnx::models::builtin()
            .into_iter()
            .map(|(file, builder)| {
                let path = dir.join(file);
                builder.save(&path)?;
                Ok(path.display().to_string())
            })
            .collect::<Result<Vec<_>, strata_onnx::OnnxError>>()
    })
    .map_err(|e| errors::onnx(&e))
}
