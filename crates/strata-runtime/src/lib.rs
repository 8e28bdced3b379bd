//! strata-runtime
