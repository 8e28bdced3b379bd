//! The integer GEMM driver: checks the operands, picks the microkernel, splits C into blocks
//! over the intra-op pool and, per block, packs A a chunk of rows at a time and runs the
//! microkernel and the write-back per tile.
//!
//! ```text
//! for ic in rows, step MC                 chunk of A rows, packed once  -> L2
//!   for jr in cols, step NR               a pair of B panels            -> L1
//!     for each MR-row tile of the chunk
//!       microkernel (all of K) -> raw sums -> write-back (zero points, bias, conversion)
//! ```

use std::ops::Range;

use super::epilogue::{strip_terms, write_tile, Epilogue, OutMat};
use super::microkernel::{IntMicrokernel, Portable};
use super::pack::{PackA, PackedBRef};
use super::problem::{with_a_buffers, Problem};
use super::{padded_depth, IntIsa, NR, PANEL};
use crate::kernels::error::{KernelError, KernelResult};

const OP: &str = "IntegerGemm";

/// Below this many multiply-adds a product stays on the calling thread.
const PARALLEL_MIN_MULADDS: usize = 1 << 19;

/// Bytes of packed A a block works through at once (fits L2 with room for B's panels).
const A_CHUNK_BYTES: usize = 96 * 1024;

/// The largest register tile height of any microkernel (sizes the tile buffer).
const MAX_MR: usize = 8;

/// `C = epilogue((A - a_zero) (B - b_zero))`: A `m x k` from `a`, B `k x n` packed, zero points
/// in each operand's own domain (one, or one per row of A / column of B), C written through
/// `out`. `threads <= 1` runs on the calling thread. Allocates nothing once each thread has run
/// a product of this size before.
pub fn igemm(
    a: &dyn PackA,
    a_zero: &[i32],
    b: PackedBRef<'_>,
    b_zero: &[i32],
    mut out: OutMat<'_>,
    epilogue: &Epilogue<'_>,
    threads: usize,
) -> KernelResult<()> {
    let (m, k, n) = (a.rows(), a.depth(), b.n);
    if k != b.k {
        return Err(KernelError::ShapeMismatch {
            op: OP,
            a: vec![m, k],
            b: vec![b.k, n],
            reason: "inner dimensions differ".into(),
        });
    }
    let per = |what: &'static str, len: usize, lines: usize| {
        if len == 1 || len == lines {
            Ok(())
        } else {
            Err(KernelError::InvalidParam {
                op: OP,
                param: what,
                reason: format!("needs 1 or {lines} values, got {len}"),
            })
        }
    };
    per("A's zero point", a_zero.len(), m)?;
    per("B's zero point", b_zero.len(), n)?;
    if let Some(scale) = &epilogue.scale {
        per("column scale", scale.col.len(), n)?;
        if let Some((row, _)) = scale.row {
            per("row scale", row.len(), m)?;
        }
    }
    for (what, len) in [
        ("int32 bias", epilogue.bias_i32.map(<[i32]>::len)),
        ("float bias", epilogue.bias_f32.map(<[f32]>::len)),
    ] {
        if let Some(len) = len {
            if len != n {
                per(what, len, n)?;
            }
        }
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    check_output(&out, m, n)?;
    let needs_scale = !matches!(out.dest, super::Dest::I32(_));
    if needs_scale && epilogue.scale.is_none() {
        return Err(KernelError::InvalidParam {
            op: OP,
            param: "scale",
            reason: "an 8-bit or float output needs a scale".into(),
        });
    }
    let kp = padded_depth(k).ok_or(KernelError::SizeOverflow {
        op: OP,
        what: "packed depth",
    })?;
    let problem = Problem {
        a,
        a_zero,
        a_shift: a.shift(),
        b,
        b_zero,
        m,
        n,
        kp,
        epilogue,
        dest: out.dest.raw(),
        strides: (out.rs, out.cs),
    };
    let isa = match IntIsa::detect() {
        // Short or shallow products keep the VNNI tiles: AMX's 32 x 32 blocks over steps of
        // 64 depths would mostly multiply padding. So do operands whose rows are not plain
        // copies (im2col, channel-major): their row-major packing is element by element.
        IntIsa::Amx if m < AMX_MIN_ROWS || kp < AMX_MIN_DEPTH || !a.rows_are_contiguous() => {
            IntIsa::Avx512Vnni
        }
        isa => isa,
    };
    run_isa(isa, &problem, threads);
    Ok(())
}

