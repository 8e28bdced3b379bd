#!/usr/bin/env python3
"""Writes the llama.cpp reference fixtures for strata-tokenizer's tests (a dev script; `cargo test`
does not need Python).

From a GGUF file (default: ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf) it writes, into
crates/strata-tokenizer/tests/fixtures/:

- <stem>_vocab.json.gz: the tokenizer description (the `tokenizer.ggml.*` keys and the chat
  template), read with the `gguf` package, so the Rust test needs no GGUF reader;
- <stem>_ids.json: for a set of texts, the ids llama.cpp returns (llama-cpp-python's
  `Llama.tokenize` with add_bos off/on and special off/on), the bytes it detokenizes them to, and
  the chat template rendered by Jinja2 the way Hugging Face's apply_chat_template renders it;
- the same ids for the file's vocabulary under other pre-tokenizers (`llama-bpe`, `qwen2`,
  `gpt-2`): vocab-only GGUF copies with `tokenizer.ggml.pre` changed and tokens and merges for
  all 2- and 3-digit strings added (the ids file records the changes), so every regex path is
  checked against llama.cpp;
- spm_vocab.json.gz and spm_ids.json: a SentencePiece (`llama`) vocabulary derived from the
  file's tokens (text of each normal token with spaces as U+2581, score = minus its index, the
  256 `<0xXX>` byte tokens, <unk>/<s>/</s>), written as a vocab-only GGUF and tokenized by
  llama.cpp the same way.

Needs: pip install gguf llama-cpp-python jinja2
Usage: python3 scripts/tokenizer_reference.py [MODEL.gguf] [STEM]
"""

import gzip
import json
import os
import sys
import tempfile

import jinja2
import jinja2.ext
import jinja2.sandbox
import llama_cpp
from gguf import GGUFReader, GGUFValueType, GGUFWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "crates", "strata-tokenizer", "tests", "fixtures")

TEXTS = [
    "",
    " ",
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they've said it's done, we'd go. DON'T SHOUT'S",
    "café naïve résumé Ærøskøbing Straße façade",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Привет, мир! Γειά σου Κόσμε! مرحبا بالعالم नमस्ते दुनिया",
    "emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { printf(\"%d\\n\", i); }",
    "<div class=\"a\">x &amp; y</div>",
    "3.14159 1234567890 007 1,000,000 2024-11-24 0x1F 1e-5 -42",
    "123456789012345678901234567890",
    "a  b   c    d     e",
    "     leading and trailing     ",
    "line1\nline2\n\nline4\n\n\n\nend",
    "tabs\there\t\tand\r\nwindows\r\nlines",
    "  \n  \n\t \n",
    "\u00a0non-breaking\u3000ideographic\u2003em space",
    "e\u0301 combining accents a\u0308",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text after end<|endoftext|>",
    "<|im_start|><|im_end|><|im_start|>",
    "not special: <|im_start", 
    "<repo_name>strata<file_sep>src/lib.rs\n<jupyter_code>print(1)",
    "Mixed: Hello世界123!?😀 'quoted' \"double\" `code`",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "https://example.com/path?query=value&x=1#frag user@example.org",
    "!!!??? ... --- *** ### $$$ %%% ^^^ ~~~",
    "The year 1999 and 2000s; 10% of $5.99 = $0.599",
]

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "What is the capital of France?"}],
     "add_generation_prompt": True},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Hi!"},
                  {"role": "assistant", "content": "Hello."},
                  {"role": "user", "content": "Count to 3."}],
     "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "No prompt."}],
     "add_generation_prompt": False},
]


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def describe(reader):
    return {
        "model": field(reader, "tokenizer.ggml.model"),
        "pre": field(reader, "tokenizer.ggml.pre"),
        "tokens": field(reader, "tokenizer.ggml.tokens"),
        "scores": field(reader, "tokenizer.ggml.scores", []),
        "token_types": field(reader, "tokenizer.ggml.token_type", []),
        "merges": field(reader, "tokenizer.ggml.merges", []),
        "bos_id": field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_id": field(reader, "tokenizer.ggml.eos_token_id"),
        "eot_id": field(reader, "tokenizer.ggml.eot_token_id"),
        "eom_id": field(reader, "tokenizer.ggml.eom_token_id"),
        "unk_id": field(reader, "tokenizer.ggml.unknown_token_id"),
        "pad_id": field(reader, "tokenizer.ggml.padding_token_id"),
        "add_bos": field(reader, "tokenizer.ggml.add_bos_token"),
        "add_eos": field(reader, "tokenizer.ggml.add_eos_token"),
        "add_space_prefix": field(reader, "tokenizer.ggml.add_space_prefix"),
        "chat_template": field(reader, "tokenizer.chat_template"),
    }


