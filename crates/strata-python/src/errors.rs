//! strata's typed errors as the Python exceptions of `strata._errors` (named after onnxruntime's:
//! `InvalidArgument`, `NoSuchFile`, `InvalidProtobuf`, `InvalidGraph`, `NotImplemented`, `Fail`;
//! eager tensor ops add `ShapeError`, `DTypeError` and `NoKernelError`, which also derive from
//! Python's `ValueError`, `TypeError` and `NotImplementedError`).

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use strata_core::CoreError;
use strata_llm::LlmError;
use strata_onnx::OnnxError;
use strata_ops::kernels::KernelError;
use strata_ops::OpError;
use strata_runtime::RuntimeError;
use strata_tokenizer::TokenizerError;

/// The exception classes, defined in Python so that they can also derive from builtins
/// (`MissingInput` is a `ValueError`, as onnxruntime's missing-input error is).
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Fail,
    InvalidArgument,
    MissingInput,
    NoSuchFile,
    InvalidProtobuf,
    InvalidGraph,
    NotImplemented,
    ShapeError,
    DTypeError,
    NoKernelError,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Fail => "Fail",
            Kind::InvalidArgument => "InvalidArgument",
            Kind::MissingInput => "MissingInput",
            Kind::NoSuchFile => "NoSuchFile",
            Kind::InvalidProtobuf => "InvalidProtobuf",
            Kind::InvalidGraph => "InvalidGraph",
            Kind::NotImplemented => "NotImplemented",
            Kind::ShapeError => "ShapeError",
            Kind::DTypeError => "DTypeError",
            Kind::NoKernelError => "NoKernelError",
        }
    }
}

/// A Python exception of `kind` carrying `message`.
pub fn raise(kind: Kind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| match exception_class(py, kind) {
        Ok(class) => PyErr::from_type(class, message),
        Err(err) => err,
    })
}

fn exception_class(py: Python<'_>, kind: Kind) -> PyResult<Bound<'_, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || {
        PyModule::import(py, "strata._errors").map(Bound::unbind)
    })?;
    Ok(module.bind(py).getattr(kind.class_name())?.cast_into()?)
}

/// The exception for a runtime error: bad feeds are `InvalidArgument`, unsupported operators
/// `NotImplemented`, anything that failed while running `Fail`.
pub fn runtime(err: &RuntimeError) -> PyErr {
    let kind = match err {
        RuntimeError::UnknownInput { .. }
        | RuntimeError::UnknownOutput { .. }
        | RuntimeError::InputIndex { .. }
        | RuntimeError::OutputIndex { .. }
        | RuntimeError::InputDType { .. }
        | RuntimeError::InputRank { .. }
        | RuntimeError::InputDim { .. }
        | RuntimeError::OutsideProfile { .. }
        | RuntimeError::Profile(_) => Kind::InvalidArgument,
        RuntimeError::InputNotSet { .. } => Kind::MissingInput,
        RuntimeError::Op(OpError::Unsupported { .. }) => Kind::NotImplemented,
        RuntimeError::DuplicateValue { .. }
        | RuntimeError::UndefinedValue { .. }
        | RuntimeError::ReadsOwnOutput { .. }
        | RuntimeError::ReadsRemovedValue { .. }
        | RuntimeError::Cycle { .. }
        | RuntimeError::UndefinedOutput { .. }
        | RuntimeError::NoOutputs => Kind::InvalidGraph,
        _ => Kind::Fail,
    };
    raise(kind, err.to_string())
}

/// The exception for a load error.
pub fn onnx(err: &OnnxError) -> PyErr {
    let kind = match err {
        OnnxError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Kind::NoSuchFile
        }
        OnnxError::Decode { .. } => Kind::InvalidProtobuf,
        OnnxError::UnsupportedOperators { .. } | OnnxError::UnsupportedDataType { .. } => {
            Kind::NotImplemented
        }
        OnnxError::Model { .. }
        | OnnxError::Node { .. }
        | OnnxError::Operator(_)
        | OnnxError::InvalidTensor { .. }
        | OnnxError::ExternalData { .. } => Kind::InvalidGraph,
        OnnxError::Runtime(inner) => return runtime(inner),
        _ => Kind::Fail,
    };
    raise(kind, err.to_string())
}

