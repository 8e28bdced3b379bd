//! The tokenizer: text → ids (special-token partition, then byte-level BPE or SentencePiece) and
//! ids → bytes, built once from a [`VocabularyDescription`] and shared (`Send + Sync`).

use std::ops::Range;

use crate::bpe::{merge_word, BpeScratch, MergeTable};
use crate::byte_level::ByteLevelMap;
use crate::chat::ChatTemplate;
use crate::description::{ModelKind, TokenType, VocabularyDescription};
use crate::error::{Result, TokenizerError};
use crate::pretokenize::PreTokenizer;
use crate::special::{partition, Fragment};
use crate::spm::{self, SpmScratch, SPACE_MARK};
use crate::vocab::{SpecialTokens, Vocabulary};

/// How to encode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Add the vocabulary's bos/eos tokens when it asks for them (`add_bos`/`add_eos`).
    pub add_special: bool,
    /// Turn control-token texts such as `<|im_start|>` in the input into their ids; when off they
    /// are tokenized as plain text (user-defined tokens are always matched, as in llama.cpp).
    pub parse_special: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self {
            add_special: true,
            parse_special: false,
        }
    }
}

/// Byte-level BPE parts.
#[derive(Debug)]
struct BytePair {
    pre: PreTokenizer,
    merges: MergeTable,
    bytes: ByteLevelMap,
    /// Llama 3 style: a whole piece that is a token is emitted without merging.
    ignore_merges: bool,
}

/// A tokenizer built from a vocabulary description.
#[derive(Debug)]
pub struct Tokenizer {
    vocab: Vocabulary,
    byte_pair: Option<BytePair>,
    special_order: Vec<u32>,
    /// The bytes each token decodes to, back to back; `piece_ranges[id]` indexes them.
    piece_bytes: Vec<u8>,
    piece_ranges: Vec<Range<usize>>,
    chat_template: Option<String>,
}

impl Tokenizer {
    /// Builds the tokenizer; every inconsistency in the description is a typed error.
    pub fn new(desc: &VocabularyDescription) -> Result<Self> {
        let kind = ModelKind::from_gguf_name(&desc.model)?;
        let pre = desc.pre.as_deref();
        let vocab = Vocabulary::new(desc, kind, pre)?;
        let byte_pair = match kind {
            ModelKind::BytePairEncoding => Some(BytePair {
                pre: PreTokenizer::for_pre_type(pre)?,
                merges: MergeTable::new(&desc.merges, &vocab.ids, vocab.len())?,
                bytes: ByteLevelMap::new(),
                ignore_merges: matches!(
                    pre,
                    Some("llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "tekken")
                ),
            }),
            ModelKind::SentencePiece => None,
        };
        let special_order = vocab.special_match_order();
        let mut tokenizer = Self {
            vocab,
            byte_pair,
            special_order,
            piece_bytes: Vec::new(),
            piece_ranges: Vec::new(),
            chat_template: desc.chat_template.clone(),
        };
        tokenizer.build_pieces();
        Ok(tokenizer)
    }

    /// What each token decodes to (special tokens as their text), like llama.cpp's piece cache.
    fn build_pieces(&mut self) {
        let mut bytes = Vec::new();
        let mut ranges = Vec::with_capacity(self.vocab.len());
        for (id, text) in self.vocab.texts.iter().enumerate() {
            let start = bytes.len();
            let kind = self.vocab.types[id];
            match (&self.byte_pair, kind) {
                (_, TokenType::Control | TokenType::Unknown | TokenType::UserDefined) => {
                    bytes.extend_from_slice(text.as_bytes())
                }
                (Some(bp), TokenType::Normal) => bp.bytes.decode_into(text, &mut bytes),
                (None, TokenType::Normal) => {
                    bytes.extend_from_slice(text.replace(SPACE_MARK, " ").as_bytes())
                }
                (None, TokenType::Byte) => bytes.extend(spm::byte_of_token_text(text)),
                // llama.cpp decodes unused and undefined tokens (and byte tokens in BPE) to nothing.
                _ => {}
            }
            ranges.push(start..bytes.len());
        }
        self.piece_bytes = bytes;
        self.piece_ranges = ranges;
    }

    /// The tokenizer family.
    pub fn model_kind(&self) -> ModelKind {
        self.vocab.kind
    }

    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The ids with a role (bos, eos, eot, eom, unk, pad) after llama.cpp's defaults.
    pub fn special_tokens(&self) -> SpecialTokens {
        self.vocab.special
    }

    /// Whether encoding with `add_special` prepends bos.
    pub fn adds_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Tokens that end generation (eos, eot, eom and the end-of-turn tokens known by text).
    pub fn end_of_generation_ids(&self) -> &[u32] {
        &self.vocab.end_of_generation
    }

    /// Whether `id` ends generation.
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.vocab.end_of_generation.binary_search(&id).is_ok()
    }

