//! Constant operands packed once, at plan time, into the microkernel's sliver layout.
//!
//! A product with a constant operand (a convolution's weights as A, a fully connected layer's
//! weights as B) would otherwise repack it on every run — for every block of the other operand
//! and on every thread. Packed whole, as slivers of the register tile's width each holding all
//! `k` steps (`pack_block` over the full depth), any cache block `pc..pc + kc` of a sliver is
//! a contiguous run, so the driver reads it in place for whatever blocking and thread split a
//! run chooses. The packed copy lives in Persistent memory (counted in the per-kind stats) and
//! is shared read-only by every context of the plan.

use strata_core::{Device, Element, MemoryKind, ReadGuard, Tensor};

use super::driver::{DepthSplit, Epilogue, FusedEpilogue, MatMut, Problem, ProduceB};
use super::isa::Isa;
use super::pack::{pack_block, MatRef};
use super::{check_distinct, check_operand, GemmFloat, OP};
use crate::kernels::error::{KernelError, KernelResult};

/// Which operand of `C = A B` a [`Prepacked`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackedOperand {
    /// A, `m x k`, packed in slivers of the register tile's rows.
    A,
    /// B, `k x n`, packed in slivers of the register tile's columns.
    B,
}

/// A constant GEMM operand in the microkernel's packed layout. Built for one instruction set
/// (the CPU's) and, for A, one row count: the register tile height depends on `m`.
#[derive(Debug)]
pub struct Prepacked<T> {
    side: PackedOperand,
    isa: Isa,
    /// Rows of A or columns of B.
    extent: usize,
    k: usize,
    /// The sliver width: `MR` for A, `NR` for B.
    tile: usize,
    data: Tensor,
    _t: std::marker::PhantomData<T>,
}

impl<T: GemmFloat + Element> Prepacked<T> {
    /// Packs A (`m x k`, element `(i, p)` at `a[i * rs + p * cs]`) for products with `m` rows.
    pub fn a(m: usize, k: usize, a: &[T], strides: (isize, isize)) -> KernelResult<Self> {
        check_operand("A", a.len(), m, k, strides)?;
        let isa = Isa::detect();
        let (tile, _) = T::tiles(m, isa);
        let view = MatRef {
            data: a,
            rs: strides.0,
            cs: strides.1,
        };
        // A is packed as its transpose: slivers of MR rows, per step of k.
        Self::pack(PackedOperand::A, isa, m, k, tile, view.t())
    }

    /// Packs B (`k x n`, element `(p, j)` at `b[p * rs + j * cs]`) for products of any row count.
    pub fn b(k: usize, n: usize, b: &[T], strides: (isize, isize)) -> KernelResult<Self> {
        check_operand("B", b.len(), k, n, strides)?;
        let isa = Isa::detect();
        // A narrow B gets the narrow microkernel's slivers where there is one.
        let tile = match T::narrow_tiles(isa) {
            Some((_, narrow)) if n <= narrow => narrow,
            _ => T::tiles(1, isa).1,
        };
        let view = MatRef {
            data: b,
            rs: strides.0,
            cs: strides.1,
        };
        Self::pack(PackedOperand::B, isa, n, k, tile, view)
    }

    /// Packs `src` (`k x extent`) into slivers of `tile` columns over all `k` rows.
    pub(super) fn pack(
        side: PackedOperand,
        isa: Isa,
        extent: usize,
        k: usize,
        tile: usize,
        src: MatRef<'_, T>,
    ) -> KernelResult<Self> {
        let len = extent
            .div_ceil(tile)
            .checked_mul(tile)
            .and_then(|n| n.checked_mul(k))
            .ok_or(KernelError::SizeOverflow {
                op: OP,
                what: "prepacked operand",
            })?;
        let data =
            Tensor::empty(&[len], T::DTYPE, Device::Cpu, MemoryKind::Persistent).map_err(|e| {
                KernelError::InvalidParam {
                    op: OP,
                    param: "prepacked operand",
                    reason: e.to_string(),
                }
            })?;
        {
            let mut guard = data.write::<T>().map_err(|e| KernelError::InvalidParam {
                op: OP,
                param: "prepacked operand",
                reason: e.to_string(),
            })?;
            let Some(dst) = guard.as_mut_slice() else {
                return Err(KernelError::InvalidParam {
                    op: OP,
                    param: "prepacked operand",
                    reason: "fresh buffer is not contiguous".into(),
                });
            };
            if extent > 0 && k > 0 {
                pack_width(tile, dst, src, k, extent)?;
            }
        }
        Ok(Prepacked {
            side,
            isa,
            extent,
            k,
            tile,
            data,
            _t: std::marker::PhantomData,
        })
    }

