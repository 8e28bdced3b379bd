//! Special-token partition: before any regex or merge runs, the raw text is cut at every
//! occurrence of a special token's text (longest tokens first), as llama.cpp does, so
//! `<|im_start|>` becomes one id instead of being spelled out.

use std::ops::Range;

/// A stretch of the input: plain text still to tokenize, or a special token already matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(Range<usize>),
    Token(u32),
}

/// Cuts `text` into fragments at the texts of `specials` (ids with their texts, in match order).
pub(crate) fn partition<'a>(
    text: &str,
    specials: impl Iterator<Item = (u32, &'a str)>,
    out: &mut Vec<Fragment>,
    scratch: &mut Vec<Fragment>,
) {
    out.clear();
    if text.is_empty() {
        return;
    }
    out.push(Fragment::Text(0..text.len()));
    for (id, needle) in specials {
        if needle.is_empty()
            || !out
                .iter()
                .any(|f| matches!(f, Fragment::Text(r) if text[r.clone()].contains(needle)))
        {
            continue;
        }
        scratch.clear();
        for fragment in out.drain(..) {
            let Fragment::Text(range) = fragment else {
                scratch.push(fragment);
                continue;
            };
            let mut start = range.start;
            while let Some(found) = text[start..range.end].find(needle) {
                let at = start + found;
                if at > start {
                    scratch.push(Fragment::Text(start..at));
                }
                scratch.push(Fragment::Token(id));
                start = at + needle.len();
            }
            if start < range.end {
                scratch.push(Fragment::Text(start..range.end));
            }
        }
        std::mem::swap(out, scratch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_special_wins_and_text_between_is_kept() {
        let text = "<|a|><|ab|>x<|a|>";
        let specials = [(7u32, "<|ab|>"), (5u32, "<|a|>")];
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        partition(text, specials.into_iter(), &mut out, &mut scratch);
        assert_eq!(
            out,
            [
                Fragment::Token(5),
                Fragment::Token(7),
                Fragment::Text(11..12),
                Fragment::Token(5)
            ]
        );
    }
}
