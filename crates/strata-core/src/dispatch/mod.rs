//! Dispatch keys (c10-style): which backend and which functionality a call on tensors needs,
//! and per-operator tables that route a key set to a kernel, falling through from the more
//! specific functionality to the more general one.
//!
//! - [`DispatchKey`] / [`DispatchKeySet`]: a one-byte bitset of backend keys (CPU, CUDA) and
//!   functionality keys (Dense, Quantized, InferenceMode), computed from a call's tensors and the
//!   thread's [`crate::InferenceMode`].
//! - [`DispatchTable`]: a const array per operator indexed by (functionality, backend), each entry
//!   a kernel, a fallthrough or missing. Lookup walks the set's functionality keys from the
//!   highest down: no hashing and no allocation.

mod key;
mod table;

pub use key::{DispatchKey, DispatchKeySet};
pub use table::{DispatchEntry, DispatchTable};
