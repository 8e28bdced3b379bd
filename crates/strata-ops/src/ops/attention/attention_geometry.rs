//! The sizes of one ONNX Attention call, validated from the dims of Q, K, V and the optional
//! past key/value cache: 3-D inputs `(batch, seq, heads * head_size)` split by the
//! `q_num_heads` / `kv_num_heads` attributes, 4-D inputs `(batch, heads, seq, head_size)`.

use crate::{OpError, OpResult};

const OP: &str = "Attention";

/// The validated sizes; every buffer length derived from them fits in `usize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub batch: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub q_len: usize,
    /// Keys in the current K / V.
    pub new_kv_len: usize,
    /// Keys in the past cache (0 without one).
    pub past_len: usize,
    /// `past_len + new_kv_len`.
    pub total_kv: usize,
    pub head_size: usize,
    pub v_head_size: usize,
    /// Q/K/V (and Y) are 3-D `(batch, seq, hidden)`.
    pub packed: bool,
}

/// Dims of the inputs that decide the geometry.
pub(crate) struct InputDims<'a> {
    pub q: &'a [usize],
    pub k: &'a [usize],
    pub v: &'a [usize],
    pub past_key: Option<&'a [usize]>,
    pub past_value: Option<&'a [usize]>,
}

fn shape_err(message: String) -> OpError {
    OpError::shape(OP, message)
}

/// `hidden / heads`, which must divide exactly.
fn split_heads(what: &str, hidden: usize, heads: usize) -> OpResult<usize> {
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(shape_err(format!(
            "{what} hidden size {hidden} is not a multiple of {heads} heads"
        )));
    }
    Ok(hidden / heads)
}

impl Geometry {
    /// Validates the dims; `heads` are the `(q_num_heads, kv_num_heads)` attributes (required
    /// for 3-D inputs, ignored for 4-D ones).
    pub(crate) fn new(dims: &InputDims<'_>, heads: Option<(usize, usize)>) -> OpResult<Geometry> {
        let (q, k, v) = (dims.q, dims.k, dims.v);
        if k.len() != q.len() || v.len() != q.len() {
            return Err(shape_err(format!(
                "Q, K and V must have the same rank, got {q:?}, {k:?}, {v:?}"
            )));
        }
        let mut g = match q.len() {
            3 => {
                let (q_heads, kv_heads) = heads.ok_or_else(|| {
                    OpError::attribute(
                        OP,
                        "q_num_heads",
                        "3-D inputs need q_num_heads and kv_num_heads",
                    )
                })?;
                Geometry {
                    batch: q[0],
                    q_heads,
                    kv_heads,
                    q_len: q[1],
                    new_kv_len: k[1],
                    past_len: 0,
                    total_kv: 0,
                    head_size: split_heads("Q", q[2], q_heads)?,
                    v_head_size: split_heads("V", v[2], kv_heads)?,
                    packed: true,
                }
            }
            4 => Geometry {
                batch: q[0],
                q_heads: q[1],
                kv_heads: k[1],
                q_len: q[2],
                new_kv_len: k[2],
                past_len: 0,
                total_kv: 0,
                head_size: q[3],
                v_head_size: v[3],
                packed: false,
            },
            r => {
                return Err(shape_err(format!(
                    "Q must be 3-D or 4-D, got rank {r} ({q:?})"
                )))
            }
        };
        let k_head_size = if g.packed {
            split_heads("K", k[2], g.kv_heads)?
        } else {
            k[3]
        };
        let (v_heads, v_len) = if g.packed {
            (g.kv_heads, v[1])
        } else {
            (v[1], v[2])
        };
        if k[0] != g.batch || v[0] != g.batch {
            return Err(shape_err(format!(
                "Q, K and V disagree on the batch size: {q:?}, {k:?}, {v:?}"
            )));
        }
        if k_head_size != g.head_size {
            return Err(shape_err(format!(
                "Q head size {} differs from K head size {k_head_size}",
                g.head_size
            )));
        }
        if v_heads != g.kv_heads || v_len != g.new_kv_len {
            return Err(shape_err(format!(
                "K {k:?} and V {v:?} disagree on heads or sequence length"
            )));
        }
        if g.kv_heads == 0 || !g.q_heads.is_multiple_of(g.kv_heads) {
            return Err(shape_err(format!(
                "{} query heads are not a multiple of {} key/value heads",
                g.q_heads, g.kv_heads
            )));
        }
        match (dims.past_key, dims.past_value) {
            (None, None) => {}
            (Some(pk), Some(pv)) => {
                let want_k = [
                    g.batch,
                    g.kv_heads,
                    pk.get(2).copied().unwrap_or(0),
                    g.head_size,
                ];
                let want_v = [g.batch, g.kv_heads, want_k[2], g.v_head_size];
                if pk != want_k || pv != want_v {
                    return Err(shape_err(format!(
                        "past_key {pk:?} / past_value {pv:?} do not match (batch, kv heads, \
                         past_len, head size) = {want_k:?} / {want_v:?}"
                    )));
                }
                g.past_len = want_k[2];
            }
            _ => {
                return Err(shape_err(
                    "past_key and past_value must be given together".to_string(),
                ))
            }
        }
        g.total_kv = g
            .past_len
            .checked_add(g.new_kv_len)
            .ok_or_else(|| shape_err("past + current sequence length overflows".into()))?;
        // Every working buffer must be addressable.
        for (what, len) in [
            ("Q", [g.q_heads, g.q_len, g.head_size.max(g.v_head_size)]),
            ("scores", [g.q_heads, g.q_len, g.total_kv]),
            (
                "K/V",
                [g.kv_heads, g.total_kv, g.head_size.max(g.v_head_size)],
            ),
        ] {
            len.iter()
                .try_fold(g.batch, |acc, &d| acc.checked_mul(d))
                .and_then(|n| n.checked_mul(8))
                .ok_or_else(|| shape_err(format!("the {what} buffer size overflows")))?;
        }
        Ok(g)
    }

