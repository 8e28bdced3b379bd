//! Optimization profiles (R5): the min/opt/max range of every input dim. The arena is sized for
//! max; runs with any dims inside the ranges only update metadata.

use std::collections::BTreeMap;

use crate::{Result, RuntimeError};

/// The range of one input's dims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRange {
    pub min: Vec<usize>,
    pub opt: Vec<usize>,
    pub max: Vec<usize>,
}

/// Ranges per input name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OptimizationProfile {
    inputs: BTreeMap<String, InputRange>,
}

impl OptimizationProfile {
    pub fn new() -> Self {
        OptimizationProfile::default()
    }

    /// Sets the range of `input`; checked to be `min <= opt <= max` per dim.
    pub fn with_input(
        mut self,
        input: &str,
        min: &[usize],
        opt: &[usize],
        max: &[usize],
    ) -> Result<Self> {
        if min.len() != opt.len() || opt.len() != max.len() {
            return Err(RuntimeError::Profile(format!(
                "input {input:?}: min/opt/max have ranks {}/{}/{}",
                min.len(),
                opt.len(),
                max.len()
            )));
        }
        for axis in 0..min.len() {
            if !(min[axis] <= opt[axis] && opt[axis] <= max[axis]) {
                return Err(RuntimeError::Profile(format!(
                    "input {input:?} dim {axis}: need min <= opt <= max, got {} / {} / {}",
                    min[axis], opt[axis], max[axis]
                )));
            }
        }
        self.inputs.insert(
            input.to_string(),
            InputRange {
                min: min.to_vec(),
                opt: opt.to_vec(),
                max: max.to_vec(),
            },
        );
        Ok(self)
    }

    pub fn range(&self, input: &str) -> Option<&InputRange> {
        self.inputs.get(input)
    }

    pub fn inputs(&self) -> impl Iterator<Item = (&str, &InputRange)> {
        self.inputs.iter().map(|(k, v)| (k.as_str(), v))
    }
}
