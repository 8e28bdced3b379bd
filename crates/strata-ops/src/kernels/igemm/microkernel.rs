//! The integer microkernel contract and the portable microkernel.
//!
//! A microkernel computes the raw sums `Σ_k a'[i][k] · b'[k][j]` of one `MR x NR` tile from a
//! packed A tile (`kp / 4` groups of `MR` rows of 4 bytes) and two consecutive packed B panels,
//! and stores them row-major (row stride [`NR`]) in `c`. Zero points, bias and the output
//! conversion are the epilogue's.

use super::{NR, PANEL};

/// A register-blocked integer microkernel. Implementors are zero-sized markers.
pub(super) trait IntMicrokernel: Copy + Send + Sync + 'static {
    /// Rows of the register tile.
    const MR: usize;

    /// Computes one tile.
    ///
    /// # Safety
    /// - `kp` is a multiple of 4; `a` is valid for reads of `kp * MR` bytes; `b` for reads of
    ///   `2 * kp * PANEL` bytes (two panels);
    /// - `c` is valid for writes of `MR * NR` i32 values;
    /// - the CPU supports the instructions of the implementation.
    unsafe fn run(kp: usize, a: *const u8, b: *const i8, c: *mut i32);
}

/// Plain Rust, for any CPU.
#[derive(Clone, Copy, Debug)]
pub(super) struct Portable;

impl IntMicrokernel for Portable {
    const MR: usize = 4;

    unsafe fn run(kp: usize, a: *const u8, b: *const i8, c: *mut i32) {
        const MR: usize = Portable::MR;
        // SAFETY: the extents are the caller's contract.
        let (a, b, c) = unsafe {
            (
                std::slice::from_raw_parts(a, kp * MR),
                std::slice::from_raw_parts(b, 2 * kp * PANEL),
                std::slice::from_raw_parts_mut(c, MR * NR),
            )
        };
        let mut acc = [[0i32; NR]; MR];
        for g in 0..kp / 4 {
            let a_group = &a[g * MR * 4..(g + 1) * MR * 4];
            for (half, panel) in b.chunks_exact(kp * PANEL).enumerate() {
                let b_group = &panel[g * PANEL * 4..(g + 1) * PANEL * 4];
                for (i, row) in acc.iter_mut().enumerate() {
                    let av = &a_group[i * 4..i * 4 + 4];
                    for (j, col) in b_group.chunks_exact(4).enumerate() {
                        let dot: i32 = av
                            .iter()
                            .zip(col)
                            .map(|(&x, &w)| i32::from(x) * i32::from(w))
                            .sum();
                        row[half * PANEL + j] = row[half * PANEL + j].wrapping_add(dot);
                    }
                }
            }
        }
        for (dst, row) in c.chunks_exact_mut(NR).zip(&acc) {
            dst.copy_from_slice(row);
        }
    }
}
