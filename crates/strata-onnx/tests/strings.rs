//! String tensors end to end: a model built by our own builder takes text in, moves it through
//! ordinary operators (Unsqueeze, Transpose, Gather), transforms it with the text operators, and
//! casts between text and numbers, and hands text, bools and numbers out — across changing input sizes, repeated runs and
//! concurrent contexts.

use std::sync::Arc;

use strata_core::{DType, Tensor};
use strata_onnx::{load_bytes, Attrs, Dim, ModelBuilder};
use strata_runtime::{InferencePlan, PlanConfig, RuntimeError};

fn text_model() -> Arc<InferencePlan> {
    let model = ModelBuilder::new("text")
        .opset(20)
        .opset_domain("ai.onnx.ml", 4)
        .input("words", DType::String, &[Dim::sym("N")])
        .initializer("axes", &Tensor::from_slice(&[0i64], &[1]).unwrap())
        .initializer("bang", &Tensor::from_strings(&[1], ["!"]).unwrap())
        .initializer("first", &Tensor::from_slice(&[0i64], &[1]).unwrap())
        .initializer("apple", &Tensor::from_strings(&[], ["apple"]).unwrap())
        // Movement operators carry text: [N] -> [1, N] -> normalize -> [1, M] -> [M, 1].
        .node("Unsqueeze", &["words", "axes"], &["row"], Attrs::new())
        .node(
            "StringNormalizer",
            &["row"],
            &["normalized"],
            Attrs::new()
                .string("case_change_action", "UPPER")
                .strings("stopwords", &["the", "a"]),
        )
        .node(
            "Transpose",
            &["normalized"],
            &["column"],
            Attrs::new().ints("perm", &[1, 0]),
        )
        .node(
            "StringConcat",
            &["column", "bang"],
            &["shouted"],
            Attrs::new(),
        )
        .node("Gather", &["words", "first"], &["head"], Attrs::new())
        // Text in, numbers and bools out: these run on the static path into planned memory.
        .node("Equal", &["words", "apple"], &["is_apple"], Attrs::new())
        .node(
            "RegexFullMatch",
            &["words"],
            &["has_digit"],
            Attrs::new().string("pattern", r".*\d.*"),
        )
        .domain_node(
            "encode",
            "ai.onnx.ml",
            "LabelEncoder",
            &["words"],
            &["ids"],
            Attrs::new()
                .strings("keys_strings", &["apple", "pear"])
                .ints("values_int64s", &[1, 2])
                .int("default_int64", 0),
        )
        // Numbers back to text, and text to numbers.
        .node("Cast", &["ids"], &["id_text"], Attrs::new().int("to", 8))
        .node(
            "Cast",
            &["id_text"],
            &["id_values"],
            Attrs::new().int("to", 1),
        )
        .output("id_text", DType::String, &[Dim::sym("N")])
        .output("id_values", DType::F32, &[Dim::sym("N")])
        .output("shouted", DType::String, &[Dim::Unknown, Dim::Known(1)])
        .output("head", DType::String, &[Dim::Known(1)])
        .output("is_apple", DType::Bool, &[Dim::sym("N")])
        .output("has_digit", DType::Bool, &[Dim::sym("N")])
        .output("ids", DType::I64, &[Dim::sym("N")]);
    let bytes = model.to_bytes().unwrap();
    load_bytes(bytes, "text.onnx", PlanConfig::default().with_threads(1)).unwrap()
}

struct Outputs {
    shouted: Vec<String>,
    head: Vec<String>,
    is_apple: Vec<bool>,
    has_digit: Vec<bool>,
    ids: Vec<i64>,
}

fn run(ctx: &mut strata_runtime::ExecutionContext, words: &[&str]) -> Outputs {
    ctx.set_input(
        "words",
        &Tensor::from_strings(&[words.len()], words.iter().copied()).unwrap(),
    )
    .unwrap();
    ctx.execute().unwrap();
    let text = |name: &str| -> Vec<String> {
        let out = ctx.output(name).unwrap();
        assert_eq!(out.dtype(), DType::String);
        out.strings()
            .unwrap()
            .into_iter()
            .map(String::from)
            .collect()
    };
    let bools = |name: &str| -> Vec<bool> {
        let v = ctx.output(name).unwrap().to_vec::<u8>().unwrap();
        v.into_iter().map(|b| b != 0).collect()
    };
    Outputs {
        shouted: text("shouted"),
        head: text("head"),
        is_apple: bools("is_apple"),
        has_digit: bools("has_digit"),
        ids: ctx.output("ids").unwrap().to_vec::<i64>().unwrap(),
    }
}

#[test]
fn text_flows_through_movement_and_text_operators() {
    let plan = text_model();
    let mut ctx = plan.create_context().unwrap();
    let out = run(&mut ctx, &["the", "apple", "pear", "r2d2", "A"]);
    assert_eq!(out.shouted, ["APPLE!", "PEAR!", "R2D2!"]);
    assert_eq!(ctx.output("shouted").unwrap().dims(), [3, 1]);
    assert_eq!(out.head, ["the"]);
    assert_eq!(out.is_apple, [false, true, false, false, false]);
    assert_eq!(out.has_digit, [false, false, false, true, false]);
    assert_eq!(out.ids, [0, 1, 2, 0, 0]);
    assert_eq!(
        ctx.output("id_text").unwrap().strings().unwrap(),
        ["0", "1", "2", "0", "0"]
    );
    assert_eq!(
        ctx.output("id_values").unwrap().to_vec::<f32>().unwrap(),
        [0.0, 1.0, 2.0, 0.0, 0.0]
    );

    // A different size re-specializes; the same size again reuses the plan.
    let out = run(&mut ctx, &["pear", "pear"]);
    assert_eq!(out.shouted, ["PEAR!", "PEAR!"]);
    assert_eq!(out.ids, [2, 2]);
    let out = run(&mut ctx, &["a", "x1"]);
    assert_eq!(out.shouted, ["X1!"]);
    assert_eq!(out.has_digit, [false, true]);
}

#[test]
fn contexts_run_text_concurrently() {
    let plan = text_model();
    std::thread::scope(|scope| {
        for t in 0..4 {
            let plan = plan.clone();
            scope.spawn(move || {
                let mut ctx = plan.create_context().unwrap();
                for i in 0..20 {
                    let word = format!("w{t}_{i}");
                    let out = run(&mut ctx, &["the", &word]);
                    assert_eq!(out.shouted, [format!("W{t}_{i}!")]);
                    assert_eq!(out.has_digit, [false, true]);
                }
            });
        }
    });
}

#[test]
fn numbers_for_a_text_input_are_a_typed_error() {
    let plan = text_model();
    let mut ctx = plan.create_context().unwrap();
    let err = ctx
        .set_input("words", &Tensor::from_slice(&[1.0f32], &[1]).unwrap())
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::InputDType { name, expected: DType::String, .. } if name == "words"),
        "{err}"
    );
}