def render_chat(template, conversation, bos, eos):
    """Hugging Face's apply_chat_template environment."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=conversation["messages"],
        add_generation_prompt=conversation["add_generation_prompt"],
        bos_token=bos, eos_token=eos)


def byte_level_decoder():
    """GPT-2's printable character -> byte map."""
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[chr(b)] = b
        else:
            table[chr(256 + n)] = b
            n += 1
    return table


def sentence_piece_description(desc):
    """A SentencePiece vocabulary from a byte-level one: see the module docstring."""
    decode = byte_level_decoder()
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    seen = set(tokens)
    for i, (text, kind) in enumerate(zip(desc["tokens"], desc["token_types"])):
        if kind == 3 and text in ("<|im_start|>", "<|im_end|>"):
            piece, piece_type = text, 3
        elif kind == 1:
            try:
                piece = bytes(decode[c] for c in text).decode("utf-8")
            except (KeyError, UnicodeDecodeError):
                continue
            piece, piece_type = piece.replace(" ", "\u2581"), 1
        else:
            continue
        if not piece or piece in seen:
            continue
        seen.add(piece)
        tokens.append(piece)
        types.append(piece_type)
        scores.append(-float(i))
    return {
        "model": "llama", "pre": None, "tokens": tokens, "scores": scores, "token_types": types,
        "merges": [], "bos_id": 1, "eos_id": 2, "eot_id": None, "eom_id": None, "unk_id": 0,
        "pad_id": None, "add_bos": None, "add_eos": None, "add_space_prefix": None,
        "chat_template": None,
    }


