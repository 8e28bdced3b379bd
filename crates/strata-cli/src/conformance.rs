//! `strata conformance`: runs ONNX backend-test case folders and prints one line per case and a
//! summary. The work is in the `strata-conformance` crate; this only prints.

use std::io::Write;

use strata_conformance::{
    default_threads, find_cases, run_cases, CaseOutcome, CaseResult, PASSING_LIST_HEADER,
};

use crate::args::ConformanceArgs;

/// Failing cases do not make this an error: only a runner that cannot run (a missing folder).
pub fn conformance(args: &ConformanceArgs) -> Result<(), String> {
    let cases = find_cases(&args.dirs).map_err(|e| e.to_string())?;
    let threads = args.threads.unwrap_or_else(default_threads);
    let list_passing = args.list_passing;
    if list_passing {
        println!("{PASSING_LIST_HEADER}");
    }
    let print = |result: &CaseResult| {
        let mut out = std::io::stdout().lock();
        // A closed pipe (`| head`) must not panic; the rest of the output is simply lost.
        let _ = if !list_passing {
            writeln!(out, "{result}")
        } else if result.outcome == CaseOutcome::Pass {
            writeln!(out, "{}", result.name)
        } else {
            Ok(())
        };
    };
    let summary = run_cases(&cases, threads, &print);
    if list_passing {
        eprintln!("{summary}");
    } else {
        let _ = writeln!(std::io::stdout().lock(), "{summary}");
    }
    Ok(())
}
