//! strata-ops
