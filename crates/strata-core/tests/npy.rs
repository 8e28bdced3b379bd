//! `.npy` files (T7): round trips for every numeric dtype, hand-crafted Fortran-order and
//! big-endian files, corrupt input, and (when Python with NumPy is available) a cross-check
//! against NumPy itself.

use std::path::PathBuf;
use std::process::Command;

use proptest::prelude::*;
use strata_core::{bf16, f16, CoreError, DType, Element, Tensor};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-npy-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A `.npy` file from its parts; `version` 1 uses a 2-byte header length, 2 and 3 a 4-byte one.
fn npy_file(version: u8, header: &str, data: &[u8]) -> Vec<u8> {
    let prefix = if version == 1 { 10 } else { 12 };
    let mut header = header.to_string();
    let unpadded = prefix + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn header(descr: &str, fortran: bool, shape: &str) -> String {
    let order = if fortran { "True" } else { "False" };
    format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}")
}

fn parse(bytes: &[u8]) -> Result<Tensor, CoreError> {
    Tensor::from_npy_bytes(bytes, "test.npy")
}

/// The value at flat index `k` used by the round trips (mirrored by the NumPy script below).
fn value_f64(k: usize) -> f64 {
    k as f64 * 0.5 - 3.0
}

fn value_int(k: usize) -> i64 {
    (k * 7 % 23) as i64 - 11
}

fn value_uint(k: usize) -> u64 {
    (k * 7 % 23) as u64
}

fn value_bool(k: usize) -> bool {
    k.is_multiple_of(3)
}

/// A tensor of `dtype` and `dims` holding the test values.
fn sample(dtype: DType, dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let ks = 0..n;
    match dtype {
        DType::F32 => {
            Tensor::from_slice(&ks.map(|k| value_f64(k) as f32).collect::<Vec<_>>(), dims)
        }
        DType::F64 => Tensor::from_slice(&ks.map(value_f64).collect::<Vec<_>>(), dims),
        DType::F16 => Tensor::from_slice(
            &ks.map(|k| f16::from_f64(value_f64(k))).collect::<Vec<_>>(),
            dims,
        ),
        DType::BF16 => Tensor::from_slice(
            &ks.map(|k| bf16::from_f64(value_f64(k))).collect::<Vec<_>>(),
            dims,
        ),
        DType::I8 => Tensor::from_slice(&ks.map(|k| value_int(k) as i8).collect::<Vec<_>>(), dims),
        DType::I16 => {
            Tensor::from_slice(&ks.map(|k| value_int(k) as i16).collect::<Vec<_>>(), dims)
        }
        DType::I32 => {
            Tensor::from_slice(&ks.map(|k| value_int(k) as i32).collect::<Vec<_>>(), dims)
        }
        DType::I64 => Tensor::from_slice(&ks.map(value_int).collect::<Vec<_>>(), dims),
        DType::U8 => Tensor::from_slice(&ks.map(|k| value_uint(k) as u8).collect::<Vec<_>>(), dims),
        DType::U16 => {
            Tensor::from_slice(&ks.map(|k| value_uint(k) as u16).collect::<Vec<_>>(), dims)
        }
        DType::U32 => {
            Tensor::from_slice(&ks.map(|k| value_uint(k) as u32).collect::<Vec<_>>(), dims)
        }
        DType::U64 => Tensor::from_slice(&ks.map(value_uint).collect::<Vec<_>>(), dims),
        DType::Bool => Tensor::from_bools(&ks.map(value_bool).collect::<Vec<_>>(), dims),
        other => unreachable!("{other} has no NumPy form"),
    }
    .unwrap()
}

/// The elements of `t` in logical order, as raw little-endian bytes.
fn logical_bytes(t: &Tensor) -> Vec<u8> {
    let dense = t.contiguous().unwrap();
    let start = dense.storage_offset() * dense.dtype().size_in_bytes();
    let len = dense.size_in_bytes().unwrap();
    let bytes = dense.read_bytes("test").unwrap().bytes()[start..start + len].to_vec();
    bytes
}

fn numeric_dtypes() -> impl Iterator<Item = DType> {
    // The dtypes with a NumPy form: no block formats, no ONNX low-precision types, no text.
    DType::ALL.into_iter().filter(|d| {
        !d.is_quantized() && !d.is_low_precision_float() && !d.is_sub_byte_int() && !d.is_string()
    })
}

