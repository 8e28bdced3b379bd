//! The ONNX backend-test conformance runner: loads each `test_*` case folder (`model.onnx` plus
//! `test_data_set_*/{input,output}_j.pb`), runs every data set and compares the outputs.
//!
//! A case ends in one of three outcomes:
//! - `pass`: every output of every data set matches (floats within [`Tolerance`], the rest
//!   exactly, dims always exactly);
//! - `unsupported`: strata says *up front* that it does not implement something the case needs —
//!   an operator (`OnnxError::UnsupportedOperators`), a value type it cannot hold (sequences,
//!   maps, optionals, complex, float6, ...), or a kernel for a dtype (`OpError::NoKernel`
//!   when the plan is built);
//! - `fail`: anything else — a load, plan or run error, a wrong result, or a panic.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use strata_core::{bf16, f16, CoreError, DType, Element, Tensor};
use strata_core::{decode_e8m0, MiniFloat};
use strata_ops::OpError;
use strata_runtime::{ExecutionContext, InferencePlan, OutputView, PlanConfig, RuntimeError};

use strata_onnx::data_type::data_type_name;
use strata_onnx::proto::{type_proto, ModelProto, ValueInfoProto};
use strata_onnx::{
    dtype_from_onnx, import_model, open_model, read_tensor_pb, OnnxError, WeightSource,
};

/// The header of `conformance_passing.txt`, printed by `strata conformance --list-passing`.
pub const PASSING_LIST_HEADER: &str = "\
# ONNX backend-test cases that pass in strata: the regression gate
# (crates/strata-conformance/tests/conformance_gate.rs) fails when any of them stops passing.
# One case per line, named by its suite folder and case folder under ../shared/onnx-tests.
# The list only grows. Regenerate it from the workspace root with
#   cargo run --release -p strata-cli -- conformance --list-passing ../shared/onnx-tests/*/ \\
#     > crates/strata-conformance/tests/conformance_passing.txt
# and check that the diff only adds lines.";

/// The case names listed in a passing-list text: one per line, `#` comments and blanks skipped.
pub fn parse_case_list(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

/// How close a float output must be: `|actual - expected| <= abs + rel * |expected|`.
/// NaN equals NaN; an infinity must be matched exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub abs: f64,
    pub rel: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            abs: 1e-7,
            rel: 1e-3,
        }
    }
}

impl Tolerance {
    /// Whether `actual` is close enough to `expected`.
    pub fn accepts(&self, actual: f64, expected: f64) -> bool {
        if expected.is_nan() || actual.is_nan() {
            return expected.is_nan() && actual.is_nan();
        }
        if expected.is_infinite() || actual.is_infinite() {
            return actual == expected;
        }
        (actual - expected).abs() <= self.abs + self.rel * expected.abs()
    }

    /// How far outside the tolerance `actual` is (infinite for NaN or infinity mismatches), to
    /// pick the worst element.
    fn excess(&self, actual: f64, expected: f64) -> f64 {
        if !actual.is_finite() || !expected.is_finite() {
            return f64::INFINITY;
        }
        (actual - expected).abs() / (self.abs + self.rel * expected.abs())
    }
}

/// One case folder to run, with the name it is reported under (`node/test_add`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub name: String,
    pub dir: PathBuf,
}

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseOutcome {
    Pass,
    /// A wrong result or an error: the worst mismatch, or the error message.
    Fail(String),
    /// Something strata declares it does not implement.
    Unsupported(String),
}

/// A case's outcome, with its name and how long it took.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: String,
    pub outcome: CaseOutcome,
    pub elapsed: Duration,
}

impl fmt::Display for CaseResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            CaseOutcome::Pass => write!(f, "pass {}", self.name),
            CaseOutcome::Fail(why) => write!(f, "fail {}: {why}", self.name),
            CaseOutcome::Unsupported(why) => write!(f, "unsupported {}: {why}", self.name),
        }
    }
}

/// Every case's result, in the order the cases were given.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub results: Vec<CaseResult>,
}

