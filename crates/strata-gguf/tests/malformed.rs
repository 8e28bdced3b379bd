//! Malformed GGUF files: each is a typed error naming the key, tensor or field at fault, never a
//! panic, and no count is allocated for before it is checked against the bytes left.

mod common;

use common::{open_bytes, Raw};
use strata_core::DType;
use strata_gguf::{GgufError, GgufWriter, Value};

fn valid_file() -> Vec<u8> {
    let values: Vec<f32> = (0..128).map(|i| i as f32 / 10.0).collect();
    GgufWriter::new()
        .string("general.architecture", "llama")
        .metadata(
            "tokenizer.ggml.tokens",
            Value::Array(strata_gguf::Array::String(vec!["a".into(), "b".into()])),
        )
        .tensor_quantized("blk.0.w", DType::Q4_1, &[4, 32], &values)
        .unwrap()
        .tensor_f32("norm", &[128], &values)
        .unwrap()
        .to_bytes()
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = valid_file();
    assert!(open_bytes("full", &bytes).is_ok());
    for len in 0..bytes.len() {
        let err = open_bytes("cut", &bytes[..len]).expect_err("truncated file must fail");
        assert!(
            matches!(
                err,
                GgufError::Truncated { .. }
                    | GgufError::CountTooLarge { .. }
                    | GgufError::TensorOutOfFile { .. }
                    | GgufError::BadMagic { .. }
            ),
            "cut at {len}: {err}"
        );
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut bytes = valid_file();
    bytes[0] = b'X';
    assert!(matches!(
        open_bytes("magic", &bytes),
        Err(GgufError::BadMagic { .. })
    ));
    for version in [1u32, 4, 0x0300_0000] {
        let mut bytes = valid_file();
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        assert_eq!(
            open_bytes("version", &bytes).unwrap_err(),
            GgufError::UnsupportedVersion { version }
        );
    }
}

#[test]
fn absurd_counts_fail_before_allocating() {
    let err = open_bytes("tensors", &Raw::header(3, u64::MAX, 0).0).unwrap_err();
    assert!(
        matches!(
            err,
            GgufError::CountTooLarge {
                count: u64::MAX,
                ..
            }
        ),
        "{err}"
    );
    let err = open_bytes("kvs", &Raw::header(3, 0, 1 << 40).0).unwrap_err();
    assert!(matches!(err, GgufError::CountTooLarge { .. }), "{err}");

    // A key whose length runs past the end.
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 50);
    r.0.resize(r.0.len() + 64, 0);
    let err = open_bytes("keylen", &r.0).unwrap_err();
    assert!(
        err.to_string().contains("key of metadata entry #0"),
        "{err}"
    );

    // An array of 2^40 u32s in a small file: named by its key.
    let mut r = Raw::header(3, 0, 1);
    r.str("tokenizer.ggml.scores").u32(9).u32(4).u64(1 << 40);
    let err = open_bytes("arraylen", &r.0).unwrap_err();
    assert!(
        matches!(&err, GgufError::CountTooLarge { what, .. } if what.contains("tokenizer.ggml.scores")),
        "{err}"
    );

    // A string array whose count fits the bytes but whose strings do not.
    let mut r = Raw::header(3, 0, 1);
    r.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).u64(3);
    r.0.extend_from_slice(b"abc");
    r.u64(u64::MAX);
    let err = open_bytes("strings", &r.0).unwrap_err();
    assert!(
        err.to_string().contains("element 1 of metadata key"),
        "{err}"
    );
}

#[test]
fn unknown_value_types_and_bad_strings_name_the_key() {
    let mut r = Raw::header(3, 0, 1);
    r.str("general.name").u32(13).u32(0);
    assert_eq!(
        open_bytes("vtype", &r.0).unwrap_err(),
        GgufError::UnknownValueType {
            key: "general.name".into(),
            type_id: 13
        }
    );
    let mut r = Raw::header(3, 0, 1);
    r.u64(2);
    r.0.extend_from_slice(&[0xFF, 0xFE]);
    r.u32(4).u32(0);
    assert!(matches!(
        open_bytes("utf8", &r.0),
        Err(GgufError::InvalidUtf8 { .. })
    ));

    // Arrays nested past the limit.
    let mut r = Raw::header(3, 0, 1);
    r.str("deep").u32(9);
    for _ in 0..10 {
        r.u32(9).u64(1);
    }
    r.0.resize(r.0.len() + 64, 0);
    assert!(matches!(
        open_bytes("deep", &r.0),
        Err(GgufError::NestingTooDeep { .. })
    ));
}

#[test]
fn duplicate_keys_and_tensors() {
    let bytes = GgufWriter::new()
        .metadata("k", Value::U8(1))
        .metadata("k", Value::U8(2))
        .to_bytes();
    assert_eq!(
        open_bytes("dupkey", &bytes).unwrap_err(),
        GgufError::DuplicateKey { key: "k".into() }
    );
    let bytes = GgufWriter::new()
        .tensor_f32("t", &[8], &[0.0; 8])
        .unwrap()
        .tensor_f32("t", &[8], &[0.0; 8])
        .unwrap()
        .to_bytes();
    assert!(matches!(
        open_bytes("duptensor", &bytes),
        Err(GgufError::DuplicateTensor { .. })
    ));
}

#[test]
fn alignment_must_be_a_power_of_two() {
    for (value, ok) in [
        (Value::U32(3), false),
        (Value::U32(0), false),
        (Value::String("32".into()), false),
        (Value::U64(64), true),
    ] {
        let bytes = GgufWriter::new()
            .metadata("general.alignment", value.clone())
            .to_bytes();
        assert_eq!(open_bytes("align", &bytes).is_ok(), ok, "{value:?}");
    }
}

/// One tensor info with the given fields, followed by `data` bytes of data section.
fn one_tensor(dims: &[u64], type_id: u32, offset: u64, data: usize) -> Vec<u8> {
    let mut r = Raw::header(3, 1, 0);
    r.tensor("blk.3.attn_q.weight", dims, type_id, offset)
        .data(32, data);
    r.0
}

#[test]
fn bad_tensor_infos_name_the_tensor() {
    let name = "blk.3.attn_q.weight";
    assert!(open_bytes("ok", &one_tensor(&[32, 2], 2, 0, 36)).is_ok());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (one_tensor(&[32, 2], 99, 0, 36), "unknown GGML type id 99"),
        (one_tensor(&[32, 2], 11, 0, 36), "q3_k is not supported"),
        (
            one_tensor(&[32, 2], 2, 16, 64),
            "not a multiple of the alignment",
        ),
        (one_tensor(&[32, 2], 2, 0, 35), "outside"),
        (one_tensor(&[32, 2], 2, u64::MAX - 31, 36), "outside"),
        (one_tensor(&[48, 2], 2, 0, 64), "whole q4_0 blocks"),
        (one_tensor(&[1, 1, 1, 1, 1], 0, 0, 4), "at most 4"),
        (one_tensor(&[u64::MAX, 4], 0, 0, 4), "overflow"),
        (one_tensor(&[1 << 62, 4], 0, 0, 4), "overflow"),
    ];
    for (bytes, expect) in cases {
        let err = open_bytes("tensor", &bytes).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(name) && text.contains(expect), "{text}");
    }
    // A tensor name that runs past the end.
    let mut r = Raw::header(3, 1, 0);
    r.u64(1000);
    r.0.resize(r.0.len() + 64, 0);
    let err = open_bytes("name", &r.0).unwrap_err();
    assert!(err.to_string().contains("name of tensor #0"), "{err}");
}
