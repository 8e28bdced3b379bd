#!/usr/bin/env python3
"""Writes the llama.cpp reference fixtures for strata-tokenizer's tests (a dev script; `cargo test`
does not need Python).

From a GGUF file (default: ../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf) it writes, into
crates/strata-tokenizer/tests/fixtures/:

- <stem>_vocab.json.gz: the tokenizer description (the `tokenizer.ggml.*` keys and the chat
  template), read with the `gguf` package, so the Rust test needs no GGUF reader;
- <stem>_ids.json: for a set of texts, the ids llama.cpp returns (llama-cpp-python's
  `Llama.tokenize` with add_bos off/on and special off/on), the bytes it detokenizes them to, and
  the chat template rendered by Jinja2 the way Hugging Face's apply_chat_template renders it.

Needs: pip install gguf llama-cpp-python jinja2
Usage: python3 scripts/tokenizer_reference.py [MODEL.gguf] [STEM]
"""

import gzip
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox
import llama_cpp
from gguf import GGUFReader

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


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, "..", "shared", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    stem = sys.argv[2] if len(sys.argv) > 2 else "smollm2"
    desc = describe(GGUFReader(model))
    os.makedirs(FIXTURES, exist_ok=True)
    with gzip.open(os.path.join(FIXTURES, f"{stem}_vocab.json.gz"), "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(desc, f, ensure_ascii=False, separators=(",", ":"))

    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    cases = []
    for text in TEXTS:
        raw = text.encode("utf-8")
        plain = llm.tokenize(raw, add_bos=False, special=False)
        with_special = llm.tokenize(raw, add_bos=True, special=False)
        parsed = llm.tokenize(raw, add_bos=False, special=True)
        cases.append({
            "text": text,
            "ids": plain,
            "ids_add_special": with_special,
            "ids_parse_special": parsed,
            "detokenized_hex": llm.detokenize(parsed, special=True).hex(),
        })

    tokens = desc["tokens"]
    bos = tokens[desc["bos_id"]] if desc["bos_id"] is not None else ""
    eos = tokens[desc["eos_id"]] if desc["eos_id"] is not None else ""
    chats = []
    for conversation in CONVERSATIONS:
        rendered = render_chat(desc["chat_template"], conversation, bos, eos)
        chats.append(dict(conversation, rendered=rendered,
                          rendered_ids=llm.tokenize(rendered.encode("utf-8"), add_bos=False, special=True)))

    out = {
        "model": os.path.basename(model),
        "reference": f"llama-cpp-python {llama_cpp.__version__}",
        "cases": cases,
        "chats": chats,
    }
    with open(os.path.join(FIXTURES, f"{stem}_ids.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} texts and {len(chats)} conversations for {stem}")


if __name__ == "__main__":
    main()
