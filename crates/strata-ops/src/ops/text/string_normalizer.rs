//! StringNormalizer (opset 10): drops the elements of a `[C]` or `[1, C]` string tensor that are
//! stopwords (compared exactly, or ignoring case when `is_case_sensitive` is 0), then lower- or
//! upper-cases the rest (`case_change_action` LOWER / UPPER / NONE). When every element is
//! dropped the output is one empty string, shape `[1]` or `[1, 1]`.
//!
//! Case mapping is Unicode's default, which is every locale's except Turkish, Azerbaijani and
//! Lithuanian; a `locale` naming one of those is refused rather than mapped wrongly.

use std::collections::HashSet;

use strata_core::{DType, Tensor};

use super::common::{text_fact, text_input, TextOutputs};
use crate::{Attributes, Dim, Fact, Kernel, OpContext, OpError, OpResult, Operator};

const OP: &str = "StringNormalizer";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CaseChange {
    Lower,
    Upper,
    None,
}

#[derive(Debug, Clone)]
pub struct StringNormalizer {
    case: CaseChange,
    case_sensitive: bool,
    /// As given when case-sensitive, lower-cased otherwise.
    stopwords: HashSet<String>,
}

impl StringNormalizer {
    pub fn build(ctx: &OpContext) -> OpResult<Box<dyn Operator>> {
        Ok(Box::new(StringNormalizer::new(ctx.attrs)?))
    }

    fn new(attrs: &Attributes) -> OpResult<Self> {
        let case = match attrs.string_or("case_change_action", "NONE")?.as_str() {
            "LOWER" => CaseChange::Lower,
            "UPPER" => CaseChange::Upper,
            "NONE" => CaseChange::None,
            other => {
                return Err(OpError::attribute(
                    OP,
                    "case_change_action",
                    format!("{other:?} is not LOWER, UPPER or NONE"),
                ))
            }
        };
        let case_sensitive = attrs.int_or("is_case_sensitive", 0)? != 0;
        if let Some(locale) = attrs.string("locale")? {
            let language = locale.split(['_', '-', '.']).next().unwrap_or("");
            if ["tr", "az", "lt"].contains(&language.to_ascii_lowercase().as_str()) {
                return Err(OpError::attribute(
                    OP,
                    "locale",
                    format!(
                        "{locale:?} needs locale-specific case mapping, which is not supported"
                    ),
                ));
            }
        }
        let stopwords = attrs
            .strings("stopwords")?
            .unwrap_or_default()
            .into_iter()
            .map(|w| if case_sensitive { w } else { w.to_lowercase() })
            .collect();
        Ok(StringNormalizer {
            case,
            case_sensitive,
            stopwords,
        })
    }

    fn is_stopword(&self, word: &str) -> bool {
        if self.case_sensitive {
            self.stopwords.contains(word)
        } else {
            self.stopwords.contains(&word.to_lowercase())
        }
    }

    fn change_case(&self, word: &str) -> String {
        match self.case {
            CaseChange::Lower => word.to_lowercase(),
            CaseChange::Upper => word.to_uppercase(),
            CaseChange::None => word.to_string(),
        }
    }
}

/// The input must be `[C]` or `[1, C]`.
fn check_rank(dims: &[Dim]) -> OpResult<()> {
    match dims {
        [_] => Ok(()),
        [first, _] if first.known().is_none_or(|n| n == 1) => Ok(()),
        _ => Err(OpError::shape(
            OP,
            format!("input must be [C] or [1, C], got {dims:?}"),
        )),
    }
}

impl Operator for StringNormalizer {
    fn op_type(&self) -> &str {
        OP
    }

    fn infer(&self, inputs: &[&Fact]) -> OpResult<Vec<Fact>> {
        let x = text_fact(OP, inputs, 0)?;
        check_rank(&x.dims)?;
        let mut dims = x.dims.clone();
        if !self.stopwords.is_empty() {
            *dims.last_mut().unwrap_or(&mut Dim::Unknown) = Dim::Unknown;
        }
        Ok(vec![Fact::new(DType::String, dims)])
    }