impl Summary {
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, CaseOutcome::Pass))
    }

    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, CaseOutcome::Fail(_)))
    }

    /// Unsupported cases.
    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, CaseOutcome::Unsupported(_)))
    }

    /// Names of the passing cases, in order.
    pub fn passing(&self) -> impl Iterator<Item = &str> {
        self.results
            .iter()
            .filter(|r| r.outcome == CaseOutcome::Pass)
            .map(|r| r.name.as_str())
    }

    fn count(&self, pred: impl Fn(&CaseOutcome) -> bool) -> usize {
        self.results.iter().filter(|r| pred(&r.outcome)).count()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed(),
            self.failed(),
            self.skipped()
        )
    }
}

/// The case folders under each of `dirs` (a folder named `test_*` holding `model.onnx`, found
/// at any depth; `dirs` may name cases themselves), sorted by name within each folder. Names are
/// paths relative to the parent of the folder given, so `onnx-tests/node` yields `node/test_add`.
/// A folder that cannot be read is an error: the runner cannot run.
pub fn find_cases<P: AsRef<Path>>(dirs: &[P]) -> strata_onnx::Result<Vec<Case>> {
    let mut cases = Vec::new();
    for dir in dirs {
        let dir = dir.as_ref();
        let root = dir.canonicalize().map_err(|e| io_error(dir, e))?;
        let base = root.parent().unwrap_or(&root).to_path_buf();
        let mut found = Vec::new();
        collect_cases(&root, &mut found)?;
        let mut named: Vec<Case> = found
            .into_iter()
            .map(|case_dir| Case {
                name: case_name(&case_dir, &base),
                dir: case_dir,
            })
            .collect();
        named.sort_by(|a, b| a.name.cmp(&b.name));
        cases.extend(named);
    }
    Ok(cases)
}

fn io_error(path: &Path, source: std::io::Error) -> OnnxError {
    OnnxError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn is_case_dir(dir: &Path) -> bool {
    dir.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("test_"))
        && dir.join("model.onnx").is_file()
}

fn collect_cases(dir: &Path, found: &mut Vec<PathBuf>) -> strata_onnx::Result<()> {
    if is_case_dir(dir) {
        found.push(dir.to_path_buf());
        return Ok(());
    }
    for sub in subdirs(dir)? {
        collect_cases(&sub, found)?;
    }
    Ok(())
}

/// The folders directly inside `dir`, sorted.
fn subdirs(dir: &Path) -> strata_onnx::Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, e))?;
    let mut dirs = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| io_error(dir, e))?.path();
        if path.is_dir() {
            dirs.push(path);
        }
    }
    dirs.sort();
    Ok(dirs)
}

fn case_name(case_dir: &Path, base: &Path) -> String {
    let relative = case_dir.strip_prefix(base).unwrap_or(case_dir);
    relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Finds and runs every case under `dirs` on all cores.
pub fn run_suite<P: AsRef<Path>>(dirs: &[P]) -> strata_onnx::Result<Summary> {
    let cases = find_cases(dirs)?;
    Ok(run_cases(&cases, default_threads(), &|_| {}))
}

/// The number of cases run at once by default: one per core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Stack for case threads: deep graphs and recursive kernels get more room than the default
/// 2 MiB, since a stack overflow aborts the whole run rather than unwinding.
const CASE_STACK_BYTES: usize = 64 << 20;

/// Runs `cases` on `threads` threads. `on_result` sees each result in case order as soon as it
/// and all before it are done (for streaming output); the summary holds them in the same order.
pub fn run_cases(
    cases: &[Case],
    threads: usize,
    on_result: &(dyn Fn(&CaseResult) + Sync),
) -> Summary {
    struct Progress {
        done: Vec<Option<CaseResult>>,
        emitted: usize,
    }
    let progress = Mutex::new(Progress {
        done: vec![None; cases.len()],
        emitted: 0,
    });
    let next = AtomicUsize::new(0);
    let worker = || loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        let Some(case) = cases.get(index) else {
            return;
        };
        let start = Instant::now();
        let outcome = run_case(&case.dir);
        let result = CaseResult {
            name: case.name.clone(),
            outcome,
            elapsed: start.elapsed(),
        };
        // Poisoning cannot happen (nothing panics while holding the lock), but recover anyway.
        let mut p = progress.lock().unwrap_or_else(|e| e.into_inner());
        p.done[index] = Some(result);
        while let Some(Some(ready)) = p.done.get(p.emitted) {
            on_result(ready);
            p.emitted += 1;
        }
    };
    let threads = threads.clamp(1, cases.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let spawned = std::thread::Builder::new()
                .name("conformance".into())
                .stack_size(CASE_STACK_BYTES)
                .spawn_scoped(scope, worker);
            if spawned.is_err() {
                // Could not start a thread: this one does the work instead.
                worker();
            }
        }
    });
    let progress = progress.into_inner().unwrap_or_else(|e| e.into_inner());
    Summary {
        results: progress.done.into_iter().flatten().collect(),
    }
}

