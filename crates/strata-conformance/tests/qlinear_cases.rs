//! The com.microsoft quantized operators against onnxruntime: small cases written by
//! `scripts/qlinear_cases.py` (onnxruntime's outputs as the expected values, backend-test
//! layout), run through the conformance runner. Integer outputs compare exactly.

use std::path::Path;

use strata_conformance::{find_cases, run_cases, CaseOutcome};

#[test]
fn every_qlinear_case_matches_onnxruntime() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/qlinear_cases");
    let cases = find_cases(&[&dir]).expect("the qlinear cases are listed");
    assert!(cases.len() >= 46, "found only {} cases", cases.len());
    let summary = run_cases(&cases, 1, &|_| {});
    let failed: Vec<String> = summary
        .results
        .iter()
        .filter(|r| r.outcome != CaseOutcome::Pass)
        .map(|r| r.to_string())
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
