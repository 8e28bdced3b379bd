//! Values computed on the dynamic path must not alias arena slots that later nodes reuse.

mod common;

use common::{fixed, input, op, tensor};
use strata_core::{DType, Tensor};
use strata_runtime::{Graph, InferencePlan, PlanConfig};

#[test]
fn a_view_inferred_at_run_time_survives_the_reuse_of_its_source_slot() {
    // Unsqueeze with run-time axes runs on the dynamic path, where its output is inferred as
    // a reshape of its input; the input's slot is reused by `negated` right after.
    let mut g = Graph::new();
    let x = input(&mut g, "x", &fixed(&[4]));
    let axes = g.add_input("axes", DType::I64, fixed(&[1])).unwrap();
    let e = op(&mut g, "Exp", &[x], &["e"], &[]);
    let u = op(&mut g, "Unsqueeze", &[e[0], axes], &["u"], &[]);
    let n = op(&mut g, "Neg", &[x], &["negated"], &[]);
    let m = op(&mut g, "Neg", &[n[0]], &["again"], &[]);
    g.set_outputs(&[u[0], m[0]]);
    let plan = InferencePlan::build(g, PlanConfig::default().with_threads(1)).unwrap();
    let mut ctx = plan.create_context().unwrap();
    let xs = [0.5f32, -1.0, 2.0, 0.25];
    ctx.set_input("x", &tensor(&xs, &[4])).unwrap();
    ctx.set_input("axes", &Tensor::from_slice(&[-1i64], &[1]).unwrap())
        .unwrap();
    ctx.execute().unwrap();
    let u = ctx.output("u").unwrap();
    assert_eq!(u.dims(), &[4, 1]);
    let expected: Vec<f32> = xs.iter().map(|v| v.exp()).collect();
    assert_eq!(u.to_vec::<f32>().unwrap(), expected);
    assert_eq!(ctx.output("again").unwrap().to_vec::<f32>().unwrap(), xs);
}