#[test]
fn round_trip_every_numeric_dtype() {
    let dir = temp_dir("round-trip");
    for dtype in numeric_dtypes() {
        for dims in [&[2usize, 3, 4][..], &[], &[5], &[0, 3], &[1, 1, 7]] {
            let t = sample(dtype, dims);
            let path = dir.join(format!("{dtype}-{}.npy", dims.len()));
            t.write_npy(&path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes, t.to_npy_bytes().unwrap());
            let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + header_len) % 64, 0, "data starts 64-byte aligned");
            let back = Tensor::read_npy(&path).unwrap();
            assert_eq!(back.dtype(), dtype);
            assert_eq!(back.dims(), dims);
            assert_eq!(logical_bytes(&back), logical_bytes(&t), "{dtype} {dims:?}");
        }
    }
    // Typed spot checks.
    let back = parse(&sample(DType::F16, &[4]).to_npy_bytes().unwrap()).unwrap();
    assert_eq!(back.to_vec::<f16>().unwrap()[1], f16::from_f32(-2.5));
    let back = parse(&sample(DType::Bool, &[4]).to_npy_bytes().unwrap()).unwrap();
    assert_eq!(back.to_bools().unwrap(), vec![true, false, false, true]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn strided_tensors_are_written_in_logical_order() {
    let t = sample(DType::I32, &[2, 3, 4]);
    for view in [
        t.transpose(0, 2).unwrap(),
        t.slice(2, -1, isize::MIN, -2).unwrap(),
        t.select(1, 1).unwrap(),
        t.narrow(1, 1, 2).unwrap(),
        t.unsqueeze(0).unwrap().expand(&[2, 2, 3, 4]).unwrap(),
    ] {
        let back = parse(&view.to_npy_bytes().unwrap()).unwrap();
        assert_eq!(back.dims(), view.dims());
        assert!(back.is_contiguous());
        assert_eq!(back.to_vec::<i32>().unwrap(), view.to_vec::<i32>().unwrap());
    }
}

#[test]
fn fortran_order_is_read_into_logical_order() {
    // a[i][j] = 10 i + j for shape (2, 3), stored column by column.
    let data: Vec<u8> = [0i32, 10, 1, 11, 2, 12]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let t = parse(&npy_file(1, &header("<i4", true, "(2, 3)"), &data)).unwrap();
    assert_eq!(t.dims(), &[2, 3]);
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![0, 1, 2, 10, 11, 12]);

    // Three dims: element (i, j, k) = 100 i + 10 j + k, Fortran order (i fastest).
    let dims = [2usize, 3, 4];
    let mut data = Vec::new();
    for k in 0..4 {
        for j in 0..3 {
            for i in 0..2 {
                data.extend_from_slice(&((100 * i + 10 * j + k) as f64).to_le_bytes());
            }
        }
    }
    let t = parse(&npy_file(1, &header("<f8", true, "(2, 3, 4)"), &data)).unwrap();
    assert_eq!(t.dims(), &dims);
    let expected: Vec<f64> = (0..24)
        .map(|f| (100 * (f / 12) + 10 * (f / 4 % 3) + f % 4) as f64)
        .collect();
    assert_eq!(t.to_vec::<f64>().unwrap(), expected);

    // One dim and a scalar are the same in both orders.
    let t = parse(&npy_file(
        1,
        &header("<u2", true, "(3,)"),
        &[1, 0, 2, 0, 3, 0],
    ))
    .unwrap();
    assert_eq!(t.to_vec::<u16>().unwrap(), vec![1, 2, 3]);
    let t = parse(&npy_file(1, &header("<u2", true, "()"), &[9, 0])).unwrap();
    assert_eq!((t.rank(), t.to_vec::<u16>().unwrap()), (0, vec![9]));
}

