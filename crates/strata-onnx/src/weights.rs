//! Where a model's weights come from: its directory (for external data files) and the mapped
//! external files themselves, each mapped once and shared by every tensor that uses it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use strata_core::MappedFile;

use crate::error::{OnnxError, Result};

/// The context [`crate::tensor_from_proto`] needs beyond the `TensorProto` itself.
///
/// Thread-safe; share one per model load so each external file is mapped once.
#[derive(Debug, Default)]
pub struct WeightSource {
    model_dir: Option<PathBuf>,
    /// Follow symbolic links that resolve outside the model directory (off unless asked for).
    links_may_leave: bool,
    files: Mutex<HashMap<PathBuf, Arc<MappedFile>>>,
    /// The model file itself, when it is mapped: weights inside it become regions of the map.
    model_map: Option<Arc<MappedFile>>,
}

impl WeightSource {
    /// External data resolves against `model_dir`.
    pub fn new(model_dir: impl Into<PathBuf>) -> Self {
        WeightSource {
            model_dir: Some(model_dir.into()),
            links_may_leave: false,
            files: Mutex::default(),
            model_map: None,
        }
    }

    /// The model's bytes are this mapping (see [`crate::map_model_file`]): tensors in it view
    /// the map, and the pages of weights that were copied or freed leave the resident set.
    pub fn with_model_map(mut self, map: Arc<MappedFile>) -> Self {
        self.model_map = Some(map);
        self
    }

    pub fn model_map(&self) -> Option<&Arc<MappedFile>> {
        self.model_map.as_ref()
    }

    /// Opts in to external data behind symbolic links that resolve outside the model directory
    /// (a model cache that links weight files to a shared blob store, say). Off by default: a
    /// model from a stranger must not read `/etc/passwd` through `weights.bin -> /etc/passwd`.
    pub fn allow_links_outside(mut self, allow: bool) -> Self {
        self.links_may_leave = allow;
        self
    }

    /// External data resolves against the directory holding the model file at `model_path`.
    pub fn for_model_file(model_path: impl AsRef<Path>) -> Self {
        let dir = model_path
            .as_ref()
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        WeightSource::new(dir)
    }

    /// A model with no directory (decoded from memory): any external data is an error.
    pub fn in_memory() -> Self {
        WeightSource::default()
    }

    pub fn model_dir(&self) -> Option<&Path> {
        self.model_dir.as_deref()
    }

    /// How many distinct external files are mapped so far.
    pub fn mapped_files(&self) -> usize {
        self.files
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    /// The mapping of `relative_path` (already checked to stay inside the model directory),
    /// mapped on first use.
    pub(crate) fn external_file(
        &self,
        tensor: &str,
        relative_path: &Path,
    ) -> Result<Arc<MappedFile>> {
        let dir = self.model_dir.as_deref().ok_or_else(|| {
            OnnxError::external(
                tensor,
                "the model was loaded from memory, so it has no directory for external files",
            )
        })?;
        let path = self.confined(tensor, dir, relative_path)?;
        // A poisoned lock only means another thread panicked mid-insert; the map is still valid.
        let mut files = self
            .files
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(file) = files.get(&path) {
            return Ok(file.clone());
        }
        let file = MappedFile::open(&path).map_err(|err| {
            OnnxError::external(tensor, format!("cannot map '{}': {err}", path.display()))
        })?;
        files.insert(path, file.clone());
        Ok(file)
    }

    /// `dir/relative_path` with every symbolic link resolved, refused unless it stays inside
    /// `dir` (also resolved) or the caller allowed links to leave it. `relative_path` is already
    /// lexically inside `dir`; only links can take it out.
    fn confined(&self, tensor: &str, dir: &Path, relative_path: &Path) -> Result<PathBuf> {
        let joined = dir.join(relative_path);
        let resolve = |path: &Path| {
            std::fs::canonicalize(path).map_err(|err| {
                OnnxError::external(tensor, format!("cannot open '{}': {err}", path.display()))
            })
        };
        let resolved = resolve(&joined)?;
        if !self.links_may_leave && !resolved.starts_with(resolve(dir)?) {
            return Err(OnnxError::external(
                tensor,
                format!(
                    "'{}' is a link to '{}', outside the model directory '{}' (links out of it \
                     are refused unless allowed with WeightSource::allow_links_outside)",
                    joined.display(),
                    resolved.display(),
                    dir.display()
                ),
            ));
        }
        Ok(resolved)
    }
}