    /// `(m, n)` of a product with this operand and `n_or_m` rows or columns of the other.
    fn product_dims(&self, n_or_m: usize) -> (usize, usize) {
        match self.side {
            PackedOperand::A => (self.extent, n_or_m),
            PackedOperand::B => (n_or_m, self.extent),
        }
    }

    /// Checks that the slivers have the width of the register tile a product of `m` rows uses.
    fn check_tile(&self, m: usize) -> KernelResult<()> {
        let (tile_rows, tile_cols) = T::tiles(m, self.isa);
        let expected = match self.side {
            PackedOperand::A => tile_rows,
            PackedOperand::B if self.is_narrow() => self.tile,
            PackedOperand::B => tile_cols,
        };
        if expected != self.tile {
            return Err(KernelError::InvalidParam {
                op: OP,
                param: "prepacked operand",
                reason: format!(
                    "packed for a register tile of {}, this product uses {expected}",
                    self.tile
                ),
            });
        }
        Ok(())
    }

    /// Whether this is a B packed for the narrow microkernel ([`super::sealed::Sealed::narrow_tiles`]).
    fn is_narrow(&self) -> bool {
        self.side == PackedOperand::B
            && self.tile != T::tiles(1, self.isa).1
            && T::narrow_tiles(self.isa).is_some_and(|(_, nr)| nr == self.tile)
    }

    /// Runs a validated product with this operand packed in it, with the microkernel its
    /// slivers were packed for.
    fn dispatch(&self, problem: &Problem<'_, T>, threads: usize) {
        if self.is_narrow() {
            T::dispatch_narrow(problem, self.isa, threads);
        } else {
            T::dispatch(problem, self.isa, threads);
        }
    }

    /// The packed copy, read-locked for a product.
    fn read(&self) -> KernelResult<ReadGuard<'_, T>> {
        self.data
            .read::<T>()
            .map_err(|e| KernelError::InvalidParam {
                op: OP,
                param: "prepacked operand",
                reason: e.to_string(),
            })
    }

    pub fn side(&self) -> PackedOperand {
        self.side
    }

    /// Rows of A or columns of B.
    pub fn extent(&self) -> usize {
        self.extent
    }

    pub fn depth(&self) -> usize {
        self.k
    }

    /// Bytes of the packed copy (Persistent memory).
    pub fn bytes(&self) -> usize {
        self.data.capacity_bytes()
    }
}

/// The slice of a packed copy (one contiguous buffer by construction).
fn packed_slice<'g, T: Element>(guard: &'g ReadGuard<'_, T>) -> KernelResult<&'g [T]> {
    // Lazily built: an error message allocates, and runs must not.
    guard.as_slice().ok_or_else(|| KernelError::InvalidParam {
        op: OP,
        param: "prepacked operand",
        reason: "not contiguous".into(),
    })
}

/// `pack_block` for a sliver width known only at run time: one of the microkernels' widths.
fn pack_width<T: GemmFloat>(
    tile: usize,
    dst: &mut [T],
    src: MatRef<'_, T>,
    k: usize,
    width: usize,
) -> KernelResult<usize> {
    macro_rules! widths {
        ($($w:literal),*) => {
            match tile {
                $($w => Ok(pack_block::<T, $w>(dst, src, 0, k, 0, width)),)*
                _ => Err(KernelError::InvalidParam {
                    op: OP,
                    param: "prepacked operand",
                    reason: format!("no microkernel has a register tile of width {tile}"),
                }),
            }
        };
    }
    widths!(4, 6, 8, 11, 13, 14, 16, 32)
}

/// `C = alpha * A B + beta * C` with one operand prepacked: for a packed A, `other` is B
/// (`k x n`, `n` given), for a packed B it is A (`m x k`, `m` given as `n_or_m`). C (`m x n`)
/// must have contiguous rows (`c_strides.1 == 1`). Threads, errors and `beta` as in
/// [`super::gemm`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_prepacked<T: GemmFloat + Element>(
    packed: &Prepacked<T>,
    n_or_m: usize,
    other: &[T],
    other_strides: (isize, isize),
    c: &mut [T],
    c_strides: (isize, isize),
    alpha: T,
    beta: T,
    threads: usize,
) -> KernelResult<()> {
    gemm_prepacked_with(
        packed,
        n_or_m,
        other,
        other_strides,
        c,
        c_strides,
        (alpha, beta),
        None,
        None,
        threads,
    )
}

