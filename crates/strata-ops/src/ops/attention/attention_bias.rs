//! The additive bias of ONNX Attention (opsets 23–25): for each score `(batch, head, query i,
//! key j)` the sum of the `attn_mask` value (boolean masks give 0 / -inf; a mask shorter than
//! the key sequence is padded with -inf), the causal mask, the sliding window (opset 25) and the
//! key padding given by `nonpad_kv_seqlen` (opset 24+). Causal and window masks are
//! bottom-right aligned: query `i` sits at absolute position `i + offset`, where `offset` is the
//! past length (internal cache), `nonpad_kv_seqlen[b] - q_len` (external cache) or 0.

use num_traits::{Float, Zero};

use crate::support::numeric::Real;
use crate::{OpError, OpResult};

const OP: &str = "Attention";

/// The mask's element values.
#[derive(Clone, Copy)]
pub(crate) enum MaskValues<'a, T> {
    /// Boolean (`0` or `1` per byte): true attends, false masks.
    Bool(&'a [u8]),
    /// Additive, of the input dtype.
    Additive(&'a [T]),
}

/// An `attn_mask` broadcast over `(batch, q_heads, q_len, mask_len)`.
#[derive(Clone, Copy)]
pub(crate) struct Mask<'a, T> {
    values: MaskValues<'a, T>,
    /// Element strides over (batch, head, query, key); 0 on broadcast axes.
    strides: [usize; 4],
    /// The mask's last dim; keys at or past it are masked out.
    len: usize,
}

impl<'a, T> Mask<'a, T> {
    /// Validates `dims` (rank 1 to 4, right-aligned against `(batch, q_heads, q_len,
    /// total_kv)`, the last dim at most `total_kv`) and computes the broadcast strides.
    pub(crate) fn new(
        values: MaskValues<'a, T>,
        dims: &[usize],
        target: [usize; 4],
    ) -> OpResult<Self> {
        if dims.is_empty() || dims.len() > 4 {
            return Err(OpError::shape(
                OP,
                format!("attn_mask must have rank 1 to 4, got dims {dims:?}"),
            ));
        }
        let offset = 4 - dims.len();
        let mut full = [1usize; 4];
        full[offset..].copy_from_slice(dims);
        let len = full[3];
        if len > target[3] {
            return Err(OpError::shape(
                OP,
                format!(
                    "attn_mask {dims:?} covers {len} keys, more than the {} keys of past and current K",
                    target[3]
                ),
            ));
        }
        for axis in 0..3 {
            if full[axis] != 1 && full[axis] != target[axis] {
                return Err(OpError::shape(
                    OP,
                    format!(
                        "attn_mask {dims:?} does not broadcast to (batch, heads, q_len) = {:?}",
                        &target[..3]
                    ),
                ));
            }
        }
        let numel = full.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        let stored = match values {
            MaskValues::Bool(v) => v.len(),
            MaskValues::Additive(v) => v.len(),
        };
        if numel != Some(stored) {
            return Err(OpError::kernel(
                OP,
                format!("attn_mask holds {stored} elements, its dims {dims:?} say otherwise"),
            ));
        }
        let mut strides = [0usize; 4];
        let mut step = 1;
        for axis in (0..4).rev() {
            strides[axis] = if full[axis] == 1 { 0 } else { step };
            step *= full[axis];
        }
        Ok(Mask {
            values,
            strides,
            len,
        })
    }
}

/// Everything that decides the bias of one score.
pub(crate) struct Bias<'a, T> {
    pub mask: Option<Mask<'a, T>>,
    pub is_causal: bool,
    /// `left_window_size` / `right_window_size`; negative leaves that side unbounded.
    pub left_window: i64,
    pub right_window: i64,
    /// Past sequence length (internal cache), when there is one.
    pub past_len: Option<usize>,
    /// `nonpad_kv_seqlen`, one per batch, when given.
    pub nonpad: Option<&'a [i64]>,
    pub q_len: usize,
}

