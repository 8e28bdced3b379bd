//! `.npy` bytes → a tensor, and back: every malformed header or payload is a typed error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_core::Tensor;

fuzz_target!(|data: &[u8]| {
    if let Ok(tensor) = Tensor::from_npy_bytes(data, "fuzz.npy") {
        let bytes = tensor.to_npy_bytes().expect("a tensor read from .npy writes back");
        let again = Tensor::from_npy_bytes(&bytes, "again.npy").expect("our own .npy reads");
        assert_eq!(again.dims(), tensor.dims());
        assert_eq!(again.dtype(), tensor.dtype());
    }
});
