//! The `strata` command: run, inspect and benchmark ONNX models.

mod bench;
mod conformance;
mod export;
mod inputs;
mod inspect;
mod model;
mod report;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "strata: an inference runtime for ONNX models"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a model once (the built-in ResNet-style default when MODEL is omitted) and print its
    /// outputs, latency and memory plan.
    Run(RunArgs),
    /// Describe a model: inputs, outputs, op counts, weight bytes and memory plan.
    Inspect(InspectArgs),
    /// Time repeated runs of a model.
    Bench(BenchArgs),
    /// Write the built-in models (ResNet-style CNN, MLP, transformer block) as .onnx files.
    Export(ExportArgs),
    /// Run ONNX backend-test cases (`test_*` folders with model.onnx and test_data_set_*) and
    /// print pass, fail or unsupported per case, then a summary.
    Conformance(ConformanceArgs),
}

#[derive(Args)]
struct ConformanceArgs {
    /// Folders to search for case folders, e.g. ../shared/onnx-tests/node.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Cases run at once (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print only the passing cases' names, as conformance_passing.txt (summary to stderr).
    #[arg(long)]
    list_passing: bool,
}

#[derive(Args)]
struct ExportArgs {
    /// Directory to write the models into.
    dir: PathBuf,
}

/// Options shared by every command that loads a model.
#[derive(Args, Clone, Default)]
struct ModelArgs {
    /// Path to an .onnx file; omit to use the built-in default model.
    model: Option<PathBuf>,
    /// Dims for an input with symbolic dims, e.g. `--shape input=1,3,224,224` (repeatable).
    #[arg(long = "shape", value_name = "NAME=D0,D1,...")]
    shapes: Vec<String>,
    /// Intra-op threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Args, Default)]
struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Input data as .npy (or ONNX .pb TensorProto) files, e.g. `--input x=x.npy` (repeatable).
    /// Inputs not given are filled with seeded random data.
    #[arg(long = "input", value_name = "NAME=FILE")]
    inputs: Vec<String>,
    /// Write each output to DIR/NAME.npy.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// Seed for generated inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print a JSON report instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct InspectArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Print a JSON report instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Timed runs.
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// Untimed warm-up runs.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Also print time per operator type (per-node profiling).
    #[arg(long)]
    profile: bool,
    /// Print a JSON report instead of text.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => run::run(&RunArgs::default()),
        Some(Command::Run(args)) => run::run(&args),
        Some(Command::Inspect(args)) => inspect::inspect(&args),
        Some(Command::Bench(args)) => bench::bench(&args),
        Some(Command::Export(args)) => export::export(&args.dir),
        Some(Command::Conformance(args)) => conformance::conformance(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
