//! N-gram features: TfIdfVectorizer (integer pools; string pools await string tensors), with its
//! pool compiled into a trie at build time.

mod ngram_trie;
mod tfidf_vectorizer;

use crate::Constructor;

/// The family's operators, registered in `registry::ONNX_FAMILIES`.
pub const OPS: &[(&str, Constructor)] =
    &[("TfIdfVectorizer", tfidf_vectorizer::TfIdfVectorizer::build)];
