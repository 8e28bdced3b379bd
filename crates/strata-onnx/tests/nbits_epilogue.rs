//! MatMulNBits with its bias Add, a residual Add and a GELU after it, as onnxruntime's 4-bit
//! quantizer leaves transformer layers: the optimizer fuses them into the MatMulNBits
//! (applied as the GEMM finishes each piece of Y), and every row count — the GEMM path and the
//! few-row dot path — gives the unfused graph's result.

use std::path::PathBuf;

use strata_core::{DType, Tensor};
use strata_onnx::{Attrs, Dim, ModelBuilder};
use strata_runtime::{InferencePlan, PlanConfig};

const K: usize = 96;
const N: usize = 40;
const BLOCK: usize = 32;

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37 + seed).sin()).collect()
}

fn known(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

/// `y = FastGelu(MatMulNBits(x, B, scales, bias = b0) + b1 + r)` for `m` rows of `x`; `r` is a
/// graph input (a residual).
fn model(m: usize) -> ModelBuilder {
    let blocks = K / BLOCK;
    let b: Vec<u8> = (0..N * blocks * BLOCK / 2)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect();
    let scales: Vec<f32> = (0..N * blocks).map(|i| 0.02 + i as f32 * 1e-3).collect();
    let attrs = Attrs::new()
        .int("K", K as i64)
        .int("N", N as i64)
        .int("bits", 4)
        .int("block_size", BLOCK as i64);
    ModelBuilder::new("nbits_epilogue")
        .opset(17)
        .opset_domain("com.microsoft", 1)
        .input("x", DType::F32, &known(&[m, K]))
        .input("r", DType::F32, &known(&[m, N]))
        .initializer(
            "b",
            &Tensor::from_slice(&b, &[N, blocks, BLOCK / 2]).unwrap(),
        )
        .initializer(
            "scales",
            &Tensor::from_slice(&scales, &[N * blocks]).unwrap(),
        )
        .initializer_f32("b0", &values(N, 0.3), &[N])
        .initializer_f32("b1", &values(N, 1.1), &[N])
        .domain_node(
            "nbits",
            "com.microsoft",
            "MatMulNBits",
            &["x", "b", "scales", "", "", "b0"],
            &["p"],
            attrs,
        )
        .node("Add", &["p", "b1"], &["biased"], Attrs::new())
        .node("Add", &["r", "biased"], &["summed"], Attrs::new())
        .domain_node(
            "gelu",
            "com.microsoft",
            "FastGelu",
            &["summed"],
            &["y"],
            Attrs::new(),
        )
        .output("y", DType::F32, &known(&[m, N]))
}

fn load(builder: &ModelBuilder, name: &str, optimize: bool) -> std::sync::Arc<InferencePlan> {
    let dir = std::env::temp_dir().join(format!("strata-nbits-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("model.onnx");
    builder.save(&path).unwrap();
    let config = PlanConfig {
        optimize,
        ..PlanConfig::default().with_threads(2)
    };
    strata_onnx::load(&path, config).unwrap()
}

fn run(plan: &std::sync::Arc<InferencePlan>, m: usize) -> Vec<f32> {
    let mut ctx = plan.create_context().unwrap();
    let x = Tensor::from_slice(&values(m * K, 2.5), &[m, K]).unwrap();
    let r = Tensor::from_slice(&values(m * N, 0.7), &[m, N]).unwrap();
    ctx.set_input("x", &x).unwrap();
    ctx.set_input("r", &r).unwrap();
    ctx.execute().unwrap();
    ctx.output("y").unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn bias_residual_and_gelu_fuse_into_matmul_nbits_with_the_unfused_result() {
    // 2 rows: the dot path (steps after the product); 16: the GEMM with the steps in its
    // epilogue.
    for m in [2, 16] {
        let name = format!("m{m}");
        let fused = load(&model(m), &name, true);
        let counts = fused.op_counts();
        assert_eq!(counts.get("MatMulNBits"), Some(&1), "{counts:?}");
        for gone in ["Add", "FastGelu"] {
            assert!(!counts.contains_key(gone), "{gone} left: {counts:?}");
        }
        let unfused = load(&model(m), &format!("{name}_plain"), false);
        assert!(unfused.op_counts().contains_key("FastGelu"));
        let (got, want) = (run(&fused, m), run(&unfused, m));
        assert_eq!(got.len(), m * N);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "m {m} element {i}: {a} vs {b}"
            );
        }
    }
}