def write_vocab_gguf(path, base, desc):
    """A tensor-less GGUF with the base file's llama.* keys and the tokenizer of `desc`."""
    w = GGUFWriter(path, "llama")
    for key, f in base.fields.items():
        if key == "llama.vocab_size":
            w.add_key_value(key, len(desc["tokens"]), GGUFValueType.UINT32)
        elif key.startswith("llama."):
            w.add_key_value(key, f.contents(), f.types[0])
    w.add_tokenizer_model(desc["model"])
    if desc["pre"] is not None:
        w.add_tokenizer_pre(desc["pre"])
    w.add_token_list(desc["tokens"])
    if desc["scores"]:
        w.add_token_scores(desc["scores"])
    w.add_token_types(desc["token_types"])
    if desc["merges"]:
        w.add_token_merges(desc["merges"])
    for key, value in (("bos", desc["bos_id"]), ("eos", desc["eos_id"]), ("unknown", desc["unk_id"]),
                       ("padding", desc["pad_id"])):
        if value is not None:
            w.add_key_value(f"tokenizer.ggml.{key}_token_id", value, GGUFValueType.UINT32)
    for key, value in (("add_bos_token", desc["add_bos"]), ("add_eos_token", desc["add_eos"]),
                       ("add_space_prefix", desc["add_space_prefix"])):
        if value is not None:
            w.add_key_value(f"tokenizer.ggml.{key}", value, GGUFValueType.BOOL)
    if desc["chat_template"] is not None:
        w.add_chat_template(desc["chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


def tokenize_cases(model_path):
    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    cases = []
    for text in TEXTS:
        raw = text.encode("utf-8")
        parsed = llm.tokenize(raw, add_bos=False, special=True)
        cases.append({
            "text": text,
            "ids": llm.tokenize(raw, add_bos=False, special=False),
            "ids_add_special": llm.tokenize(raw, add_bos=True, special=False),
            "ids_parse_special": parsed,
            "detokenized_hex": llm.detokenize(parsed, special=True).hex(),
        })
    return llm, cases


def write_ids(stem, out):
    out["reference"] = f"llama-cpp-python {llama_cpp.__version__}"
    with open(os.path.join(FIXTURES, f"{stem}_ids.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {stem}_ids.json: {len(out['cases'])} texts")


def write_vocab(name, desc):
    with gzip.open(os.path.join(FIXTURES, name), "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(desc, f, ensure_ascii=False, separators=(",", ":"))


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, "..", "shared", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    stem = sys.argv[2] if len(sys.argv) > 2 else "smollm2"
    base = GGUFReader(model)
    desc = describe(base)
    os.makedirs(FIXTURES, exist_ok=True)
    write_vocab(f"{stem}_vocab.json.gz", desc)

    llm, cases = tokenize_cases(model)
    tokens = desc["tokens"]
    bos = tokens[desc["bos_id"]] if desc["bos_id"] is not None else ""
    eos = tokens[desc["eos_id"]] if desc["eos_id"] is not None else ""
    chats = []
    for conversation in CONVERSATIONS:
        rendered = render_chat(desc["chat_template"], conversation, bos, eos)
        chats.append(dict(conversation, rendered=rendered,
                          rendered_ids=llm.tokenize(rendered.encode("utf-8"), add_bos=False, special=True)))
    write_ids(stem, {"model": os.path.basename(model), "vocabulary": f"{stem}_vocab.json.gz",
                     "overrides": {}, "cases": cases, "chats": chats})

    with tempfile.TemporaryDirectory() as tmp:
        # The same vocabulary under the other pre-tokenizers; add_bos left to llama.cpp's default.
        # SmolLM2's vocabulary has no multi-digit tokens, so digit splits would not show in its
        # ids: the variants add tokens and merges for every 2- and 3-digit string.
        digits = "0123456789"
        pairs = [a + b for a in digits for b in digits]
        triples = [p + c for p in pairs for c in digits]
        extra_tokens = [t for t in pairs + triples if t not in set(desc["tokens"])]
        extra_merges = [f"{p[0]} {p[1]}" for p in pairs] + [f"{t[:2]} {t[2]}" for t in triples]
        for pre in ("llama-bpe", "qwen2", "gpt-2"):
            overrides = {"pre": pre, "add_bos": None, "extra_tokens": extra_tokens, "extra_merges": extra_merges}
            variant = dict(desc, pre=pre, add_bos=None, tokens=desc["tokens"] + extra_tokens,
                           token_types=desc["token_types"] + [1] * len(extra_tokens),
                           merges=desc["merges"] + extra_merges)
            path = os.path.join(tmp, f"{pre}.gguf")
            write_vocab_gguf(path, base, variant)
            _, cases = tokenize_cases(path)
            write_ids(f"{stem}_{pre.replace('-', '_')}", {
                "model": f"{os.path.basename(model)} with tokenizer.ggml.pre = {pre}",
                "vocabulary": f"{stem}_vocab.json.gz", "overrides": overrides, "cases": cases, "chats": []})

        spm = sentence_piece_description(desc)
        write_vocab("spm_vocab.json.gz", spm)
        path = os.path.join(tmp, "spm.gguf")
        write_vocab_gguf(path, base, spm)
        _, cases = tokenize_cases(path)
        write_ids("spm", {"model": f"SentencePiece vocabulary derived from {os.path.basename(model)}",
                          "vocabulary": "spm_vocab.json.gz", "overrides": {}, "cases": cases, "chats": []})


if __name__ == "__main__":
    main()