/// [`gemm_prepacked`] with an epilogue run on each finished piece of C's rows while it is still
/// in cache (`epilogue(i, j, row)`, `row` = C's elements `(i, j..j + row.len())`): bias,
/// residual and activation fused into the product instead of a second pass over C. `fused`,
/// when given, is the same epilogue in the form the microkernels apply to their accumulators
/// before storing them (no pass over C at all); products that do not go through them (a few
/// rows against a packed B) run `epilogue` instead, so both must be given and agree. With
/// `k == 0` no epilogue runs.
#[allow(clippy::too_many_arguments)]
pub fn gemm_prepacked_with<T: GemmFloat + Element>(
    packed: &Prepacked<T>,
    n_or_m: usize,
    other: &[T],
    other_strides: (isize, isize),
    c: &mut [T],
    c_strides: (isize, isize),
    (alpha, beta): (T, T),
    epilogue: Option<&Epilogue<'_, T>>,
    fused: Option<FusedEpilogue<'_, T>>,
    threads: usize,
) -> KernelResult<()> {
    let (m, n) = packed.product_dims(n_or_m);
    if m == 0 || n == 0 {
        return Ok(());
    }
    check_operand("C", c.len(), m, n, c_strides)?;
    if packed.k == 0 {
        check_distinct(m, n, c_strides)?;
        super::scale(m, n, c, c_strides, beta);
        return Ok(());
    }
    let c = MatMut::of(c, c_strides);
    // SAFETY: `c` was checked to hold every (i, j) of the m x n product and stays mutably
    // borrowed until the product returns, so nothing else touches it.
    unsafe {
        gemm_prepacked_raw(
            packed,
            n_or_m,
            other,
            other_strides,
            c,
            (alpha, beta),
            epilogue,
            fused,
            threads,
        )
    }
}

/// [`gemm_prepacked_with`] writing through a raw C (its slice form checks C and calls this; the
/// fused-epilogue tests call it directly).
///
/// # Safety
/// `c` is valid for reads and writes of every element `(i, j)` of the `m x n` product (at
/// `c.ptr + i * c.rs + j * c.cs`), and nothing else accesses those elements during the call.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_prepacked_raw<T: GemmFloat + Element>(
    packed: &Prepacked<T>,
    n_or_m: usize,
    other: &[T],
    other_strides: (isize, isize),
    c: MatMut<T>,
    (alpha, beta): (T, T),
    epilogue: Option<&Epilogue<'_, T>>,
    fused: Option<FusedEpilogue<'_, T>>,
    threads: usize,
) -> KernelResult<()> {
    // SAFETY: forwarded (this function's contract).
    unsafe {
        run_prepacked(
            packed,
            n_or_m,
            Other::Matrix(other, other_strides),
            c,
            (alpha, beta),
            epilogue,
            fused,
            None,
            threads,
        )
    }
}

/// `C = A B` (C overwritten, `m x n` with contiguous rows) with A prepacked and B (`k x n`)
/// made block by block by `produce` straight into the packed layout, as in
/// [`super::gemm_produced_b`]: a convolution's unfolded input, written where the microkernel
/// reads it instead of into a matrix that is then packed. With several threads each produces
/// the blocks of its own columns of C (when there are enough of them). `epilogue` and `fused` as
/// in [`gemm_prepacked_with`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_prepacked_produced_b<T: GemmFloat + Element>(
    packed: &Prepacked<T>,
    n: usize,
    produce: ProduceB<'_, T>,
    c: &mut [T],
    c_strides: (isize, isize),
    epilogue: Option<&Epilogue<'_, T>>,
    fused: Option<FusedEpilogue<'_, T>>,
    threads: usize,
) -> KernelResult<()> {
    let (m, n) = packed.product_dims(n);
    if m == 0 || n == 0 {
        return Ok(());
    }
    check_operand("C", c.len(), m, n, c_strides)?;
    let c = MatMut::of(c, c_strides);
    // SAFETY: `c` was checked to hold every (i, j) of the m x n product and stays mutably
    // borrowed until the product returns, so nothing else touches it.
    unsafe {
        run_prepacked(
            packed,
            n,
            Other::Produced(produce),
            c,
            (T::ONE, T::ZERO),
            epilogue,
            fused,
            None,
            threads,
        )
    }
}

