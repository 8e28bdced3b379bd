//! The `strata` binary as a script sees it: exit codes, JSON on stdout (errors included), clear
//! refusals of bad arguments, and runs that end when `--timeout` says so.

use std::path::PathBuf;
use std::process::{Command, Output};

use strata_core::DType;
use strata_onnx::{Attrs, Dim, ModelBuilder};

fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("the strata binary starts")
}

fn temp_model(name: &str, builder: &ModelBuilder) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.onnx");
    builder.save(&path).unwrap();
    path
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn with_json_errors_are_json_objects_with_kind_and_exit_code() {
    let out = strata(&["run", "/nonexistent/model.onnx", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let error = &json(&out)["error"];
    assert_eq!(error["kind"], "error");
    assert_eq!(error["exit_code"], 1);
    assert!(error["message"].as_str().unwrap().contains("model.onnx"));

    let out = strata(&["run", "--threads", "0", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let error = &json(&out)["error"];
    assert_eq!(error["kind"], "usage");
    assert!(error["message"].as_str().unwrap().contains("at least 1"));
}

#[test]
fn an_input_given_twice_is_refused() {
    let out = strata(&["run", "--input", "input=a.npy", "--input", "input=b.npy"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("given twice"), "{stderr}");
}

#[test]
fn run_says_which_inputs_it_filled_with_seeded_data() {
    let out = strata(&["run", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let notes = json(&out)["notes"].to_string();
    assert!(
        notes.contains("filled with seeded random f32 data"),
        "{notes}"
    );
}

#[test]
fn inspect_json_gives_dims_as_arrays() {
    let model = ModelBuilder::new("dims")
        .input("x", DType::F32, &[Dim::sym("N"), Dim::Known(3)])
        .node("Relu", &["x"], &["y"], Attrs::new())
        .output("y", DType::F32, &[Dim::sym("N"), Dim::Known(3)]);
    let path = temp_model("dims", &model);
    let out = strata(&["inspect", path.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json(&out)["inputs"][0]["dims"], serde_json::json!(["N", 3]));
}

#[test]
fn an_endless_loop_ends_at_the_timeout() {
    let body = ModelBuilder::new("body")
        .input("i", DType::I64, &[])
        .input("c", DType::Bool, &[])
        .input("v", DType::F32, &[Dim::Known(1)])
        .node("Identity", &["c"], &["c_out"], Attrs::new())
        .node("Neg", &["v"], &["v_out"], Attrs::new())
        .output("c_out", DType::Bool, &[])
        .output("v_out", DType::F32, &[Dim::Known(1)])
        .to_model()
        .unwrap()
        .graph
        .unwrap();
    let model = ModelBuilder::new("endless")
        .input("v0", DType::F32, &[Dim::Known(1)])
        .initializer(
            "cond",
            &strata_core::Tensor::from_bools(&[true], &[]).unwrap(),
        )
        .node(
            "Loop",
            &["", "cond", "v0"],
            &["v"],
            Attrs::new().graph("body", body),
        )
        .output("v", DType::F32, &[Dim::Known(1)]);
    let path = temp_model("endless", &model);
    let started = std::time::Instant::now();
    let out = strata(&[
        "run",
        path.to_str().unwrap(),
        "--timeout",
        "0.2",
        "--max-loop-iterations",
        "1000000000",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("timed out"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(120));
}

/// `generate --timeout` bounds each run of a language model (here far below one prefill).
#[test]
fn generation_ends_at_the_timeout() {
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    );
    let out = strata(&[
        "generate",
        model,
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "4",
        "--timeout",
        "0.000001",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("timed out"), "{stderr}");
}
