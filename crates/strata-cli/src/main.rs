//! The `strata` command: run, inspect and benchmark ONNX models.

mod args;
mod bench;
mod bench_llm;
mod conformance;
mod export;
mod generate;
mod inputs;
mod inspect;
mod inspect_gguf;
mod model;
mod report;
mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use args::{BenchArgs, ConformanceArgs, ExportArgs, GenerateArgs, InspectArgs, RunArgs};

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
    /// Time repeated runs of a model (GGUF language models: prefill and decode tokens per second).
    Bench(BenchArgs),
    /// Generate text with a GGUF language model, streamed to stdout.
    Generate(GenerateArgs),
    /// Write the built-in models (ResNet-style CNN, MLP, transformer block) as .onnx files.
    Export(ExportArgs),
    /// Run ONNX backend-test cases (`test_*` folders with model.onnx and test_data_set_*) and
    /// print pass, fail or unsupported per case, then a summary.
    Conformance(ConformanceArgs),
}

fn main() -> ExitCode {
    // With --json a script reads stdout as JSON: failures are JSON objects there too.
    let json = std::env::args().skip(1).any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if json && err.use_stderr() => return json_error(&err.to_string(), "usage", 2),
        Err(err) => err.exit(),
    };
    let result = match cli.command {
        None => run::run(&RunArgs::default()),
        Some(Command::Run(args)) => run::run(&args),
        Some(Command::Inspect(args)) => match &args.model.model {
            Some(path) if inspect_gguf::is_gguf(path) => {
                inspect_gguf::inspect(path, args.model.memory_limit, args.json)
            }
            _ => inspect::inspect(&args),
        },
        Some(Command::Bench(args)) => match &args.model.model {
            Some(path) if inspect_gguf::is_gguf(path) => bench_llm::bench(&args),
            _ => bench::bench(&args),
        },
        Some(Command::Generate(args)) => generate::generate(&args),
        Some(Command::Export(args)) => export::export(&args.dir),
        Some(Command::Conformance(args)) => conformance::conformance(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) if json => json_error(&message, "error", 1),
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `{"error": {"message", "kind", "exit_code"}}` on stdout (and the message on stderr, for
/// people) and exits with `code`: `kind` is "usage" for bad arguments (exit 2), else "error".
fn json_error(message: &str, kind: &str, code: u8) -> ExitCode {
    let message = message.trim().trim_start_matches("error: ");
    eprintln!("error: {message}");
    let value = serde_json::json!({
        "error": { "message": message, "kind": kind, "exit_code": code },
    });
    println!("{value}");
    ExitCode::from(code)
}
