//! Taking a request's inputs: each is checked against the model's declaration (and the
//! optimization profile) when set, and copied in at the next `execute`.

use strata_core::Tensor;
use strata_ops::Dim;

use super::state::ExecutionContext;
use crate::{Result, RuntimeError};

impl ExecutionContext {
    fn input_index(&self, name: &str) -> Result<usize> {
        self.plan
            .inputs()
            .iter()
            .position(|i| i.name == name)
            .ok_or_else(|| RuntimeError::UnknownInput {
                name: name.to_string(),
                available: self.plan.inputs().iter().map(|i| i.name.clone()).collect(),
            })
    }

    /// Sets an input by name; its contents are read at the next `execute`.
    pub fn set_input(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        let index = self.input_index(name)?;
        self.set_input_at(index, tensor)
    }

    /// Sets an input by position; its contents are read at the next `execute`.
    pub fn set_input_at(&mut self, index: usize, tensor: &Tensor) -> Result<()> {
        let info = self
            .plan
            .inputs()
            .get(index)
            .ok_or(RuntimeError::InputIndex {
                index,
                count: self.plan.inputs().len(),
            })?;
        let name = &info.name;
        if !tensor.is_defined() {
            return Err(RuntimeError::InputNotSet { name: name.clone() });
        }
        if tensor.dtype() != info.dtype {
            return Err(RuntimeError::InputDType {
                name: name.clone(),
                expected: info.dtype,
                actual: tensor.dtype(),
            });
        }
        if tensor.rank() != info.dims.len() {
            return Err(RuntimeError::InputRank {
                name: name.clone(),
                expected: info.dims.len(),
                actual: tensor.rank(),
                dims: tensor.dims().to_vec(),
            });
        }
        let profile = self
            .plan
            .config()
            .profile
            .as_ref()
            .and_then(|p| p.range(name));
        for (axis, (&actual, declared)) in tensor.dims().iter().zip(&info.dims).enumerate() {
            if let Dim::Known(expected) = declared {
                if actual != *expected {
                    return Err(RuntimeError::InputDim {
                        name: name.clone(),
                        axis,
                        expected: expected.to_string(),
                        actual,
                    });
                }
            }
            if let Some(range) = profile {
                if !(range.min[axis] <= actual && actual <= range.max[axis]) {
                    return Err(RuntimeError::OutsideProfile {
                        name: name.clone(),
                        axis,
                        actual,
                        min: range.min[axis],
                        max: range.max[axis],
                    });
                }
            }
        }
        self.pending[index] = Some(tensor.clone());
        Ok(())
    }
}
