//! Shape inference on declared dims whose element count overflows a usize: an error naming the
//! overflow, never a panic (debug builds) or a wrapped count (release builds). Found by the
//! fuzzer in Reshape; the same unchecked products were in Flatten, DFT, Col2Im and others.

use strata_core::{DType, Tensor};
use strata_ops::{build_operator, Attr, Attributes, Dim, Fact, OpContext, OpResult};

fn infer(op_type: &str, attrs: &[(&str, Attr)], inputs: &[Fact]) -> OpResult<Vec<Fact>> {
    let mut a = Attributes::new(op_type);
    for (k, v) in attrs {
        a.insert(k, v.clone());
    }
    let op = build_operator(&OpContext {
        op_type,
        domain: "",
        opset: 20,
        attrs: &a,
        num_inputs: inputs.len(),
        num_outputs: 1,
    })?;
    op.infer(&inputs.iter().collect::<Vec<_>>())
}

/// Operator, attributes, input facts.
type Case = (&'static str, Vec<(&'static str, Attr)>, Vec<Fact>);

fn declared(dims: &[usize]) -> Fact {
    Fact::new(DType::F32, dims.iter().map(|&d| Dim::Known(d)).collect())
}

fn ints(values: &[i64]) -> Fact {
    Fact::constant(Tensor::from_slice(values, &[values.len()]).unwrap())
}

#[test]
fn overflowing_element_counts_are_errors() {
    let big = declared(&[1 << 32, 1 << 32]);
    let cases: Vec<Case> = vec![
        ("Reshape", vec![], vec![big.clone(), ints(&[-1])]),
        (
            "Reshape",
            vec![],
            vec![big.clone(), ints(&[1 << 40, 1 << 30])],
        ),
        (
            "Flatten",
            vec![("axis", Attr::Int(2))],
            vec![declared(&[1 << 32, 1 << 32, 2])],
        ),
        ("Tile", vec![], vec![declared(&[1 << 40]), ints(&[1 << 40])]),
        (
            "DepthToSpace",
            vec![("blocksize", Attr::Int(1 << 32))],
            vec![declared(&[1, 1, 2, 2])],
        ),
        (
            "SpaceToDepth",
            vec![("blocksize", Attr::Int(2))],
            vec![declared(&[1, 1 << 62, 4, 4])],
        ),
        (
            "Concat",
            vec![("axis", Attr::Int(0))],
            vec![declared(&[1 << 63]), declared(&[1 << 63])],
        ),
    ];
    for (op, attrs, inputs) in cases {
        let err = infer(op, &attrs, &inputs).expect_err(op);
        assert!(err.to_string().contains("overflow"), "{op}: {err}");
    }
    // The element count of such a fact is not known, rather than wrong.
    assert_eq!(big.numel(), None);
    assert_eq!(declared(&[1 << 32, 0]).numel(), Some(0));
}