/// Runs one case folder; a panic anywhere inside is caught and reported as a failure.
pub fn run_case(dir: &Path) -> CaseOutcome {
    match catch_unwind(AssertUnwindSafe(|| check_case(dir))) {
        Ok(Ok(())) => CaseOutcome::Pass,
        Ok(Err(Stop::Fail(why))) => CaseOutcome::Fail(one_line(&why)),
        Ok(Err(Stop::Unsupported(why))) => CaseOutcome::Unsupported(one_line(&why)),
        Err(payload) => CaseOutcome::Fail(format!("panic: {}", panic_message(&*payload))),
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        one_line(s)
    } else if let Some(s) = payload.downcast_ref::<String>() {
        one_line(s)
    } else {
        "(a non-text panic payload)".to_string()
    }
}

/// Each case is reported on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Why a case stopped before passing.
enum Stop {
    Fail(String),
    Unsupported(String),
}

/// An error as a stop: unsupported when strata declares it does not implement something.
fn stop(context: &str, err: &OnnxError) -> Stop {
    let why = if context.is_empty() {
        err.to_string()
    } else {
        format!("{context}: {err}")
    };
    if is_unsupported(err) {
        Stop::Unsupported(why)
    } else {
        Stop::Fail(why)
    }
}

fn fail(why: impl Into<String>) -> Stop {
    Stop::Fail(why.into())
}

fn check_case(dir: &Path) -> Result<(), Stop> {
    let model_path = dir.join("model.onnx");
    let (model, _bytes) = open_model(&model_path).map_err(|e| stop("", &e))?;
    let imported = import_model(
        &model,
        &WeightSource::for_model_file(&model_path),
        &model_path.display().to_string(),
    );
    // Unsupported operators first: they are what the grouping of skipped cases is about.
    if let Err(err @ OnnxError::UnsupportedOperators { .. }) = &imported {
        return Err(stop("", err));
    }
    if let Some(why) = unsupported_value_type(&model) {
        return Err(Stop::Unsupported(why));
    }
    let graph = imported.map_err(|e| stop("", &e))?;
    let plan = InferencePlan::build(graph, PlanConfig::default().with_threads(1))
        .map_err(|e| stop("", &e.into()))?;
    let mut ctx = plan
        .create_context()
        .map_err(|e| fail(format!("create context: {e}")))?;
    let sets = data_sets(dir).map_err(|e| fail(e.to_string()))?;
    if sets.is_empty() {
        return Err(fail("no test_data_set_* folder"));
    }
    for set in &sets {
        let label = set
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        run_data_set(&plan, &mut ctx, set, &label, &Tolerance::default())?;
    }
    Ok(())
}

/// The `test_data_set_*` folders of a case, sorted.
fn data_sets(dir: &Path) -> strata_onnx::Result<Vec<PathBuf>> {
    Ok(subdirs(dir)?
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("test_data_set_"))
        })
        .collect())
}

/// `prefix_0.pb`, `prefix_1.pb`, ... up to the first that does not exist.
fn numbered_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    (0..)
        .map(|j| dir.join(format!("{prefix}_{j}.pb")))
        .take_while(|p| p.is_file())
        .collect()
}