/// [`gemm_prepacked`] (`alpha` 1, `beta` 0) with the depth cut at `at` ([`DepthSplit`]): `c`
/// gets the product over the first `at` steps of the depth, `partial` (C's shape and strides)
/// over the rest, each half on its own threads, so that each reads only the depth rows its
/// core made. The caller adds `partial` to `c`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_prepacked_split_depth<T: GemmFloat + Element>(
    packed: &Prepacked<T>,
    n_or_m: usize,
    other: &[T],
    other_strides: (isize, isize),
    (c, partial): (&mut [T], &mut [T]),
    c_strides: (isize, isize),
    at: usize,
    threads: usize,
) -> KernelResult<()> {
    let (m, n) = packed.product_dims(n_or_m);
    if m == 0 || n == 0 {
        return Ok(());
    }
    check_operand("C", c.len(), m, n, c_strides)?;
    check_operand("partial", partial.len(), m, n, c_strides)?;
    if at == 0 || at >= packed.k {
        return Err(KernelError::InvalidParam {
            op: OP,
            param: "depth split",
            reason: format!("the cut {at} is not inside the depth {}", packed.k),
        });
    }
    let split = DepthSplit {
        at,
        partial: MatMut::of(partial, c_strides),
    };
    // SAFETY: `c` and `partial` were checked to hold every (i, j) of the m x n product; they
    // are distinct mutable borrows (so disjoint) and stay borrowed until the product returns,
    // so nothing else touches them.
    unsafe {
        run_prepacked(
            packed,
            n_or_m,
            Other::Matrix(other, other_strides),
            MatMut::of(c, c_strides),
            (T::ONE, T::ZERO),
            None,
            None,
            Some(split),
            threads,
        )
    }
}

