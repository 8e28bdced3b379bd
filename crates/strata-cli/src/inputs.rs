//! Input tensors for a run: read from files or generated from a seed.

use std::path::Path;

use strata_core::{DType, Device, Element, MemoryKind, Tensor};

/// Reads an input file: `.npy`, or an ONNX `.pb` TensorProto.
pub fn read_input(path: &Path) -> Result<Tensor, String> {
    if path.extension().is_some_and(|e| e == "pb") {
        strata_onnx::read_tensor_pb(path).map_err(|e| e.to_string())
    } else {
        Tensor::read_npy(path).map_err(|e| e.to_string())
    }
}

/// A tensor of seeded pseudo-random data: floats in [-1, 1), integers in [0, 4), bools 0/1.
/// The tensor is allocated first, through the registry, so impossible dims are an out-of-memory
/// or size error rather than an abort; then it is filled in place.
pub fn random_tensor(dtype: DType, dims: &[usize], seed: u64) -> Result<Tensor, String> {
    let t = Tensor::empty(dims, dtype, Device::Cpu, MemoryKind::Default)
        .map_err(|e| format!("cannot make random {dtype} data of dims {dims:?}: {e}"))?;
    let unit = || strata_onnx::models::seeded_stream(seed, 1.0);
    let small = || unit().map(|v| ((v + 1.0) * 2.0) as i64 % 4);
    fn fill<T: Element>(t: &Tensor, values: impl Iterator<Item = T>) -> strata_core::Result<()> {
        let n = t.numel();
        let mut w = t.write::<T>()?;
        // A fresh tensor is contiguous from the start of its storage.
        let slots = w.storage_data().iter_mut().take(n);
        slots.zip(values).for_each(|(slot, v)| *slot = v);
        Ok(())
    }
    match dtype {
        DType::F32 => fill(&t, unit()),
        DType::F64 => fill(&t, unit().map(f64::from)),
        DType::F16 => fill(&t, unit().map(strata_core::f16::from_f32)),
        DType::BF16 => fill(&t, unit().map(strata_core::bf16::from_f32)),
        DType::I64 => fill(&t, small()),
        DType::I32 => fill(&t, small().map(|v| v as i32)),
        DType::I16 => fill(&t, small().map(|v| v as i16)),
        DType::I8 => fill(&t, small().map(|v| v as i8)),
        DType::U8 => fill(&t, small().map(|v| v as u8)),
        DType::U16 => fill(&t, small().map(|v| v as u16)),
        DType::U32 => fill(&t, small().map(|v| v as u32)),
        DType::U64 => fill(&t, small().map(|v| v as u64)),
        DType::Bool => fill(&t, unit().map(|v| u8::from(v > 0.0))),
        other => return Err(format!("cannot generate random {other} data")),
    }
    .map_err(|e| e.to_string())?;
    Ok(t)
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
