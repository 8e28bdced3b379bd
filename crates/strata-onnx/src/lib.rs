//! strata-onnx
