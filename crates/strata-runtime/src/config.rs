//! Plan configuration.

use strata_core::{default_memory_limit, Device, DEFAULT_ALIGNMENT};

use crate::OptimizationProfile;

/// How a plan is built and run.
#[derive(Debug, Clone)]
pub struct PlanConfig {
    /// Where weights live and kernels run.
    pub device: Device,
    /// Alignment of every arena offset.
    pub alignment: usize,
    /// Intra-op threads per kernel.
    pub threads: usize,
    /// Input dim ranges; without one, symbolic dims are planned from the first inputs seen.
    pub profile: Option<OptimizationProfile>,
    /// Record per-node timings in each context.
    pub profiling: bool,
    /// Run graph optimizations (constant folding, dead-node removal).
    pub optimize: bool,
    /// Most trips one Loop may run before the run fails (an endless loop is an error, not a
    /// hang); [`strata_ops::run_control::DEFAULT_MAX_LOOP_ITERATIONS`] by default.
    pub max_loop_iterations: u64,
    /// Most bytes the plan may hold at once: weights, every context's arena, and what runs
    /// allocate. Checked before allocating; passing it is a `MemoryLimitExceeded` error at build
    /// or run. Default: the machine's physical memory.
    pub memory_limit: usize,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            device: Device::Cpu,
            alignment: DEFAULT_ALIGNMENT,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            profile: None,
            profiling: false,
            optimize: true,
            max_loop_iterations: strata_ops::run_control::DEFAULT_MAX_LOOP_ITERATIONS,
            memory_limit: default_memory_limit(),
        }
    }
}

impl PlanConfig {
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    pub fn with_profile(mut self, profile: OptimizationProfile) -> Self {
        self.profile = Some(profile);
        self
    }

    /// The plan's memory limit in bytes (see [`PlanConfig::memory_limit`]).
    pub fn with_memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    pub fn with_profiling(mut self, on: bool) -> Self {
        self.profiling = on;
        self
    }
}
