//! ONNX external data: tensors whose bytes live in a side file next to the model.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use strata_core::DType;
use strata_onnx::proto::tensor_proto::{DataLocation, DataType};
use strata_onnx::proto::{StringStringEntryProto, TensorProto};
use strata_onnx::{
    is_zero_copy, open_model, tensor_from_proto, Attrs, Dim, ModelBuilder, OnnxError, WeightSource,
};

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-onnx-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn external(name: &str, data_type: DataType, dims: &[i64], keys: &[(&str, &str)]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(data_type as i32),
        dims: dims.to_vec(),
        data_location: Some(DataLocation::External as i32),
        external_data: keys
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: Some(k.to_string()),
                value: Some(v.to_string()),
            })
            .collect(),
        ..Default::default()
    }
}

fn external_error(tp: &TensorProto, weights: &WeightSource) -> String {
    match tensor_from_proto(tp, weights) {
        Err(OnnxError::ExternalData { tensor, message }) => {
            assert_eq!(tensor, tp.name());
            message
        }
        other => panic!(
            "expected an external-data error for {}, got {other:?}",
            tp.name()
        ),
    }
}

#[test]
fn builder_writes_big_initializers_to_a_side_file() {
    let dir = temp_dir("external-builder");
    let path = dir.join("model.onnx");
    let big: Vec<f32> = (0..3000).map(|i| i as f32).collect();
    let also_big: Vec<i64> = (0..700).collect();
    ModelBuilder::new("ext")
        .input("x", DType::F32, &[Dim::Known(3000)])
        .initializer_f32("big", &big, &[3000])
        .initializer_f32("small", &[1.0, 2.0], &[2])
        .initializer_i64("also_big", &also_big, &[700])
        .node("Add", &["x", "big"], &["y"], Attrs::new())
        .output("y", DType::F32, &[Dim::Known(3000)])
        .external_data(1024)
        .save(&path)
        .unwrap();
    let data_path = dir.join("model.onnx.data");
    let data_len = std::fs::metadata(&data_path).unwrap().len() as usize;
    assert_eq!(
        data_len,
        4096 * 3 + 700 * 8,
        "12000 bytes at 0, then aligned to 4096"
    );

    let (model, _file) = open_model(&path).unwrap();
    let graph = model.graph.as_ref().unwrap();
    let weights = WeightSource::for_model_file(&path);
    let by_name = |name: &str| graph.initializer.iter().find(|t| t.name() == name).unwrap();
    assert_eq!(by_name("big").data_location(), DataLocation::External);
    assert_eq!(by_name("small").data_location(), DataLocation::Default);
    let big_tensor = tensor_from_proto(by_name("big"), &weights).unwrap();
    assert!(is_zero_copy(&big_tensor));
    assert_eq!(big_tensor.to_vec::<f32>().unwrap(), big);
    let also = tensor_from_proto(by_name("also_big"), &weights).unwrap();
    assert!(is_zero_copy(&also));
    assert_eq!(also.to_vec::<i64>().unwrap(), also_big);
    assert_eq!(weights.mapped_files(), 1, "the side file is mapped once");
    assert_eq!(
        tensor_from_proto(by_name("small"), &weights)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [1.0, 2.0]
    );
    // A custom side-file name in a subdirectory.
    std::fs::create_dir_all(dir.join("weights")).unwrap();
    ModelBuilder::new("ext")
        .initializer_f32("big", &big, &[3000])
        .external_data(0)
        .external_data_file("weights/w.bin")
        .save(&path)
        .unwrap();
    let (model, _) = open_model(&path).unwrap();
    let tensor = tensor_from_proto(
        &model.graph.unwrap().initializer[0],
        &WeightSource::for_model_file(&path),
    )
    .unwrap();
    assert_eq!(tensor.to_vec::<f32>().unwrap(), big);
    assert!(matches!(
        ModelBuilder::new("e")
            .initializer_f32("w", &[1.0], &[1])
            .external_data(0)
            .external_data_file("../up.bin")
            .save(&path),
        Err(OnnxError::Builder { .. })
    ));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn offsets_lengths_and_alignment() {
    let dir = temp_dir("external-manual");
    let values = [1.0f32, -2.0, 3.5];
    let mut file = vec![0xAAu8; 2];
    file.extend(values.iter().flat_map(|v| v.to_le_bytes())); // at 2: misaligned for f32
    file.extend([0u8; 2]);
    file.extend(values.iter().flat_map(|v| v.to_le_bytes())); // at 16: aligned
    file.extend([1u8, 0, 1, 2]); // bools at 28; the last byte is not a bool
    std::fs::write(dir.join("w.bin"), &file).unwrap();
    let weights = WeightSource::new(&dir);

    let misaligned = external(
        "m",
        DataType::Float,
        &[3],
        &[("location", "w.bin"), ("offset", "2"), ("length", "12")],
    );
    let t = tensor_from_proto(&misaligned, &weights).unwrap();
    assert!(!is_zero_copy(&t));
    assert_eq!(t.to_vec::<f32>().unwrap(), values);
    let aligned = external(
        "a",
        DataType::Float,
        &[3],
        &[("location", "./w.bin"), ("offset", "16")],
    );
    let t = tensor_from_proto(&aligned, &weights).unwrap();
    assert!(
        is_zero_copy(&t),
        "page-aligned map + offset 16 is aligned for f32"
    );
    assert_eq!(t.to_vec::<f32>().unwrap(), values);
    let bools = external(
        "flags",
        DataType::Bool,
        &[3],
        &[("location", "w.bin"), ("offset", "28"), ("length", "3")],
    );
    assert_eq!(
        tensor_from_proto(&bools, &weights)
            .unwrap()
            .to_bools()
            .unwrap(),
        [true, false, true]
    );
    assert_eq!(weights.mapped_files(), 1);

    let bad_bools = external(
        "bad_flags",
        DataType::Bool,
        &[4],
        &[("location", "w.bin"), ("offset", "28")],
    );
    assert!(matches!(
        tensor_from_proto(&bad_bools, &weights),
        Err(OnnxError::InvalidTensor { .. })
    ));
    let message = external_error(
        &external(
            "long",
            DataType::Float,
            &[3],
            &[("location", "w.bin"), ("offset", "2"), ("length", "16")],
        ),
        &weights,
    );
    assert!(
        message.contains("length 16") && message.contains("w.bin"),
        "{message}"
    );
    let message = external_error(
        &external(
            "past_end",
            DataType::Float,
            &[3],
            &[("location", "w.bin"), ("offset", "24")],
        ),
        &weights,
    );
    assert!(
        message.contains("outside") && message.contains("w.bin"),
        "{message}"
    );
    let message = external_error(
        &external(
            "overflow",
            DataType::Float,
            &[3],
            &[("location", "w.bin"), ("offset", &usize::MAX.to_string())],
        ),
        &weights,
    );
    assert!(message.contains("outside"), "{message}");
    let message = external_error(
        &external(
            "missing",
            DataType::Float,
            &[3],
            &[("location", "nope.bin")],
        ),
        &weights,
    );
    assert!(message.contains("nope.bin"), "{message}");
    external_error(
        &external("no_location", DataType::Float, &[3], &[("offset", "0")]),
        &weights,
    );
    external_error(
        &external(
            "bad_offset",
            DataType::Float,
            &[3],
            &[("location", "w.bin"), ("offset", "ten")],
        ),
        &weights,
    );
    external_error(&aligned, &WeightSource::in_memory());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn locations_cannot_escape_the_model_directory() {
    let root = temp_dir("external-escape");
    let model_dir = root.join("model");
    std::fs::create_dir_all(&model_dir).unwrap();
    // A perfectly readable file right outside the model directory.
    let secret = root.join("secret.bin");
    std::fs::write(&secret, [0u8; 16]).unwrap();
    let weights = WeightSource::new(&model_dir);
    let absolute = secret.display().to_string();
    for location in [
        "../secret.bin",
        "sub/../../secret.bin",
        "..\\secret.bin",
        absolute.as_str(),
    ] {
        let tp = external("escape", DataType::Float, &[4], &[("location", location)]);
        let message = external_error(&tp, &weights);
        assert!(message.contains(location), "{message}");
        assert!(
            message.contains("escapes") || message.contains("absolute"),
            "{message}"
        );
    }
    assert_eq!(weights.mapped_files(), 0, "nothing outside was opened");
    std::fs::remove_dir_all(&root).ok();
}

#[cfg(unix)]
#[test]
fn links_out_of_the_model_directory_are_refused_unless_allowed() {
    use std::os::unix::fs::symlink;
    let root = temp_dir("external-links");
    let model_dir = root.join("model");
    let inside = model_dir.join("blobs");
    std::fs::create_dir_all(&inside).unwrap();
    let secret = root.join("secret.bin");
    std::fs::write(&secret, 7.0f32.to_le_bytes().repeat(4)).unwrap();
    std::fs::write(inside.join("w.bin"), 3.0f32.to_le_bytes().repeat(4)).unwrap();
    // A file link and a directory link leading out, and a link that stays inside.
    symlink(&secret, model_dir.join("file_link.bin")).unwrap();
    symlink(&root, model_dir.join("dir_link")).unwrap();
    symlink(inside.join("w.bin"), model_dir.join("inner_link.bin")).unwrap();

    let confined = WeightSource::new(&model_dir);
    for location in ["file_link.bin", "dir_link/secret.bin"] {
        let tp = external("leak", DataType::Float, &[4], &[("location", location)]);
        let message = external_error(&tp, &confined);
        assert!(message.contains("outside the model directory"), "{message}");
    }
    assert_eq!(confined.mapped_files(), 0, "nothing outside was opened");

    let read = |weights: &WeightSource, location: &str| {
        let tp = external("w", DataType::Float, &[4], &[("location", location)]);
        tensor_from_proto(&tp, weights)
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    };
    assert_eq!(read(&confined, "inner_link.bin"), [3.0; 4]);
    let trusting = WeightSource::new(&model_dir).allow_links_outside(true);
    assert_eq!(read(&trusting, "file_link.bin"), [7.0; 4]);
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn models_loaded_from_memory_with_external_data_fail_cleanly() {
    let dir = temp_dir("external-memory");
    let path = dir.join("m.onnx");
    ModelBuilder::new("m")
        .initializer_f32("w", &[1.0; 16], &[16])
        .external_data(0)
        .save(&path)
        .unwrap();
    let bytes = Bytes::from(std::fs::read(&path).unwrap());
    let model = strata_onnx::load_model_bytes(bytes, "m.onnx").unwrap();
    let tp = &model.graph.unwrap().initializer[0];
    assert!(external_error(tp, &WeightSource::in_memory()).contains("from memory"));
    assert_eq!(
        tensor_from_proto(tp, &WeightSource::for_model_file(&path))
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [1.0; 16]
    );
    assert_eq!(
        WeightSource::for_model_file("m.onnx").model_dir(),
        Some(Path::new("."))
    );
    std::fs::remove_dir_all(&dir).ok();
}
