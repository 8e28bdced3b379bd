//! An operator's inputs at plan time: the one place that says which are present, which are
//! required, and how many a fixed-arity operator takes. Missing inputs are `Fact::absent()`
//! (left empty in the node) or beyond the end of the list.

use crate::{Fact, OpError, OpResult};

/// Input `index` when present.
pub(crate) fn optional<'a>(inputs: &[&'a Fact], index: usize) -> Option<&'a Fact> {
    inputs.get(index).copied().filter(|f| f.is_defined())
}

/// Input `index`, which must be present.
pub(crate) fn required<'a>(op: &str, inputs: &[&'a Fact], index: usize) -> OpResult<&'a Fact> {
    optional(inputs, index).ok_or_else(|| OpError::MissingInput {
        op: op.into(),
        index,
    })
}

/// Exactly `N` inputs, all present (`let [a, b] = exact_inputs(op, inputs)?`).
pub(crate) fn exact_inputs<'a, const N: usize>(
    op: &str,
    inputs: &[&'a Fact],
) -> OpResult<[&'a Fact; N]> {
    match <[&'a Fact; N]>::try_from(inputs) {
        Ok(all) if all.iter().all(|f| f.is_defined()) => Ok(all),
        _ => Err(OpError::InputCount {
            op: op.into(),
            expected: N.to_string(),
            actual: inputs.len(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use strata_core::DType;

    use super::*;

    #[test]
    fn present_required_and_exact() {
        let (x, absent) = (Fact::new(DType::F32, vec![]), Fact::absent());
        let inputs = [&x, &absent];
        assert!(optional(&inputs, 0).is_some());
        assert!(optional(&inputs, 1).is_none() && optional(&inputs, 5).is_none());
        let err = required("Op", &inputs, 1).unwrap_err();
        assert!(
            matches!(err, OpError::MissingInput { index: 1, .. }),
            "{err}"
        );
        let [a] = exact_inputs::<1>("Op", &inputs[..1]).unwrap();
        assert_eq!(a.dtype, DType::F32);
        // Two listed but one absent, or the wrong count: both are input-count errors.
        assert!(matches!(
            exact_inputs::<2>("Op", &inputs),
            Err(OpError::InputCount { .. })
        ));
        assert!(matches!(
            exact_inputs::<1>("Op", &inputs),
            Err(OpError::InputCount { .. })
        ));
    }
}
