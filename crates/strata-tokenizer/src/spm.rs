//! SentencePiece BPE (`tokenizer.ggml.model = llama`): start from UTF-8 characters, repeatedly
//! merge the adjacent pair whose concatenation is the token with the highest score, and spell
//! anything left that is not a token as `<0xXX>` byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::symbols::{live, merge_right, split_chars, Symbol};
use crate::vocab::Vocabulary;

/// SentencePiece's word-boundary mark, which stands for a space in token texts.
pub(crate) const SPACE_MARK: &str = "\u{2581}";

/// A candidate merge: highest score first, then the leftmost pair.
#[derive(Clone, Copy, Debug)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Reusable buffers for one encode call.
#[derive(Debug, Default)]
pub(crate) struct SpmScratch {
    symbols: Vec<Symbol>,
    heap: BinaryHeap<Bigram>,
}

/// Tokenizes `text` (spaces already replaced by `▁`) and appends the ids to `out`.
/// Bytes with no `<0xXX>` token (nor a one-character token) become `unk` if there is one.
pub(crate) fn encode(vocab: &Vocabulary, text: &str, scratch: &mut SpmScratch, out: &mut Vec<u32>) {
    let SpmScratch { symbols, heap } = scratch;
    split_chars(text, symbols);
    heap.clear();
    let try_pair = |symbols: &[Symbol],
                    heap: &mut BinaryHeap<Bigram>,
                    left: Option<usize>,
                    right: Option<usize>| {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let (l, r) = (symbols[left], symbols[right]);
        let len = l.len + r.len;
        if let Some(id) = vocab.token_id(&text[l.start..l.start + len]) {
            heap.push(Bigram {
                score: vocab.scores[id as usize],
                left,
                right,
                len,
            });
        }
    };
    for i in 1..symbols.len() {
        try_pair(symbols, heap, Some(i - 1), Some(i));
    }
    while let Some(bigram) = heap.pop() {
        let (l, r) = (symbols[bigram.left], symbols[bigram.right]);
        // Skip pairs where a side was merged away or grew since the pair was queued.
        if l.len == 0 || r.len == 0 || l.len + r.len != bigram.len {
            continue;
        }
        let after = merge_right(symbols, bigram.left, bigram.right);
        try_pair(symbols, heap, symbols[bigram.left].prev, Some(bigram.left));
        try_pair(symbols, heap, Some(bigram.left), after);
    }
    for symbol in live(symbols) {
        let piece = symbol.text(text);
        match vocab.token_id(piece) {
            Some(id) => out.push(id),
            None => {
                for &byte in piece.as_bytes() {
                    if let Some(id) = byte_token(vocab, byte) {
                        out.push(id);
                    }
                }
            }
        }
    }
}

/// The token for a raw byte: `<0xXX>`, else the one-byte text itself, else `unk`.
fn byte_token(vocab: &Vocabulary, byte: u8) -> Option<u32> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let name = [
        b'<',
        b'0',
        b'x',
        HEX[usize::from(byte >> 4)],
        HEX[usize::from(byte & 15)],
        b'>',
    ];
    // The name is ASCII, so it is valid UTF-8.
    let name = std::str::from_utf8(&name).unwrap_or_default();
    vocab
        .token_id(name)
        .or_else(|| {
            std::str::from_utf8(&[byte])
                .ok()
                .and_then(|s| vocab.token_id(s))
        })
        .or(vocab.special.unk)
}

/// The byte a `<0xXX>` token stands for.
pub(crate) fn byte_of_token_text(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
