//! `strata export`: the built-in models as .onnx files, for side-by-side runs with other
//! runtimes (see scripts/compare_onnxruntime.py).

use std::path::Path;

pub fn export(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (file, builder) in strata_onnx::models::builtin() {
        let path = dir.join(file);
        builder.save(&path).map_err(|e| e.to_string())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