/// Rows below which a product does not use AMX.
const AMX_MIN_ROWS: usize = 16;
/// Packed depth below which a product does not use AMX.
const AMX_MIN_DEPTH: usize = 64;

/// Runs a checked product with the kernels of `isa`, which this CPU has.
fn run_isa(isa: IntIsa, problem: &Problem<'_>, threads: usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        IntIsa::Amx => run_amx(problem, threads),
        #[cfg(target_arch = "x86_64")]
        IntIsa::Avx512Vnni => run::<super::x86::Avx512Vnni>(problem, threads),
        #[cfg(target_arch = "x86_64")]
        IntIsa::Avx2 => run::<super::x86::Avx2>(problem, threads),
        _ => run::<Portable>(problem, threads),
    }
}

/// Runs a product with the microkernels of `isa` (for tests).
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(super) fn igemm_with(
    isa: IntIsa,
    a: &dyn PackA,
    a_zero: &[i32],
    b: PackedBRef<'_>,
    b_zero: &[i32],
    mut out: OutMat<'_>,
    epilogue: &Epilogue<'_>,
    threads: usize,
) {
    let problem = Problem {
        a,
        a_zero,
        a_shift: a.shift(),
        b,
        b_zero,
        m: a.rows(),
        n: b.n,
        kp: padded_depth(a.depth()).unwrap(),
        epilogue,
        dest: out.dest.raw(),
        strides: (out.rs, out.cs),
    };
    assert!(isa.is_available());
    check_output(&out, problem.m, problem.n).unwrap();
    run_isa(isa, &problem, threads);
}

/// Checks that C's `m x n` elements lie in its storage and are distinct.
fn check_output(out: &OutMat<'_>, m: usize, n: usize) -> KernelResult<()> {
    let (rs, cs) = (out.rs, out.cs);
    let bad = |reason: &str| KernelError::InvalidLayout {
        op: OP,
        operand: "C",
        rows: m,
        cols: n,
        strides: (rs as isize, cs as isize),
        reason: reason.into(),
    };
    let last = (m - 1)
        .checked_mul(rs)
        .and_then(|r| (n - 1).checked_mul(cs).and_then(|c| r.checked_add(c)));
    if last.is_none_or(|last| last >= out.dest.len()) {
        return Err(bad("reaches outside its storage"));
    }
    let distinct = m == 1 && (n == 1 || cs > 0)
        || n == 1 && rs > 0
        || (cs > 0 && rs >= n.saturating_mul(cs))
        || (rs > 0 && cs >= m.saturating_mul(rs));
    if !distinct {
        return Err(bad("maps two elements to one place"));
    }
    Ok(())
}

fn run<K: IntMicrokernel>(p: &Problem<'_>, threads: usize) {
    let work = p.m.saturating_mul(p.n).saturating_mul(p.kp);
    let threads = if work < PARALLEL_MIN_MULADDS {
        1
    } else {
        threads.min(crate::parallel::threads())
    };
    if threads <= 1 {
        block::<K>(p, 0..p.m, 0..p.n);
        return;
    }
    let (row_chunk, col_chunk) = split(p.m, p.n, K::MR, threads);
    let (row_blocks, col_blocks) = (p.m.div_ceil(row_chunk), p.n.div_ceil(col_chunk));
    crate::parallel::for_each_thread(row_blocks * col_blocks, |index| {
        let (r, c) = (index / col_blocks, index % col_blocks);
        let rows = r * row_chunk..((r + 1) * row_chunk).min(p.m);
        let cols = c * col_chunk..((c + 1) * col_chunk).min(p.n);
        block::<K>(p, rows, cols);
    });
}

