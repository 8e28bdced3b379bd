//! ONNX external data references: the `location`/`offset`/`length` keys of a tensor whose
//! bytes live in a side file, and the rule that such a file must lie inside the model directory.

use std::path::{Component, Path, PathBuf};

use crate::error::{OnnxError, Result};
use crate::proto::TensorProto;

/// Where a tensor's bytes are: a file relative to the model directory, and a byte range in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExternalRef {
    /// The location, checked and normalized: relative, no component escaping the directory.
    pub relative_path: PathBuf,
    pub offset: usize,
    /// `None` when the model leaves it out: the range then ends where the tensor's bytes do.
    pub length: Option<usize>,
}

/// Reads the external-data keys of `tp` (`checksum` and unknown keys are ignored).
pub(crate) fn external_ref(tp: &TensorProto, tensor: &str) -> Result<ExternalRef> {
    let mut location = None;
    let mut offset = 0;
    let mut length = None;
    for entry in &tp.external_data {
        let value = entry.value();
        let number = || {
            value.trim().parse::<usize>().map_err(|_| {
                OnnxError::external(
                    tensor,
                    format!("key '{}' is not a byte count: '{value}'", entry.key()),
                )
            })
        };
        match entry.key() {
            "location" => location = Some(value),
            "offset" => offset = number()?,
            "length" => length = Some(number()?),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| OnnxError::external(tensor, "no 'location' key"))?;
    let relative_path = relative_location(location)
        .map_err(|reason| OnnxError::external(tensor, format!("location '{location}' {reason}")))?;
    Ok(ExternalRef {
        relative_path,
        offset,
        length,
    })
}

/// Normalizes `location` to a path inside the model directory, or says why it is not one.
///
/// The check is lexical: absolute paths, drive prefixes and `..` climbing above the directory
/// are refused. Symbolic links are resolved when the file is opened
/// ([`crate::WeightSource`]), where a link leading outside the directory is refused too.
/// Backslashes count as separators, since ONNX files travel between Windows and Unix.
pub(crate) fn relative_location(location: &str) -> std::result::Result<PathBuf, &'static str> {
    if location.contains('\0') {
        return Err("contains a NUL byte");
    }
    let unified = location.replace('\\', "/");
    let mut clean = PathBuf::new();
    for component in Path::new(&unified).components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !clean.pop() {
                    return Err("escapes the model directory");
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err("is absolute; it must be relative to the model directory")
            }
        }
    }
    if clean.as_os_str().is_empty() {
        return Err("names no file");
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::StringStringEntryProto;

    fn entry(key: &str, value: &str) -> StringStringEntryProto {
        StringStringEntryProto {
            key: Some(key.into()),
            value: Some(value.into()),
        }
    }

    #[test]
    fn locations_stay_inside_the_model_directory() {
        assert_eq!(relative_location("w.bin"), Ok(PathBuf::from("w.bin")));
        assert_eq!(
            relative_location("./data/../w.bin"),
            Ok(PathBuf::from("w.bin"))
        );
        assert_eq!(
            relative_location("data\\w.bin"),
            Ok(PathBuf::from("data/w.bin"))
        );
        for bad in [
            "../w.bin",
            "data/../../w.bin",
            "..\\w.bin",
            "/etc/passwd",
            "\\\\server\\share",
            "",
            ".",
            "a\0b",
        ] {
            assert!(relative_location(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn keys_are_parsed_and_checked() {
        let mut tp = TensorProto {
            external_data: vec![
                entry("location", "w.bin"),
                entry("offset", "4096"),
                entry("length", "16"),
                entry("checksum", "x"),
            ],
            ..Default::default()
        };
        let r = external_ref(&tp, "w").unwrap();
        assert_eq!(
            (r.relative_path, r.offset, r.length),
            (PathBuf::from("w.bin"), 4096, Some(16))
        );
        tp.external_data[1] = entry("offset", "-1");
        assert!(
            matches!(external_ref(&tp, "w"), Err(OnnxError::ExternalData { tensor, .. }) if tensor == "w")
        );
        tp.external_data.remove(0);
        let message = external_ref(&tp, "w").unwrap_err().to_string();
        assert!(message.contains("'w'"), "{message}");
    }
}
