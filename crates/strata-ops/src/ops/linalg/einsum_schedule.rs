//! Einsum equations (opset 12+): parsing (`"bij,bjk->bik"`, spaces allowed, `...` for broadcast
//! dims, implicit output when `->` is absent) and, for concrete input dims, the execution schedule:
//! every label's size, each input as a strided view (repeated labels become one diagonal axis,
//! size-1 broadcast dims stride 0), then pairwise contractions left to right, each one packed
//! into `[batch, m, k] x [batch, k, n]` for the GEMM, and a final gather into the output order.

use crate::{OpError, OpResult};

const OP: &str = "Einsum";

/// One term's labels: letters as `Some(byte)`, the ellipsis as `None`.
type Term = Vec<Option<u8>>;

/// A parsed equation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Equation {
    inputs: Vec<Term>,
    output: Option<Term>,
}

impl Equation {
    pub fn parse(equation: &str) -> OpResult<Self> {
        let compact: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, rhs) = match compact.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (compact.as_str(), None),
        };
        let inputs = lhs
            .split(',')
            .map(parse_term)
            .collect::<OpResult<Vec<_>>>()?;
        let output = rhs.map(parse_term).transpose()?;
        if let Some(out) = &output {
            let mut seen = [false; 256];
            for l in out.iter().flatten() {
                if std::mem::replace(&mut seen[*l as usize], true) {
                    return Err(bad(format!(
                        "output label {:?} appears twice in {equation:?}",
                        *l as char
                    )));
                }
            }
        }
        Ok(Equation { inputs, output })
    }

    pub fn input_count(&self) -> usize {
        self.inputs.len()
    }
}

fn bad(message: String) -> OpError {
    OpError::attribute(OP, "equation", message)
}

fn parse_term(term: &str) -> OpResult<Term> {
    let mut labels = Vec::new();
    let mut rest = term;
    let mut ellipsis = false;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("...") {
            if std::mem::replace(&mut ellipsis, true) {
                return Err(bad(format!("term {term:?} has more than one ellipsis")));
            }
            labels.push(None);
            rest = after;
        } else if c.is_ascii_alphabetic() {
            labels.push(Some(c as u8));
            rest = &rest[1..];
        } else {
            return Err(bad(format!("unexpected {c:?} in term {term:?}")));
        }
    }
    Ok(labels)
}

/// A strided view of an operand with one axis per distinct label (sizes are the labels').
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    /// Buffer index in the plan (inputs are buffers `0..inputs`).
    pub buffer: usize,
    pub labels: Vec<usize>,
    pub strides: Vec<usize>,
}

/// One pairwise contraction: `a` packed as `[batch, m, k]`, `b` as `[batch, k, n]`, multiplied
/// into `out` `[batch, m, n]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Contraction {
    pub a: View,
    pub b: View,
    /// Label orders of the packed operands (kept labels first, then labels summed away).
    pub a_order: Vec<usize>,
    pub a_keep: usize,
    pub b_order: Vec<usize>,
    pub b_keep: usize,
    pub packed_a: usize,
    pub packed_b: usize,
    pub out: usize,
    /// `(batch, m, k, n)` element counts.
    pub shape: (usize, usize, usize, usize),
}

/// The resolved computation for one set of input dims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Schedule {
    /// Every label's size (ellipsis dims are labels too).
    pub sizes: Vec<usize>,
    pub out_dims: Vec<usize>,
    /// Element counts of the working buffers: the widened inputs first, then the contraction
    /// buffers, then the final output buffer (the last one).
    pub buffers: Vec<usize>,
    pub contractions: Vec<Contraction>,
    /// The view the output is gathered from, and its label order (output labels first).
    pub last: View,
    pub last_order: Vec<usize>,
}

impl Schedule {
    /// Total working elements, checked.
    pub fn scratch_len(&self) -> OpResult<usize> {
        self.buffers
            .iter()
            .try_fold(0usize, |acc, &n| acc.checked_add(n))
            .ok_or_else(|| OpError::shape(OP, "working set size overflows"))
    }
}

fn checked_product(values: impl IntoIterator<Item = usize>) -> OpResult<usize> {
    values
        .into_iter()
        .try_fold(1usize, |acc, v| acc.checked_mul(v))
        .ok_or_else(|| OpError::shape(OP, "size overflows"))
}

