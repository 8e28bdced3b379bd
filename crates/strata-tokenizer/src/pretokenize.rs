//! Pre-tokenizers for byte-level BPE: the regex splits llama.cpp applies for each
//! `tokenizer.ggml.pre` type, before merges run inside each piece.
//!
//! A pre-tokenizer is a list of stages; each stage splits every piece the previous stage produced
//! into its matches and the gaps between them (both kept, as llama.cpp does). The patterns use
//! `\s+(?!\S)`, a lookahead the linear-time `regex` crate lacks; it is hand-translated: the
//! pattern matches `\s+` instead, and a whole-whitespace match from that branch that stops before
//! a non-space character gives back its last character — exactly what the backtracking
//! `\s+(?!\S)|\s+` would match.

use std::ops::Range;

use regex::Regex;

use crate::error::{Result, TokenizerError};

/// GPT-2: contractions, letters, digits, other symbols (each with an optional leading space), and
/// whitespace. `\s+(?!\S)` is the final `\s+` branch plus the give-back rule.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

/// Llama 3 (`llama-bpe`): case-insensitive contractions, digits in runs of at most three,
/// punctuation runs that swallow following newlines, newline runs.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";

/// Qwen 2: Llama 3's pattern with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+";

/// Which whitespace matches the give-back rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GiveBack {
    /// The stage has no `\s+(?!\S)` branch.
    Never,
    /// Every all-whitespace match comes from the `\s+` branch (GPT-2 style patterns).
    AllWhitespace,
    /// The pattern has an earlier `\s*[\r\n]+` branch, so all-whitespace matches that contain a
    /// line break came from it; only those without one came from `\s+`.
    WhitespaceWithoutLineBreak,
}

#[derive(Debug)]
struct Stage {
    regex: Regex,
    give_back: GiveBack,
}

/// A compiled pre-tokenizer for one `pre` type.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    stages: Vec<Stage>,
}

