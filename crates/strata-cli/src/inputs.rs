//! Input tensors for a run: read from files or generated from a seed.

use std::path::Path;

use strata_core::{DType, Tensor};

/// Reads an input file: `.npy`, or an ONNX `.pb` TensorProto.
pub fn read_input(path: &Path) -> Result<Tensor, String> {
    if path.extension().is_some_and(|e| e == "pb") {
        strata_onnx::read_tensor_pb(path).map_err(|e| e.to_string())
    } else {
        Tensor::read_npy(path).map_err(|e| e.to_string())
    }
}

/// A tensor of seeded pseudo-random data: floats in [-1, 1), integers in [0, 4), bools 0/1.
pub fn random_tensor(dtype: DType, dims: &[usize], seed: u64) -> Result<Tensor, String> {
    let n: usize = dims.iter().product();
    let unit = strata_onnx::models::seeded_values(n, seed, 1.0);
    let small = || unit.iter().map(|v| ((v + 1.0) * 2.0) as i64 % 4);
    let t = match dtype {
        DType::F32 => Tensor::from_slice(&unit, dims),
        DType::F64 => Tensor::from_slice(&unit.iter().map(|&v| v as f64).collect::<Vec<_>>(), dims),
        DType::F16 => Tensor::from_slice(
            &unit
                .iter()
                .map(|&v| strata_core::f16::from_f32(v))
                .collect::<Vec<_>>(),
            dims,
        ),
        DType::BF16 => Tensor::from_slice(
            &unit
                .iter()
                .map(|&v| strata_core::bf16::from_f32(v))
                .collect::<Vec<_>>(),
            dims,
        ),
        DType::I64 => Tensor::from_slice(&small().collect::<Vec<_>>(), dims),
        DType::I32 => Tensor::from_slice(&small().map(|v| v as i32).collect::<Vec<_>>(), dims),
        DType::I16 => Tensor::from_slice(&small().map(|v| v as i16).collect::<Vec<_>>(), dims),
        DType::I8 => Tensor::from_slice(&small().map(|v| v as i8).collect::<Vec<_>>(), dims),
        DType::U8 => Tensor::from_slice(&small().map(|v| v as u8).collect::<Vec<_>>(), dims),
        DType::U16 => Tensor::from_slice(&small().map(|v| v as u16).collect::<Vec<_>>(), dims),
        DType::U32 => Tensor::from_slice(&small().map(|v| v as u32).collect::<Vec<_>>(), dims),
        DType::U64 => Tensor::from_slice(&small().map(|v| v as u64).collect::<Vec<_>>(), dims),
        DType::Bool => Tensor::from_bools(&unit.iter().map(|&v| v > 0.0).collect::<Vec<_>>(), dims),
        other => return Err(format!("cannot generate random {other} data")),
    };
    t.map_err(|e| e.to_string())
}

/// `NAME` with every character outside `[A-Za-z0-9._-]` replaced by `_`, for file names.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizes_output_names() {
        assert_eq!(sanitize("out/put:0"), "out_put_0");
        assert_eq!(sanitize("a.b-c_d"), "a.b-c_d");
        assert_eq!(sanitize("ü"), "_");
    }

    #[test]
    fn random_inputs_are_seeded() {
        let a = random_tensor(DType::F32, &[4], 3)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let b = random_tensor(DType::F32, &[4], 3)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(a, b);
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
        let i = random_tensor(DType::I64, &[100], 1)
            .unwrap()
            .to_vec::<i64>()
            .unwrap();
        assert!(i.iter().all(|v| (0..4).contains(v)));
    }
}
