//! Initializers of a memory-mapped model are used in place when aligned, copied once when not.

use std::path::PathBuf;

use strata_core::{bf16, f16, CoreError, DType, MemoryKind, Tensor};
use strata_onnx::{
    is_zero_copy, open_model, tensor_from_proto, Attrs, Dim, ModelBuilder, WeightSource,
};

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-onnx-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Where `raw_data` of initializer `name` starts in the mapped file.
fn raw_offset(model: &strata_onnx::proto::ModelProto, file: &bytes::Bytes, name: &str) -> usize {
    let tp = model
        .graph
        .as_ref()
        .unwrap()
        .initializer
        .iter()
        .find(|t| t.name() == name)
        .unwrap();
    tp.raw_data.as_ref().unwrap().as_ptr() as usize - file.as_ptr() as usize
}

#[test]
fn aligned_raw_data_in_a_mapped_file_is_zero_copy_and_misaligned_is_copied() {
    let dir = temp_dir("mapped");
    let values: Vec<f32> = (0..64).map(|i| i as f32 - 10.5).collect();
    let path = dir.join("model.onnx");
    let (mut aligned, mut misaligned) = (false, false);
    // The model doc string precedes the graph: its length moves the initializer in the file.
    for pad in 0..8 {
        ModelBuilder::new("pad")
            .doc_string(&"#".repeat(pad))
            .input("x", DType::F32, &[Dim::Known(64)])
            .initializer_f32("w", &values, &[8, 8])
            .node("Add", &["x", "w"], &["y"], Attrs::new())
            .output("y", DType::F32, &[Dim::Known(8), Dim::Known(8)])
            .align_initializers(false)
            .save(&path)
            .unwrap();
        let (model, file) = open_model(&path).unwrap();
        let offset = raw_offset(&model, &file, "w");
        let tp = &model.graph.as_ref().unwrap().initializer[0];
        let raw_ptr = tp.raw_data.as_ref().unwrap().as_ptr();
        assert!(
            raw_ptr >= file.as_ptr() && raw_ptr < file.as_ptr().wrapping_add(file.len()),
            "raw_data is a slice of the map"
        );
        let tensor = tensor_from_proto(tp, &WeightSource::for_model_file(&path)).unwrap();
        assert_eq!(
            (tensor.dims(), tensor.memory_kind()),
            (&[8usize, 8][..], MemoryKind::Persistent)
        );
        assert_eq!(tensor.to_vec::<f32>().unwrap(), values);
        let storage = tensor.storage().unwrap();
        if offset.is_multiple_of(4) {
            aligned = true;
            assert!(is_zero_copy(&tensor) && storage.block().is_external());
            assert_eq!(
                storage.as_ptr(),
                raw_ptr,
                "the tensor reads the mapped bytes"
            );
            assert!(storage.block().is_read_only());
            assert!(matches!(
                tensor.fill(0.0f32),
                Err(CoreError::ReadOnly { .. })
            ));
        } else {
            misaligned = true;
            assert!(!is_zero_copy(&tensor) && !storage.block().is_external());
            assert_ne!(storage.as_ptr(), raw_ptr);
        }
        // The tensor outlives the model and the file mapping handle.
        drop((model, file));
        assert_eq!(tensor.to_vec::<f32>().unwrap()[63], 63.0 - 10.5);
    }
    assert!(aligned && misaligned, "both paths were exercised");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn builder_models_have_every_initializer_in_place() {
    let dir = temp_dir("aligned");
    let path = dir.join("model.onnx");
    let halves: Vec<f16> = (0..5).map(|i| f16::from_f32(i as f32 / 4.0)).collect();
    let brains: Vec<bf16> = (0..3).map(|i| bf16::from_f32(i as f32 * 8.0)).collect();
    ModelBuilder::new("all")
        .input("x", DType::F32, &[Dim::sym("N")])
        .node("Identity", &["x"], &["y"], Attrs::new())
        .initializer_values("f64", &[1.5f64, 2.5, 3.5], &[3])
        .initializer_values("i8", &[-1i8, 2, 3], &[3])
        .initializer_values("f16", &halves, &[5])
        .initializer_values("i32", &[7i32; 7], &[7])
        .initializer_values("bf16", &brains, &[3])
        .initializer_i64("i64", &[1, 2, 3], &[3])
        .initializer_values("u16", &[9u16; 9], &[9])
        .initializer(
            "bool",
            &Tensor::from_bools(&[true, false, true], &[3]).unwrap(),
        )
        .initializer_f32("f32", &[0.25; 11], &[11])
        .output("y", DType::F32, &[Dim::sym("N")])
        .save(&path)
        .unwrap();
    let (model, _file) = open_model(&path).unwrap();
    let weights = WeightSource::for_model_file(&path);
    let tensors: Vec<(String, Tensor)> = model
        .graph
        .as_ref()
        .unwrap()
        .initializer
        .iter()
        .map(|tp| {
            (
                tp.name().to_string(),
                tensor_from_proto(tp, &weights).unwrap(),
            )
        })
        .collect();
    for (name, tensor) in &tensors {
        assert!(is_zero_copy(tensor), "{name} is used in place");
        assert_eq!(
            tensor.storage().unwrap().as_ptr() as usize % 64,
            0,
            "{name} is 64-byte aligned in the page-aligned map"
        );
    }
    let get = |name: &str| &tensors.iter().find(|(n, _)| n == name).unwrap().1;
    assert_eq!(get("f64").to_vec::<f64>().unwrap(), [1.5, 2.5, 3.5]);
    assert_eq!(get("i8").to_vec::<i8>().unwrap(), [-1, 2, 3]);
    assert_eq!(get("f16").to_vec::<f16>().unwrap(), halves);
    assert_eq!(get("bf16").to_vec::<bf16>().unwrap(), brains);
    assert_eq!(get("i64").to_vec::<i64>().unwrap(), [1, 2, 3]);
    assert_eq!(get("bool").to_bools().unwrap(), [true, false, true]);
    assert_eq!(get("f32").dtype(), DType::F32);
    std::fs::remove_dir_all(&dir).ok();
}
