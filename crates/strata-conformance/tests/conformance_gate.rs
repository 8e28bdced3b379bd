//! The conformance regression gate: every ONNX backend-test case listed in
//! `conformance_passing.txt` must still pass. Cases that pass but are not listed are reported
//! (not a failure) so the list can be regenerated; see the list's header for the command.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use strata_conformance::{default_threads, find_cases, parse_case_list, run_cases, CaseOutcome};

const PASSING_LIST: &str = include_str!("conformance_passing.txt");

/// The suite folders (`node`, `pytorch-converted`, ...) of the shared corpus, when present.
fn suites() -> Option<Vec<PathBuf>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/onnx-tests");
    let entries = std::fs::read_dir(&root).ok()?;
    let mut suites: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    suites.sort();
    Some(suites)
}

#[test]
fn listed_cases_still_pass() {
    let Some(suites) = suites() else {
        eprintln!("skipping the conformance gate: ../shared/onnx-tests is not present");
        return;
    };
    let cases = match find_cases(&suites) {
        Ok(cases) => cases,
        Err(err) => panic!("cannot list the conformance cases: {err}"),
    };
    let summary = run_cases(&cases, default_threads(), &|_| {});
    eprintln!("conformance: {summary}");

    let outcomes: HashMap<&str, &CaseOutcome> = summary
        .results
        .iter()
        .map(|r| (r.name.as_str(), &r.outcome))
        .collect();
    let listed = parse_case_list(PASSING_LIST);
    assert!(!listed.is_empty(), "conformance_passing.txt lists no cases");

    let regressions: Vec<String> = listed
        .iter()
        .filter_map(|&name| match outcomes.get(name) {
            Some(CaseOutcome::Pass) => None,
            Some(CaseOutcome::Fail(why)) => Some(format!("fail {name}: {why}")),
            Some(CaseOutcome::Unsupported(why)) => Some(format!("unsupported {name}: {why}")),
            None => Some(format!("missing {name}: no such case folder")),
        })
        .collect();

    let newly_passing: Vec<&str> = summary
        .passing()
        .filter(|name| !listed.contains(name))
        .collect();
    if !newly_passing.is_empty() {
        eprintln!(
            "{} passing cases are not in conformance_passing.txt yet (regenerate it, see its \
             header): {}",
            newly_passing.len(),
            newly_passing.join(", ")
        );
    }

    assert!(
        regressions.is_empty(),
        "{} of {} listed conformance cases no longer pass:\n{}",
        regressions.len(),
        listed.len(),
        regressions.join("\n")
    );
}
