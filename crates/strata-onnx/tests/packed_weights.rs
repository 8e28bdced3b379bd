//! Weights every reader packed at plan time are freed (R1, issue 10 item 2): the plan keeps only
//! the packed copy, runs still equal a plan that reads the weight as an input, and a weight that
//! something else still reads is kept.

use std::path::PathBuf;

use strata_core::{DType, Tensor};
use strata_onnx::{Attrs, Dim, ModelBuilder};
use strata_runtime::{InferencePlan, PlanConfig};

const C: usize = 8;
const M: usize = 16;
const HW: usize = 12;

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37 + seed).sin()).collect()
}

fn known(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Known(d)).collect()
}

/// `y = Conv(x, w)` (3x3, pad 1) with `w` a weight, or a graph input when `weight_as_input`;
/// with `weight_out` the weight is also a graph output.
fn conv_model(weight_as_input: bool, weight_out: bool) -> ModelBuilder {
    let w_dims = [M, C, 3, 3];
    let mut b =
        ModelBuilder::new("packed")
            .opset(17)
            .input("x", DType::F32, &known(&[1, C, HW, HW]));
    b = if weight_as_input {
        b.input("w", DType::F32, &known(&w_dims))
    } else {
        b.initializer_f32("w", &values(M * C * 9, 0.5), &w_dims)
    };
    b = b
        .node(
            "Conv",
            &["x", "w"],
            &["y"],
            Attrs::new().ints("pads", &[1, 1, 1, 1]),
        )
        .output("y", DType::F32, &known(&[1, M, HW, HW]));
    if weight_out {
        b = b
            .node("Identity", &["w"], &["w_copy"], Attrs::new())
            .output("w_copy", DType::F32, &known(&w_dims));
    }
    b
}