    /// Query heads per key/value head (grouped-query attention).
    pub(crate) fn group(&self) -> usize {
        self.q_heads / self.kv_heads
    }

    /// Y's dims.
    pub(crate) fn y_dims(&self) -> Vec<usize> {
        if self.packed {
            vec![self.batch, self.q_len, self.q_heads * self.v_head_size]
        } else {
            vec![self.batch, self.q_heads, self.q_len, self.v_head_size]
        }
    }

    /// present_key's and present_value's dims.
    pub(crate) fn present_dims(&self) -> (Vec<usize>, Vec<usize>) {
        (
            vec![self.batch, self.kv_heads, self.total_kv, self.head_size],
            vec![self.batch, self.kv_heads, self.total_kv, self.v_head_size],
        )
    }

    /// qk_matmul_output's dims.
    pub(crate) fn scores_dims(&self) -> Vec<usize> {
        vec![self.batch, self.q_heads, self.q_len, self.total_kv]
    }

    /// Elements of the scaled Q, the full K and V, the scores and Y working buffers.
    pub(crate) fn working_lens(&self) -> [usize; 5] {
        let (b, hq, hk) = (self.batch, self.q_heads, self.kv_heads);
        [
            b * hq * self.q_len * self.head_size,
            b * hk * self.total_kv * self.head_size,
            b * hk * self.total_kv * self.v_head_size,
            b * hq * self.q_len * self.total_kv,
            b * hq * self.q_len * self.v_head_size,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims<'a>(q: &'a [usize], k: &'a [usize], v: &'a [usize]) -> InputDims<'a> {
        InputDims {
            q,
            k,
            v,
            past_key: None,
            past_value: None,
        }
    }

    #[test]
    fn packed_inputs_split_by_head_attributes() {
        let g = Geometry::new(&dims(&[2, 4, 72], &[2, 6, 24], &[2, 6, 30]), Some((9, 3))).unwrap();
        assert_eq!((g.head_size, g.v_head_size, g.group()), (8, 10, 3));
        assert_eq!(g.y_dims(), vec![2, 4, 90]);
        assert_eq!(g.scores_dims(), vec![2, 9, 4, 6]);
    }

    #[test]
    fn past_cache_extends_the_key_sequence() {
        let mut d = dims(&[1, 2, 3, 4], &[1, 2, 5, 4], &[1, 2, 5, 6]);
        d.past_key = Some(&[1, 2, 7, 4]);
        d.past_value = Some(&[1, 2, 7, 6]);
        let g = Geometry::new(&d, None).unwrap();
        assert_eq!(g.total_kv, 12);
        assert_eq!(g.present_dims(), (vec![1, 2, 12, 4], vec![1, 2, 12, 6]));
    }

    #[test]
    fn inconsistent_dims_are_errors() {
        // 3-D without head counts, heads not dividing the hidden size, GQA mismatch.
        assert!(Geometry::new(&dims(&[1, 2, 8], &[1, 2, 8], &[1, 2, 8]), None).is_err());
        assert!(Geometry::new(&dims(&[1, 2, 8], &[1, 2, 8], &[1, 2, 8]), Some((3, 1))).is_err());
        assert!(Geometry::new(&dims(&[1, 3, 2, 4], &[1, 2, 2, 4], &[1, 2, 2, 4]), None).is_err());
        assert!(Geometry::new(&dims(&[1, 2, 2, 4], &[1, 2, 2, 5], &[1, 2, 2, 4]), None).is_err());
        assert!(Geometry::new(&dims(&[1, 2, 2], &[1, 2, 2, 4], &[1, 2, 2, 4]), None).is_err());
        let mut d = dims(&[1, 2, 3, 4], &[1, 2, 5, 4], &[1, 2, 5, 4]);
        d.past_key = Some(&[1, 2, 7, 4]);
        assert!(Geometry::new(&d, None).is_err());
    }
}