    /// The stored text of a token (byte-level or `▁` form).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize).map(String::as_str)
    }

    /// The type of a token.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.vocab.types.get(id as usize).copied()
    }

    /// The id of the token whose stored text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.token_id(text)
    }

    /// Encodes `text` into ids.
    pub fn encode(&self, text: &str, options: EncodeOptions) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        self.encode_into(text, options, &mut out)?;
        Ok(out)
    }

    /// Encodes `text`, appending the ids to `out`.
    pub fn encode_into(
        &self,
        text: &str,
        options: EncodeOptions,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let vocab = &self.vocab;
        let (mut fragments, mut scratch) = (Vec::new(), Vec::new());
        let specials = self
            .special_order
            .iter()
            .filter(|&&id| options.parse_special || !vocab.types[id as usize].is_special())
            .map(|&id| (id, vocab.texts[id as usize].as_str()));
        partition(text, specials, &mut fragments, &mut scratch);

        let add_bos = options.add_special && vocab.add_bos;
        if add_bos {
            out.push(
                vocab
                    .special
                    .bos
                    .ok_or(TokenizerError::MissingSpecialToken("bos"))?,
            );
        }
        match &self.byte_pair {
            Some(bp) => self.encode_byte_pair(bp, text, &fragments, out),
            None => self.encode_sentence_piece(text, &fragments, out),
        }
        if options.add_special && vocab.add_eos {
            out.push(
                vocab
                    .special
                    .eos
                    .ok_or(TokenizerError::MissingSpecialToken("eos"))?,
            );
        }
        Ok(())
    }

    fn encode_byte_pair(
        &self,
        bp: &BytePair,
        text: &str,
        fragments: &[Fragment],
        out: &mut Vec<u32>,
    ) {
        let (mut pieces, mut split_scratch) = (Vec::new(), Vec::new());
        let mut merge_scratch = BpeScratch::default();
        let mut encoded = String::new();
        for fragment in fragments {
            let range = match fragment {
                Fragment::Token(id) => {
                    out.push(*id);
                    continue;
                }
                Fragment::Text(range) => range.clone(),
            };
            let fragment_text = &text[range];
            bp.pre.split(fragment_text, &mut pieces, &mut split_scratch);
            for piece in &pieces {
                encoded.clear();
                bp.bytes
                    .encode_into(&fragment_text[piece.clone()], &mut encoded);
                if bp.ignore_merges {
                    if let Some(id) = self.vocab.token_id(&encoded) {
                        out.push(id);
                        continue;
                    }
                }
                merge_word(
                    &bp.merges,
                    &encoded,
                    &mut merge_scratch,
                    |symbol| match self.vocab.token_id(symbol) {
                        Some(id) => out.push(id),
                        // Not a token: llama.cpp falls back to one-byte tokens where they exist.
                        None => out.extend(symbol.char_indices().filter_map(|(i, c)| {
                            (c.len_utf8() == 1)
                                .then(|| self.vocab.token_id(&symbol[i..i + 1]))
                                .flatten()
                        })),
                    },
                );
            }
        }
    }

    fn encode_sentence_piece(&self, text: &str, fragments: &[Fragment], out: &mut Vec<u32>) {
        let mut scratch = SpmScratch::default();
        let mut escaped = String::new();
        // A space is prefixed to the first text and to text right after a special token.
        let mut previous_was_special = true;
        for fragment in fragments {
            match fragment {
                Fragment::Token(id) => {
                    out.push(*id);
                    previous_was_special = true;
                }
                Fragment::Text(range) => {
                    escaped.clear();
                    if self.vocab.add_space_prefix && previous_was_special {
                        escaped.push_str(SPACE_MARK);
                    }
                    for ch in text[range.clone()].chars() {
                        if ch == ' ' {
                            escaped.push_str(SPACE_MARK);
                        } else {
                            escaped.push(ch);
                        }
                    }
                    spm::encode(&self.vocab, &escaped, &mut scratch, out);
                    previous_was_special = false;
                }
            }
        }
    }

    /// The bytes token `id` decodes to; control and unknown tokens give their text only when
    /// `render_special`.
    pub fn token_bytes(&self, id: u32, render_special: bool) -> Result<&[u8]> {
        let range = self
            .piece_ranges
            .get(id as usize)
            .ok_or(TokenizerError::TokenOutOfRange {
                id,
                vocab_size: self.vocab.len(),
            })?;
        if !render_special && self.vocab.types[id as usize].is_special() {
            return Ok(&[]);
        }
        Ok(&self.piece_bytes[range.clone()])
    }

    /// Whether decoding drops one leading space from the first non-empty piece (the space
    /// SentencePiece encoding prefixes), so text round-trips.
    pub(crate) fn strips_leading_space(&self) -> bool {
        self.vocab.add_space_prefix
    }

    /// Decodes `ids` to text; invalid UTF-8 (a sequence cut short) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], render_special: bool) -> Result<String> {
        let mut bytes = Vec::new();
        for &id in ids {
            let mut piece = self.token_bytes(id, render_special)?;
            if bytes.is_empty() && self.strips_leading_space() {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
            bytes.extend_from_slice(piece);
        }
        Ok(match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// The chat template from the description, with this vocabulary's bos/eos texts.
    pub fn chat_template(&self) -> Result<ChatTemplate> {
        let source = self
            .chat_template
            .as_deref()
            .ok_or(TokenizerError::NoChatTemplate)?;
        let text_of = |id: Option<u32>| {
            id.and_then(|id| self.token_text(id))
                .unwrap_or_default()
                .to_string()
        };
        ChatTemplate::new(
            source,
            &text_of(self.vocab.special.bos),
            &text_of(self.vocab.special.eos),
        )
    }
}
