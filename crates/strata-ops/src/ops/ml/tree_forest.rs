//! The compiled form of a tree ensemble, shared by TreeEnsemble (opset 5) and the older
//! TreeEnsembleRegressor / TreeEnsembleClassifier: a flat array of branch nodes walked per row,
//! branches leading to other nodes or to leaves, each leaf a run of (target, weight)
//! contributions. Thresholds, set members and weights are held in f64, into which every input
//! dtype (f16, f32, f64) widens exactly, so comparisons match the input's own precision.
//!
//! Building checks everything the walk relies on (indices in range, no cycles), so walking a
//! row needs no checks beyond the row holding every feature the forest reads.

use std::cmp::Ordering;

use strata_core::f16;

use crate::support::numeric::Real;
use crate::{OpError, OpResult};

/// A branch node's comparison of `x[feature]` against its threshold (or set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Comparison {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    /// `x[feature]` is one of the node's set members.
    Member,
}

/// Where a branch leads: another branch node or a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    Node(u32),
    Leaf(u32),
}

/// One branch node as given by the model, before compilation.
#[derive(Debug, Clone)]
pub(crate) struct BranchSpec {
    pub feature: usize,
    pub comparison: Comparison,
    pub threshold: f64,
    /// For [`Comparison::Member`]: the set (NaN-free).
    pub members: Vec<f64>,
    /// Where a NaN feature goes (the operators differ: opset 5 also sends NaN down the true
    /// branch of NEQ, the older operators only follow `nodes_missing_value_tracks_true`).
    pub nan_goes_true: bool,
    pub if_true: Next,
    pub if_false: Next,
}

/// One contribution of a leaf.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Contribution {
    pub target: u32,
    pub weight: f64,
}

#[derive(Debug, Clone, Copy)]
struct Branch {
    threshold: f64,
    feature: u32,
    comparison: Comparison,
    nan_goes_true: bool,
    /// For sets: `members[first_member..first_member + member_count]`, sorted.
    first_member: u32,
    member_count: u32,
    /// Node index, or `LEAF_BIT | leaf index`.
    if_true: u32,
    if_false: u32,
}

const LEAF_BIT: u32 = 1 << 31;

/// A validated, flattened ensemble of trees.
#[derive(Debug, Clone)]
pub(crate) struct Forest {
    branches: Vec<Branch>,
    members: Vec<f64>,
    /// Per leaf, its run in `contributions`.
    leaves: Vec<(u32, u32)>,
    contributions: Vec<Contribution>,
    roots: Vec<Next>,
    targets: usize,
    /// One more than the largest feature index any branch reads.
    features_read: usize,
}

/// An input element, widened to f64 for comparisons (exactly, for the float types).
pub(crate) trait FeatureValue: strata_core::Element + Copy {
    fn to_f64(self) -> f64;
}

/// A float element type scores are written in, narrowed once from f64.
pub(crate) trait ScoreValue: FeatureValue {
    /// The largest finite value of the type (numpy `finfo.max`).
    const MAX: f64;
    fn from_f64(v: f64) -> Self;
}

macro_rules! feature_value {
    ($($t:ty => $widen:expr),*) => {$(
        impl FeatureValue for $t {
            #[inline(always)]
            fn to_f64(self) -> f64 {
                $widen(self)
            }
        }
    )*};
}

feature_value!(
    f32 => f64::from,
    f64 => std::convert::identity,
    f16 => |v: f16| f64::from(v.widen()),
    i32 => f64::from,
    i64 => |v: i64| v as f64
);

