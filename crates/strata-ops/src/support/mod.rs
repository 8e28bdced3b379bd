//! Helpers shared across operator families, each written once: present/required inputs
//! (`inputs`), axis normalization and integer arguments (`axes`), the device/dtype checks of
//! kernel selection (`kernel_choice`), carving planned scratch (`scratch`), element values as
//! bytes (`scalar`), strided copies (`copy_runs`), the strided walk and broadcast walks
//! (`strided`, `broadcast`), per-dtype arithmetic (`numeric`, `accumulate`), math functions
//! (`erf`, `fast_math`, `f16_bits`), and the operator test harness (`test_util`, `rng`).

pub(crate) mod accumulate;
pub(crate) mod axes;
pub mod broadcast;
pub(crate) mod copy_runs;
pub(crate) mod erf;
pub(crate) mod f16_bits;
pub(crate) mod fast_math;
pub(crate) mod inputs;
pub(crate) mod kernel_choice;
pub mod numeric;
#[cfg(test)]
pub(crate) mod rng;
pub(crate) mod scalar;
pub(crate) mod scratch;
pub mod strided;
#[cfg(test)]
pub(crate) mod test_util;