/// The operand beside a prepacked one: a matrix in memory, or (beside a packed A) a B made block
/// by block.
enum Other<'a, T> {
    Matrix(&'a [T], (isize, isize)),
    Produced(ProduceB<'a, T>),
}

/// [`gemm_prepacked_raw`] and [`gemm_prepacked_produced_b`]: checks, then the product.
///
/// # Safety
/// As [`gemm_prepacked_raw`].
#[allow(clippy::too_many_arguments)]
unsafe fn run_prepacked<T: GemmFloat + Element>(
    packed: &Prepacked<T>,
    n_or_m: usize,
    other: Other<'_, T>,
    c: MatMut<T>,
    (alpha, beta): (T, T),
    epilogue: Option<&Epilogue<'_, T>>,
    fused: Option<FusedEpilogue<'_, T>>,
    depth_split: Option<DepthSplit<T>>,
    threads: usize,
) -> KernelResult<()> {
    let k = packed.k;
    let (m, n) = packed.product_dims(n_or_m);
    let c_strides = (c.rs, c.cs);
    if m == 0 || n == 0 {
        return Ok(());
    }
    check_distinct(m, n, c_strides)?;
    check_rows_contiguous(m, n, c_strides)?;
    if k == 0 {
        return Err(KernelError::InvalidParam {
            op: OP,
            param: "prepacked operand",
            reason: "has depth 0 (an empty product only scales C)".into(),
        });
    }
    packed.check_tile(m)?;
    let guard = packed.read()?;
    let data = packed_slice(&guard)?;
    let empty = no_operand();
    let (a, b, packed_a, packed_b, produce_b) = match (packed.side, other) {
        (PackedOperand::A, Other::Produced(produce)) => {
            (empty, empty, Some(data), None, Some(produce))
        }
        (side, Other::Matrix(other, strides)) => {
            let view = MatRef {
                data: other,
                rs: strides.0,
                cs: strides.1,
            };
            if side == PackedOperand::A {
                check_operand("B", other.len(), k, n, strides)?;
                (empty, view, Some(data), None, None)
            } else {
                check_operand("A", other.len(), m, k, strides)?;
                (view, empty, None, Some(data), None)
            }
        }
        (PackedOperand::B, Other::Produced(_)) => {
            return Err(KernelError::InvalidParam {
                op: OP,
                param: "prepacked operand",
                reason: "a produced B needs the weights packed as A".into(),
            })
        }
    };
    if let Some(fused) = &fused {
        if epilogue.is_none() {
            return Err(KernelError::InvalidParam {
                op: OP,
                param: "epilogue",
                reason: "a fused epilogue needs its row form too".into(),
            });
        }
        check_fused(fused, m, n)?;
    }
    let problem = Problem {
        m,
        n,
        k,
        a,
        b,
        c,
        alpha,
        beta,
        packed_a,
        packed_b,
        produce_b,
        epilogue,
        fused,
        depth_split,
    };
    // A few rows against packed weights stream the slivers (not with a depth split, which
    // only the driver makes); anything else takes the driver.
    if packed.side == PackedOperand::B && depth_split.is_none() {
        // SAFETY: the operands were validated above, `data` holds the packed slivers, and `c`
        // is valid and ours alone for the call (this function's contract).
        if unsafe { super::skinny_packed::try_run(&problem, packed.tile, threads) } {
            return Ok(());
        }
    }
    packed.dispatch(&problem, threads);
    Ok(())
}

/// The height of the register tile a product of `m` rows against the prepacked B `b` runs with:
/// the sliver height of an A packed for [`gemm_packed_a`] (with AVX-512 it depends on `m`).
pub(crate) fn packed_a_rows<T: GemmFloat + Element>(b: &Prepacked<T>, m: usize) -> usize {
    match T::narrow_tiles(b.isa) {
        Some((mr, _)) if b.is_narrow() => mr,
        _ => T::tiles(m, b.isa).0,
    }
}

/// `C = A B` with B prepacked and A already packed by the caller, for producers that can write
/// A's rows straight into the sliver layout (Winograd's transformed input tiles) instead of
/// having them packed again. `a` (`m x k`, `k` = B's depth) holds `m.div_ceil(mr)` slivers of
/// `mr = packed_a_rows(b, m)` rows: element `(i, p)` of sliver `s` at `s * k * mr + p * mr +
/// i`, zero past row `m` (the layout [`Prepacked::a`] holds). C (`m x n`) must have contiguous
/// rows. Threads as in [`super::gemm`].
pub(crate) fn gemm_packed_a<T: GemmFloat + Element>(
    a: &[T],
    m: usize,
    b: &Prepacked<T>,
    c: &mut [T],
    c_strides: (isize, isize),
    threads: usize,
) -> KernelResult<()> {
    if b.side != PackedOperand::B {
        return Err(KernelError::InvalidParam {
            op: OP,
            param: "prepacked operand",
            reason: "a product with a packed A needs B prepacked".into(),
        });
    }
    let (n, k) = (b.extent, b.k);
    if m == 0 || n == 0 {
        return Ok(());
    }
    check_operand("C", c.len(), m, n, c_strides)?;
    check_distinct(m, n, c_strides)?;
    check_rows_contiguous(m, n, c_strides)?;
    if k == 0 {
        super::scale(m, n, c, c_strides, T::ZERO);
        return Ok(());
    }
    let mr = packed_a_rows(b, m);
    let expected = m
        .div_ceil(mr)
        .checked_mul(mr * k)
        .ok_or(KernelError::SizeOverflow {
            op: OP,
            what: "packed A",
        })?;
    if a.len() < expected {
        return Err(KernelError::BufferLength {
            op: OP,
            buffer: "packed A",
            expected,
            actual: a.len(),
        });
    }
    b.check_tile(m)?;
    let guard = b.read()?;
    let empty = no_operand();
    let problem = Problem {
        m,
        n,
        k,
        a: empty,
        b: empty,
        c: MatMut::of(c, c_strides),
        alpha: T::ONE,
        beta: T::ZERO,
        packed_a: Some(&a[..expected]),
        packed_b: Some(packed_slice(&guard)?),
        produce_b: None,
        epilogue: None,
        fused: None,
        depth_split: None,
    };
    // `dispatch` relies on a validated product: C was checked to hold every (i, j) at distinct
    // offsets and stays mutably borrowed until it returns; A holds the slivers of the tile
    // height the dispatch picks for m rows (`packed_a_rows`, the same `tiles`); B was checked
    // to have the dispatch's sliver width.
    b.dispatch(&problem, threads);
    Ok(())
}

/// The operand a packed one stands in for in a [`Problem`].
fn no_operand<'a, T>() -> MatRef<'a, T> {
    MatRef {
        data: &[],
        rs: 0,
        cs: 0,
    }
}

/// Checks that C (`m x n`) has contiguous rows, which products with a packed operand store.
fn check_rows_contiguous(m: usize, n: usize, c_strides: (isize, isize)) -> KernelResult<()> {
    if c_strides.1 != 1 && n > 1 {
        return Err(KernelError::InvalidLayout {
            op: OP,
            operand: "C",
            rows: m,
            cols: n,
            strides: c_strides,
            reason: "a product with a prepacked operand writes rows of C contiguously".into(),
        });
    }
    Ok(())
}

/// Checks that a fused epilogue's residual and biases cover an `m x n` product.
fn check_fused<T>(fused: &FusedEpilogue<'_, T>, m: usize, n: usize) -> KernelResult<()> {
    if let Some((data, rs)) = fused.residual {
        check_operand("residual", data.len(), m, n, (rs, 1))?;
    }
    for (buffer, bias, expected) in [
        ("row bias", fused.row_bias, m),
        ("column bias", fused.col_bias, n),
    ] {
        if let Some(bias) = bias.filter(|b| b.len() < expected) {
            return Err(KernelError::BufferLength {
                op: OP,
                buffer,
                expected,
                actual: bias.len(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::gemm;
    use crate::support::rng::Rng;
    use crate::support::test_util::assert_close_within;

    /// Products with a prepacked A or B against the same product packing per call: random
    /// sizes around the register tiles and cache blocks, transposed sources, alpha and beta,
    /// one and two threads.
    #[test]
    fn prepacked_products_match_products_packed_per_call() {
        let mut rng = Rng::new(0x9e9a);
        for case in 0..120 {
            let m = [1, 2, 4, 5, 14, 29, 64, 131][rng.below(8)];
            // Up to 16 columns, B is packed for the narrow microkernel where there is one.
            let n = [1, 3, 10, 16, 17, 33, 255, 600][rng.below(8)];
            let k = [1, 7, 129, 300][rng.below(4)];
            let a = rng.vec(m * k);
            let b = rng.vec(k * n);
            // Sources row-major or transposed.
            let sa = if rng.below(2) == 0 {
                (k as isize, 1)
            } else {
                (1, m as isize)
            };
            let sb = if rng.below(2) == 0 {
                (n as isize, 1)
            } else {
                (1, k as isize)
            };
            let (alpha, beta) = ([1.0, -0.5][rng.below(2)], [0.0, 1.0][rng.below(2)]);
            let c0 = rng.vec(m * n);
            let sc = (n as isize, 1);
            let threads = 1 + rng.below(2);
            let mut expected = c0.clone();
            gemm(m, n, k, &a, sa, &b, sb, &mut expected, sc, alpha, beta, 1).unwrap();

            let packed_a = Prepacked::a(m, k, &a, sa).unwrap();
            assert_eq!((packed_a.side(), packed_a.extent()), (PackedOperand::A, m));
            let mut c = c0.clone();
            gemm_prepacked(&packed_a, n, &b, sb, &mut c, sc, alpha, beta, threads).unwrap();
            assert_close_within(
                &c,
                &expected,
                1e-4,
                &format!("case {case} A m{m} n{n} k{k}"),
            );

            let packed_b = Prepacked::b(k, n, &b, sb).unwrap();
            assert!(packed_b.bytes() >= k * n * 4);
            assert_eq!(
                packed_b.is_narrow(),
                n <= 16 && Isa::detect() == Isa::Avx512
            );
            let mut c = c0.clone();
            gemm_prepacked(&packed_b, m, &a, sa, &mut c, sc, alpha, beta, threads).unwrap();
            assert_close_within(
                &c,
                &expected,
                1e-4,
                &format!("case {case} B m{m} n{n} k{k}"),
            );
        }
    }

    /// A prepacked B whose last sliver is at most half used (read by the half-wide kernel, one
    /// sliver-width step per row) and a prepacked A above such columns, against a naive product.
    #[test]
    fn prepacked_narrow_last_slivers_match_naive_reference() {
        let mut rng = Rng::new(0x7a11);
        for (m, n, k) in [(49, 40, 96), (196, 48, 33), (14, 196, 64), (13, 169, 300)] {
            let a = rng.vec(m * k);
            let b = rng.vec(k * n);
            let mut expected = vec![0.0f32; m * n];
            for i in 0..m {
                for j in 0..n {
                    expected[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                }
            }
            for threads in [1, 2] {
                let packed_b = Prepacked::b(k, n, &b, (n as isize, 1)).unwrap();
                let mut c = vec![f32::NAN; m * n];
                let sc = (n as isize, 1);
                gemm_prepacked(
                    &packed_b,
                    m,
                    &a,
                    (k as isize, 1),
                    &mut c,
                    sc,
                    1.0,
                    0.0,
                    threads,
                )
                .unwrap();
                assert_close_within(&c, &expected, 1e-4, &format!("B m{m} n{n} k{k}"));
                let packed_a = Prepacked::a(m, k, &a, (k as isize, 1)).unwrap();
                let mut c = vec![f32::NAN; m * n];
                gemm_prepacked(
                    &packed_a,
                    n,
                    &b,
                    (n as isize, 1),
                    &mut c,
                    sc,
                    1.0,
                    0.0,
                    threads,
                )
                .unwrap();
                assert_close_within(&c, &expected, 1e-4, &format!("A m{m} n{n} k{k}"));
            }
        }
    }

    /// A product with its depth cut in two: C holds the first part's product, `partial` the
    /// second's, for A or B prepacked, cuts near either end and in the middle (across depth
    /// blocks), one to three threads; a cut outside the depth is an error.
    #[test]
    fn depth_split_products_add_up_to_the_product() {
        let mut rng = Rng::new(0xde);
        for (m, n, k) in [(64, 196, 384), (49, 96, 960), (13, 40, 33)] {
            let a = rng.vec(m * k);
            let b = rng.vec(k * n);
            let product = |depth: std::ops::Range<usize>| -> Vec<f32> {
                let mut c = vec![0.0f32; m * n];
                for i in 0..m {
                    for j in 0..n {
                        c[i * n + j] = depth.clone().map(|p| a[i * k + p] * b[p * n + j]).sum();
                    }
                }
                c
            };
            let packed_a = Prepacked::a(m, k, &a, (k as isize, 1)).unwrap();
            let packed_b = Prepacked::b(k, n, &b, (n as isize, 1)).unwrap();
            for at in [1, k / 2, k - 1] {
                let (first, second) = (product(0..at), product(at..k));
                for threads in [1, 2, 3] {
                    let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                    for (packed, other, strides, n_or_m) in [
                        (&packed_a, &b, (n as isize, 1), n),
                        (&packed_b, &a, (k as isize, 1), m),
                    ] {
                        let mut c = vec![f32::NAN; m * n];
                        let mut partial = vec![f32::NAN; m * n];
                        crate::parallel::install(&pool, || {
                            let outputs = (&mut c[..], &mut partial[..]);
                            let sc = (n as isize, 1);
                            gemm_prepacked_split_depth(
                                packed, n_or_m, other, strides, outputs, sc, at, threads,
                            )
                        })
                        .unwrap();
                        let what = format!("m{m} n{n} k{k} at {at} threads {threads}");
                        assert_close_within(&c, &first, 1e-4, &what);
                        assert_close_within(&partial, &second, 1e-4, &what);
                    }
                }
            }
            let (mut c, mut partial) = (vec![0.0f32; m * n], vec![0.0f32; m * n]);
            for at in [0, k] {
                let outputs = (&mut c[..], &mut partial[..]);
                let sc = (n as isize, 1);
                let result = gemm_prepacked_split_depth(
                    &packed_a,
                    n,
                    &b,
                    (n as isize, 1),
                    outputs,
                    sc,
                    at,
                    2,
                );
                assert!(result.is_err(), "cut at {at} of {k}");
            }
        }
    }

    #[test]
    fn mismatched_operands_are_errors() {
        let a = vec![1.0f32; 64 * 8];
        let packed = Prepacked::a(64, 8, &a, (8, 1)).unwrap();
        let b = vec![1.0f32; 8 * 10];
        let mut c = vec![0.0f32; 64 * 10];
        // B shorter than k x n.
        assert!(
            gemm_prepacked(&packed, 10, &b[..70], (10, 1), &mut c, (10, 1), 1.0, 0.0, 1).is_err()
        );
        // C with column-major storage.
        assert!(gemm_prepacked(&packed, 10, &b, (10, 1), &mut c, (1, 64), 1.0, 0.0, 1).is_err());
        // A source shorter than m x k.
        assert!(Prepacked::a(64, 8, &a[..100], (8, 1)).is_err());
        // The right call works and gives the plain product.
        gemm_prepacked(&packed, 10, &b, (10, 1), &mut c, (10, 1), 1.0, 0.0, 1).unwrap();
        assert!(c.iter().all(|&v| v == 8.0));
    }

    /// A product with A packed by the caller (here by `Prepacked::a`, whose sliver height is
    /// the one `packed_a_rows` names) against a prepacked B equals the plain product: row
    /// counts around the register tiles (partial last slivers), C with padded rows, one and two
    /// threads.
    #[test]
    fn caller_packed_a_matches_the_plain_product() {
        let mut rng = Rng::new(0xa9ac);
        for (m, n, k) in [
            (1, 5, 3),
            (7, 16, 64),
            (40, 10, 300),
            (13, 33, 17),
            (29, 64, 64),
            (126, 64, 64),
            (301, 70, 129),
        ] {
            let (a, b) = (rng.vec(m * k), rng.vec(k * n));
            let ldc = n + 3;
            let mut expected = vec![0.0f32; m * ldc];
            gemm(
                m,
                n,
                k,
                &a,
                (k as isize, 1),
                &b,
                (n as isize, 1),
                &mut expected,
                (ldc as isize, 1),
                1.0,
                0.0,
                1,
            )
            .unwrap();
            let packed_b = Prepacked::b(k, n, &b, (n as isize, 1)).unwrap();
            // A in slivers of the height `packed_a_rows` names (the narrow microkernel's for
            // B of at most 16 columns on AVX-512), as a caller such as Winograd packs it.
            let mr = packed_a_rows(&packed_b, m);
            let mut slivers = vec![f32::NAN; m.div_ceil(mr) * mr * k];
            let view = MatRef {
                data: &a,
                rs: k as isize,
                cs: 1,
            };
            pack_width(mr, &mut slivers, view.t(), k, m).unwrap();
            let slivers = &slivers[..];
            for threads in [1, 2] {
                let pool = crate::parallel::ThreadPool::new(threads).unwrap();
                let mut c = vec![f32::NAN; m * ldc];
                crate::parallel::install(&pool, || {
                    gemm_packed_a(slivers, m, &packed_b, &mut c, (ldc as isize, 1), threads)
                })
                .unwrap();
                let rows = |v: &[f32]| -> Vec<f32> {
                    v.chunks(ldc).flat_map(|r| r[..n].to_vec()).collect()
                };
                assert_close_within(
                    &rows(&c),
                    &rows(&expected),
                    1e-4,
                    &format!("m{m} n{n} k{k} {threads} threads"),
                );
            }
        }
    }

    #[test]
    fn caller_packed_a_mismatches_are_errors() {
        let (m, n, k): (usize, usize, usize) = (20, 10, 8);
        let b = vec![1.0f32; k * n];
        let packed_b = Prepacked::b(k, n, &b, (n as isize, 1)).unwrap();
        let a =
            vec![1.0f32; m.div_ceil(packed_a_rows(&packed_b, m)) * packed_a_rows(&packed_b, m) * k];
        let mut c = vec![0.0f32; m * n];
        // A shorter than its slivers.
        assert!(matches!(
            gemm_packed_a(&a[..a.len() - 1], m, &packed_b, &mut c, (n as isize, 1), 1),
            Err(KernelError::BufferLength { .. })
        ));
        // A prepacked A where B belongs.
        let packed_a = Prepacked::a(m, k, &a[..m * k], (k as isize, 1)).unwrap();
        assert!(gemm_packed_a(&a, m, &packed_a, &mut c, (n as isize, 1), 1).is_err());
        // C too short, and C with column-major storage.
        assert!(gemm_packed_a(&a, m, &packed_b, &mut c[..m * n - 1], (n as isize, 1), 1).is_err());
        assert!(gemm_packed_a(&a, m, &packed_b, &mut c, (1, m as isize), 1).is_err());
        // The right call gives the plain product.
        gemm_packed_a(&a, m, &packed_b, &mut c, (n as isize, 1), 1).unwrap();
        assert!(c.iter().all(|&v| v == 8.0));
    }
}