impl ScoreValue for f32 {
    const MAX: f64 = f32::MAX as f64;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl ScoreValue for f64 {
    const MAX: f64 = f64::MAX;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
}

impl ScoreValue for f16 {
    const MAX: f64 = 65504.0;
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}

fn index_u32(op: &str, what: &str, i: usize) -> OpResult<u32> {
    u32::try_from(i)
        .ok()
        .filter(|&i| i < LEAF_BIT)
        .ok_or_else(|| OpError::attribute(op, what, format!("{i} is too large")))
}

impl Forest {
    /// Compiles `branches` (indexed by node position), per-leaf contribution lists and tree
    /// roots. `targets` bounds every contribution's target. Errors name `op` and the attribute
    /// at fault.
    pub fn new(
        op: &str,
        branches: &[BranchSpec],
        leaves: &[Vec<Contribution>],
        roots: &[Next],
        targets: usize,
    ) -> OpResult<Forest> {
        index_u32(op, "nodes", branches.len())?;
        index_u32(op, "n_targets", targets)?;
        index_u32(op, "leaves", leaves.len())?;
        let check_next = |next: Next, what: &str| -> OpResult<u32> {
            match next {
                Next::Node(n) if (n as usize) < branches.len() => Ok(n),
                Next::Leaf(l) if (l as usize) < leaves.len() => Ok(LEAF_BIT | l),
                Next::Node(n) => Err(OpError::attribute(
                    op,
                    what,
                    format!("node {n} is outside the {} nodes", branches.len()),
                )),
                Next::Leaf(l) => Err(OpError::attribute(
                    op,
                    what,
                    format!("leaf {l} is outside the {} leaves", leaves.len()),
                )),
            }
        };
        let mut members = Vec::new();
        let mut compiled = Vec::with_capacity(branches.len());
        let mut features_read = 0;
        for b in branches {
            let feature = index_u32(op, "nodes_featureids", b.feature)?;
            features_read = features_read.max(b.feature + 1);
            let first_member = index_u32(op, "membership_values", members.len())?;
            let mut set = b.members.clone();
            if set.iter().any(|v| v.is_nan()) {
                return Err(OpError::attribute(
                    op,
                    "membership_values",
                    "a set holds NaN",
                ));
            }
            set.sort_by(f64::total_cmp);
            set.dedup();
            members.extend_from_slice(&set);
            compiled.push(Branch {
                threshold: b.threshold,
                feature,
                comparison: b.comparison,
                nan_goes_true: b.nan_goes_true,
                first_member,
                member_count: index_u32(op, "membership_values", set.len())?,
                if_true: check_next(b.if_true, "nodes_truenodeids")?,
                if_false: check_next(b.if_false, "nodes_falsenodeids")?,
            });
        }
        index_u32(op, "membership_values", members.len())?;
        let mut flat_leaves = Vec::with_capacity(leaves.len());
        let mut contributions = Vec::new();
        for leaf in leaves {
            let first = index_u32(op, "leaves", contributions.len())?;
            for c in leaf {
                if c.target as usize >= targets {
                    return Err(OpError::attribute(
                        op,
                        "leaf_targetids",
                        format!("target {} is outside the {targets} targets", c.target),
                    ));
                }
                contributions.push(*c);
            }
            flat_leaves.push((first, index_u32(op, "leaves", leaf.len())?));
        }
        for &root in roots {
            check_next(root, "tree_roots")?;
        }
        check_acyclic(op, &compiled)?;
        Ok(Forest {
            branches: compiled,
            members,
            leaves: flat_leaves,
            contributions,
            roots: roots.to_vec(),
            targets,
            features_read,
        })
    }

    /// Scratch for one row of f64 scores, named for `op`'s errors.
    pub fn score_scratch_bytes(&self, op: &str) -> OpResult<usize> {
        self.targets()
            .checked_mul(std::mem::size_of::<f64>())
            .ok_or_else(|| OpError::shape(op, "too many targets"))
    }

    /// X, with `features` columns (if known), must hold every feature the trees read.
    pub fn check_features(&self, op: &str, features: Option<usize>) -> OpResult<()> {
        let read = self.features_read();
        match features {
            Some(f) if f < read => Err(OpError::shape(
                op,
                format!("X has {f} features, the trees read feature {}", read - 1),
            )),
            _ => Ok(()),
        }
    }

    pub fn targets(&self) -> usize {
        self.targets
    }

    pub fn trees(&self) -> usize {
        self.roots.len()
    }

    pub fn features_read(&self) -> usize {
        self.features_read
    }

    /// The contributions of the leaf that tree `tree` reaches for `row`. The row must hold at
    /// least [`Forest::features_read`] values (callers check once per run).
    #[inline]
    pub fn leaf_for<T: FeatureValue>(&self, tree: usize, row: &[T]) -> &[Contribution] {
        let mut at = match self.roots[tree] {
            Next::Leaf(l) => return self.leaf(l),
            Next::Node(n) => n,
        };
        loop {
            let b = &self.branches[at as usize];
            let x = row[b.feature as usize].to_f64();
            let take_true = if x.is_nan() {
                b.nan_goes_true
            } else {
                match b.comparison {
                    Comparison::Leq => x <= b.threshold,
                    Comparison::Lt => x < b.threshold,
                    Comparison::Gte => x >= b.threshold,
                    Comparison::Gt => x > b.threshold,
                    Comparison::Eq => x == b.threshold,
                    Comparison::Neq => x != b.threshold,
                    // Equality as floats: -0 is a member where 0 is.
                    Comparison::Member => {
                        let start = b.first_member as usize;
                        self.members[start..start + b.member_count as usize]
                            .binary_search_by(|m| m.partial_cmp(&x).unwrap_or(Ordering::Less))
                            .is_ok()
                    }
                }
            };
            let next = if take_true { b.if_true } else { b.if_false };
            if next & LEAF_BIT != 0 {
                return self.leaf(next & !LEAF_BIT);
            }
            at = next;
        }
    }

