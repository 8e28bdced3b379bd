//! StringSplit (opset 20): splits every string by `delimiter` (or, when it is absent or empty,
//! by runs of whitespace, ignoring leading and trailing whitespace), at most `maxsplit` times —
//! Python's `str.split` semantics. Outputs: the parts, padded with empty strings to the longest
//! split, shape `X.shape + [max parts]`; and the number of parts of each string (int64, `X.shape`).

use strata_core::{DType, Tensor};

use super::common::{text_fact, text_input, TextOutputs};
use crate::{Dim, Fact, Kernel, OpContext, OpResult, Operator};

const OP: &str = "StringSplit";

#[derive(Debug, Clone)]
pub struct StringSplit {
    /// `None`: split on whitespace runs.
    delimiter: Option<String>,
    /// `None`: no limit.
    maxsplit: Option<usize>,
}

impl StringSplit {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        let delimiter = ctx.attrs.string("delimiter")?.filter(|d| !d.is_empty());
        // Negative means unlimited, as in Python.
        let maxsplit = ctx
            .attrs
            .int("maxsplit")?
            .and_then(|m| usize::try_from(m).ok());
        Ok(Box::new(StringSplit {
            delimiter,
            maxsplit,
        }))
    }

    fn split<'s>(&self, s: &'s str) -> Vec<&'s str> {
        match &self.delimiter {
            Some(d) => match self.maxsplit {
                Some(m) => s.splitn(m.saturating_add(1), d.as_str()).collect(),
                None => s.split(d.as_str()).collect(),
            },
            None => split_whitespace(s, self.maxsplit),
        }
    }
}

/// Python's whitespace: Unicode White_Space plus the ASCII separators U+001C–U+001F.
fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `str.split(None, maxsplit)`: whitespace runs separate parts; once `maxsplit` parts are cut,
/// the rest (without its leading whitespace) is the last part.
fn split_whitespace(s: &str, maxsplit: Option<usize>) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = s.trim_start_matches(is_space);
    while !rest.is_empty() {
        if maxsplit == Some(parts.len()) {
            parts.push(rest);
            break;
        }
        match rest.find(is_space) {
            Some(end) => {
                parts.push(&rest[..end]);
                rest = rest[end..].trim_start_matches(is_space);
            }
            None => {
                parts.push(rest);
                break;
            }
        }
    }
    parts
}

impl Operator for StringSplit {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = text_fact(OP, inputs, 0)?;
        let mut parts = x.dims.clone();
        parts.push(Dim::Unknown);
        Ok(vec![
            Fact::new(DType::String, parts),
            Fact::new(DType::I64, x.dims.clone()),
        ])
    }

    fn is_data_dependent(&self) -> bool {
        true
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        _device: strata_core::Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let op = self.clone();
        Ok(TextOutputs::boxed(OP, move |inputs| split(&op, inputs)))
    }
}

fn split(op: &StringSplit, inputs: &[&Tensor]) -> OpResult<Vec<Tensor>> {
    let x = text_input(OP, inputs, 0)?;
    let splits: Vec<Vec<&str>> = x.strings()?.into_iter().map(|s| op.split(s)).collect();
    let width = splits.iter().map(Vec::len).max().unwrap_or(0);
    let counts: Vec<i64> = splits.iter().map(|p| p.len() as i64).collect();
    let mut padded = Vec::with_capacity(splits.len() * width);
    for parts in &splits {
        padded.extend(parts.iter().copied());
        padded.extend(std::iter::repeat_n("", width - parts.len()));
    }
    let mut dims = x.dims().to_vec();
    dims.push(width);
    Ok(vec![
        Tensor::from_strings(&dims, padded)?,
        Tensor::from_slice(&counts, x.dims())?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OpError;

    fn op(delimiter: Option<&str>, maxsplit: Option<usize>) -> StringSplit {
        StringSplit {
            delimiter: delimiter.map(String::from),
            maxsplit,
        }
    }

    #[test]
    fn python_split_semantics() {
        let ws = op(None, None);
        assert_eq!(ws.split("  a b\t\nc  "), ["a", "b", "c"]);
        assert!(ws.split("   ").is_empty());
        assert_eq!(op(None, Some(1)).split(" a b  c  "), ["a", "b  c  "]);
        assert_eq!(op(None, Some(0)).split(" a b "), ["a b "]);
        let comma = op(Some(","), None);
        assert_eq!(comma.split("a,,b"), ["a", "", "b"]);
        assert_eq!(comma.split(""), [""]);
        assert_eq!(op(Some("::"), Some(1)).split("a::b::c"), ["a", "b::c"]);
    }

    #[test]
    fn pads_to_the_longest_and_counts() {
        let x = Tensor::from_strings(&[2], ["a b c", "d"]).unwrap();
        let out = split(&op(None, None), &[&x]).unwrap();
        assert_eq!(out[0].dims(), [2, 3]);
        assert_eq!(out[0].strings().unwrap(), ["a", "b", "c", "d", "", ""]);
        assert_eq!(out[1].to_vec::<i64>().unwrap(), [3, 1]);
        let empty = Tensor::from_strings(&[0], Vec::<&str>::new()).unwrap();
        assert_eq!(split(&op(None, None), &[&empty]).unwrap()[0].dims(), [0, 0]);
    }

    #[test]
    fn numbers_are_refused() {
        let n = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
        assert!(matches!(
            split(&op(None, None), &[&n]),
            Err(OpError::DType { index: 0, .. })
        ));
    }
}
