//! strata-core: the foundation of strata.
//!
//! - values: [`DType`] (with the float8/float4 codecs [`MiniFloat`]), [`Device`], [`Shape`] with
//!   checked size arithmetic, alignment rules;
//! - memory: [`MemoryBlock`], [`Storage`], the [`Allocator`] trait with the CPU, caching and
//!   pinned allocators, the [`AllocatorRegistry`] keyed by (device, [`MemoryKind`]), the
//!   [`WorkspaceArena`] and mapped files;
//! - tensors: the cheap [`Tensor`] handle, its zero-copy views, typed access and `.npy` I/O.

pub mod align;
pub mod device;
pub mod dispatch;
pub mod dtype;
pub mod error;
pub mod memory;
mod parse;
pub mod shape;
pub mod tensor;

pub use align::{align_up, DEFAULT_ALIGNMENT};
pub use device::Device;
pub use dispatch::{DispatchEntry, DispatchKey, DispatchKeySet, DispatchTable};
pub use dtype::low_float::{decode_e8m0, encode_e8m0, E8m0Rounding, MiniFloat};
pub use dtype::{DType, Element, QK_K, QUANT_BLOCK};
pub use error::{CoreError, Result};
pub use memory::allocator::{Allocator, AllocatorStats};
pub use memory::arena::WorkspaceArena;
pub use memory::block::MemoryBlock;
pub use memory::budget::{default_memory_limit, parse_memory_size, BudgetCharge, MemoryBudget};
pub use memory::caching::CachingAllocator;
pub use memory::cpu::CpuAllocator;
pub use memory::external::{MappedFile, MappedFileBytes};
pub use memory::host_vec::{try_collect, try_vec_filled, try_vec_with_capacity};
pub use memory::kind::MemoryKind;
pub use memory::ledger::KindStats;
pub use memory::mode::InferenceMode;
pub use memory::pinned::PinnedAllocator;
pub use memory::registry::AllocatorRegistry;
pub use memory::storage::Storage;
pub use shape::{Shape, Strides, MAX_RANK};
pub use tensor::{BytesRead, BytesWrite, Layout, ReadGuard, StringBuffer, Tensor, WriteGuard};

pub use half::{bf16, f16};