/// [`run`] on AMX tiles (32-row blocks).
#[cfg(target_arch = "x86_64")]
fn run_amx(p: &Problem<'_>, threads: usize) {
    use super::amx;
    debug_assert!(amx::available());
    let work = p.m.saturating_mul(p.n).saturating_mul(p.kp);
    let threads = if work < PARALLEL_MIN_MULADDS {
        1
    } else {
        threads.min(crate::parallel::threads())
    };
    if threads <= 1 {
        // SAFETY: AMX is only chosen once `amx::available()` said so.
        unsafe { amx::block(p, 0..p.m, 0..p.n) };
        return;
    }
    let (row_chunk, col_chunk) = split(p.m, p.n, amx::MR, threads);
    let (row_blocks, col_blocks) = (p.m.div_ceil(row_chunk), p.n.div_ceil(col_chunk));
    crate::parallel::for_each_thread(row_blocks * col_blocks, |index| {
        let (r, c) = (index / col_blocks, index % col_blocks);
        let rows = r * row_chunk..((r + 1) * row_chunk).min(p.m);
        let cols = c * col_chunk..((c + 1) * col_chunk).min(p.n);
        // SAFETY: as above.
        unsafe { amx::block(p, rows, cols) };
    });
}

/// Rows and columns per parallel block, in whole tiles: the dimension with more tiles is split
/// (columns keep A's packing per block, rows B's panels).
fn split(m: usize, n: usize, mr: usize, threads: usize) -> (usize, usize) {
    let (row_tiles, col_tiles) = (m.div_ceil(mr), n.div_ceil(NR));
    if col_tiles >= threads && col_tiles * NR >= row_tiles * mr {
        (m, col_tiles.div_ceil(threads) * NR)
    } else {
        (row_tiles.div_ceil(threads) * mr, n)
    }
}

/// Computes rows `rows` x columns `cols` of C on the calling thread (`cols.start` is a
/// multiple of [`NR`]).
fn block<K: IntMicrokernel>(p: &Problem<'_>, rows: Range<usize>, cols: Range<usize>) {
    let mr = K::MR;
    let tile_bytes = p.kp * mr;
    let chunk_tiles = (A_CHUNK_BYTES / tile_bytes.max(1))
        .max(1)
        .min(rows.len().div_ceil(mr));
    let chunk_rows = chunk_tiles * mr;
    with_a_buffers(chunk_tiles * tile_bytes, chunk_rows, |packed, sums| {
        let mut tile = [0i32; MAX_MR * NR];
        for ic in rows.clone().step_by(chunk_rows) {
            let chunk = chunk_rows.min(rows.end - ic);
            let tiles = chunk.div_ceil(mr);
            for t in 0..tiles {
                let i0 = ic + t * mr;
                let count = mr.min(rows.end - i0);
                p.a.pack_tile(
                    i0,
                    count,
                    mr,
                    &mut packed[t * tile_bytes..(t + 1) * tile_bytes],
                    &mut sums[t * mr..(t + 1) * mr],
                );
            }
            for jr in cols.clone().step_by(NR) {
                let width = NR.min(cols.end - jr);
                let panels = &p.b.data[(jr / PANEL) * p.kp * PANEL..];
                let terms = strip_terms(&p.correction(&[]), p.epilogue, p.dest, (jr, width));
                for t in 0..tiles {
                    let i0 = ic + t * mr;
                    let count = mr.min(rows.end - i0);
                    // SAFETY: the A tile holds kp * MR packed bytes; `panels` starts at an
                    // even panel below the packed count, which is even, so two panels of
                    // kp * PANEL bytes follow; `tile` holds MAX_MR >= MR rows of NR; K was
                    // chosen after run-time feature detection.
                    unsafe {
                        K::run(
                            p.kp,
                            packed[t * tile_bytes..].as_ptr(),
                            panels.as_ptr(),
                            tile.as_mut_ptr(),
                        )
                    };
                    let fix = p.correction(&sums[t * mr..t * mr + count]);
                    // SAFETY: rows i0.. and columns jr.. of this tile lie in this block,
                    // which no other task touches; `igemm` checked C's extent.
                    unsafe {
                        write_tile(
                            &tile,
                            (i0, count),
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
        }
    });
}
