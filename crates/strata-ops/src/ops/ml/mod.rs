//! The `ai.onnx.ml` domain: classic machine-learning operators. Binarizer and
//! ArrayFeatureExtractor (opset 1); TreeEnsemble (opset 5) and TreeEnsembleRegressor (opsets 1
//! and 3), whose trees compile into the shared flat [`tree_forest::Forest`] walker, with the
//! shared score transforms in `post_transform`.

mod array_feature_extractor;
mod binarizer;
mod post_transform;
mod tree_ensemble;
mod tree_ensemble_regressor;
mod tree_forest;

use crate::OpTable;

/// The domain's operators, read by the registry for `ai.onnx.ml`.
pub const OPS: &[OpTable] = &[&[
    (
        "ArrayFeatureExtractor",
        array_feature_extractor::ArrayFeatureExtractor::build,
    ),
    ("Binarizer", binarizer::Binarizer::build),
    ("TreeEnsemble", tree_ensemble::TreeEnsemble::build),
    (
        "TreeEnsembleRegressor",
        tree_ensemble_regressor::TreeEnsembleRegressor::build,
    ),
]];