/// The exception for a language-model error: bad settings, ids and over-long prompts are
/// `InvalidArgument`, a file strata cannot read is `InvalidGraph` (or `NotImplemented` for an
/// unsupported architecture or tensor type).
pub fn llm(err: &LlmError) -> PyErr {
    if let LlmError::Runtime(inner) = err {
        return runtime(inner);
    }
    raise(llm_kind(err), err.to_string())
}

/// The exception for an error loading the model at `path` (the message names the file).
pub fn llm_at(path: &std::path::Path, err: &LlmError) -> PyErr {
    raise(llm_kind(err), format!("{}: {err}", path.display()))
}

fn llm_kind(err: &LlmError) -> Kind {
    match err {
        LlmError::Runtime(RuntimeError::Op(OpError::Unsupported { .. })) => Kind::NotImplemented,
        LlmError::Runtime(_) => Kind::Fail,
        LlmError::Usage { .. }
        | LlmError::TokenOutOfRange { .. }
        | LlmError::ContextFull { .. } => Kind::InvalidArgument,
        LlmError::Tokenizer(inner) => match inner {
            TokenizerError::UnsupportedModel(_) | TokenizerError::UnsupportedPreTokenizer(_) => {
                Kind::NotImplemented
            }
            TokenizerError::TokenOutOfRange { .. }
            | TokenizerError::SamplerConfig { .. }
            | TokenizerError::NoChatTemplate
            | TokenizerError::ChatTemplate(_) => Kind::InvalidArgument,
            _ => Kind::InvalidGraph,
        },
        LlmError::UnsupportedArchitecture(_) => Kind::NotImplemented,
        LlmError::Gguf(strata_gguf::GgufError::UnsupportedTensorType { .. })
        | LlmError::Gguf(strata_gguf::GgufError::UnsupportedVersion { .. }) => Kind::NotImplemented,
        LlmError::Gguf(strata_gguf::GgufError::Core(_)) | LlmError::Core(_) => Kind::Fail,
        LlmError::Gguf(_) | LlmError::BadMetadata { .. } | LlmError::BadTensor { .. } => {
            Kind::InvalidGraph
        }
    }
}

/// The exception for an eager op's error (the message starts with the op's name): dims that do
/// not fit are `ShapeError`, dtypes it does not take `DTypeError`, a key set no kernel serves
/// `NoKernelError`, anything else `Fail`.
pub fn eager(err: &OpError) -> PyErr {
    let kind = match err {
        OpError::Shape { .. }
        | OpError::InputCount { .. }
        | OpError::MissingInput { .. }
        | OpError::Attribute { .. } => Kind::ShapeError,
        OpError::DType { .. } => Kind::DTypeError,
        OpError::NoKernel { .. } | OpError::Unsupported { .. } => Kind::NoKernelError,
        OpError::Compute(inner) => match inner {
            KernelError::SizeOverflow { .. } => Kind::Fail,
            _ => Kind::ShapeError,
        },
        OpError::Core(inner) => core_kind(inner),
        _ => Kind::Fail,
    };
    raise(kind, err.to_string())
}

/// The exception for a tensor (core) error.
pub fn core(err: &CoreError) -> PyErr {
    raise(core_kind(err), err.to_string())
}

fn core_kind(err: &CoreError) -> Kind {
    match err {
        CoreError::NoKernel { .. } => Kind::NoKernelError,
        CoreError::DTypeMismatch { .. }
        | CoreError::UnsupportedDType { .. }
        | CoreError::ParseDType { .. } => Kind::DTypeError,
        CoreError::NegativeDim { .. }
        | CoreError::NumelMismatch { .. }
        | CoreError::ShapeMismatch { .. }
        | CoreError::AxisOutOfRange { .. }
        | CoreError::InvalidView { .. }
        | CoreError::PartialBlock { .. } => Kind::ShapeError,
        CoreError::Undefined { .. } => Kind::InvalidArgument,
        _ => Kind::Fail,
    }
}