#[test]
fn big_endian_files_are_byte_swapped() {
    fn check<T: Element>(descr: &str, values: &[T], be: impl Fn(&T) -> Vec<u8>) {
        let data: Vec<u8> = values.iter().flat_map(&be).collect();
        let shape = format!("({},)", values.len());
        let t = parse(&npy_file(1, &header(descr, false, &shape), &data)).unwrap();
        assert_eq!(t.dtype(), T::DTYPE, "{descr}");
        assert_eq!(t.to_vec::<T>().unwrap(), values, "{descr}");
    }
    check(">f4", &[1.5f32, -2.0, 3.25e10], |v| {
        v.to_be_bytes().to_vec()
    });
    check(">f8", &[1.5f64, -2.0, f64::MIN_POSITIVE], |v| {
        v.to_be_bytes().to_vec()
    });
    check(">f2", &[f16::from_f32(1.5), f16::from_f32(-65504.0)], |v| {
        v.to_be_bytes().to_vec()
    });
    check(">i2", &[1i16, -2, i16::MIN], |v| v.to_be_bytes().to_vec());
    check(">i4", &[1i32, -2, i32::MAX], |v| v.to_be_bytes().to_vec());
    check(">i8", &[1i64, -2, i64::MIN], |v| v.to_be_bytes().to_vec());
    check(">u2", &[1u16, 65535], |v| v.to_be_bytes().to_vec());
    check(">u4", &[1u32, 0xdead_beef], |v| v.to_be_bytes().to_vec());
    check(">u8", &[1u64, u64::MAX - 1], |v| v.to_be_bytes().to_vec());
    check("|u1", &[1u8, 255], |v| vec![*v]);
    check("|i1", &[1i8, -128], |v| v.to_be_bytes().to_vec());

    // Big-endian and Fortran order together.
    let data: Vec<u8> = [0i16, 10, 1, 11, 2, 12]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    let t = parse(&npy_file(1, &header(">i2", true, "(2, 3)"), &data)).unwrap();
    assert_eq!(t.to_vec::<i16>().unwrap(), vec![0, 1, 2, 10, 11, 12]);
}

#[test]
fn format_versions_two_and_three() {
    let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    for version in [2, 3] {
        let t = parse(&npy_file(version, &header("<f4", false, "(2,)"), &data)).unwrap();
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    }
    // Header written with double quotes and Python 2 long suffixes.
    let t = parse(&npy_file(
        1,
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1L, 2L)}",
        &data,
    ))
    .unwrap();
    assert_eq!(t.dims(), &[1, 2]);
}

fn assert_npy_error(bytes: &[u8], what: &str) {
    match parse(bytes) {
        Err(CoreError::Npy { path, .. }) => assert_eq!(path, "test.npy", "{what}"),
        Err(CoreError::SizeOverflow { .. }) => {}
        other => panic!("{what}: expected an npy error, got {other:?}"),
    }
}