impl<T: Real> Bias<'_, T> {
    /// The absolute position of query 0 of batch `b`.
    fn offset(&self, b: usize) -> i64 {
        match (self.past_len, self.nonpad) {
            (Some(past), _) => past as i64,
            (None, Some(nonpad)) => nonpad[b] - self.q_len as i64,
            (None, None) => 0,
        }
    }

    fn has_window(&self) -> bool {
        self.left_window >= 0 || self.right_window >= 0
    }

    /// Adds the bias of row `(b, h, i)` to `scores` (one per key), passing each sum through
    /// `round`, and returns whether the bias masks out every key (the row attends nothing).
    pub(crate) fn add_to_row(
        &self,
        (b, h, i): (usize, usize, usize),
        scores: &mut [T::Wide],
        round: impl Fn(T::Wide) -> T::Wide,
    ) -> bool {
        let neg_inf = T::Wide::neg_infinity();
        let position = i as i64 + self.offset(b);
        let valid_keys = self.nonpad.map(|n| n[b]);
        let mut all_masked = true;
        for (j, score) in scores.iter_mut().enumerate() {
            let key = j as i64;
            let mut bias = match &self.mask {
                None => T::Wide::zero(),
                Some(m) if j >= m.len => neg_inf,
                Some(m) => {
                    let at =
                        b * m.strides[0] + h * m.strides[1] + i * m.strides[2] + j * m.strides[3];
                    match m.values {
                        MaskValues::Bool(v) if v[at] != 0 => T::Wide::zero(),
                        MaskValues::Bool(_) => neg_inf,
                        MaskValues::Additive(v) => v[at].widen(),
                    }
                }
            };
            let causal_blocked = self.is_causal && key > position;
            let diff = position - key;
            let window_blocked = self.has_window()
                && ((self.left_window >= 0 && diff > self.left_window)
                    || (self.right_window >= 0 && -diff > self.right_window));
            let padding_blocked = valid_keys.is_some_and(|n| key >= n);
            if causal_blocked || window_blocked || padding_blocked {
                bias = bias + neg_inf;
            }
            all_masked &= bias == neg_inf;
            *score = round(*score + bias);
        }
        all_masked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bias<'a>(mask: Option<Mask<'a, f32>>, causal: bool, past: Option<usize>) -> Bias<'a, f32> {
        Bias {
            mask,
            is_causal: causal,
            left_window: -1,
            right_window: -1,
            past_len: past,
            nonpad: None,
            q_len: 2,
        }
    }

    #[test]
    fn causal_is_bottom_right_with_a_past() {
        let mut row = [1.0f32; 3];
        let b = bias(None, true, None);
        assert!(!b.add_to_row((0, 0, 0), &mut row, |x| x));
        assert_eq!(row, [1.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        let mut row = [1.0f32; 3];
        let b = bias(None, true, Some(1));
        b.add_to_row((0, 0, 0), &mut row, |x| x);
        assert_eq!(row, [1.0, 1.0, f32::NEG_INFINITY]);
    }

    #[test]
    fn short_bool_mask_pads_with_neg_inf_and_reports_fully_masked_rows() {
        // Mask (q_len 2, 2 keys) against 3 keys: key 2 is padding.
        let values = [0u8, 0, 1, 0];
        let m = Mask::new(MaskValues::Bool(&values), &[2, 2], [1, 1, 2, 3]).unwrap();
        let b = bias(Some(m), false, None);
        let mut row = [0.0f32; 3];
        assert!(b.add_to_row((0, 0, 0), &mut row, |x| x));
        let mut row = [0.0f32; 3];
        assert!(!b.add_to_row((0, 0, 1), &mut row, |x| x));
        assert_eq!(row, [0.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
    }

    #[test]
    fn additive_mask_broadcasts_over_heads_and_window_limits_left() {
        let values = [1.5f32, -2.0, 0.5];
        let m = Mask::new(MaskValues::Additive(&values), &[3], [2, 4, 2, 3]).unwrap();
        let mut b = bias(Some(m), false, None);
        b.left_window = 0;
        let mut row = [0.0f32; 3];
        b.add_to_row((1, 3, 1), &mut row, |x| x);
        assert_eq!(row, [f32::NEG_INFINITY, -2.0, 0.5]);
    }

    #[test]
    fn bad_mask_dims_are_errors() {
        let values = [0.0f32; 8];
        assert!(Mask::new(MaskValues::Additive(&values), &[2, 4], [1, 1, 2, 3]).is_err());
        assert!(Mask::new(MaskValues::Additive(&values), &[4, 2], [1, 1, 2, 3]).is_err());
        assert!(Mask::new(
            MaskValues::Additive(&values),
            &[1, 1, 1, 2, 4],
            [1, 1, 2, 4]
        )
        .is_err());
        assert!(Mask::new(MaskValues::Additive(&values), &[2, 3], [1, 1, 2, 3]).is_err());
    }
}
