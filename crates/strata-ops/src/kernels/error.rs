//! The error type of the CPU kernels. Every message names the operator, what was wrong and why,
//! so a caller can wrap it with node names without re-deriving the cause.

/// Result alias for kernel functions.
pub type KernelResult<T> = Result<T, KernelError>;

/// Everything a kernel or one of its shape functions can reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// An operand has the wrong number of dimensions.
    #[error("{op}: {operand} has rank {rank} but {expected}")]
    Rank {
        op: &'static str,
        operand: &'static str,
        rank: usize,
        expected: String,
    },

    /// Input channels do not match the weight, given the group count.
    #[error(
        "{op}: input has {input_channels} channels but weight expects {expected_channels} \
         (groups {groups})"
    )]
    ChannelMismatch {
        op: &'static str,
        input_channels: usize,
        expected_channels: usize,
        groups: usize,
    },

    /// A size that must divide evenly does not.
    #[error("{op}: {what} ({value}) is not divisible by groups ({groups})")]
    GroupsDivide {
        op: &'static str,
        what: &'static str,
        value: usize,
        groups: usize,
    },

    /// An attribute has an invalid value or the wrong number of entries.
    #[error("{op}: invalid {param}: {reason}")]
    InvalidParam {
        op: &'static str,
        param: &'static str,
        reason: String,
    },

    /// The (padded) input is smaller than the kernel window along a spatial axis.
    #[error(
        "{op}: kernel extent {extent} exceeds the padded input size {padded} on spatial axis {axis}"
    )]
    WindowTooLarge {
        op: &'static str,
        axis: usize,
        extent: usize,
        padded: usize,
    },

    /// Two shapes cannot be combined (matmul inner dims, broadcasting).
    #[error("{op}: cannot combine shapes {a:?} and {b:?}: {reason}")]
    ShapeMismatch {
        op: &'static str,
        a: Vec<usize>,
        b: Vec<usize>,
        reason: String,
    },

    /// A slice handed to a kernel has a different length than its dims require.
    #[error("{op}: {buffer} has {actual} elements but {expected} are required")]
    BufferLength {
        op: &'static str,
        buffer: &'static str,
        expected: usize,
        actual: usize,
    },

    /// A strided operand reaches outside its slice, or an output's strides overlap.
    #[error("{op}: operand {operand} ({rows}x{cols}, strides {strides:?}) {reason}")]
    InvalidLayout {
        op: &'static str,
        operand: &'static str,
        rows: usize,
        cols: usize,
        strides: (isize, isize),
        reason: String,
    },

    /// A size computation does not fit in `usize`.
    #[error("{op}: size overflow computing {what}")]
    SizeOverflow {
        op: &'static str,
        what: &'static str,
    },
}
