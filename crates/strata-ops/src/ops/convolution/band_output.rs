//! The output of a direct convolution, shared by its band tasks: each task writes its own rows
//! (or channels) through a raw pointer, since the bands of one NCHW output are not contiguous
//! slices that could be split safely.

/// The output, shared by the band tasks of one call.
#[derive(Clone, Copy)]
pub(super) struct OutPtr(pub *mut f32);

// SAFETY: every task writes a disjoint set of output elements (its own band's), and the call
// does not return before every task has finished.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The output from element `at` on (a method: a closure capturing the field would capture
    /// the bare pointer, which is not `Send`).
    pub(super) fn at(self, at: usize) -> *mut f32 {
        self.0.wrapping_add(at)
    }

    /// # Safety
    /// `at..at + len` must be inside the output and written by no other task meanwhile.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slice(&self, at: usize, len: usize) -> &mut [f32] {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(at), len) }
    }
}
