//! Bad bytes give typed errors naming their source, never panics: truncation at every point,
//! corruption of every byte, garbage.

use bytes::Bytes;
use strata_core::DType;
use strata_onnx::{
    load_model_bytes, open_model, tensor_from_proto, Attrs, Dim, ModelBuilder, OnnxError,
    WeightSource,
};

/// A small but realistic model: inputs with symbolic dims, initializers of several dtypes, nodes
/// with attributes of every kind.
fn model_bytes() -> Vec<u8> {
    let constant = strata_core::Tensor::from_slice(&[1i64, 2, 3], &[3]).unwrap();
    ModelBuilder::new("robust")
        .opset(17)
        .input(
            "x",
            DType::F32,
            &[Dim::sym("N"), Dim::Known(3), Dim::Known(4), Dim::Known(4)],
        )
        .initializer_f32(
            "w",
            &(0..54).map(|i| i as f32 * 0.1).collect::<Vec<_>>(),
            &[2, 3, 3, 3],
        )
        .initializer_f32("b", &[0.5, -0.5], &[2])
        .initializer_i64("shape", &[1, -1], &[2])
        .initializer_values("mask", &[1u8, 0, 1], &[3])
        .node(
            "Conv",
            &["x", "w", "b"],
            &["y"],
            Attrs::new().ints("pads", &[1, 1, 1, 1]).int("group", 1),
        )
        .node(
            "LeakyRelu",
            &["y"],
            &["z"],
            Attrs::new().float("alpha", 0.1),
        )
        .node(
            "Constant",
            &[],
            &["c"],
            Attrs::new().tensor("value", &constant),
        )
        .node(
            "Resize",
            &["z", "", "s"],
            &["r"],
            Attrs::new()
                .string("mode", "nearest")
                .floats("f", &[1.0, 2.0]),
        )
        .node("Reshape", &["r", "shape"], &["out"], Attrs::new())
        .output("out", DType::F32, &[Dim::sym("N"), Dim::Unknown])
        .to_bytes()
        .unwrap()
}

/// Converts every initializer; errors are fine, panics are not.
fn convert_all(model: &strata_onnx::proto::ModelProto) -> usize {
    let weights = WeightSource::in_memory();
    let graph = model.graph.as_ref().unwrap();
    graph
        .initializer
        .iter()
        .filter(|tp| tensor_from_proto(tp, &weights).is_err())
        .count()
}

#[test]
fn every_truncation_is_an_error_naming_the_source() {
    let full = Bytes::from(model_bytes());
    let model = load_model_bytes(full.clone(), "full").unwrap();
    assert_eq!(convert_all(&model), 0);
    for len in 0..full.len() {
        match load_model_bytes(full.slice(..len), "cut.onnx") {
            Err(OnnxError::Decode { path, message }) => {
                assert_eq!(path, "cut.onnx");
                assert!(!message.is_empty());
            }
            other => panic!(
                "prefix of {len}/{} bytes: expected a decode error, got {other:?}",
                full.len()
            ),
        }
    }
}

#[test]
fn corrupting_any_byte_never_panics() {
    let full = model_bytes();
    let mut decode_errors = 0;
    for index in 0..full.len() {
        for flip in [0xFF, 0x80, 0x01] {
            let mut bytes = full.clone();
            bytes[index] ^= flip;
            match load_model_bytes(Bytes::from(bytes), "corrupt.onnx") {
                Ok(model) => {
                    convert_all(&model);
                }
                Err(err) => {
                    assert!(err.to_string().starts_with("corrupt.onnx: "), "{err}");
                    decode_errors += 1;
                }
            }
        }
    }
    // Flipping bits in weights leaves a valid file; flipping tags and lengths must not.
    assert!(
        decode_errors > full.len() / 4,
        "{decode_errors} of {} corruptions detected",
        3 * full.len()
    );
}

#[test]
fn corrupted_lengths_and_tags_are_errors() {
    let full = model_bytes();
    // The model's graph field (tag 7, length-delimited: 0x3A) with an impossible length.
    let graph_at = full.iter().position(|&b| b == 0x3A).unwrap();
    let mut bytes = full[..=graph_at].to_vec();
    bytes.extend([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]);
    bytes.extend(&full[graph_at + 2..]);
    assert!(matches!(
        load_model_bytes(Bytes::from(bytes), "m"),
        Err(OnnxError::Decode { .. })
    ));
    // Wire type 7 does not exist.
    assert!(load_model_bytes(Bytes::from_static(&[0x0F, 0x00]), "m").is_err());
    // A varint that never ends.
    assert!(load_model_bytes(
        Bytes::from(
            vec![0x08; 1]
                .into_iter()
                .chain([0x80; 20])
                .collect::<Vec<u8>>()
        ),
        "m"
    )
    .is_err());
}

#[test]
fn garbage_is_an_error() {
    let fixed: [&[u8]; 6] = [
        b"",
        &[0; 64],
        &[0xFF; 64],
        b"hello, this is not an ONNX model",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
        b"{\"ir_version\": 8}",
    ];
    for bytes in fixed {
        assert!(
            matches!(
                load_model_bytes(Bytes::copy_from_slice(bytes), "junk"),
                Err(OnnxError::Decode { .. })
            ),
            "{bytes:?}"
        );
    }
    // Seeded random garbage of many lengths.
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for len in 0..2000 {
        let bytes: Vec<u8> = (0..len % 257)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        if let Ok(model) = load_model_bytes(Bytes::from(bytes), "random") {
            convert_all(&model);
        }
    }
}

#[test]
fn files_are_named_in_errors() {
    let dir = std::env::temp_dir().join(format!("strata-onnx-robust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.onnx");
    let err = open_model(&missing).unwrap_err();
    assert!(
        matches!(&err, OnnxError::Io { path, source } if *path == missing && source.kind() == std::io::ErrorKind::NotFound)
    );
    assert!(err.to_string().contains("missing.onnx"), "{err}");
    let full = model_bytes();
    let cut = dir.join("cut.onnx");
    std::fs::write(&cut, &full[..full.len() / 2]).unwrap();
    let err = open_model(&cut).unwrap_err();
    assert!(
        matches!(&err, OnnxError::Decode { path, .. } if path.ends_with("cut.onnx")),
        "{err}"
    );
    let empty = dir.join("empty.onnx");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(open_model(&empty), Err(OnnxError::Decode { .. })));
    assert!(
        matches!(open_model(&dir), Err(OnnxError::Io { .. })),
        "a directory is not a model"
    );
    std::fs::remove_dir_all(&dir).ok();
}
