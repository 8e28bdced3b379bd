//! The output of a convolution computed as a transposed product, `Y^T = X^T W^T`: the GEMM
//! writes `Y^T` (positions x channels) contiguously into scratch, with its fast vector stores
//! on every depth block, and this pass moves it into the channel rows of `Y` once, running the
//! epilogue (bias, residual, activation) on each row while it is in cache.

use crate::kernels::float::Float;
use crate::kernels::interleave::{transpose_lanes, transpose_lanes_sum, LANES};
use crate::parallel::for_each_chunk_mut_pinned;

/// Channel rows written per band: a band reads 16 consecutive channels of each position, one
/// 64-byte line of `Y^T`, and finishes its rows while they are in L1.
const BAND: usize = LANES;

/// Writes `yt` (`width` positions x `channels`, row-major), plus `partial` (the same shape: the
/// other half of a product whose depth was split) when given, into `y`, where position `px` of
/// channel `ch` goes to `y[ch * y_rs + px]` (`y_rs >= width`), then calls `finish(ch, row)`
/// on each channel's `width` new elements. Bands of channels are spread over up to `threads`
/// threads of the current pool.
pub(super) fn write_transposed<T: Float + bytemuck::Pod + Send + Sync>(
    (yt, partial): (&[T], Option<&[T]>),
    width: usize,
    channels: usize,
    y: &mut [T],
    y_rs: usize,
    threads: usize,
    finish: impl Fn(usize, &mut [T]) + Sync,
) {
    if width == 0 || channels == 0 {
        return;
    }
    debug_assert!(y_rs >= width && yt.len() >= width * channels);
    debug_assert!(partial.is_none_or(|p| p.len() >= width * channels));
    // Rows past the last channel are left alone; the last row needs only `width` elements.
    let len = ((channels - 1) * y_rs + width).min(y.len());
    let band = |index: usize, rows: &mut [T]| {
        let first = index * BAND;
        let count = rows.len().div_ceil(y_rs);
        // 16 positions at a time, each reading its band's channels from one line of `yt`, then
        // transposed in registers (channel by channel, `yt`'s rows a power of two apart would
        // fight over the same L1 set: 1024 <- 256 1x1 at 14x14 ran 25 % slower than
        // untransposed; element by element, SqueezeNet's 1000 <- 512 classifier spent 9 % of its
        // time here).
        match partial {
            Some(p) => {
                let sources = (&yt[first..], &p[first..]);
                transpose_lanes_sum(sources, channels, count, width, rows, y_rs)
            }
            None => transpose_lanes(&yt[first..], channels, count, width, rows, y_rs),
        }
        for (r, row) in rows.chunks_mut(y_rs).enumerate() {
            finish(first + r, &mut row[..width]);
        }
    };
    let y = &mut y[..len];
    // Contiguous halves, the first on the calling thread: the GEMM split `Y^T` by columns the
    // same way, so each thread moves the channels it computed, from its own cache (handed out
    // band by band, half of `Y^T` crossed cores: 1280 <- 320 at 7x7, 2 threads, 0.83x).
    if threads > 1 {
        for_each_chunk_mut_pinned(y, BAND * y_rs, band);
    } else {
        for (index, rows) in y.chunks_mut(BAND * y_rs).enumerate() {
            band(index, rows);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element lands at its channel row and position, columns past `width` and rows past
    /// the last channel stay untouched, and `finish` sees each channel once with its row.
    #[test]
    fn moves_positions_into_channel_rows() {
        for (width, channels, y_rs, threads) in [
            (5, 3, 7, 1),
            (49, 64, 49, 2),
            (17, 33, 20, 1),
            (1, 1, 1, 2),
            (196, 48, 200, 2),
        ] {
            let yt: Vec<f32> = (0..width * channels).map(|i| i as f32).collect();
            let mut y = vec![-1.0f32; channels * y_rs];
            let seen = std::sync::Mutex::new(vec![0usize; channels]);
            write_transposed(
                (&yt, None),
                width,
                channels,
                &mut y,
                y_rs,
                threads,
                |ch, row| {
                    assert_eq!(row.len(), width);
                    seen.lock().unwrap()[ch] += 1;
                    row.iter_mut().for_each(|v| *v += 0.5);
                },
            );
            assert!(seen.into_inner().unwrap().iter().all(|&n| n == 1));
            for ch in 0..channels {
                for px in 0..y_rs {
                    let expected = if px < width {
                        (px * channels + ch) as f32 + 0.5
                    } else {
                        -1.0
                    };
                    assert_eq!(y[ch * y_rs + px], expected, "{width} {channels} {ch} {px}");
                }
            }
        }
    }
}