    fn is_data_dependent(&self) -> bool {
        !self.stopwords.is_empty()
    }

    fn kernel(
        &self,
        _inputs: &[&Fact],
        _outputs: &[&Fact],
        _device: strata_core::Device,
    ) -> OpResult<Box<dyn Kernel>> {
        let op = self.clone();
        Ok(TextOutputs::boxed(OP, move |inputs| normalize(&op, inputs)))
    }
}

fn normalize(op: &StringNormalizer, inputs: &[&Tensor]) -> OpResult<Vec<Tensor>> {
    let x = text_input(OP, inputs, 0)?;
    let dims: Vec<Dim> = x.dims().iter().map(|&d| Dim::Known(d)).collect();
    check_rank(&dims)?;
    let mut kept: Vec<String> = x
        .strings()?
        .into_iter()
        .filter(|w| !op.is_stopword(w))
        .map(|w| op.change_case(w))
        .collect();
    if kept.is_empty() {
        kept.push(String::new());
    }
    let out_dims: Vec<usize> = match x.rank() {
        1 => vec![kept.len()],
        _ => vec![1, kept.len()],
    };
    Ok(vec![Tensor::from_strings(&out_dims, kept)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attr;

    fn build(attrs: Attributes) -> OpResult<StringNormalizer> {
        StringNormalizer::new(&attrs)
    }

    fn attrs(action: &str, sensitive: i64, stops: &[&str]) -> Attributes {
        Attributes::new(OP)
            .with("case_change_action", Attr::String(action.into()))
            .with("is_case_sensitive", Attr::Int(sensitive))
            .with(
                "stopwords",
                Attr::Strings(stops.iter().map(|s| s.to_string()).collect()),
            )
    }

    #[test]
    fn drops_stopwords_then_changes_case() {
        let x = Tensor::from_strings(&[4], ["monday", "tuesday", "Monday", "Straße"]).unwrap();
        let op = build(attrs("UPPER", 1, &["monday"])).unwrap();
        let out = normalize(&op, &[&x]).unwrap();
        assert_eq!(out[0].strings().unwrap(), ["TUESDAY", "MONDAY", "STRASSE"]);
        let op = build(attrs("LOWER", 0, &["MONDAY"])).unwrap();
        let x2 = Tensor::from_strings(&[1, 3], ["Monday", "x", "monDAY"]).unwrap();
        let out = normalize(&op, &[&x2]).unwrap();
        assert_eq!(out[0].dims(), [1, 1]);
        assert_eq!(out[0].strings().unwrap(), ["x"]);
    }

    #[test]
    fn everything_dropped_leaves_one_empty_string() {
        let op = build(attrs("NONE", 1, &["a"])).unwrap();
        let x = Tensor::from_strings(&[1, 2], ["a", "a"]).unwrap();
        let out = normalize(&op, &[&x]).unwrap();
        assert_eq!(
            (out[0].dims(), out[0].strings().unwrap()),
            (&[1, 1][..], vec![""])
        );
    }

    #[test]
    fn bad_attributes_and_shapes_are_errors() {
        assert!(build(attrs("TITLE", 0, &[])).is_err());
        let turkish = attrs("LOWER", 0, &[]).with("locale", Attr::String("tr_TR.UTF-8".into()));
        assert!(build(turkish).unwrap_err().to_string().contains("locale"));
        let op = build(attrs("NONE", 0, &[])).unwrap();
        let x = Tensor::from_strings(&[2, 2], ["a", "b", "c", "d"]).unwrap();
        assert!(matches!(normalize(&op, &[&x]), Err(OpError::Shape { .. })));
        assert!(op.infer(&[&Fact::known(DType::I64, &[2])]).is_err());
    }
}