fn run_data_set(
    plan: &InferencePlan,
    ctx: &mut ExecutionContext,
    set: &Path,
    label: &str,
    tolerance: &Tolerance,
) -> Result<(), Stop> {
    let inputs = numbered_files(set, "input");
    if inputs.len() > plan.inputs().len() {
        return Err(fail(format!(
            "{label}: {} input files, but the model has {} runtime inputs",
            inputs.len(),
            plan.inputs().len()
        )));
    }
    for (j, path) in inputs.iter().enumerate() {
        let what = format!("{label}: input {j} ({:?})", plan.inputs()[j].name);
        let tensor = read_tensor_pb(path).map_err(|e| stop(&what, &e))?;
        ctx.set_input_at(j, &tensor)
            .map_err(|e| fail(format!("{what}: {e}")))?;
    }
    ctx.execute().map_err(|e| fail(format!("{label}: {e}")))?;

    let outputs = numbered_files(set, "output");
    if outputs.len() != plan.outputs().len() {
        return Err(fail(format!(
            "{label}: {} output files, but the model has {} outputs",
            outputs.len(),
            plan.outputs().len()
        )));
    }
    for (j, path) in outputs.iter().enumerate() {
        let what = format!("{label}: output {j} ({:?})", plan.outputs()[j].name);
        let expected = read_tensor_pb(path).map_err(|e| stop(&what, &e))?;
        let actual = ctx.output_at(j).map_err(|e| fail(format!("{what}: {e}")))?;
        if let Some(mismatch) = compare(&actual, &expected, tolerance) {
            return Err(fail(format!("{what}: {mismatch}")));
        }
    }
    Ok(())
}

/// Whether `err` is strata declaring that it does not implement something (rather than a bug,
/// a bad model, or a wrong result).
fn is_unsupported(err: &OnnxError) -> bool {
    match err {
        OnnxError::UnsupportedOperators { .. } | OnnxError::UnsupportedDataType { .. } => true,
        OnnxError::Runtime(rt) => chain_says(&**rt),
        _ => chain_says(err),
    }
}

/// Whether `err` or any error it wraps is an unsupported-operator or missing-kernel error.
/// Transparent wrappers hide their own level from `source()`, so every level is checked.
fn chain_says(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(err);
    while let Some(e) = current {
        let says = if let Some(op) = e.downcast_ref::<OpError>() {
            matches!(
                op,
                OpError::Unsupported { .. }
                    | OpError::NoKernel { .. }
                    | OpError::Core(CoreError::UnsupportedDType { .. })
            )
        } else if let Some(rt) = e.downcast_ref::<RuntimeError>() {
            matches!(
                rt,
                RuntimeError::Core(CoreError::UnsupportedDType { .. })
                    | RuntimeError::Op(OpError::Unsupported { .. } | OpError::NoKernel { .. })
            )
        } else if let Some(core) = e.downcast_ref::<CoreError>() {
            matches!(core, CoreError::UnsupportedDType { .. })
        } else {
            false
        };
        if says {
            return true;
        }
        current = e.source();
    }
    false
}

/// A graph input or output whose type strata cannot hold: not a tensor (sequence, map,
/// optional, sparse) or an element type with no strata dtype (complex, float6, ...).
fn unsupported_value_type(model: &ModelProto) -> Option<String> {
    let graph = model.graph.as_ref()?;
    let initializers: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let inputs = graph
        .input
        .iter()
        .filter(|i| !initializers.contains(&i.name()))
        .map(|i| ("input", i));
    let outputs = graph.output.iter().map(|o| ("output", o));
    inputs
        .chain(outputs)
        .find_map(|(role, value)| value_type_problem(value).map(|p| format!("{role} {p}")))
}

fn value_type_problem(value: &ValueInfoProto) -> Option<String> {
    let name = value.name();
    let kind = match value.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => {
            let elem = t.elem_type();
            return dtype_from_onnx(elem).is_none().then(|| {
                format!(
                    "{name:?} has data type {} ({elem}), which strata cannot hold",
                    data_type_name(elem)
                )
            });
        }
        // No type at all: the importer reports it as a model error (a failure).
        None => return None,
        Some(type_proto::Value::SequenceType(_)) => "a sequence",
        Some(type_proto::Value::MapType(_)) => "a map",
        Some(type_proto::Value::OptionalType(_)) => "an optional",
        Some(type_proto::Value::SparseTensorType(_)) => "a sparse tensor",
        Some(type_proto::Value::OpaqueType(_)) => "an opaque value",
    };
    Some(format!("{name:?} is {kind}; strata supports only tensors"))
}

