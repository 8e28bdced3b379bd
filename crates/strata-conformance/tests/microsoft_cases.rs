//! onnxruntime's com.microsoft operators against onnxruntime itself: every case under
//! `tests/microsoft_cases` (made by `scripts/ms_op_cases.py`: tiny models, seeded inputs,
//! onnxruntime's outputs) must pass through the conformance runner at its default tolerance
//! (rtol 1e-3).

use std::path::Path;

use strata_conformance::{find_cases, run_cases, CaseOutcome};

#[test]
fn every_microsoft_case_matches_onnxruntime() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/microsoft_cases");
    let cases = find_cases(&[&dir]).expect("the microsoft_cases folder is readable");
    assert!(cases.len() >= 80, "only {} cases found", cases.len());
    let summary = run_cases(&cases, 2, &|_| {});
    let failures: Vec<String> = summary
        .results
        .iter()
        .filter(|r| r.outcome != CaseOutcome::Pass)
        .map(|r| r.to_string())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases fail:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
