//! `strata export`: the built-in models as .onnx files, for side-by-side runs with other
//! runtimes (see scripts/compare_onnxruntime.py).

use std::path::Path;

use strata_onnx::models;
use strata_onnx::Dim;

pub fn export(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let builders = [
        ("resnet_like.onnx", models::default_model()),
        (
            "resnet_like_batch.onnx",
            models::resnet_like(Dim::sym("N"), 64, 32, 3, 10, 42),
        ),
        ("mlp.onnx", models::mlp(Dim::sym("N"), 256, 512, 10, 7)),
        (
            "transformer_like.onnx",
            models::transformer_like(64, 128, 256, 11),
        ),
    ];
    for (file, builder) in builders {
        let path = dir.join(file);
        builder.save(&path).map_err(|e| e.to_string())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