/// The worst difference between an output and its expected tensor, or `None` when they match.
fn compare(actual: &OutputView<'_>, expected: &Tensor, tolerance: &Tolerance) -> Option<String> {
    if actual.dtype() != expected.dtype() {
        return Some(format!(
            "dtype {}, expected {}",
            actual.dtype(),
            expected.dtype()
        ));
    }
    if actual.dims() != expected.dims() {
        return Some(format!(
            "dims {:?}, expected {:?}",
            actual.dims(),
            expected.dims()
        ));
    }
    let dims = expected.dims();
    let result = match expected.dtype() {
        DType::F32 => compare_floats::<f32>(actual, expected, dims, tolerance, |v| v as f64),
        DType::F64 => compare_floats::<f64>(actual, expected, dims, tolerance, |v| v),
        DType::F16 => compare_floats::<f16>(actual, expected, dims, tolerance, f16::to_f64),
        DType::BF16 => compare_floats::<bf16>(actual, expected, dims, tolerance, bf16::to_f64),
        DType::I8 => compare_exact::<i8>(actual, expected, dims),
        DType::I16 => compare_exact::<i16>(actual, expected, dims),
        DType::I32 => compare_exact::<i32>(actual, expected, dims),
        DType::I64 => compare_exact::<i64>(actual, expected, dims),
        DType::U8 | DType::Bool => compare_exact::<u8>(actual, expected, dims),
        DType::U16 => compare_exact::<u16>(actual, expected, dims),
        DType::U32 => compare_exact::<u32>(actual, expected, dims),
        DType::U64 => compare_exact::<u64>(actual, expected, dims),
        // Sub-byte integers are held one per byte, sign-extended when signed.
        DType::I4 | DType::I2 => compare_exact::<i8>(actual, expected, dims),
        DType::U4 | DType::U2 => compare_exact::<u8>(actual, expected, dims),
        DType::String => compare_text(actual, expected, dims),
        // Low-precision floats compare by value (so any NaN pattern matches any NaN).
        DType::F8E8M0 => compare_floats::<u8>(actual, expected, dims, tolerance, |code| {
            f64::from(decode_e8m0(code))
        }),
        low => match MiniFloat::of(low) {
            Some(format) => compare_floats::<u8>(actual, expected, dims, tolerance, |code| {
                f64::from(format.decode(code))
            }),
            None => Err(format!("cannot compare outputs of dtype {low}")),
        },
    };
    result.err()
}

/// Both tensors' elements in logical order.
fn elements<T: Element>(
    actual: &OutputView<'_>,
    expected: &Tensor,
) -> Result<(Vec<T>, Vec<T>), String> {
    let a = actual
        .to_vec::<T>()
        .map_err(|e| format!("reading the output: {e}"))?;
    let e = expected
        .to_vec::<T>()
        .map_err(|e| format!("reading the expected tensor: {e}"))?;
    Ok((a, e))
}

fn compare_floats<T: Element + Copy + fmt::Display>(
    actual: &OutputView<'_>,
    expected: &Tensor,
    dims: &[usize],
    tolerance: &Tolerance,
    to_f64: impl Fn(T) -> f64,
) -> Result<(), String> {
    let (a, e) = elements::<T>(actual, expected)?;
    let mut worst: Option<(usize, f64)> = None;
    let mut differing = 0;
    for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
        let (x64, y64) = (to_f64(x), to_f64(y));
        if tolerance.accepts(x64, y64) {
            continue;
        }
        differing += 1;
        let excess = tolerance.excess(x64, y64);
        match worst {
            Some((_, w)) if w >= excess => {}
            _ => worst = Some((i, excess)),
        }
    }
    match worst {
        None => Ok(()),
        Some((i, _)) => Err(format!(
            "at {}: actual {} vs expected {} ({differing} of {} elements differ)",
            index_text(i, dims),
            a[i],
            e[i],
            e.len()
        )),
    }
}

