//! The shape of one band of the blocked depthwise convolution, shared by its portable and
//! vector kernels.

/// The geometry of one band's multiply-adds, in interleaved positions (`LANES` elements each).
pub(super) struct BandShape {
    /// Output rows and columns of the band.
    pub rows: usize,
    pub cols: usize,
    /// Input positions between vertically / horizontally adjacent outputs' windows.
    pub row_step: usize,
    pub col_step: usize,
}
