//! The vocabulary: token texts, types and scores, the text → id index, and the special ids with
//! the defaults llama.cpp applies when the description leaves them out.

use rustc_hash::FxHashMap as HashMap;

use crate::description::{ModelKind, TokenType, VocabularyDescription};
use crate::error::{Result, TokenizerError};

/// Token texts that end generation, as llama.cpp recognises them by text.
const END_OF_GENERATION_TEXTS: [&str; 7] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
];

/// Token texts llama.cpp takes as the end-of-turn token when the file names none.
const END_OF_TURN_TEXTS: [&str; 7] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "<｜end▁of▁sentence｜>",
];

/// Fill-in-the-middle roles (prefix, suffix, middle, pad, repo, file separator) and the texts
/// llama.cpp recognises for each; the first present text of a role is forced to a control token,
/// and the `bool` says whether that token also ends generation.
const FILL_IN_MIDDLE_ROLES: [(&[&str], bool); 6] = [
    (
        &["<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>"],
        false,
    ),
    (
        &["<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>"],
        false,
    ),
    (
        &["<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>"],
        false,
    ),
    (&["<|fim_pad|>", "<fim-pad>", "<PAD>"], true),
    (
        &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"],
        true,
    ),
    (&["<|file_sep|>"], true),
];

/// The ids of the tokens with a role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
}

#[derive(Debug)]
pub(crate) struct Vocabulary {
    pub(crate) kind: ModelKind,
    pub(crate) texts: Vec<String>,
    pub(crate) types: Vec<TokenType>,
    pub(crate) scores: Vec<f32>,
    /// Text → id; for duplicate texts the last id wins, as in llama.cpp.
    pub(crate) ids: HashMap<String, u32>,
    pub(crate) special: SpecialTokens,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_space_prefix: bool,
    /// Tokens that end generation: eos, eot, eom and the end-of-turn texts llama.cpp knows.
    pub(crate) end_of_generation: Vec<u32>,
}

impl Vocabulary {
    pub(crate) fn new(
        desc: &VocabularyDescription,
        kind: ModelKind,
        pre: Option<&str>,
    ) -> Result<Self> {
        let n = desc.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocabulary);
        }
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::VocabularyTooLarge(n));
        }
        let check_len = |field: &'static str, actual: usize| {
            if actual != 0 && actual != n {
                return Err(TokenizerError::LengthMismatch {
                    field,
                    expected: n,
                    actual,
                });
            }
            Ok(())
        };
        check_len("tokenizer.ggml.scores", desc.scores.len())?;
        check_len("tokenizer.ggml.token_type", desc.token_types.len())?;

        let mut types = if desc.token_types.is_empty() {
            vec![TokenType::Normal; n]
        } else {
            desc.token_types
                .iter()
                .enumerate()
                .map(|(id, &t)| TokenType::from_gguf(t, id))
                .collect::<Result<_>>()?
        };
        let scores = if desc.scores.is_empty() {
            vec![0.0; n]
        } else {
            desc.scores.clone()
        };
        // llama.cpp names empty tokens so they cannot match everywhere as special text.
        let texts: Vec<String> = desc
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if t.is_empty() {
                    format!("[EMPTY_{i}]")
                } else {
                    t.clone()
                }
            })
            .collect();
        let mut ids = HashMap::with_capacity_and_hasher(n, Default::default());
        for (id, text) in texts.iter().enumerate() {
            ids.insert(text.clone(), id as u32);
        }

        // Defaults by model, then what the description says (llama.cpp's order).
        let (mut special, mut add_bos, mut add_eos, mut add_space_prefix) = match kind {
            ModelKind::SentencePiece => (
                SpecialTokens {
                    bos: Some(1),
                    eos: Some(2),
                    unk: Some(0),
                    ..Default::default()
                },
                true,
                false,
                true,
            ),
            ModelKind::BytePairEncoding => {
                let bos = if pre == Some("chatglm-bpe") {
                    None
                } else {
                    Some(11)
                };
                let add_bos = matches!(
                    pre,
                    Some("llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "tekken")
                );
                (
                    SpecialTokens {
                        bos,
                        eos: Some(11),
                        ..Default::default()
                    },
                    add_bos,
                    false,
                    false,
                )
            }
        };
        let in_range = |role: &'static str, id: Option<u32>| -> Result<Option<u32>> {
            match id {
                Some(id) if id as usize >= n => Err(TokenizerError::SpecialIdOutOfRange {
                    role,
                    id,
                    vocab_size: n,
                }),
                other => Ok(other),
            }
        };
        let given = |role, id: Option<u32>, default: Option<u32>| -> Result<Option<u32>> {
            Ok(in_range(role, id)?.or(default))
        };
        special.bos = given("bos", desc.bos_id, special.bos)?;
        special.eos = given("eos", desc.eos_id, special.eos)?;
        special.eot = given("eot", desc.eot_id, None)?;
        special.eom = given("eom", desc.eom_id, None)?;
        special.unk = given("unk", desc.unk_id, special.unk)?;
        special.pad = given("pad", desc.pad_id, None)?;
        // Model defaults such as id 11 may not exist in a small vocabulary.
        for id in [&mut special.bos, &mut special.eos, &mut special.unk] {
            if id.is_some_and(|i| i as usize >= n) {
                *id = None;
            }
        }
        add_bos = desc.add_bos.unwrap_or(add_bos);
        add_eos = desc.add_eos.unwrap_or(add_eos);
        add_space_prefix = desc.add_space_prefix.unwrap_or(add_space_prefix);

        // Tokens llama.cpp recognises by their text are forced to be control tokens.
        let mut recognised: Vec<u32> = Vec::new();
        if special.eot.is_none() {
            special.eot = END_OF_TURN_TEXTS.iter().find_map(|t| ids.get(*t).copied());
            recognised.extend(special.eot);
        }
        if special.eom.is_none() {
            special.eom = ids.get("<|eom_id|>").copied();
            recognised.extend(special.eom);
        }
        let mut end_of_generation: Vec<u32> = END_OF_GENERATION_TEXTS
            .iter()
            .filter_map(|t| ids.get(*t).copied())
            .collect();
        recognised.extend(&end_of_generation);
        for (texts, ends) in FILL_IN_MIDDLE_ROLES {
            if let Some(id) = texts.iter().find_map(|t| ids.get(*t).copied()) {
                recognised.push(id);
                if ends {
                    end_of_generation.push(id);
                }
            }
        }
        for &id in &recognised {
            types[id as usize] = TokenType::Control;
        }
        end_of_generation.extend(
            [special.eos, special.eot, special.eom]
                .into_iter()
                .flatten(),
        );
        end_of_generation.sort_unstable();
        end_of_generation.dedup();

        Ok(Self {
            kind,
            texts,
            types,
            scores,
            ids,
            special,
            add_bos,
            add_eos,
            add_space_prefix,
            end_of_generation,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    /// The id of the token whose text is exactly `text`.
    pub(crate) fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Special-token texts matched in raw text before tokenizing, longest first: control and
    /// unknown tokens when `parse_special`, user-defined tokens always.
    pub(crate) fn special_match_order(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.len() as u32)
            .filter(|&id| {
                matches!(
                    self.types[id as usize],
                    TokenType::Control | TokenType::UserDefined | TokenType::Unknown
                )
            })
            .collect();
        order.sort_by(|&a, &b| {
            self.texts[b as usize]
                .len()
                .cmp(&self.texts[a as usize].len())
                .then(a.cmp(&b))
        });
        order
    }
}