fn compare_exact<T: Element + Copy + fmt::Debug>(
    actual: &OutputView<'_>,
    expected: &Tensor,
    dims: &[usize],
) -> Result<(), String> {
    let (a, e) = elements::<T>(actual, expected)?;
    first_difference(&a, &e, dims)
}

fn compare_text(actual: &OutputView<'_>, expected: &Tensor, dims: &[usize]) -> Result<(), String> {
    let a = actual
        .strings()
        .map_err(|e| format!("reading the output: {e}"))?;
    let e = expected
        .strings()
        .map_err(|e| format!("reading the expected tensor: {e}"))?;
    first_difference(&a, &e, dims)
}

/// Exact comparison: the first differing element and how many differ.
fn first_difference<T: PartialEq + fmt::Debug>(
    a: &[T],
    e: &[T],
    dims: &[usize],
) -> Result<(), String> {
    let differing = a.iter().zip(e).filter(|(x, y)| x != y).count();
    match a.iter().zip(e).position(|(x, y)| x != y) {
        None => Ok(()),
        Some(i) => Err(format!(
            "at {}: actual {:?} vs expected {:?} ({differing} of {} elements differ)",
            index_text(i, dims),
            a[i],
            e[i],
            e.len()
        )),
    }
}

/// The multi-dimensional index of flat element `flat` in a row-major tensor of `dims`.
fn index_text(flat: usize, dims: &[usize]) -> String {
    let mut index = vec![0; dims.len()];
    let mut rest = flat;
    for (slot, &d) in index.iter_mut().zip(dims).rev() {
        if d > 0 {
            *slot = rest % d;
            rest /= d;
        }
    }
    format!("{index:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_follows_the_rule() {
        let t = Tolerance::default();
        assert!(t.accepts(1.0005, 1.0));
        assert!(!t.accepts(1.002, 1.0));
        assert!(t.accepts(0.0, 1e-8));
        assert!(!t.accepts(1e-6, 0.0));
        assert!(t.accepts(f64::NAN, f64::NAN));
        assert!(!t.accepts(0.0, f64::NAN));
        assert!(!t.accepts(f64::NAN, 0.0));
        assert!(t.accepts(f64::INFINITY, f64::INFINITY));
        assert!(!t.accepts(f64::NEG_INFINITY, f64::INFINITY));
        assert!(!t.accepts(1e300, f64::INFINITY));
        assert!(!t.accepts(f64::INFINITY, 1e300));
    }

    #[test]
    fn index_text_is_row_major() {
        assert_eq!(index_text(5, &[2, 3]), "[1, 2]");
        assert_eq!(index_text(0, &[]), "[]");
        assert_eq!(index_text(7, &[2, 2, 2]), "[1, 1, 1]");
    }

    #[test]
    fn case_list_skips_comments_and_blanks() {
        let text = "# header\n\nnode/test_add\n  simple/test_x  \n#node/test_old\n";
        assert_eq!(
            parse_case_list(text),
            vec!["node/test_add", "simple/test_x"]
        );
        assert!(parse_case_list(PASSING_LIST_HEADER).is_empty());
    }

    #[test]
    fn missing_folder_is_an_error() {
        assert!(find_cases(&["/nonexistent/strata-conformance"]).is_err());
    }

    #[test]
    fn a_folder_without_a_model_fails_and_a_panic_is_caught() {
        let outcome = run_case(Path::new("/nonexistent/strata-conformance/test_x"));
        assert!(matches!(outcome, CaseOutcome::Fail(_)), "{outcome:?}");
        let caught = catch_unwind(|| panic!("boom"));
        let message = caught.err().map(|p| panic_message(&*p));
        assert_eq!(message.as_deref(), Some("boom"));
    }

    #[test]
    fn summary_line_counts_outcomes() {
        let result = |outcome| CaseResult {
            name: "n".into(),
            outcome,
            elapsed: Duration::ZERO,
        };
        let summary = Summary {
            results: vec![
                result(CaseOutcome::Pass),
                result(CaseOutcome::Fail("x".into())),
                result(CaseOutcome::Unsupported("y".into())),
                result(CaseOutcome::Pass),
            ],
        };
        assert_eq!(summary.to_string(), "2 passed, 1 failed, 1 skipped");
        assert_eq!(summary.passing().count(), 2);
    }
}
