//! The integer GEMM on Intel AMX tiles (`tdpbusd`): u8 × i8 dot products of four, added into
//! 16 × 16 i32 tiles, exact like VNNI's but each instruction doing 16 × 16 × 64 of them.
//!
//! AMX wants the u8 operand row-major (16 rows × 64 bytes of depth per tile) and the i8 one in
//! groups of 4 depths × 16 columns, 64 bytes a row: that second layout is exactly a packed B
//! panel's ([`super::PackedB`]), 16 groups (64 depths) a tile. So only A is repacked: a chunk of
//! its rows is copied row-major into a buffer whose row length is the depth rounded up to 64,
//! zero-padded (zeros add nothing), with the row sums the zero-point correction needs.
//!
//! ```text
//! for ic in rows, step MC                   chunk of A rows, row-major, padded -> L2
//!   for jr in cols, step 32                 two B panels (tiles 6, 7)
//!     for each 32-row tile of the chunk     A in tiles 4, 5
//!       C tiles 0..4 (32 x 32 i32) over all of K -> memory -> write-back (the epilogue)
//! ```
//!
//! Linux hands AMX's 8 KB of tile state to a process only on request
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`), made once; where the CPU lacks AMX
//! or the request fails, the VNNI microkernel runs instead. Tiles are configured at the start
//! of each block and released at its end, so threads that never run a block pay nothing and the
//! kernel saves no tile state for a thread between products.

use std::arch::asm;
use std::ops::Range;
use std::sync::OnceLock;

use super::epilogue::{strip_terms, write_tile};
use super::problem::{with_a_buffers, Problem};
use super::{NR, PANEL};

/// Rows of C one tile pair covers (two 16-row tiles).
pub(super) const MR: usize = 32;

/// Depth bytes of one A tile row (and 16 groups of a B panel).
const STEP: usize = 64;

/// Bytes of row-major A a block works through at once (L2 holds it with B's panels).
const A_CHUNK_BYTES: usize = 512 * 1024;

/// Whether AMX-INT8 is there and this process may use it (asked once).
pub(super) fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| cpu_has_amx_int8() && request_tile_data())
}

fn cpu_has_amx_int8() -> bool {
    use std::arch::x86_64::__cpuid_count;
    // Leaf 7 exists only up to the CPU's maximum leaf.
    if __cpuid_count(0, 0).eax < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    // AMX-TILE is EDX bit 24, AMX-INT8 bit 25.
    edx & (1 << 24) != 0 && edx & (1 << 25) != 0
}

/// Asks Linux for the tile data state; `true` when granted.
#[cfg(target_os = "linux")]
fn request_tile_data() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM) only changes which register state the kernel
    // lets this process use; it reads and writes no memory of ours. `syscall` clobbers rcx and
    // r11, declared.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

#[cfg(not(target_os = "linux"))]
fn request_tile_data() -> bool {
    false
}

/// The tile configuration: palette 1, all eight tiles 16 rows of 64 bytes (C: 16 × 16 i32;
/// A: 16 rows × 64 depths; B: 16 groups × 16 columns × 4 depths).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    const fn new() -> TileConfig {
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        let mut t = 0;
        while t < 8 {
            bytes[16 + 2 * t] = STEP as u8;
            bytes[48 + t] = 16;
            t += 1;
        }
        TileConfig(bytes)
    }
}

static CONFIG: TileConfig = TileConfig::new();

/// Tiles configured on this thread for the duration of a block, released on drop (also when a
/// write-back panics).
struct Tiles;

impl Tiles {
    /// # Safety
    /// [`available`] returned `true`.
    unsafe fn configure() -> Tiles {
        // SAFETY: AMX is usable (caller's contract); the configuration is 64 valid bytes.
        unsafe { asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly)) };
        Tiles
    }

    /// Zeroes the four C tiles.
    #[inline(always)]
    fn zero(&self) {
        // SAFETY: tiles are configured (`self` exists); no memory is touched.
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            )
        };
    }

    /// Adds one 64-depth step: rows of A at `a0` and `a1` (16 each, `lda` apart) by the B
    /// groups at `b0` and `b1` (16 groups of 64 bytes each).
    ///
    /// # Safety
    /// `a0`, `a1` are valid for reads of 16 rows of 64 bytes `lda` apart; `b0`, `b1` of 1024
    /// bytes.
    #[inline(always)]
    unsafe fn step(&self, a0: *const u8, a1: *const u8, lda: usize, b0: *const i8, b1: *const i8) {
        // SAFETY: the caller's contract covers every load; tiles are configured.
        unsafe {
            asm!(
                // Tiles are not renamed: each load goes right before its first use, so the
                // next step's loads can start while this step's last products run.
                "tileloadd tmm4, [{a0} + {lda} * 1]",
                "tileloadd tmm6, [{b0} + {s} * 1]",
                "tdpbusd tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b1} + {s} * 1]",
                "tdpbusd tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a1} + {lda} * 1]",
                "tdpbusd tmm2, tmm5, tmm6",
                "tdpbusd tmm3, tmm5, tmm7",
                a0 = in(reg) a0,
                a1 = in(reg) a1,
                lda = in(reg) lda,
                b0 = in(reg) b0,
                b1 = in(reg) b1,
                s = in(reg) STEP,
                options(nostack, readonly),
            )
        };
    }

    /// Stores the four C tiles as a 32 × 32 i32 block, row-major (row stride [`NR`]).
    #[inline(always)]
    fn store(&self, c: &mut [i32; MR * NR]) {
        let p = c.as_mut_ptr();
        // SAFETY: each tile is 16 rows of 16 i32 at row stride NR * 4 bytes: tile 0 at the
        // top left, 1 top right (+16 columns), 2 bottom left (+16 rows), 3 bottom right; all
        // inside the MR x NR block.
        unsafe {
            asm!(
                "tilestored [{p} + {s} * 1], tmm0",
                "tilestored [{p1} + {s} * 1], tmm1",
                "tilestored [{p2} + {s} * 1], tmm2",
                "tilestored [{p3} + {s} * 1], tmm3",
                p = in(reg) p,
                p1 = in(reg) p.add(16),
                p2 = in(reg) p.add(16 * NR),
                p3 = in(reg) p.add(16 * NR + 16),
                s = in(reg) NR * 4,
                options(nostack),
            )
        };
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: tiles were configured; releasing returns them to their initial state.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// Asks for the cache line at `p` in L2.
#[inline(always)]
fn prefetch_l2(p: *const i8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    // SAFETY: a prefetch is a hint: it reads nothing architecturally and cannot fault.
    unsafe { _mm_prefetch::<_MM_HINT_T1>(p) };
}

/// `kp` rounded up to whole AMX steps.
fn row_len(kp: usize) -> usize {
    kp.div_ceil(STEP) * STEP
}

/// Computes rows `rows` x columns `cols` of C on the calling thread (`cols.start` is a
/// multiple of [`NR`]).
///
/// # Safety
/// [`available`] returned `true`.
pub(super) unsafe fn block(p: &Problem<'_>, rows: Range<usize>, cols: Range<usize>) {
    let lda = row_len(p.kp);
    let steps = lda / STEP;
    // Whole steps that stay inside a panel; the last, partial one (when kp is not a multiple
    // of 64) reads its groups from `tail`, zero-padded, so no load passes B's end.
    let full_steps = p.kp / STEP;
    let tail_groups = (p.kp % STEP) / 4;
    let chunk_tiles = (A_CHUNK_BYTES / (MR * lda))
        .max(1)
        .min(rows.len().div_ceil(MR));
    let chunk_rows = chunk_tiles * MR;
    with_a_buffers(chunk_rows * lda, chunk_rows, |packed, sums| {
        // SAFETY: AMX is available (caller's contract).
        let tiles = unsafe { Tiles::configure() };
        // Two C blocks: one being written back while the next is stored.
        let mut c = [[0i32; MR * NR]; 2];
        let mut tail = [[0i8; STEP * 16]; 2];
        for ic in rows.clone().step_by(chunk_rows) {
            let chunk = chunk_rows.min(rows.end - ic);
            p.a.pack_rows(ic, chunk, lda, packed, sums);
            // Rows past the chunk are zero (they add nothing; their sums are never read).
            let padded = chunk.div_ceil(MR) * MR;
            packed[chunk * lda..padded * lda].fill(0);
            for jr in cols.clone().step_by(NR) {
                let width = NR.min(cols.end - jr);
                let panel0 = &p.b.data[(jr / PANEL) * p.kp * PANEL..];
                let panel1 = &panel0[p.kp * PANEL..];
                if tail_groups > 0 {
                    for (dst, panel) in tail.iter_mut().zip([panel0, panel1]) {
                        let start = full_steps * STEP * 16;
                        dst[..tail_groups * 64]
                            .copy_from_slice(&panel[start..start + tail_groups * 64]);
                    }
                }
                let terms = strip_terms(&p.correction(&[]), p.epilogue, p.dest, (jr, width));
                // The next strip's two panels (contiguous), pulled into L2 a few lines per
                // step while this strip computes: tile loads get little from the hardware
                // prefetchers, and weights are usually in memory, not cache.
                let next_strip = if jr + NR < cols.end {
                    &p.b.data[(jr / PANEL + 2) * p.kp * PANEL..][..2 * p.kp * PANEL]
                } else {
                    &[]
                };
                let a_tiles = chunk.div_ceil(MR);
                let lines_per_step = (next_strip.len() / 64).div_ceil(a_tiles * steps);
                // Software-pipelined: tile t's products are issued before tile t - 1's
                // write-back runs, so the AMX unit works while the core writes back.
                let mut pending: Option<usize> = None;
                for t in 0..=a_tiles {
                    if t < a_tiles {
                        let a_tile = &packed[t * MR * lda..(t + 1) * MR * lda];
                        tiles.zero();
                        for s in 0..steps {
                            let first = (t * steps + s) * lines_per_step * 64;
                            for line in (first..next_strip.len()).step_by(64).take(lines_per_step) {
                                prefetch_l2(next_strip[line..].as_ptr());
                            }
                            let (b0, b1) = if s < full_steps {
                                (&panel0[s * STEP * 16..], &panel1[s * STEP * 16..])
                            } else {
                                (&tail[0][..], &tail[1][..])
                            };
                            // SAFETY: A's tile holds 32 rows of `lda` bytes, this step's 64
                            // bytes of each inside; a full step's 16 groups of 64 bytes lie in
                            // each panel (s < kp / 64), the partial one's in `tail` (1024
                            // bytes).
                            unsafe {
                                tiles.step(
                                    a_tile[s * STEP..].as_ptr(),
                                    a_tile[16 * lda + s * STEP..].as_ptr(),
                                    lda,
                                    b0.as_ptr(),
                                    b1.as_ptr(),
                                )
                            };
                        }
                    }
                    if let Some(done) = pending.take() {
                        let i0 = ic + done * MR;
                        let count = MR.min(rows.end - i0);
                        let acc = &c[done % 2];
                        // The write-back takes at most 8 rows a call.
                        for r in (0..count).step_by(8) {
                            let rows8 = 8.min(count - r);
                            let row0 = done * MR + r;
                            let fix = p.correction(&sums[row0..row0 + rows8]);
                            // SAFETY: rows i0 + r.. and columns jr.. of C lie in this block,
                            // which no other task touches; `igemm` checked C's extent.
                            unsafe {
                                write_tile(
                                    &acc[r * NR..],
                                    (i0 + r, rows8),
                                    (jr, width),
                                    &fix,
                                    p.epilogue,
                                    p.dest,
                                    p.strides,
                                    terms.as_ref(),
                                )
                            };
                        }
                    }
                    if t < a_tiles {
                        tiles.store(&mut c[t % 2]);
                        pending = Some(t);
                    }
                }
            }
        }
        drop(tiles);
    });
}