/// Saves the model to a file (so its weights are mapped, as for real models) and loads it.
fn load(builder: &ModelBuilder, name: &str) -> std::sync::Arc<InferencePlan> {
    let dir = std::env::temp_dir().join(format!("strata-packed-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("model.onnx");
    builder.save(&path).unwrap();
    strata_onnx::load(&path, PlanConfig::default().with_threads(1)).unwrap()
}

fn run(plan: &std::sync::Arc<InferencePlan>, inputs: &[(&str, Tensor)]) -> Vec<f32> {
    let mut ctx = plan.create_context().unwrap();
    for (name, t) in inputs {
        ctx.set_input(name, t).unwrap();
    }
    ctx.execute().unwrap();
    ctx.output("y").unwrap().to_vec::<f32>().unwrap()
}

fn f32_weight_bytes(plan: &InferencePlan) -> usize {
    plan.weight_bytes().get(&DType::F32).copied().unwrap_or(0)
}

#[test]
fn a_packed_weight_is_freed_and_runs_match_the_weight_as_input() {
    let x = Tensor::from_slice(&values(C * HW * HW, 1.5), &[1, C, HW, HW]).unwrap();
    let w = Tensor::from_slice(&values(M * C * 9, 0.5), &[M, C, 3, 3]).unwrap();
    let packed = load(&conv_model(false, false), "freed");
    assert_eq!(
        f32_weight_bytes(&packed),
        0,
        "the conv weight was packed and freed"
    );
    let reference = load(&conv_model(true, false), "input");
    let expected = run(&reference, &[("x", x.clone()), ("w", w)]);
    let got = run(&packed, &[("x", x.clone())]);
    assert_eq!(got, expected);
    // A second context, and a second run, read the same packed weight.
    assert_eq!(run(&packed, &[("x", x)]), expected);
}

#[test]
fn a_weight_something_else_reads_is_kept() {
    let x = Tensor::from_slice(&values(C * HW * HW, 1.5), &[1, C, HW, HW]).unwrap();
    let plan = load(&conv_model(false, true), "kept");
    assert_eq!(f32_weight_bytes(&plan), M * C * 9 * 4);
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("x", &x).unwrap();
    ctx.execute().unwrap();
    let copy = ctx.output("w_copy").unwrap().to_vec::<f32>().unwrap();
    assert_eq!(copy, values(M * C * 9, 0.5));
}

/// `y = MatMulNBits(x, B, scales, zero_points)` (K 64, N 8, blocks of 32) with B, its scales and
/// zero points constants, or graph inputs when `weights_as_inputs`.
fn nbits_model(
    bits: usize,
    weights_as_inputs: bool,
) -> (ModelBuilder, Vec<(&'static str, Tensor)>) {
    const K: usize = 64;
    const N: usize = 8;
    const BLOCK: usize = 32;
    let blocks = K / BLOCK;
    let b: Vec<u8> = (0..N * blocks * BLOCK * bits / 8)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect();
    let scales: Vec<f32> = (0..N * blocks).map(|i| 0.01 + i as f32 * 1e-3).collect();
    let zp_row = (blocks * bits).div_ceil(8);
    let zp: Vec<u8> = (0..N * zp_row).map(|i| (i * 37 % 251) as u8).collect();
    let weights = vec![
        (
            "b",
            Tensor::from_slice(&b, &[N, blocks, BLOCK * bits / 8]).unwrap(),
        ),
        (
            "scales",
            Tensor::from_slice(&scales, &[N * blocks]).unwrap(),
        ),
        ("zp", Tensor::from_slice(&zp, &[N * zp_row]).unwrap()),
    ];
    let mut m = ModelBuilder::new("nbits")
        .opset(17)
        .opset_domain("com.microsoft", 1)
        .input("x", DType::F32, &known(&[M, K]));
    for (name, t) in &weights {
        m = if weights_as_inputs {
            let dims: Vec<usize> = t.dims().to_vec();
            m.input(name, t.dtype(), &known(&dims))
        } else {
            m.initializer(name, t)
        };
    }
    let attrs = Attrs::new()
        .int("K", K as i64)
        .int("N", N as i64)
        .int("bits", bits as i64)
        .int("block_size", BLOCK as i64);
    m = m
        .domain_node(
            "nbits",
            "com.microsoft",
            "MatMulNBits",
            &["x", "b", "scales", "zp"],
            &["y"],
            attrs,
        )
        .output("y", DType::F32, &known(&[M, N]));
    let x = Tensor::from_slice(&values(M * K, 2.5), &[M, K]).unwrap();
    let mut inputs = vec![("x", x)];
    if weights_as_inputs {
        inputs.extend(weights);
    }
    (m, inputs)
}

#[test]
fn matmul_nbits_frees_its_original_weights_and_runs_match_the_weights_as_inputs() {
    for bits in [2usize, 4, 8] {
        let (model, inputs) = nbits_model(bits, false);
        let packed = load(&model, &format!("nbits{bits}"));
        let weights = packed.weight_bytes();
        assert_eq!(
            weights.get(&DType::U8).copied().unwrap_or(0),
            0,
            "{bits}-bit B and zero points freed"
        );
        assert_eq!(f32_weight_bytes(&packed), 0, "{bits}-bit scales freed");
        let (model, with_weights) = nbits_model(bits, true);
        let reference = load(&model, &format!("nbits{bits}_input"));
        let expected = run(&reference, &with_weights);
        let got = run(&packed, &inputs);
        assert_eq!(got.len(), expected.len());
        for (g, e) in got.iter().zip(&expected) {
            assert!(
                (g - e).abs() <= 1e-4 * e.abs().max(1.0),
                "{bits}-bit: {got:?} vs {expected:?}"
            );
        }
        // A second run reads the kernel's own copy again.
        assert_eq!(run(&packed, &inputs), got);
    }
}

/// `y = op(x, ..., B, ...)` for the 8-bit products: MatMulInteger (`x · B`, i32),
/// QLinearMatMul (requantized to u8), com.microsoft MatMulIntegerToFloat and
/// DynamicQuantizeMatMul (f32), with B (i8, K x N) a constant, or a graph input when
/// `b_as_input`.
fn integer_model(op: &str, b_as_input: bool) -> (ModelBuilder, Vec<(&'static str, Tensor)>) {
    const K: usize = 40;
    const N: usize = 24;
    let b_values: Vec<i8> = (0..K * N).map(|i| ((i * 37) % 255) as i8).collect();
    let b = Tensor::from_slice(&b_values, &[K, N]).unwrap();
    let x_values: Vec<u8> = (0..M * K).map(|i| ((i * 11) % 256) as u8).collect();
    let x = if op == "DynamicQuantizeMatMul" {
        let floats: Vec<f32> = x_values.iter().map(|&v| v as f32 / 50.0 - 2.0).collect();
        Tensor::from_slice(&floats, &[M, K]).unwrap()
    } else {
        Tensor::from_slice(&x_values, &[M, K]).unwrap()
    };
    let float_input = op == "DynamicQuantizeMatMul";
    let mut m = ModelBuilder::new("int8")
        .opset(17)
        .opset_domain("com.microsoft", 1)
        .input(
            "x",
            if float_input { DType::F32 } else { DType::U8 },
            &known(&[M, K]),
        );
    m = if b_as_input {
        m.input("b", DType::I8, &known(&[K, N]))
    } else {
        m.initializer("b", &b)
    };
    let scalar = |v: f32| Tensor::from_slice(&[v], &[]).unwrap();
    m = if op == "MatMulInteger" {
        m.node(op, &["x", "b"], &["y"], Attrs::new())
            .output("y", DType::I32, &known(&[M, N]))
    } else if op == "MatMulIntegerToFloat" {
        m.initializer("xs", &scalar(0.02))
            .initializer("bs", &scalar(0.01))
            .domain_node(
                "mitf",
                "com.microsoft",
                op,
                &["x", "b", "xs", "bs"],
                &["y"],
                Attrs::new(),
            )
            .output("y", DType::F32, &known(&[M, N]))
    } else if float_input {
        m.initializer("bs", &scalar(0.01))
            .domain_node(
                "dqm",
                "com.microsoft",
                op,
                &["x", "b", "bs"],
                &["y"],
                Attrs::new(),
            )
            .output("y", DType::F32, &known(&[M, N]))
    } else {
        m.initializer("xs", &scalar(0.02))
            .initializer("xz", &Tensor::from_slice(&[3u8], &[]).unwrap())
            .initializer("bs", &scalar(0.01))
            .initializer("bz", &Tensor::from_slice(&[-2i8], &[]).unwrap())
            .initializer("ys", &scalar(0.5))
            .initializer("yz", &Tensor::from_slice(&[128u8], &[]).unwrap())
            .node(
                op,
                &["x", "xs", "xz", "b", "bs", "bz", "ys", "yz"],
                &["y"],
                Attrs::new(),
            )
            .output("y", DType::U8, &known(&[M, N]))
    };
    let mut inputs = vec![("x", x)];
    if b_as_input {
        inputs.push(("b", b));
    }
    (m, inputs)
}

fn outputs_as_f64(plan: &std::sync::Arc<InferencePlan>, inputs: &[(&str, Tensor)]) -> Vec<f64> {
    let mut ctx = plan.create_context().unwrap();
    for (name, t) in inputs {
        ctx.set_input(name, t).unwrap();
    }
    ctx.execute().unwrap();
    let y = ctx.output("y").unwrap();
    match y.dtype() {
        DType::I32 => y
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .collect(),
        DType::F32 => y
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .collect(),
        _ => y
            .to_vec::<u8>()
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .collect(),
    }
}

#[test]
fn integer_products_free_their_packed_weights_and_runs_match_the_weight_as_input() {
    for op in [
        "MatMulInteger",
        "QLinearMatMul",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
    ] {
        let (model, inputs) = integer_model(op, false);
        let packed = load(&model, &format!("{op}-packed"));
        // Only QLinearMatMul's one-byte zero point of B is left of the i8 weights.
        let expected_i8 = if op == "QLinearMatMul" { 1 } else { 0 };
        assert_eq!(
            packed.weight_bytes().get(&DType::I8).copied().unwrap_or(0),
            expected_i8,
            "{op}: B freed once packed"
        );
        let (model, with_b) = integer_model(op, true);
        let reference = load(&model, &format!("{op}-input"));
        let expected = outputs_as_f64(&reference, &with_b);
        let got = outputs_as_f64(&packed, &inputs);
        assert_eq!(got, expected, "{op}");
        assert_eq!(
            outputs_as_f64(&packed, &inputs),
            expected,
            "{op}: second run"
        );
    }
}
