//! Dynamic quantization (onnxruntime's `quantize_dynamic`): `DynamicQuantizeLinear →
//! MatMulInteger → Cast → Mul(scale) → Add(bias)` runs as one fused product whose results equal
//! the unfused graph's; a chain whose int32 product has a second reader stays as it is.

mod common;

use common::{fixed, input, noise, op, tensor};
use strata_core::Tensor;
use strata_ops::Attr;
use strata_runtime::{Graph, InferencePlan, PlanConfig};

const M: usize = 5;
const K: usize = 24;
const N: usize = 10;

fn graph(second_reader: bool) -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&[1, M, K]));
    let q = op(
        &mut g,
        "DynamicQuantizeLinear",
        &[x],
        &["xq", "xs", "xz"],
        &[],
    );
    let w: Vec<i8> = noise(K * N, 5).iter().map(|v| (v * 120.0) as i8).collect();
    let w = g
        .add_initializer("w", Tensor::from_slice(&w, &[K, N]).unwrap())
        .unwrap();
    let wz = g
        .add_initializer("wz", Tensor::scalar(3i8).unwrap())
        .unwrap();
    let ws = g
        .add_initializer("ws", Tensor::scalar(0.0071f32).unwrap())
        .unwrap();
    let scale = op(&mut g, "Mul", &[q[1], ws], &["scale"], &[])[0];
    let product = op(
        &mut g,
        "MatMulInteger",
        &[q[0], w, q[2], wz],
        &["product"],
        &[],
    )[0];
    let cast = op(
        &mut g,
        "Cast",
        &[product],
        &["cast"],
        &[("to", Attr::Int(1))],
    )[0];
    let scaled = op(&mut g, "Mul", &[cast, scale], &["scaled"], &[])[0];
    let bias: Vec<f32> = (0..N).map(|j| j as f32 * 0.3 - 1.0).collect();
    let bias = g.add_initializer("bias", tensor(&bias, &[N])).unwrap();
    let out = op(&mut g, "Add", &[bias, scaled], &["out"], &[])[0];
    if second_reader {
        g.set_outputs(&[out, product]);
    } else {
        g.set_outputs(&[out]);
    }
    g
}

fn run(second_reader: bool, optimize: bool) -> (Vec<f32>, usize) {
    let mut config = PlanConfig::default().with_threads(2);
    config.optimize = optimize;
    let plan = InferencePlan::build(graph(second_reader), config).unwrap();
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("x", &tensor(&noise(M * K, 9), &[1, M, K]))
        .unwrap();
    ctx.execute().unwrap();
    let out = ctx.output("out").unwrap().to_vec::<f32>().unwrap();
    (out, plan.optimize_report().quantized)
}

#[test]
fn the_dynamic_quantization_tail_fuses_into_one_product_with_equal_results() {
    let (got, fused) = run(false, true);
    assert_eq!(fused, 1);
    let (want, none) = run(false, false);
    assert_eq!(none, 0);
    assert_eq!(got, want);
    assert!(got.iter().any(|v| v.abs() > 0.5), "{got:?}");
}

#[test]
fn an_int32_product_with_a_second_reader_is_not_fused() {
    let (got, fused) = run(true, true);
    assert_eq!(fused, 0);
    let (want, _) = run(true, false);
    assert_eq!(got, want);
}
