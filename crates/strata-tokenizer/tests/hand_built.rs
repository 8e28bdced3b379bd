//! Tokenizers over small hand-built vocabularies: merge order, special tokens, add_bos, byte
//! fallback, decoding and streaming decoding of UTF-8 split across tokens.

use strata_tokenizer::StreamDecoder;
use strata_tokenizer::{EncodeOptions, Tokenizer, TokenizerError, VocabularyDescription};

const PLAIN: EncodeOptions = EncodeOptions {
    add_special: false,
    parse_special: false,
};
const SPECIAL: EncodeOptions = EncodeOptions {
    add_special: true,
    parse_special: true,
};

/// GPT-2's byte → character map, written independently of the crate's.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// Byte-level vocabulary: `<s>`, `<|ctl|>` (control), `<user>` (user-defined), the 256 byte
/// characters, then `extra` tokens; merges as given.
fn byte_level(extra: &[&str], merges: &[&str], pre: &str) -> VocabularyDescription {
    let mut tokens = vec![
        "<s>".to_string(),
        "<|ctl|>".to_string(),
        "<user>".to_string(),
    ];
    let mut types = vec![3, 3, 4];
    for b in 0..=255u8 {
        tokens.push(byte_char(b).to_string());
        types.push(1);
    }
    for t in extra {
        tokens.push(t.to_string());
        types.push(1);
    }
    VocabularyDescription {
        model: "gpt2".into(),
        pre: Some(pre.into()),
        tokens,
        token_types: types,
        merges: merges.iter().map(|m| m.to_string()).collect(),
        bos_id: Some(0),
        eos_id: Some(1),
        add_bos: Some(true),
        ..Default::default()
    }
}

fn texts(t: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&id| t.token_text(id).unwrap().to_string())
        .collect()
}

#[test]
fn byte_level_merges_follow_rank_order() {
    let desc = byte_level(
        &["lo", "low", "ow", "Ġlow", "Ġl"],
        &["Ġ l", "o w", "Ġl ow", "l o", "lo w"],
        "gpt-2",
    );
    let t = Tokenizer::new(&desc).unwrap();
    let ids = t.encode("low low", PLAIN).unwrap();
    // "low": o+w (rank 1) beats l+o (rank 3), and no merge joins l+ow. " low": Ġ+l (rank 0),
    // o+w (rank 1), then Ġl+ow (rank 2).
    assert_eq!(texts(&t, &ids), ["l", "ow", "Ġlow"]);
    assert_eq!(t.decode(&ids, false).unwrap(), "low low");
}

#[test]
fn special_tokens_are_matched_before_bpe_and_bos_is_added() {
    let t = Tokenizer::new(&byte_level(&[], &[], "smollm")).unwrap();
    let ids = t.encode("a<|ctl|>b<user>", SPECIAL).unwrap();
    assert_eq!(texts(&t, &ids), ["<s>", "a", "<|ctl|>", "b", "<user>"]);
    // Without special parsing the control text is spelled out, the user-defined one still matches.
    let ids = t.encode("<|ctl|><user>", PLAIN).unwrap();
    assert_eq!(
        texts(&t, &ids),
        ["<", "|", "ctl", "|", ">", "<user>"]
            .map(|s| s.to_string())
            .concat_chars()
    );
    // Decoding hides control tokens unless asked, user-defined tokens always show.
    let ids = t.encode("x<|ctl|><user>", SPECIAL).unwrap();
    assert_eq!(t.decode(&ids, false).unwrap(), "x<user>");
    assert_eq!(t.decode(&ids, true).unwrap(), "<s>x<|ctl|><user>");
}

trait ConcatChars {
    fn concat_chars(self) -> Vec<String>;
}
impl<const N: usize> ConcatChars for [String; N] {
    /// Splits every string into its characters (a vocabulary without merges spells text out).
    fn concat_chars(self) -> Vec<String> {
        self.iter()
            .flat_map(|s| {
                if s == "<user>" {
                    vec![s.clone()]
                } else {
                    s.chars().map(String::from).collect()
                }
            })
            .collect()
    }
}

#[test]
fn multibyte_text_round_trips_and_streams_without_splitting_characters() {
    let t = Tokenizer::new(&byte_level(&[], &[], "gpt-2")).unwrap();
    let text = "naïve 日本 😀!";
    let ids = t.encode(text, PLAIN).unwrap();
    assert_eq!(ids.len(), text.len(), "no merges: one token per byte");
    assert_eq!(t.decode(&ids, false).unwrap(), text);
    let mut stream = StreamDecoder::new(&t, false);
    let mut pieces = Vec::new();
    for &id in &ids {
        let piece = stream.push(id).unwrap();
        if !piece.is_empty() {
            pieces.push(piece.to_string());
        }
    }
    assert!(!stream.has_pending());
    assert_eq!(stream.finish(), "");
    assert_eq!(pieces.concat(), text);
    // Every piece is whole characters: the 4-byte emoji comes out at once.
    assert!(pieces.contains(&"😀".to_string()), "{pieces:?}");
    assert!(pieces.contains(&"日".to_string()));
}

#[test]
fn streaming_decoder_flushes_a_cut_sequence_as_replacement() {
    let t = Tokenizer::new(&byte_level(&[], &[], "gpt-2")).unwrap();
    let ids = t.encode("€", PLAIN).unwrap();
    assert_eq!(ids.len(), 3);
    let mut stream = StreamDecoder::new(&t, false);
    assert_eq!(stream.push(ids[0]).unwrap(), "");
    assert_eq!(stream.push(ids[1]).unwrap(), "");
    assert!(stream.has_pending());
    assert_eq!(stream.finish(), "\u{FFFD}");
    // A stray continuation byte can never become valid: replaced at once, the rest goes on.
    let mut stream = StreamDecoder::new(&t, false);
    assert_eq!(stream.push(ids[2]).unwrap(), "\u{FFFD}");
    let a = t.encode("a", PLAIN).unwrap()[0];
    assert_eq!(stream.push(a).unwrap(), "a");
}

