//! Protobuf `TensorProto` bytes → a strata tensor (raw data, typed fields, sub-byte packing,
//! strings, external references from memory).
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_onnx::WeightSource;

fuzz_target!(|data: &[u8]| {
    let Ok(proto) = strata_onnx::load_tensor_bytes(bytes::Bytes::copy_from_slice(data), "fuzz.pb")
    else {
        return;
    };
    if let Ok(tensor) = strata_onnx::tensor_from_proto(&proto, &WeightSource::in_memory()) {
        if !tensor.dtype().is_string() {
            let _ = tensor.read_bytes("fuzz").map(|bytes| bytes.bytes().len());
        }
    }
});