#[test]
fn corrupt_files_are_errors() {
    let data = [0u8; 24];
    let good = npy_file(1, &header("<f4", false, "(2, 3)"), &data);
    assert!(parse(&good).is_ok());

    // Every truncation of a valid file is an error.
    for len in 0..good.len() {
        assert!(parse(&good[..len]).is_err(), "truncated to {len} bytes");
    }

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("wrong magic", b"\x93NUMPX\x01\x00\x10\x00{}".to_vec()),
        (
            "version 4",
            npy_file(1, &header("<f4", false, "(2,)"), &data)
                .iter()
                .enumerate()
                .map(|(i, &b)| if i == 6 { 4 } else { b })
                .collect(),
        ),
        (
            "header longer than the file",
            b"\x93NUMPY\x01\x00\xff\xff{'descr'".to_vec(),
        ),
        (
            "version 2 header length cut",
            b"\x93NUMPY\x02\x00\x10\x00".to_vec(),
        ),
        (
            "header not UTF-8",
            npy_file(1, "{'descr': '\u{fffd}'}", &data)
                .iter()
                .map(|&b| if b == 0xef { 0xff } else { b })
                .collect(),
        ),
        (
            "no descr",
            npy_file(1, "{'fortran_order': False, 'shape': (2,), }", &data),
        ),
        (
            "no fortran_order",
            npy_file(1, "{'descr': '<f4', 'shape': (2,), }", &data),
        ),
        (
            "no shape",
            npy_file(1, "{'descr': '<f4', 'fortran_order': False, }", &data),
        ),
        (
            "descr not a string",
            npy_file(
                1,
                "{'descr': 4, 'fortran_order': False, 'shape': (2,), }",
                &data,
            ),
        ),
        (
            "complex dtype",
            npy_file(1, &header("<c8", false, "(2,)"), &data),
        ),
        (
            "unicode dtype",
            npy_file(1, &header("<U4", false, "(2,)"), &data),
        ),
        (
            "object dtype",
            npy_file(1, &header("|O", false, "(2,)"), &data),
        ),
        (
            "unknown byte order",
            npy_file(1, &header("!f4", false, "(2,)"), &data),
        ),
        (
            "multi-byte descr",
            npy_file(1, &header("é4", false, "(2,)"), &data),
        ),
        (
            "multi-byte descr 2",
            npy_file(1, &header("<é", false, "(2,)"), &data),
        ),
        (
            "empty descr",
            npy_file(1, &header("", false, "(2,)"), &data),
        ),
        (
            "fortran_order maybe",
            npy_file(
                1,
                "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }",
                &data,
            ),
        ),
        (
            "shape a list",
            npy_file(1, &header("<f4", false, "[2, 3]"), &data),
        ),
        (
            "shape not numbers",
            npy_file(1, &header("<f4", false, "(2, x)"), &data),
        ),
        (
            "negative dim",
            npy_file(1, &header("<f4", false, "(-1,)"), &data),
        ),
        (
            "dim beyond usize",
            npy_file(
                1,
                &header("<f4", false, "(99999999999999999999999,)"),
                &data,
            ),
        ),
        (
            "element count overflow",
            npy_file(
                1,
                &header("<f4", false, "(4294967296, 4294967296, 4)"),
                &data,
            ),
        ),
        (
            "byte count overflow",
            npy_file(1, &header("<f8", false, "(4611686018427387904,)"), &data),
        ),
        (
            "data one byte short",
            npy_file(1, &header("<f4", false, "(2, 3)"), &data[..23]),
        ),
        (
            "bool holding 2",
            npy_file(1, &header("|b1", false, "(3,)"), &[0, 1, 2]),
        ),
    ];
    for (what, bytes) in cases {
        assert_npy_error(&bytes, what);
    }

    match Tensor::read_npy("/definitely/not/here.npy") {
        Err(CoreError::Io { path, .. }) => assert!(path.contains("not/here.npy")),
        other => panic!("expected an io error, got {other:?}"),
    }
}

