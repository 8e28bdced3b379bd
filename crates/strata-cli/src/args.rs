//! The options of each `strata` command, as clap parses them.

use std::path::PathBuf;

use clap::Args;

#[derive(Args)]
pub struct ConformanceArgs {
    /// Folders to search for case folders, e.g. ../shared/onnx-tests/node.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Cases run at once (default: all cores).
    #[arg(long, value_parser = at_least_one)]
    pub threads: Option<usize>,
    /// Print only the passing cases' names, as conformance_passing.txt (summary to stderr).
    #[arg(long)]
    pub list_passing: bool,
}

#[derive(Args)]
pub struct ExportArgs {
    /// Directory to write the models into.
    pub dir: PathBuf,
}

/// Options shared by every command that loads a model.
#[derive(Args, Clone, Default)]
pub struct ModelArgs {
    /// Path to an .onnx file; omit to use the built-in default model.
    pub model: Option<PathBuf>,
    /// Dims for an input with symbolic dims, e.g. `--shape input=1,3,224,224` (repeatable).
    #[arg(long = "shape", value_name = "NAME=D0,D1,...")]
    pub shapes: Vec<String>,
    /// Intra-op threads (default: all cores).
    #[arg(long, value_parser = at_least_one)]
    pub threads: Option<usize>,
    /// Fail with a "timed out" error when loading, or any one run, takes longer than SECONDS.
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    pub timeout: Option<std::time::Duration>,
    /// Fail a run when one Loop has taken more than N trips (an endless loop is an error).
    #[arg(long, value_name = "N", value_parser = at_least_one_trip)]
    pub max_loop_iterations: Option<u64>,
    /// Most memory the model may use (weights, arenas, run-time allocations), e.g. 512M, 4G,
    /// 1.5G; going past it is an error. Default: the machine's memory.
    #[arg(long, value_name = "SIZE", value_parser = strata_core::parse_memory_size)]
    pub memory_limit: Option<usize>,
}

/// A timeout: a positive number of seconds, fractions allowed.
fn positive_seconds(text: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|err| format!("'{text}' is not a number of seconds: {err}"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err("must be more than 0 seconds".into());
    }
    std::time::Duration::try_from_secs_f64(seconds).map_err(|err| format!("'{text}': {err}"))
}

/// A loop-trip bound: at least 1.
fn at_least_one_trip(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(err) => Err(format!("'{text}' is not a trip count: {err}")),
    }
}

/// A thread count: a whole number of at least 1 (`--threads 0` is an error, not "all cores").
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(err) => Err(format!("'{text}' is not a thread count: {err}")),
    }
}

#[derive(Args, Default)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Input data as .npy (or ONNX .pb TensorProto) files, e.g. `--input x=x.npy` (repeatable).
    /// Inputs not given are filled with seeded random data.
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub inputs: Vec<String>,
    /// Write each output to DIR/NAME.npy.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Seed for generated inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print a JSON report instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print a JSON report instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Timed runs.
    #[arg(long, default_value_t = 50)]
    pub runs: usize,
    /// Untimed warm-up runs.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Also print time per operator type (per-node profiling).
    #[arg(long)]
    pub profile: bool,
    /// GGUF models: prompt tokens prefilled per timed run.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// GGUF models: tokens generated (decode steps) per timed run.
    #[arg(long, default_value_t = 64)]
    pub gen_tokens: usize,
    /// Print a JSON report instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `strata generate MODEL.gguf (--prompt TEXT | --chat TEXT)`.
#[derive(Args)]
pub struct GenerateArgs {
    /// Path to a .gguf language model.
    pub model: PathBuf,
    /// Text to continue (BOS and special tokens as llama.cpp adds them).
    #[arg(long, conflicts_with = "chat", required_unless_present = "chat")]
    pub prompt: Option<String>,
    /// A user message, rendered with the model's chat template.
    #[arg(long)]
    pub chat: Option<String>,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// 0 keeps every token.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop before this text (repeatable).
    #[arg(long = "stop", value_name = "TEXT")]
    pub stop: Vec<String>,
    /// Positions a session holds (default: the model's context length).
    #[arg(long)]
    pub context: Option<usize>,
    /// Intra-op threads (default: all cores).
    #[arg(long, value_parser = at_least_one)]
    pub threads: Option<usize>,
    /// Most memory the model may use (weights, KV cache, run-time allocations), e.g. 512M, 4G.
    #[arg(long, value_name = "SIZE", value_parser = strata_core::parse_memory_size)]
    pub memory_limit: Option<usize>,
    /// Fail with a "timed out" error when one run of the model (a prompt chunk or one generated
    /// token) takes longer than SECONDS.
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    pub timeout: Option<std::time::Duration>,
    /// Print one JSON object (ids, text, speeds, KV cache bytes) instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_are_positive_numbers() {
        assert_eq!(at_least_one("2"), Ok(2));
        assert!(at_least_one("0").unwrap_err().contains("at least 1"));
        assert!(at_least_one("-1").unwrap_err().contains("'-1'"));
        assert!(at_least_one("many").is_err());
    }

    #[test]
    fn timeouts_are_positive_seconds_and_trip_bounds_positive_counts() {
        assert_eq!(
            positive_seconds("0.5"),
            Ok(std::time::Duration::from_millis(500))
        );
        for bad in ["0", "-1", "NaN", "soon", "1e300"] {
            assert!(positive_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(at_least_one_trip("10"), Ok(10));
        assert!(at_least_one_trip("0").is_err());
    }
}
