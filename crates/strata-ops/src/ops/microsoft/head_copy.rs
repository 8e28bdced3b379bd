//! Gathering attention heads into the head-major `(B, heads, len, size)` buffers the shared
//! head core reads: rows of a strided source ([`HeadView`]) with an optional per-head bias, and
//! a past cache `(B, heads, past, size)` placed in front (MultiHeadAttention and
//! GroupQueryAttention build K and V, and their `present` outputs, this way).

use super::attention_heads::HeadView;

/// Copies rows `0..len` of every `(b, h)` of `src` to rows `row0..row0 + len` of `dst`
/// (`(B, heads, dst_len, size)`), adding `bias[h * size..][..size]` when `bias` is not empty.
#[allow(clippy::too_many_arguments)]
pub(crate) fn copy_heads(
    src: &HeadView<'_>,
    (batch, heads, len, size): (usize, usize, usize, usize),
    bias: &[f32],
    dst: &mut [f32],
    dst_len: usize,
    row0: usize,
) {
    for b in 0..batch {
        for h in 0..heads {
            let base = src.offset + b * src.batch + h * src.head;
            let out = &mut dst[((b * heads + h) * dst_len + row0) * size..][..len * size];
            for (s, row) in out.chunks_exact_mut(size).enumerate() {
                let from = &src.data[base + s * src.seq..][..size];
                if bias.is_empty() {
                    row.copy_from_slice(from);
                } else {
                    let bh = &bias[h * size..][..size];
                    for ((o, &x), &c) in row.iter_mut().zip(from).zip(bh) {
                        *o = x + c;
                    }
                }
            }
        }
    }
}

/// Copies a past cache `(B, heads, past_len, size)` (the first `rows` rows of each head) to rows
/// `0..rows` of `dst` (`(B, heads, dst_len, size)`).
pub(crate) fn copy_past(
    past: &[f32],
    (batch, heads, past_len, size): (usize, usize, usize, usize),
    rows: usize,
    dst: &mut [f32],
    dst_len: usize,
) {
    for bh in 0..batch * heads {
        dst[bh * dst_len * size..][..rows * size]
            .copy_from_slice(&past[bh * past_len * size..][..rows * size]);
    }
}
