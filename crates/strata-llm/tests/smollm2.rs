//! SmolLM2-135M-Instruct (Q4_1) from ../shared/models against llama.cpp: the tokenizer built from
//! the file's metadata returns llama.cpp's ids; greedy generation, prefill argmax and logits match the
//! reference recorded by `scripts/llama_cpp_reference.py` in `tests/fixtures/smollm2_llama_cpp.json`.
//! Skipped, with a notice, when the shared models folder is absent.

use std::path::PathBuf;

use serde_json::Value;
use strata_gguf::GgufFile;
use strata_llm::{tokenizer_from_gguf, GenerateOptions, LanguageModel, LoadOptions};
use strata_tokenizer::EncodeOptions;

fn model_path() -> Option<PathBuf> {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    ));
    if path.exists() {
        Some(path)
    } else {
        println!("skipped: {} is absent", path.display());
        None
    }
}

fn json(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn tokenizer_from_gguf_metadata_gives_llama_cpp_ids() {
    let Some(path) = model_path() else { return };
    let file = GgufFile::open(&path).unwrap();
    let t = tokenizer_from_gguf(&file).unwrap();
    let reference = json(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../strata-tokenizer/tests/fixtures/smollm2_ids.json"
    ));
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    let options = [
        ("ids", false, false),
        ("ids_add_special", true, false),
        ("ids_parse_special", false, true),
    ];
    let mut compared = 0;
    for case in cases {
        let text = case["text"].as_str().unwrap();
        for (key, add_special, parse_special) in options {
            let ours = t
                .encode(
                    text,
                    EncodeOptions {
                        add_special,
                        parse_special,
                    },
                )
                .unwrap();
            assert_eq!(ours, ids(&case[key]), "{key} {text:?}");
            compared += 1;
        }
    }
    assert!(compared >= 90);
    assert!(t.chat_template().is_ok(), "the file's chat template parses");
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// The reference's top logits of one row as `(id, value)`, values exact f32.
fn top_logits(v: &Value) -> Vec<(usize, f32)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|pair| {
            let pair = pair.as_array().unwrap();
            (
                pair[0].as_u64().unwrap() as usize,
                pair[1].as_f64().unwrap() as f32,
            )
        })
        .collect()
}

/// Our prompt ids, prefill argmax per position and greedy tokens next to llama.cpp's, and how
/// many of our logit rows hold llama.cpp's top logits bit for bit, per case.
struct Comparison {
    text: String,
    prefill: (Vec<u32>, Vec<u32>),
    greedy: (Vec<u32>, Vec<u32>),
    /// Tokens of our public `generate` iterator (greedy by default).
    generated: Vec<u32>,
    rows_equal: usize,
    rows: usize,
}

impl Comparison {
    fn prefill_agreeing(&self) -> usize {
        self.prefill
            .0
            .iter()
            .zip(&self.prefill.1)
            .filter(|(a, b)| a == b)
            .count()
    }

    fn greedy_prefix(&self) -> usize {
        self.greedy
            .0
            .iter()
            .zip(&self.greedy.1)
            .take_while(|(a, b)| a == b)
            .count()
    }
}

/// Whether `row` holds every one of the reference's top logits exactly.
fn row_equal(row: &[f32], reference: &Value) -> bool {
    top_logits(reference)
        .iter()
        .all(|&(id, value)| row[id].to_bits() == value.to_bits())
}

fn compare_with_llama_cpp(path: &std::path::Path) -> Vec<Comparison> {
    let reference = json(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/smollm2_llama_cpp.json"
    ));
    let options = LoadOptions {
        threads: 2,
        context: Some(512),
        all_logits: true,
        ..Default::default()
    };
    let model = LanguageModel::load(path, options).unwrap();
    let v = model.vocab_size();
    let cases = reference["cases"].as_array().unwrap();
    assert!(cases.len() >= 4);
    let max_tokens = reference["generate"].as_u64().unwrap() as usize;
    let mut out = Vec::new();
    for case in cases {
        let text = case["prompt"].as_str().unwrap();
        let prompt = model.encode_prompt(text).unwrap();
        assert_eq!(prompt, ids(&case["prompt_ids"]), "prompt ids of {text:?}");
        let (mut rows_equal, mut rows) = (0, 0);

        let mut session = model.session().unwrap();
        let logits = session.prefill_all(&prompt).unwrap();
        let argmaxes: Vec<u32> = logits.chunks_exact(v).map(argmax).collect();
        for (row, top) in logits
            .chunks_exact(v)
            .zip(case["prefill_top"].as_array().unwrap())
        {
            rows += 1;
            rows_equal += usize::from(row_equal(row, top));
        }

        // Greedy by hand, one decode step per token as llama.cpp's reference ran.
        let reference_tops = case["generated_top"].as_array().unwrap();
        let expected = ids(&case["generated"]);
        let mut session = model.session().unwrap();
        let mut row = session.prefill(&prompt).unwrap().to_vec();
        let mut greedy = Vec::new();
        assert_eq!(reference_tops.len(), expected.len());
        for (step, top) in reference_tops.iter().enumerate() {
            rows += 1;
            rows_equal += usize::from(row_equal(&row, top));
            let next = argmax(&row);
            greedy.push(next);
            if step + 1 < expected.len() {
                row = session.step(next).unwrap().to_vec();
            }
        }

        let mut session = model.session().unwrap();
        let options = GenerateOptions {
            max_tokens,
            ..Default::default()
        };
        let generated: Vec<u32> = model
            .generate(&mut session, &prompt, &options)
            .unwrap()
            .map(|p| p.unwrap().id)
            .collect();
        out.push(Comparison {
            text: text.to_string(),
            prefill: (argmaxes, ids(&case["prefill_argmax"])),
            greedy: (greedy, expected),
            generated,
            rows_equal,
            rows,
        });
    }
    for c in &out {
        println!(
            "{:?}: prefill argmax {}/{} positions agree, greedy tokens agree for {} of {}, \
             {}/{} logit rows bit-equal",
            c.text,
            c.prefill_agreeing(),
            c.prefill.1.len(),
            c.greedy_prefix(),
            c.greedy.1.len(),
            c.rows_equal,
            c.rows
        );
    }
    out
}

/// The bar: for every fixture prompt, every prefill argmax and every one of the 64
/// greedy tokens equal llama.cpp's, and every logit row (prefill positions and decode steps)
/// holds llama.cpp's two largest logits bit for bit.
#[test]
fn greedy_generation_prefill_argmax_and_logits_equal_llama_cpp() {
    let Some(path) = model_path() else { return };
    let comparisons = compare_with_llama_cpp(&path);
    let (equal, rows) = comparisons
        .iter()
        .fold((0, 0), |(e, r), c| (e + c.rows_equal, r + c.rows));
    println!("{equal} of {rows} logit rows bit-equal with llama.cpp");
    for c in &comparisons {
        assert_eq!(c.prefill.0, c.prefill.1, "prefill argmax of {:?}", c.text);
        assert_eq!(c.greedy.0, c.greedy.1, "greedy tokens of {:?}", c.text);
        assert_eq!(
            c.generated, c.greedy.1,
            "the generate iterator's tokens for {:?}",
            c.text
        );
    }
    assert_eq!(equal, rows, "logit rows bit-equal with llama.cpp");
}
