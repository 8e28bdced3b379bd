//! A QDQ graph (onnxruntime's static quantization format) runs as an integer graph: the
//! optimizer turns DequantizeLinear → Conv / Add / GlobalAveragePool → QuantizeLinear into
//! QLinearConv, QLinearAdd and QLinearGlobalAveragePool, and the result stays within
//! quantization steps of the float QDQ graph.

mod common;

use common::{fixed, input, noise, op, tensor};
use strata_core::Tensor;
use strata_ops::Attr;
use strata_runtime::{Graph, InferencePlan, PlanConfig};

fn scalar(g: &mut Graph, name: &str, t: Tensor) -> strata_runtime::ValueId {
    g.add_initializer(name, t).unwrap()
}

/// x -> Q/DQ -> Conv(per-channel int8 weights, int32 bias) -> Q/DQ -> + x -> Q/DQ -> GAP -> Q/DQ.
fn qdq_graph() -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&[1, 4, 6, 6]));
    let xs = scalar(&mut g, "xs", Tensor::scalar(0.02f32).unwrap());
    let xz = scalar(&mut g, "xz", Tensor::scalar(128u8).unwrap());
    let xq = op(&mut g, "QuantizeLinear", &[x, xs, xz], &["xq"], &[])[0];
    let xd = op(&mut g, "DequantizeLinear", &[xq, xs, xz], &["xd"], &[])[0];
    let w: Vec<i8> = noise(4 * 4 * 9, 3)
        .iter()
        .map(|v| (v * 127.0) as i8)
        .collect();
    let w = scalar(&mut g, "w", Tensor::from_slice(&w, &[4, 4, 3, 3]).unwrap());
    let ws: Vec<f32> = (0..4).map(|c| 0.004 + 0.001 * c as f32).collect();
    let ws = scalar(&mut g, "ws", tensor(&ws, &[4]));
    let wz = scalar(&mut g, "wz", Tensor::from_slice(&[0i8; 4], &[4]).unwrap());
    let wd = op(
        &mut g,
        "DequantizeLinear",
        &[w, ws, wz],
        &["wd"],
        &[("axis", Attr::Int(0))],
    )[0];
    // Bias quantized at x_scale * w_scale, as the quantizer writes it.
    let b = scalar(
        &mut g,
        "b",
        Tensor::from_slice(&[100i32, -50, 0, 7], &[4]).unwrap(),
    );
    let bs: Vec<f32> = (0..4).map(|c| 0.02 * (0.004 + 0.001 * c as f32)).collect();
    let bs = scalar(&mut g, "bs", tensor(&bs, &[4]));
    let bz = scalar(&mut g, "bz", Tensor::from_slice(&[0i32; 4], &[4]).unwrap());
    let bd = op(
        &mut g,
        "DequantizeLinear",
        &[b, bs, bz],
        &["bd"],
        &[("axis", Attr::Int(0))],
    )[0];
    let pads = [("pads", Attr::Ints(vec![1, 1, 1, 1]))];
    let y = op(&mut g, "Conv", &[xd, wd, bd], &["y"], &pads)[0];
    let ys = scalar(&mut g, "ys", Tensor::scalar(0.03f32).unwrap());
    let yz = scalar(&mut g, "yz", Tensor::scalar(120u8).unwrap());
    let yq = op(&mut g, "QuantizeLinear", &[y, ys, yz], &["yq"], &[])[0];
    let yd = op(&mut g, "DequantizeLinear", &[yq, ys, yz], &["yd"], &[])[0];
    let s = op(&mut g, "Add", &[yd, xd], &["s"], &[])[0];
    let ss = scalar(&mut g, "ss", Tensor::scalar(0.04f32).unwrap());
    let sz = scalar(&mut g, "sz", Tensor::scalar(125u8).unwrap());
    let sq = op(&mut g, "QuantizeLinear", &[s, ss, sz], &["sq"], &[])[0];
    let sd = op(&mut g, "DequantizeLinear", &[sq, ss, sz], &["sd"], &[])[0];
    let p = op(&mut g, "GlobalAveragePool", &[sd], &["p"], &[])[0];
    let ps = scalar(&mut g, "ps", Tensor::scalar(0.01f32).unwrap());
    let pz = scalar(&mut g, "pz", Tensor::scalar(128u8).unwrap());
    let pq = op(&mut g, "QuantizeLinear", &[p, ps, pz], &["pq"], &[])[0];
    let out = op(&mut g, "DequantizeLinear", &[pq, ps, pz], &["out"], &[])[0];
    g.set_outputs(&[out, sd]);
    g
}

fn run(config: PlanConfig) -> (Vec<f32>, Vec<f32>, usize) {
    let plan = InferencePlan::build(qdq_graph(), config).unwrap();
    let mut ctx = plan.create_context().unwrap();
    let x = tensor(&noise(4 * 36, 11), &[1, 4, 6, 6]);
    ctx.set_input("x", &x).unwrap();
    ctx.execute().unwrap();
    let out = ctx.output("out").unwrap().to_vec::<f32>().unwrap();
    let sd = ctx.output("sd").unwrap().to_vec::<f32>().unwrap();
    (out, sd, plan.optimize_report().quantized)
}

#[test]
fn qdq_conv_add_and_pool_run_as_qlinear_operators_within_a_quantization_step() {
    let (out, sd, quantized) = run(PlanConfig::default().with_threads(1));
    assert_eq!(
        quantized, 3,
        "Conv, Add and GlobalAveragePool become QLinear operators"
    );
    let mut float = PlanConfig::default().with_threads(1);
    float.optimize = false;
    let (want_out, want_sd, none) = run(float);
    assert_eq!(none, 0);
    // The integer path rounds once where the float path rounds at every Q: one step apart at
    // most (the residual sum's scale is 0.04, the pooled one's 0.01).
    for (a, b) in sd.iter().zip(&want_sd) {
        assert!((a - b).abs() <= 0.04 * 1.01, "{a} vs {b}");
    }
    assert!(sd.iter().zip(&want_sd).filter(|(a, b)| a != b).count() * 10 < sd.len());
    for (a, b) in out.iter().zip(&want_out) {
        assert!((a - b).abs() <= 0.01 * 1.01, "{a} vs {b}");
    }
}