#[test]
fn a_huge_shape_with_little_data_is_refused_before_allocating() {
    // Regression: the reader allocated the whole tensor (here 4 TiB) before noticing that the
    // file holds only 24 bytes of data.
    let bytes = npy_file(1, &header("<f4", false, "(1099511627776,)"), &[0u8; 24]);
    match parse(&bytes) {
        Err(CoreError::Npy { message, .. }) => assert!(message.contains("truncated"), "{message}"),
        other => panic!("expected a truncation error, got {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300), magic in any::<bool>()) {
        let mut input = bytes;
        if magic {
            let mut with_magic = b"\x93NUMPY\x01\x00".to_vec();
            with_magic.extend_from_slice(&input);
            input = with_magic;
        }
        let _ = parse(&input);
    }

    #[test]
    fn damaged_files_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        dtype in prop::sample::select(numeric_dtypes().collect::<Vec<_>>()),
    ) {
        let mut bytes = sample(dtype, &[2, 3]).to_npy_bytes().unwrap();
        let len = bytes.len();
        for (at, value) in edits {
            bytes[at.index(len)] = value;
        }
        if let Ok(t) = parse(&bytes) {
            // Whatever parsed is a consistent tensor.
            prop_assert_eq!(t.size_in_bytes().unwrap(), t.numel() * t.dtype().size_in_bytes());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cross-check with NumPy, when it is installed.
// ---------------------------------------------------------------------------------------------

fn numpy_available() -> bool {
    Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

const NUMPY_SCRIPT: &str = r#"
import sys, os
import numpy as np
d = sys.argv[1]
n = 24
k = np.arange(n)
vf = k * 0.5 - 3.0
vi = (k * 7 % 23) - 11
vu = k * 7 % 23
expect = {
    'f32': vf.astype('<f4'), 'f64': vf.astype('<f8'), 'f16': vf.astype('<f2'),
    'i8': vi.astype('i1'), 'i16': vi.astype('<i2'), 'i32': vi.astype('<i4'), 'i64': vi.astype('<i8'),
    'u8': vu.astype('u1'), 'u16': vu.astype('<u2'), 'u32': vu.astype('<u4'), 'u64': vu.astype('<u8'),
    'bool': (k % 3 == 0),
}
for name, want in expect.items():
    a = np.load(os.path.join(d, name + '.npy'))
    assert a.shape == (2, 3, 4), (name, a.shape)
    assert a.dtype == want.dtype, (name, a.dtype, want.dtype)
    assert np.array_equal(a.reshape(-1), want), (name, a, want)
# bf16 is stored as 2-byte void: the top half of the f32 bits.
a = np.load(os.path.join(d, 'bf16.npy'))
assert a.dtype.str == '|V2' and a.shape == (2, 3, 4), a.dtype
bits = np.frombuffer(a.tobytes(), dtype='<u2')
assert np.array_equal(bits, (vf.astype('<f4').view('<u4') >> 16).astype('<u2'))
# A transposed tensor arrives in logical order.
t = np.load(os.path.join(d, 'transposed.npy'))
assert np.array_equal(t, vi.astype('<i4').reshape(2, 3, 4).transpose(2, 1, 0)), t
# Files for strata to read: Fortran order, big-endian, both, and a scalar.
base = np.arange(24, dtype='<i4').reshape(2, 3, 4) * 3 - 7
np.save(os.path.join(d, 'py_fortran.npy'), np.asfortranarray(base))
np.save(os.path.join(d, 'py_big.npy'), base.astype('>f8'))
np.save(os.path.join(d, 'py_big_fortran.npy'), np.asfortranarray(base.astype('>i2')))
np.save(os.path.join(d, 'py_scalar.npy'), np.float32(2.5))
np.save(os.path.join(d, 'py_bool.npy'), base % 2 == 0)
np.save(os.path.join(d, 'py_empty.npy'), np.zeros((0, 3), dtype='<u8'))
"#;

#[test]
fn numpy_agrees() {
    if !numpy_available() {
        eprintln!("python3 with numpy not available: skipping the NumPy cross-check");
        return;
    }
    let dir = temp_dir("numpy");
    for dtype in numeric_dtypes() {
        sample(dtype, &[2, 3, 4])
            .write_npy(dir.join(format!("{dtype}.npy")))
            .unwrap();
    }
    sample(DType::I32, &[2, 3, 4])
        .permute(&[2, 1, 0])
        .unwrap()
        .write_npy(dir.join("transposed.npy"))
        .unwrap();
    let out = Command::new("python3")
        .arg("-c")
        .arg(NUMPY_SCRIPT)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "numpy check failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let base: Vec<i32> = (0..24).map(|v| v * 3 - 7).collect();
    let fortran = Tensor::read_npy(dir.join("py_fortran.npy")).unwrap();
    assert_eq!(
        (fortran.dtype(), fortran.dims()),
        (DType::I32, &[2usize, 3, 4][..])
    );
    assert_eq!(fortran.to_vec::<i32>().unwrap(), base);
    let big = Tensor::read_npy(dir.join("py_big.npy")).unwrap();
    assert_eq!(
        big.to_vec::<f64>().unwrap(),
        base.iter().map(|&v| v as f64).collect::<Vec<_>>()
    );
    let both = Tensor::read_npy(dir.join("py_big_fortran.npy")).unwrap();
    assert_eq!(
        both.to_vec::<i16>().unwrap(),
        base.iter().map(|&v| v as i16).collect::<Vec<_>>()
    );
    let scalar = Tensor::read_npy(dir.join("py_scalar.npy")).unwrap();
    assert_eq!(
        (scalar.rank(), scalar.to_vec::<f32>().unwrap()),
        (0, vec![2.5])
    );
    let bools = Tensor::read_npy(dir.join("py_bool.npy")).unwrap();
    assert_eq!(
        bools.to_bools().unwrap(),
        base.iter().map(|v| v % 2 == 0).collect::<Vec<_>>()
    );
    let empty = Tensor::read_npy(dir.join("py_empty.npy")).unwrap();
    assert_eq!(
        (empty.dtype(), empty.dims()),
        (DType::U64, &[0usize, 3][..])
    );
    std::fs::remove_dir_all(&dir).ok();
}
