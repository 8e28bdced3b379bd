//! GGUF files written by our writer read back exactly: every metadata value type, tensors of
//! every dtype in place over the mapping, v2 and v3, custom alignment.

mod common;

use common::{open_bytes, temp_path};
use strata_core::dtype::block::{dequantize_row, random_blocks, GGUF_WEIGHT_TYPES};
use strata_core::{DType, MemoryKind};
use strata_gguf::{Array, GgufFile, GgufWriter, Value};

fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(1.5e-5)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::String("héllo ✓".to_string())),
        ("t.u64", Value::U64(u64::MAX - 1)),
        ("t.i64", Value::I64(i64::MIN + 1)),
        ("t.f64", Value::F64(-2.25e300)),
        (
            "t.strings",
            Value::Array(Array::String(vec!["a".into(), "".into(), "Ġthe".into()])),
        ),
        ("t.f32s", Value::Array(Array::F32(vec![0.5, -1.0, 3.25]))),
        ("t.i32s", Value::Array(Array::I32(vec![-1, 2, 3]))),
        ("t.bools", Value::Array(Array::Bool(vec![true, false]))),
        ("t.u8s", Value::Array(Array::U8(vec![1, 2, 255]))),
        ("t.u64s", Value::Array(Array::U64(vec![u64::MAX]))),
        ("t.f64s", Value::Array(Array::F64(vec![1e-300]))),
        ("t.i8s", Value::Array(Array::I8(vec![-128, 127]))),
        ("t.u16s", Value::Array(Array::U16(vec![65535]))),
        ("t.i16s", Value::Array(Array::I16(vec![-32768]))),
        ("t.u32s", Value::Array(Array::U32(vec![7, 8]))),
        ("t.i64s", Value::Array(Array::I64(vec![-7]))),
        ("t.empty", Value::Array(Array::String(vec![]))),
        (
            "t.nested",
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, 2]),
                Array::String(vec!["x".into()]),
            ])),
        ),
    ]
}

#[test]
fn metadata_of_every_type_round_trips_in_v2_and_v3() {
    for version in [2, 3] {
        let mut w = GgufWriter::new()
            .version(version)
            .string("general.architecture", "llama");
        for (k, v) in every_value() {
            w = w.metadata(k, v);
        }
        let file = open_bytes("meta", &w.to_bytes()).unwrap();
        assert_eq!(file.version(), version);
        assert_eq!(file.architecture().unwrap(), "llama");
        for (k, v) in every_value() {
            assert_eq!(file.get(k), Some(&v), "{k}");
        }
        assert_eq!(file.metadata().len(), every_value().len() + 1);
        assert_eq!(file.get_u64("t.u32").unwrap(), 4_000_000_000);
        assert!(file.get_u64("t.i8").is_err(), "negative is not unsigned");
        assert!(file.get_str("t.u8").is_err());
        assert!(file.get_str("missing").is_err());
        assert_eq!(file.tensors().len(), 0);
    }
}

/// Random-looking bytes for a tensor of `dtype`, with every f16 scale a tame value.
fn tensor_bytes(dtype: DType, numel: usize, seed: u64) -> Vec<u8> {
    random_blocks(dtype, numel, seed, 0.01).unwrap()
}

#[test]
fn tensors_of_every_dtype_are_read_in_place() {
    for alignment in [32, 64] {
        let mut w = GgufWriter::new().alignment(alignment);
        let mut expect = Vec::new();
        for (i, dtype) in GGUF_WEIGHT_TYPES.into_iter().enumerate() {
            let dims = [3, 2 * dtype.block_size().max(8)];
            let bytes = tensor_bytes(dtype, dims[0] * dims[1], i as u64);
            w = w
                .tensor(&format!("w.{dtype}"), dtype, &dims, bytes.clone())
                .unwrap();
            expect.push((dtype, dims, bytes));
        }
        let path = temp_path("tensors");
        w.write(&path).unwrap();
        let file = GgufFile::open(&path).unwrap();
        assert_eq!(file.alignment(), alignment);
        assert_eq!(file.data_offset() % alignment, 0);
        for (dtype, dims, bytes) in expect {
            let name = format!("w.{dtype}");
            let info = file.tensor_info(&name).unwrap();
            assert_eq!((info.dtype, info.dims.as_slice()), (dtype, &dims[..]));
            assert_eq!(info.size_in_bytes, bytes.len());
            assert_eq!(info.file_offset % alignment, 0, "{name} aligned");
            let t = file.tensor(&name).unwrap();
            assert_eq!((t.dtype(), t.dims()), (dtype, &dims[..]));
            assert_eq!(t.memory_kind(), MemoryKind::Persistent);
            let read = t.read_bytes("test").unwrap();
            assert_eq!(read.bytes(), &bytes[..], "{name} bytes");
            let in_file = file.tensor_bytes(&name).unwrap();
            assert_eq!(
                read.bytes().as_ptr(),
                in_file.as_ptr(),
                "{name} is zero-copy"
            );
            let mut values = vec![0.0f32; dims[0] * dims[1]];
            dequantize_row(dtype, read.bytes(), &mut values).unwrap();
            assert!(values.iter().all(|v| v.is_finite()), "{name} finite");
        }
        assert!(file.tensor("absent").is_err());
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn tensors_outlive_the_file_handle() {
    let values: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let bytes = GgufWriter::new()
        .tensor_f32("x", &[8, 8], &values)
        .unwrap()
        .tensor_quantized("q", DType::Q8_0, &[2, 32], &values)
        .unwrap()
        .to_bytes();
    let file = open_bytes("alive", &bytes).unwrap();
    let x = file.tensor("x").unwrap();
    let q = file.tensor("q").unwrap();
    drop(file);
    assert_eq!(x.to_vec::<f32>().unwrap(), values);
    let mut back = vec![0.0f32; 64];
    dequantize_row(DType::Q8_0, q.read_bytes("t").unwrap().bytes(), &mut back).unwrap();
    for (a, b) in values.iter().zip(&back) {
        assert!((a - b).abs() <= 63.0 / 127.0, "{a} vs {b}");
    }
}

#[test]
fn writer_refuses_wrong_sizes() {
    assert!(GgufWriter::new()
        .tensor("w", DType::Q4_0, &[1, 32], vec![0; 17])
        .is_err());
    assert!(GgufWriter::new()
        .tensor("w", DType::Bool, &[1], vec![0])
        .is_err());
    assert!(GgufWriter::new()
        .tensor_quantized("w", DType::Q4_K, &[256], &[0.0; 256])
        .is_err());
}

#[test]
fn value_display_is_short() {
    let long = Value::String("x".repeat(500));
    assert!(long.to_string().len() < 100);
    let arr = Value::Array(Array::String((0..1000).map(|i| i.to_string()).collect()));
    let shown = arr.to_string();
    assert!(
        shown.starts_with("[string; 1000]") && shown.contains('…'),
        "{shown}"
    );
}