impl Equation {
    /// Resolves the equation against the input dims.
    pub fn schedule(&self, dims: &[&[usize]]) -> OpResult<Schedule> {
        if dims.len() != self.inputs.len() {
            return Err(OpError::InputCount {
                op: OP.into(),
                expected: self.inputs.len().to_string(),
                actual: dims.len(),
            });
        }
        // Ellipsis rank of each input, and the broadcast one.
        let mut ellipsis = Vec::with_capacity(dims.len());
        for (i, (term, d)) in self.inputs.iter().zip(dims).enumerate() {
            let letters = term.iter().filter(|l| l.is_some()).count();
            let has_ellipsis = term.len() > letters;
            let e = match d.len().checked_sub(letters) {
                Some(e) if has_ellipsis || e == 0 => e,
                _ => {
                    return Err(OpError::shape(
                        OP,
                        format!(
                            "input {i} has rank {} but its term has {letters} labels{}",
                            d.len(),
                            if has_ellipsis { " and an ellipsis" } else { "" }
                        ),
                    ))
                }
            };
            ellipsis.push(e);
        }
        let e_rank = ellipsis.iter().copied().max().unwrap_or(0);
        // Label ids: ellipsis dims 0..e_rank, then letters in order of first appearance.
        let mut letter_id = [usize::MAX; 256];
        let mut letters: Vec<u8> = Vec::new();
        let mut sizes = vec![1usize; e_rank];
        let mut counts = vec![0usize; e_rank];
        let mut views = Vec::with_capacity(dims.len());
        for (i, (term, d)) in self.inputs.iter().zip(dims).enumerate() {
            let mut axis_labels = Vec::with_capacity(d.len());
            for l in term {
                match l {
                    None => axis_labels.extend(e_rank - ellipsis[i]..e_rank),
                    Some(c) => {
                        let slot = &mut letter_id[*c as usize];
                        if *slot == usize::MAX {
                            *slot = sizes.len();
                            letters.push(*c);
                            sizes.push(1);
                            counts.push(0);
                        }
                        axis_labels.push(*slot);
                    }
                }
            }
            // Sizes: letters must agree (or be 1 and broadcast), like numpy for ellipsis dims.
            let mut contiguous = vec![1usize; d.len()];
            for a in (0..d.len().saturating_sub(1)).rev() {
                contiguous[a] = contiguous[a + 1] * d[a + 1];
            }
            let mut labels: Vec<usize> = Vec::new();
            let mut strides: Vec<usize> = Vec::new();
            let mut own: Vec<usize> = Vec::new();
            for (a, &l) in axis_labels.iter().enumerate() {
                match labels.iter().position(|&x| x == l) {
                    Some(p) => {
                        if own[p] != d[a] {
                            return Err(OpError::shape(
                                OP,
                                format!(
                                    "input {i}: repeated label has sizes {} and {}",
                                    own[p], d[a]
                                ),
                            ));
                        }
                        strides[p] += contiguous[a];
                    }
                    None => {
                        labels.push(l);
                        strides.push(contiguous[a]);
                        own.push(d[a]);
                    }
                }
                // Every occurrence counts, repeats within a term too (the implicit output keeps
                // letters seen exactly once).
                counts[l] += 1;
            }
            for (p, &l) in labels.iter().enumerate() {
                let s = own[p];
                if sizes[l] == 1 {
                    sizes[l] = s;
                } else if s != 1 && s != sizes[l] {
                    return Err(OpError::shape(
                        OP,
                        format!(
                            "input {i}: label size {s} does not match {} elsewhere",
                            sizes[l]
                        ),
                    ));
                }
            }
            views.push((
                View {
                    buffer: i,
                    labels,
                    strides,
                },
                own,
            ));
        }
        // Size-1 axes broadcast against larger ones: stride 0.
        let mut views: Vec<View> = views
            .into_iter()
            .map(|(mut v, own)| {
                for (p, &l) in v.labels.iter().enumerate() {
                    if own[p] != sizes[l] {
                        v.strides[p] = 0;
                    }
                }
                v
            })
            .collect();

        let output: Vec<usize> = match &self.output {
            Some(term) => {
                let mut out = Vec::new();
                for l in term {
                    match l {
                        None => out.extend(0..e_rank),
                        Some(c) => match letter_id[*c as usize] {
                            usize::MAX => {
                                return Err(bad(format!(
                                    "output label {:?} is in no input",
                                    *c as char
                                )))
                            }
                            id => out.push(id),
                        },
                    }
                }
                out
            }
            None => {
                // Implicit: broadcast dims, then the letters seen exactly once, alphabetically.
                let mut once: Vec<u8> = letters
                    .iter()
                    .copied()
                    .filter(|c| counts[letter_id[*c as usize]] == 1)
                    .collect();
                once.sort_unstable();
                (0..e_rank)
                    .chain(once.iter().map(|c| letter_id[*c as usize]))
                    .collect()
            }
        };
        let out_dims: Vec<usize> = output.iter().map(|&l| sizes[l]).collect();

        let mut buffers: Vec<usize> = dims
            .iter()
            .map(|d| checked_product(d.iter().copied()))
            .collect::<OpResult<_>>()?;
        let mut contractions = Vec::new();
        let mut acc = views.remove(0);
        for j in 0..views.len() {
            let b = views[j].clone();
            let later: Vec<usize> = views[j + 1..]
                .iter()
                .flat_map(|v| v.labels.iter().copied())
                .chain(output.iter().copied())
                .collect();
            let kept = |l: &usize| later.contains(l);
            let in_a = |l: &usize| acc.labels.contains(l);
            let in_b = |l: &usize| b.labels.contains(l);
            let batch: Vec<usize> = acc
                .labels
                .iter()
                .copied()
                .filter(|l| in_b(l) && kept(l))
                .collect();
            let k: Vec<usize> = acc
                .labels
                .iter()
                .copied()
                .filter(|l| in_b(l) && !kept(l))
                .collect();
            let m: Vec<usize> = acc
                .labels
                .iter()
                .copied()
                .filter(|l| !in_b(l) && kept(l))
                .collect();
            let a_sum = acc.labels.iter().copied().filter(|l| !in_b(l) && !kept(l));
            let n: Vec<usize> = b
                .labels
                .iter()
                .copied()
                .filter(|l| !in_a(l) && kept(l))
                .collect();
            let b_sum = b.labels.iter().copied().filter(|l| !in_a(l) && !kept(l));
            let count = |ls: &[usize]| checked_product(ls.iter().map(|&l| sizes[l]));
            let shape = (count(&batch)?, count(&m)?, count(&k)?, count(&n)?);
            let a_order: Vec<usize> = [&batch[..], &m, &k].concat();
            let b_order: Vec<usize> = [&batch[..], &k, &n].concat();
            let (a_keep, b_keep) = (a_order.len(), b_order.len());
            let a_order = a_order.into_iter().chain(a_sum).collect();
            let b_order = b_order.into_iter().chain(b_sum).collect();
            let first = buffers.len();
            buffers.push(checked_product([shape.0, shape.1, shape.2])?);
            buffers.push(checked_product([shape.0, shape.2, shape.3])?);
            buffers.push(checked_product([shape.0, shape.1, shape.3])?);
            let labels: Vec<usize> = [&batch[..], &m, &n].concat();
            let mut strides = vec![1usize; labels.len()];
            for p in (0..labels.len().saturating_sub(1)).rev() {
                strides[p] = strides[p + 1] * sizes[labels[p + 1]];
            }
            contractions.push(Contraction {
                a: acc,
                b,
                a_order,
                a_keep,
                b_order,
                b_keep,
                packed_a: first,
                packed_b: first + 1,
                out: first + 2,
                shape,
            });
            acc = View {
                buffer: first + 2,
                labels,
                strides,
            };
        }
        let last_order: Vec<usize> = output
            .iter()
            .copied()
            .chain(acc.labels.iter().copied().filter(|l| !output.contains(l)))
            .collect();
        buffers.push(checked_product(out_dims.iter().copied())?);
        let plan = Schedule {
            sizes,
            out_dims,
            buffers,
            contractions,
            last: acc,
            last_order,
        };
        plan.scratch_len()?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_spaces_ellipsis_and_implicit_outputs() {
        let eq = Equation::parse("bij, bjk -> bik").unwrap();
        assert_eq!(eq.input_count(), 2);
        let plan = eq.schedule(&[&[5, 2, 3], &[5, 3, 4]]).unwrap();
        assert_eq!(plan.out_dims, [5, 2, 4]);
        let c = &plan.contractions[0];
        assert_eq!(c.shape, (5, 2, 3, 4));
        // Implicit output: letters used once, sorted: "ba,b" -> "a".
        let plan = Equation::parse("ba,b")
            .unwrap()
            .schedule(&[&[3, 2], &[3]])
            .unwrap();
        assert_eq!(plan.out_dims, [2]);
        // Inner product: nothing left.
        let plan = Equation::parse("i,i")
            .unwrap()
            .schedule(&[&[5], &[5]])
            .unwrap();
        assert_eq!(plan.out_dims, Vec::<usize>::new());
        // Diagonal under an ellipsis: "...ii->...i" over [3, 5, 5] views one axis of stride 6.
        let plan = Equation::parse("...ii ->...i")
            .unwrap()
            .schedule(&[&[3, 5, 5]])
            .unwrap();
        assert_eq!(plan.out_dims, [3, 5]);
        assert_eq!(plan.last.strides, [25, 6]);
        // Ellipsis dims broadcast (size 1 against 4).
        let plan = Equation::parse("...i,...i->...")
            .unwrap()
            .schedule(&[&[1, 3], &[4, 3]])
            .unwrap();
        assert_eq!(plan.out_dims, [4]);
    }

    #[test]
    fn bad_equations_and_shapes_are_errors() {
        assert!(Equation::parse("ij->ii").is_err());
        assert!(Equation::parse("i.j->i").is_err());
        assert!(Equation::parse("......i").is_err());
        let eq = Equation::parse("ij,jk->ik").unwrap();
        let err = eq.schedule(&[&[2, 3], &[4, 5]]).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
        assert!(eq.schedule(&[&[2, 3, 1], &[3, 5]]).is_err());
        assert!(eq.schedule(&[&[2, 3]]).is_err());
        let err = Equation::parse("ij->iz")
            .unwrap()
            .schedule(&[&[2, 3]])
            .unwrap_err();
        assert!(err.to_string().contains("'z'"), "{err}");
        assert!(Equation::parse("ii").unwrap().schedule(&[&[2, 3]]).is_err());
    }
}
