//! The one error type of `strata-core`. Every variant names what was wrong and where.

use crate::{DType, Device, MemoryKind};

/// Result alias used throughout `strata-core`.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;

/// Everything that can go wrong in the core layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    #[error("invalid dimension {value} at axis {axis}: dimensions must be non-negative")]
    NegativeDim { axis: usize, value: i64 },

    #[error("size overflow: {what} does not fit in usize")]
    SizeOverflow { what: String },

    #[error("invalid alignment {align}: must be a non-zero power of two")]
    InvalidAlignment { align: usize },

    #[error("unknown device {text:?}: expected `cpu` or `cuda:N`")]
    ParseDevice { text: String },

    #[error("unknown dtype {text:?}")]
    ParseDType { text: String },

    #[error("dtype mismatch in {op}: expected {expected}, found {actual}")]
    DTypeMismatch {
        op: &'static str,
        expected: DType,
        actual: DType,
    },

    #[error("{op} is not supported for dtype {dtype}: {reason}")]
    UnsupportedDType {
        op: &'static str,
        dtype: DType,
        reason: &'static str,
    },

    #[error("{op}: element count mismatch, {from:?} has {from_numel} elements but {to:?} needs {to_numel}")]
    NumelMismatch {
        op: &'static str,
        from: Vec<usize>,
        from_numel: usize,
        to: Vec<usize>,
        to_numel: usize,
    },

    #[error("no kernel for {op} with dispatch keys {keys}")]
    NoKernel {
        op: &'static str,
        keys: crate::dispatch::DispatchKeySet,
    },

    #[error("{op}: shape mismatch, expected {expected:?}, found {actual:?}")]
    ShapeMismatch {
        op: &'static str,
        expected: Vec<usize>,
        actual: Vec<usize>,
    },

    #[error("{op}: axis {axis} out of range for rank {rank}")]
    AxisOutOfRange {
        op: &'static str,
        axis: isize,
        rank: usize,
    },

    #[error("{op}: {message}")]
    InvalidView { op: &'static str, message: String },

    #[error("{op}: byte range {offset}..{end} is out of bounds of a {len}-byte buffer")]
    OutOfBounds {
        op: &'static str,
        offset: usize,
        end: usize,
        len: usize,
    },

    #[error("out of memory: could not allocate {bytes} bytes ({kind:?}) on {device}: {reason}")]
    OutOfMemory {
        bytes: usize,
        device: Device,
        kind: MemoryKind,
        reason: String,
    },

    #[error("memory limit exceeded: {bytes} more bytes ({kind:?}) on {device} would pass the limit of {limit} bytes ({used} bytes in use; raise it with PlanConfig::memory_limit or --memory-limit)")]
    MemoryLimitExceeded {
        bytes: usize,
        kind: MemoryKind,
        device: Device,
        used: usize,
        limit: usize,
    },

    #[error("no allocator registered for {device} ({kind:?}), and none for its Default kind")]
    NoAllocator { device: Device, kind: MemoryKind },

    #[error("memory kind {kind:?} is host-only and cannot be used on {device}")]
    HostKindOnDevice { device: Device, kind: MemoryKind },

    #[error("{op}: tensor is on {actual}, expected {expected}")]
    DeviceMismatch {
        op: &'static str,
        expected: Device,
        actual: Device,
    },

    #[error("{op}: tensor is undefined")]
    Undefined { op: &'static str },

    #[error("{op}: memory is already borrowed {held}")]
    BorrowConflict {
        op: &'static str,
        held: &'static str,
    },

    #[error("{op}: memory is read-only")]
    ReadOnly { op: &'static str },

    #[error("arena reset refused: {live} arena slice(s) are still alive")]
    ArenaInUse { live: usize },

    #[error("arena exhausted: requested {requested} bytes (align {align}) with {used} of {capacity} bytes used")]
    ArenaExhausted {
        requested: usize,
        align: usize,
        used: usize,
        capacity: usize,
    },

    #[error("{op}: capacity {capacity} bytes is less than the {needed} bytes needed")]
    CapacityExceeded {
        op: &'static str,
        needed: usize,
        capacity: usize,
    },

    #[error("io error on {path}: {message}")]
    Io { path: String, message: String },

    #[error("npy format error in {path}: {message}")]
    Npy { path: String, message: String },

    #[error("{numel} elements of {dtype} do not fill whole blocks of {block} elements")]
    PartialBlock {
        dtype: DType,
        numel: usize,
        block: usize,
    },

    #[error("invalid bool value {value} at element {index}: bool tensors hold only 0 or 1")]
    InvalidBool { index: usize, value: u8 },
}

impl CoreError {
    pub(crate) fn overflow(what: impl Into<String>) -> Self {
        CoreError::SizeOverflow { what: what.into() }
    }
}