#[test]
fn llama3_ignores_merges_for_whole_tokens() {
    // "ab" is a token but no merge builds it: llama-bpe emits it whole, gpt-2 cannot.
    let desc = byte_level(&["ab"], &[], "llama-bpe");
    let t = Tokenizer::new(&desc).unwrap();
    assert_eq!(texts(&t, &t.encode("ab", PLAIN).unwrap()), ["ab"]);
    let t = Tokenizer::new(&byte_level(&["ab"], &[], "gpt-2")).unwrap();
    assert_eq!(texts(&t, &t.encode("ab", PLAIN).unwrap()), ["a", "b"]);
}

#[test]
fn bad_descriptions_are_typed_errors() {
    let mut desc = byte_level(&[], &[], "gpt-2");
    desc.pre = Some("klingon".into());
    assert!(matches!(
        Tokenizer::new(&desc),
        Err(TokenizerError::UnsupportedPreTokenizer(_))
    ));
    let mut desc = byte_level(&[], &[], "gpt-2");
    desc.model = "t5".into();
    assert!(matches!(
        Tokenizer::new(&desc),
        Err(TokenizerError::UnsupportedModel(_))
    ));
    let mut desc = byte_level(&[], &[], "gpt-2");
    desc.token_types.pop();
    assert!(matches!(
        Tokenizer::new(&desc),
        Err(TokenizerError::LengthMismatch { .. })
    ));
    let mut desc = byte_level(&[], &[], "gpt-2");
    desc.token_types[5] = 42;
    assert!(matches!(
        Tokenizer::new(&desc),
        Err(TokenizerError::InvalidTokenType { id: 5, value: 42 })
    ));
    let mut desc = byte_level(&[], &[], "gpt-2");
    desc.eos_id = Some(100_000);
    assert!(matches!(
        Tokenizer::new(&desc),
        Err(TokenizerError::SpecialIdOutOfRange { role: "eos", .. })
    ));
    assert!(matches!(
        Tokenizer::new(&VocabularyDescription {
            model: "gpt2".into(),
            ..Default::default()
        }),
        Err(TokenizerError::EmptyVocabulary)
    ));
    let t = Tokenizer::new(&byte_level(&[], &[], "gpt-2")).unwrap();
    assert!(matches!(
        t.decode(&[9999], false),
        Err(TokenizerError::TokenOutOfRange { id: 9999, .. })
    ));
}

/// SentencePiece vocabulary: unk, bos, eos, byte tokens for a few bytes, and scored pieces.
fn sentence_piece() -> VocabularyDescription {
    let mut tokens = vec!["<unk>".to_string(), "<s>".to_string(), "</s>".to_string()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0, 0.0, 0.0];
    for b in [0xE2u8, 0x82, 0xAC, b'!'] {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (piece, score) in [
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("he", -1.5),
        ("ll", -1.2),
        ("hell", -1.0),
        ("▁hello", -0.5),
        ("hello", -0.8),
        ("llo", -0.9),
        ("▁h", -3.0),
    ] {
        tokens.push(piece.to_string());
        types.push(1);
        scores.push(score);
    }
    VocabularyDescription {
        model: "llama".into(),
        tokens,
        token_types: types,
        scores,
        ..Default::default()
    }
}

#[test]
fn sentence_piece_merges_by_score_with_space_prefix_and_bos() {
    let t = Tokenizer::new(&sentence_piece()).unwrap();
    assert!(t.adds_bos(), "SentencePiece defaults to add_bos");
    let ids = t.encode("hello hello", EncodeOptions::default()).unwrap();
    assert_eq!(texts(&t, &ids), ["<s>", "▁hello", "▁hello"]);
    assert_eq!(
        t.decode(&ids, false).unwrap(),
        "hello hello",
        "the prefix space is dropped"
    );
    // Without the prefix space: he+ll... the best-scoring pair merges first: "ll"(-1.2) vs
    // "he"(-1.5): ll first, then he, then he+ll = hell (-1.0), then hell+o = hello.
    let mut desc = sentence_piece();
    desc.add_space_prefix = Some(false);
    let t = Tokenizer::new(&desc).unwrap();
    assert_eq!(texts(&t, &t.encode("hello", PLAIN).unwrap()), ["hello"]);
}

#[test]
fn sentence_piece_falls_back_to_bytes_then_unk() {
    let t = Tokenizer::new(&sentence_piece()).unwrap();
    let ids = t.encode("€!x", PLAIN).unwrap();
    // ▁ is a token; € is spelled as its three byte tokens; ! has a byte token; x has none → unk.
    assert_eq!(
        texts(&t, &ids),
        ["▁", "<0xE2>", "<0x82>", "<0xAC>", "<0x21>", "<unk>"]
    );
    let mut stream = StreamDecoder::new(&t, false);
    let shown: Vec<String> = ids
        .iter()
        .map(|&id| stream.push(id).unwrap().to_string())
        .collect();
    assert_eq!(shown, ["", "", "", "€", "!", ""]);
}

#[test]
fn tokenizer_is_shareable_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Tokenizer>();
    let t = std::sync::Arc::new(Tokenizer::new(&byte_level(&[], &[], "qwen2")).unwrap());
    let handles: Vec<_> = (0..2)
        .map(|i| {
            let t = t.clone();
            std::thread::spawn(move || t.encode(&format!("thread {i}"), PLAIN).unwrap())
        })
        .collect();
    let results: Vec<Vec<u32>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(t.decode(&results[1], false).unwrap(), "thread 1");
}
