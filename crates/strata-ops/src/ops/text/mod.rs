//! Text: operators on string tensors (StringNormalizer, StringConcat, StringSplit,
//! RegexFullMatch, TfIdfVectorizer with its n-gram pool compiled into a trie, and ai.onnx.ml LabelEncoder), and the wrapper that lets the element-moving
//! operators carry text ([`movement`]).

mod cast;
mod common;
mod equal;
mod label_encoder;
mod movement;
mod ngram_trie;
mod regex_full_match;
mod string_concat;
mod string_normalizer;
mod string_split;
mod tfidf_vectorizer;

pub use cast::text_cast_kernel;
pub use equal::TextEqual;
pub use movement::{movement_inputs, DataInputs, TextMovement, MOVEMENT_OPS};

use crate::OpTable;

/// The family's default-domain operators, read by the registry.
pub const OPS: &[OpTable] = &[&[
    (
        "StringNormalizer",
        string_normalizer::StringNormalizer::build,
    ),
    ("StringConcat", string_concat::StringConcat::build),
    ("StringSplit", string_split::StringSplit::build),
    ("RegexFullMatch", regex_full_match::RegexFullMatch::build),
    ("TfIdfVectorizer", tfidf_vectorizer::TfIdfVectorizer::build),
]];

/// The family's `ai.onnx.ml` operators, read by the registry for that domain.
pub const ML_OPS: &[OpTable] = &[&[("LabelEncoder", label_encoder::LabelEncoder::build)]];