    fn leaf(&self, leaf: u32) -> &[Contribution] {
        let (first, count) = self.leaves[leaf as usize];
        &self.contributions[first as usize..(first + count) as usize]
    }
}

/// Rejects node graphs with a cycle (a walk would never reach a leaf): Kahn's algorithm over
/// the branch → branch edges.
fn check_acyclic(op: &str, branches: &[Branch]) -> OpResult<()> {
    let mut incoming = vec![0u32; branches.len()];
    let children = |b: &Branch| {
        [b.if_true, b.if_false]
            .into_iter()
            .filter(|n| n & LEAF_BIT == 0)
    };
    for b in branches {
        for c in children(b) {
            incoming[c as usize] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..branches.len()).filter(|&i| incoming[i] == 0).collect();
    let mut done = 0;
    while let Some(i) = ready.pop() {
        done += 1;
        for c in children(&branches[i]) {
            incoming[c as usize] -= 1;
            if incoming[c as usize] == 0 {
                ready.push(c as usize);
            }
        }
    }
    if done == branches.len() {
        Ok(())
    } else {
        Err(OpError::attribute(
            op,
            "nodes_truenodeids",
            "the nodes form a cycle",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn branch(
        feature: usize,
        comparison: Comparison,
        threshold: f64,
        t: Next,
        f: Next,
    ) -> BranchSpec {
        BranchSpec {
            feature,
            comparison,
            threshold,
            members: Vec::new(),
            nan_goes_true: false,
            if_true: t,
            if_false: f,
        }
    }

    fn leaf(target: u32, weight: f64) -> Vec<Contribution> {
        vec![Contribution { target, weight }]
    }

    #[test]
    fn walks_to_the_leaf_each_comparison_picks() {
        // x0 <= 1 ? (x1 in {2, 5} ? leaf 0 : leaf 1) : leaf 2
        let mut member = branch(
            1,
            Comparison::Member,
            f64::NAN,
            Next::Leaf(0),
            Next::Leaf(1),
        );
        member.members = vec![5.0, 2.0];
        let nodes = [
            branch(0, Comparison::Leq, 1.0, Next::Node(1), Next::Leaf(2)),
            member,
        ];
        let leaves = [leaf(0, 10.0), leaf(0, 20.0), leaf(1, 30.0)];
        let f = Forest::new("T", &nodes, &leaves, &[Next::Node(0)], 2).unwrap();
        assert_eq!(f.features_read(), 2);
        let w = |row: &[f32]| f.leaf_for(0, row)[0].weight;
        assert_eq!(w(&[1.0, 5.0]), 10.0);
        assert_eq!(w(&[0.0, 3.0]), 20.0);
        assert_eq!(w(&[1.5, 2.0]), 30.0);
        // NaN follows the node's NaN direction.
        assert_eq!(w(&[f32::NAN, 2.0]), 30.0);
        let mut nodes2 = nodes.clone();
        nodes2[0].nan_goes_true = true;
        let f2 = Forest::new("T", &nodes2, &leaves, &[Next::Node(0)], 2).unwrap();
        assert_eq!(f2.leaf_for(0, &[f64::NAN, 2.0])[0].weight, 10.0);
        let neq = [branch(
            0,
            Comparison::Neq,
            1.0,
            Next::Leaf(0),
            Next::Leaf(1),
        )];
        let f3 = Forest::new("T", &neq, &leaves, &[Next::Node(0)], 2).unwrap();
        // NaN goes where the node says, whatever the comparison.
        assert_eq!(f3.leaf_for(0, &[f32::NAN])[0].weight, 20.0);
        assert_eq!(f3.leaf_for(0, &[1.0f32])[0].weight, 20.0);
        assert_eq!(f3.leaf_for(0, &[2.0f32])[0].weight, 10.0);
    }

    #[test]
    fn bad_structure_is_rejected() {
        let leaves = [leaf(0, 1.0)];
        let cycle = [
            branch(0, Comparison::Lt, 0.0, Next::Node(1), Next::Leaf(0)),
            branch(0, Comparison::Lt, 0.0, Next::Node(0), Next::Leaf(0)),
        ];
        let err = Forest::new("T", &cycle, &leaves, &[Next::Node(0)], 1).unwrap_err();
        assert!(err.to_string().contains("cycle"), "{err}");
        let dangling = [branch(0, Comparison::Lt, 0.0, Next::Node(7), Next::Leaf(0))];
        assert!(Forest::new("T", &dangling, &leaves, &[Next::Node(0)], 1).is_err());
        let bad_leaf = [branch(0, Comparison::Lt, 0.0, Next::Leaf(3), Next::Leaf(0))];
        assert!(Forest::new("T", &bad_leaf, &leaves, &[Next::Node(0)], 1).is_err());
        let ok = [branch(0, Comparison::Lt, 0.0, Next::Leaf(0), Next::Leaf(0))];
        assert!(Forest::new("T", &ok, &[leaf(2, 1.0)], &[Next::Node(0)], 2).is_err());
        assert!(Forest::new("T", &ok, &leaves, &[Next::Node(4)], 1).is_err());
    }
}
