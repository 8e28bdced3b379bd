//! QDQ around AveragePool, Concat and Gemm runs as integer operators: the optimizer turns
//! DequantizeLinear → AveragePool / Concat / Gemm → QuantizeLinear into com.microsoft
//! QLinearAveragePool, QLinearConcat and QGemm, within quantization steps of the float QDQ
//! graph; a Gemm whose int32 bias is not at `a_scale · b_scale` keeps the float graph.

mod common;

use common::{fixed, input, noise, op, tensor};
use strata_core::Tensor;
use strata_ops::Attr;
use strata_runtime::{Graph, InferencePlan, PlanConfig, ValueId};

fn constant(g: &mut Graph, name: &str, t: Tensor) -> ValueId {
    g.add_initializer(name, t).unwrap()
}

/// `x` quantized with (scale, zero) and dequantized again.
fn qdq(g: &mut Graph, x: ValueId, name: &str, scale: f32, zero: u8) -> ValueId {
    let s = constant(g, &format!("{name}_s"), Tensor::scalar(scale).unwrap());
    let z = constant(g, &format!("{name}_z"), Tensor::scalar(zero).unwrap());
    let q = op(
        g,
        "QuantizeLinear",
        &[x, s, z],
        &[&format!("{name}_q")],
        &[],
    )[0];
    op(
        g,
        "DequantizeLinear",
        &[q, s, z],
        &[&format!("{name}_d")],
        &[],
    )[0]
}

const CS: f32 = 0.03;
const YS: f32 = 0.05;

/// x [1,4,6,6] -> Q/DQ -> AveragePool 2x2/2 -> Q/DQ -> Concat(·, x2 Q/DQ) along channels
/// -> Q/DQ -> Flatten -> Q/DQ -> Gemm(per-row int8 B, transB, int32 bias) -> Q/DQ.
fn graph(bias_scale_factor: f32) -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&[1, 4, 6, 6]));
    let x2 = input(&mut g, "x2", &fixed(&[1, 2, 3, 3]));
    let xd = qdq(&mut g, x, "x", 0.02, 128);
    let pool_attrs = [
        ("kernel_shape", Attr::Ints(vec![2, 2])),
        ("strides", Attr::Ints(vec![2, 2])),
    ];
    let p = op(&mut g, "AveragePool", &[xd], &["p"], &pool_attrs)[0];
    let pd = qdq(&mut g, p, "p", 0.015, 126);
    let x2d = qdq(&mut g, x2, "x2", 0.025, 130);
    let c = op(
        &mut g,
        "Concat",
        &[pd, x2d],
        &["c"],
        &[("axis", Attr::Int(1))],
    )[0];
    let cd = qdq(&mut g, c, "c", CS, 128);
    let f = op(&mut g, "Flatten", &[cd], &["f"], &[])[0];
    // Flatten between a DequantizeLinear and a QuantizeLinear of the same parameters.
    let cs = g.value_id("c_s").unwrap();
    let cz = g.value_id("c_z").unwrap();
    let fq = op(&mut g, "QuantizeLinear", &[f, cs, cz], &["fq"], &[])[0];
    let fd = op(&mut g, "DequantizeLinear", &[fq, cs, cz], &["fd"], &[])[0];
    let (n, k) = (5usize, 54usize);
    let w: Vec<i8> = noise(n * k, 7).iter().map(|v| (v * 127.0) as i8).collect();
    let w = constant(&mut g, "w", Tensor::from_slice(&w, &[n, k]).unwrap());
    let ws: Vec<f32> = (0..n).map(|j| 0.004 + 0.001 * j as f32).collect();
    let wsv = constant(&mut g, "ws", tensor(&ws, &[n]));
    let wz = constant(&mut g, "wz", Tensor::from_slice(&[0i8; 5], &[n]).unwrap());
    let axis = [("axis", Attr::Int(0))];
    let wd = op(&mut g, "DequantizeLinear", &[w, wsv, wz], &["wd"], &axis)[0];
    let b = constant(
        &mut g,
        "b",
        Tensor::from_slice(&[300i32, -200, 0, 57, -1000], &[n]).unwrap(),
    );
    let bs: Vec<f32> = ws.iter().map(|s| CS * s * bias_scale_factor).collect();
    let bs = constant(&mut g, "bs", tensor(&bs, &[n]));
    let bz = constant(&mut g, "bz", Tensor::from_slice(&[0i32; 5], &[n]).unwrap());
    let bd = op(&mut g, "DequantizeLinear", &[b, bs, bz], &["bd"], &axis)[0];
    let y = op(
        &mut g,
        "Gemm",
        &[fd, wd, bd],
        &["y"],
        &[("transB", Attr::Int(1))],
    )[0];
    let yd = qdq(&mut g, y, "y", YS, 120);
    g.set_outputs(&[yd, cd]);
    g
}

/// The two outputs, how many groups ran quantized, and the plan's operators.
type Run = (Vec<f32>, Vec<f32>, usize, String);

fn run(g: Graph, optimize: bool) -> Run {
    let mut config = PlanConfig::default().with_threads(1);
    config.optimize = optimize;
    let plan = InferencePlan::build(g, config).unwrap();
    let mut ctx = plan.create_context().unwrap();
    ctx.set_input("x", &tensor(&noise(4 * 36, 11), &[1, 4, 6, 6]))
        .unwrap();
    ctx.set_input("x2", &tensor(&noise(2 * 9, 5), &[1, 2, 3, 3]))
        .unwrap();
    ctx.execute().unwrap();
    let y = ctx.output("y_d").unwrap().to_vec::<f32>().unwrap();
    let c = ctx.output("c_d").unwrap().to_vec::<f32>().unwrap();
    let ops = format!("{:?}", plan.op_counts());
    (y, c, plan.optimize_report().quantized, ops)
}

#[test]
fn qdq_average_pool_concat_and_gemm_run_as_integer_operators_within_quantization_steps() {
    let (y, c, quantized, ops) = run(graph(1.0), true);
    // AveragePool, Concat, Flatten (on the 8-bit tensor) and Gemm.
    assert_eq!(quantized, 4, "{ops}");
    let (want_y, want_c, none, _) = run(graph(1.0), false);
    assert_eq!(none, 0);
    // Each path rounds once per QuantizeLinear, the integer one from exact sums: one step.
    for (a, b) in c.iter().zip(&want_c) {
        assert!((a - b).abs() <= CS * 1.01, "concat {a} vs {b}");
    }
    assert!(c.iter().zip(&want_c).filter(|(a, b)| a != b).count() * 5 < c.len());
    // A concat step apart in a few inputs moves a Gemm output by a few of its steps at most.
    for (a, b) in y.iter().zip(&want_y) {
        assert!((a - b).abs() <= 3.0 * YS, "gemm {a} vs {b}");
    }
    assert!(y.iter().any(|&v| v != y[0]), "outputs vary: {y:?}");
}

#[test]
fn a_gemm_bias_at_another_scale_keeps_the_float_gemm() {
    let (y, _, quantized, ops) = run(graph(2.0), true);
    assert_eq!(quantized, 3, "AveragePool, Concat and Flatten only: {ops}");
    let (want_y, _, _, _) = run(graph(2.0), false);
    for (a, b) in y.iter().zip(&want_y) {
        assert!((a - b).abs() <= 3.0 * YS, "gemm {a} vs {b}");
    }
}