impl PreTokenizer {
    /// Builds the pre-tokenizer llama.cpp uses for `pre` (`None` = `default`).
    pub(crate) fn for_pre_type(pre: Option<&str>) -> Result<Self> {
        let name = pre.unwrap_or("default");
        let stages: &[(&str, GiveBack)] = match name {
            "default" => &[
                (r"[\p{P}\$\+<=>\^~\|]+", GiveBack::Never),
                (GPT2, GiveBack::AllWhitespace),
                (r"\p{N}+", GiveBack::Never),
                (r"[0-9][0-9][0-9]", GiveBack::Never),
            ],
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v1-en"
            | "jina-v2-es" | "jina-v2-de" | "jina-v2-code" | "roberta-bpe" | "mpt" | "olmo"
            | "jais" => &[(GPT2, GiveBack::AllWhitespace)],
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva-7b" => &[(r"\p{N}", GiveBack::Never), (GPT2, GiveBack::AllWhitespace)],
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "dbrx" | "smaug-bpe"
            | "chatglm-bpe" => &[(LLAMA3, GiveBack::WhitespaceWithoutLineBreak)],
            "qwen2" | "stablelm2" | "megrez" => &[(QWEN2, GiveBack::WhitespaceWithoutLineBreak)],
            other => return Err(TokenizerError::UnsupportedPreTokenizer(other.to_string())),
        };
        let stages = stages
            .iter()
            .map(|&(pattern, give_back)| {
                Regex::new(pattern)
                    .map(|regex| Stage { regex, give_back })
                    .map_err(|e| TokenizerError::Pattern {
                        pre: name.to_string(),
                        message: e.to_string(),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { stages })
    }

    /// Splits `text` into pieces (byte ranges into `text`, in order, covering all of it).
    /// `scratch` is reused between calls to avoid reallocating.
    pub(crate) fn split(
        &self,
        text: &str,
        pieces: &mut Vec<Range<usize>>,
        scratch: &mut Vec<Range<usize>>,
    ) {
        pieces.clear();
        if text.is_empty() {
            return;
        }
        pieces.push(0..text.len());
        for stage in &self.stages {
            scratch.clear();
            for piece in pieces.iter() {
                stage.split_piece(text, piece.clone(), scratch);
            }
            std::mem::swap(pieces, scratch);
        }
    }
}

impl Stage {
    fn split_piece(&self, text: &str, piece: Range<usize>, out: &mut Vec<Range<usize>>) {
        let haystack = &text[piece.clone()];
        let base = piece.start;
        let mut gap_start = 0;
        let mut pos = 0;
        while pos < haystack.len() {
            let Some(found) = self.regex.find_at(haystack, pos) else {
                break;
            };
            let (start, mut end) = (found.start(), found.end());
            if end == start {
                // None of the patterns match the empty string; guard against looping anyway.
                pos = next_char_boundary(haystack, start);
                continue;
            }
            if self.gives_back(&haystack[start..end], end < haystack.len()) {
                end = last_char_start(haystack, end);
            }
            if start > gap_start {
                out.push(base + gap_start..base + start);
            }
            out.push(base + start..base + end);
            gap_start = end;
            pos = end;
        }
        if gap_start < haystack.len() {
            out.push(base + gap_start..base + haystack.len());
        }
    }

    /// Whether `matched` is a `\s+` match that `\s+(?!\S)` would have matched one character
    /// shorter: it is all whitespace, longer than one character, and followed by a non-space
    /// character inside the piece (`\s+` is greedy, so whatever follows is not whitespace).
    fn gives_back(&self, matched: &str, followed: bool) -> bool {
        let eligible = match self.give_back {
            GiveBack::Never => false,
            GiveBack::AllWhitespace => true,
            GiveBack::WhitespaceWithoutLineBreak => !matched.contains(['\r', '\n']),
        };
        eligible
            && followed
            && matched.chars().all(char::is_whitespace)
            && matched.chars().nth(1).is_some()
    }
}

fn next_char_boundary(s: &str, at: usize) -> usize {
    s[at..]
        .chars()
        .next()
        .map_or(s.len(), |c| at + c.len_utf8())
}

fn last_char_start(s: &str, end: usize) -> usize {
    s[..end].char_indices().next_back().map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pre: &str, text: &str) -> Vec<String> {
        let p = PreTokenizer::for_pre_type(Some(pre)).unwrap();
        let (mut pieces, mut scratch) = (Vec::new(), Vec::new());
        p.split(text, &mut pieces, &mut scratch);
        pieces.into_iter().map(|r| text[r].to_string()).collect()
    }

    #[test]
    fn gpt2_keeps_one_space_for_the_next_word() {
        assert_eq!(split("gpt-2", "Hello   world"), ["Hello", "  ", " world"]);
        assert_eq!(split("gpt-2", "a  "), ["a", "  "]);
        assert_eq!(split("gpt-2", "I'll 123"), ["I", "'ll", " 123"]);
        assert_eq!(split("gpt-2", "a\n\nb"), ["a", "\n", "\n", "b"]);
    }

    #[test]
    fn smollm_isolates_every_digit_first() {
        assert_eq!(
            split("smollm", "x 2024!"),
            ["x", " ", "2", "0", "2", "4", "!"]
        );
    }

    #[test]
    fn llama3_groups_digits_by_three_and_newlines() {
        assert_eq!(split("llama-bpe", "1234567 ok"), ["123", "456", "7", " ok"]);
        assert_eq!(split("llama-bpe", "a:\n\n  b"), ["a", ":\n\n", " ", " b"]);
        assert_eq!(split("llama-bpe", "x  \n y"), ["x", "  \n", " y"]);
        assert_eq!(split("qwen2", "12 'S"), ["1", "2", " '", "S"]);
    }

    #[test]
    fn unknown_pre_type_is_a_typed_error() {
        assert!(matches!(
            PreTokenizer::for_pre_type(Some("nope")),
            Err(TokenizerError::UnsupportedPreTokenizer(name)) if name == "nope"
        ));
    }
}
