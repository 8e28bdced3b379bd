#!/usr/bin/env python3
"""llama.cpp's reference for strata-llm's SmolLM2 test, and llama.cpp's speed on the same file.

    python3 scripts/llama_cpp_reference.py            # writes crates/strata-llm/tests/fixtures/smollm2_llama_cpp.json
    python3 scripts/llama_cpp_reference.py --bench    # prefill (128 tokens) and decode tok/s at 1 and 2 threads

The fixture holds, per prompt: the prompt ids (BOS and special tokens as llama.cpp adds them),
the argmax of the logits at every prompt position, and 64 greedily generated tokens (stopping
early at an end-of-generation token). For every logit row (each prompt position, then each
generation step) it also keeps the two largest logits as `[id, value]` with the value printed
with 9 significant digits, which round-trips an f32: equal values mean bit-equal logits.
Needs llama-cpp-python (`pip install llama-cpp-python`).
"""

import argparse
import json
import os
import time

import numpy as np
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "..", "shared", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
FIXTURE = os.path.join(ROOT, "crates", "strata-llm", "tests", "fixtures", "smollm2_llama_cpp.json")

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the boiling point of water in Celsius?<|im_end|>\n<|im_start|>assistant\n",
    "Les trois couleurs du drapeau français sont",
    "1, 2, 3, 5, 8, 13, 21,",
]
GENERATE = 64


def _plain_cpu_buffers():
    """Keeps llama.cpp's weights in plain CPU buffers (`use_extra_bufts = false`). On CPUs with
    AMX, llama.cpp otherwise moves q4_1/q8_0 weights into its AMX buffers, whose decode crashes
    (segfault) with llama-cpp-python 0.3.36 here; q4_1 and q8_0 have no other repacked form on
    x86, so this is llama.cpp's ordinary CPU path (integer dots, tinyBLAS)."""
    low = llama_cpp.llama_cpp
    default = low.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    low.llama_model_default_params = params


_plain_cpu_buffers()


def load(threads, n_ctx=512, logits_all=True):
    return llama_cpp.Llama(
        model_path=MODEL,
        n_ctx=n_ctx,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=logits_all,
        verbose=False,
    )


def tokenize(llm, text):
    return llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)


TOP = 2


def top(row):
    """The TOP largest logits of a row as [id, value] pairs, values exact for f32."""
    row = np.asarray(row, dtype=np.float32)
    ids = np.argsort(-row, kind="stable")[:TOP]
    return [[int(i), float(f"{row[i]:.9g}")] for i in ids]


def reference():
    llm = load(threads=2)
    eos = llm.token_eos()
    cases = []
    for text in PROMPTS:
        ids = tokenize(llm, text)
        llm.reset()
        llm.eval(ids)
        scores = np.array(llm.scores[: len(ids)])
        argmax = [int(a) for a in scores.argmax(axis=1)]
        prefill_top = [top(row) for row in scores]
        generated, generated_top = [], []
        for _ in range(GENERATE):
            row = llm.scores[llm.n_tokens - 1]
            nxt = int(np.argmax(row))
            generated.append(nxt)
            generated_top.append(top(row))
            if nxt == eos or llama_cpp.llama_token_is_eog(llm._model.vocab, nxt):
                break
            llm.eval([nxt])
        cases.append({"prompt": text, "prompt_ids": ids, "prefill_argmax": argmax, "generated": generated,
                      "prefill_top": prefill_top, "generated_top": generated_top})
        print(f"{len(ids)} prompt ids, {len(generated)} generated: {llm.detokenize(generated)!r}")
    out = {
        "model": os.path.basename(MODEL),
        "llama_cpp_python": llama_cpp.__version__,
        "generate": GENERATE,
        "cases": cases,
    }
    with open(FIXTURE, "w") as f:
        # One case per line group; the top-logit lists stay on one line each to keep it small.
        f.write("{\n")
        for key in ("model", "llama_cpp_python", "generate"):
            f.write(f" {json.dumps(key)}: {json.dumps(out[key])},\n")
        f.write(' "cases": [\n')
        for i, case in enumerate(cases):
            f.write("  {\n")
            f.write(",\n".join(f"   {json.dumps(k)}: {json.dumps(v)}" for k, v in case.items()))
            f.write("\n  }" + ("," if i + 1 < len(cases) else "") + "\n")
        f.write(" ]\n}\n")
    print("wrote", FIXTURE)


def bench(prompt_tokens=128, gen_tokens=64, repeats=3):
    for threads in (1, 2):
        llm = load(threads=threads, n_ctx=prompt_tokens + gen_tokens + 8, logits_all=False)
        prompt = (tokenize(llm, "The quick brown fox jumps over the lazy dog. " * 40))[:prompt_tokens]
        best_prefill, best_decode = 0.0, 0.0
        for _ in range(repeats):
            llm.reset()
            t = time.perf_counter()
            llm.eval(prompt)
            prefill = prompt_tokens / (time.perf_counter() - t)
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            t = time.perf_counter()
            for _ in range(gen_tokens):
                llm.eval([tok])
                tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            decode = gen_tokens / (time.perf_counter() - t)
            best_prefill, best_decode = max(best_prefill, prefill), max(best_decode, decode)
        print(json.dumps({"threads": threads, "prefill_tokens_per_s": round(best_prefill, 1),
                          "decode_tokens_per_s": round(best_decode, 1)}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", action="store_true")
    args = parser.parse_args()
    bench() if args.bench else reference()
