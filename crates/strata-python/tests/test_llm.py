"""`strata.LanguageModel` on SmolLM2-135M-Instruct (Q4_1, ../shared/models): the tokenizer gives
llama.cpp's ids (fixtures recorded with llama-cpp-python), and generation from Python gives the
same tokens and text as strata's Rust `generate` (`strata generate --json`), streamed or not.
Skipped when the model file is absent."""

import json
import os
import subprocess
import threading

import pytest

import strata
from conftest import REPO

MODEL = REPO.parent / "shared" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GENERATE_FIXTURE = REPO / "crates" / "strata-llm" / "tests" / "fixtures" / "smollm2_llama_cpp.json"
TOKENIZER_FIXTURE = REPO / "crates" / "strata-tokenizer" / "tests" / "fixtures" / "smollm2_ids.json"

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason=f"{MODEL} is absent")


@pytest.fixture(scope="module")
def lm():
    return strata.LanguageModel(MODEL, n_threads=1)


def strata_bin():
    """The `strata` CLI: $STRATA_BIN (ci.sh sets it) or the workspace's release build."""
    path = os.environ.get("STRATA_BIN") or str(REPO / "target" / "release" / "strata")
    if not os.path.exists(path):
        if os.environ.get("STRATA_BIN"):
            pytest.fail(f"STRATA_BIN={path} does not exist")
        pytest.skip(f"{path} not built (cargo build --release -p strata-cli)")
    return path


def rust_generate(prompt=None, chat=None, max_tokens=24, stop=(), **sampling):
    """`strata generate --json`: the Rust generation's ids and text."""
    cmd = [strata_bin(), "generate", str(MODEL), "--json", "--threads", "1",
           "--max-tokens", str(max_tokens)]
    cmd += ["--prompt", prompt] if prompt is not None else ["--chat", chat]
    for flag, value in sampling.items():
        cmd += [f"--{flag.replace('_', '-')}", str(value)]
    for s in stop:
        cmd += ["--stop", s]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    return report["generated_ids"], report["text"]


def fixture(path):
    return json.loads(path.read_text())


# -- tokenizer ----------------------------------------------------------------------------------


def test_tokenize_gives_llama_cpp_prompt_ids(lm):
    cases = fixture(GENERATE_FIXTURE)["cases"]
    assert len(cases) == 6
    for case in cases:
        assert lm.tokenize(case["prompt"]) == case["prompt_ids"], case["prompt"]
        assert lm.tokenize(case["prompt"].encode()) == case["prompt_ids"]


def test_tokenize_options_and_detokenize_match_llama_cpp(lm):
    reference = fixture(TOKENIZER_FIXTURE)
    compared = 0
    for case in reference["cases"]:
        text = case["text"]
        assert lm.tokenize(text, add_special=False, parse_special=False) == case["ids"], text
        assert lm.tokenize(text, add_special=True, parse_special=False) == case["ids_add_special"]
        assert lm.tokenize(text, add_special=False, parse_special=True) == case["ids_parse_special"]
        expected = bytes.fromhex(case["detokenized_hex"]).decode("utf-8", errors="replace")
        assert lm.detokenize(case["ids_parse_special"], render_special=True) == expected, text
        compared += 1
    assert compared >= 30
    # Without render_special, special tokens are left out of the text.
    ids = lm.tokenize("<|im_start|>user\nHi<|im_end|>")
    assert lm.detokenize(ids) == "user\nHi"
    assert lm.detokenize(ids, render_special=True) == "<|im_start|>user\nHi<|im_end|>"


def test_chat_template_matches_llama_cpp(lm):
    for chat in fixture(TOKENIZER_FIXTURE)["chats"]:
        opened = chat["add_generation_prompt"]
        rendered = lm.render_chat(chat["messages"], add_generation_prompt=opened)
        assert rendered == chat["rendered"]
        assert lm.tokenize(rendered) == chat["rendered_ids"]
        pairs = [(m["role"], m["content"]) for m in chat["messages"]]
        assert lm.render_chat(pairs, add_generation_prompt=opened) == rendered


def test_metadata(lm):
    assert lm.architecture == "llama"
    assert lm.vocab_size == 49152
    assert lm.context_length == 8192
    assert lm.n_ctx == 8192
    assert lm.n_layers == 30 and lm.n_embd == 576 and lm.n_heads == 9 and lm.n_kv_heads == 3
    assert lm.n_threads == 1
    assert lm.chat_template and "<|im_start|>" in lm.chat_template
    assert lm.eos_token_id == 2 and 2 in lm.info["end_of_generation_ids"]
    meta = lm.metadata
    assert meta["general.architecture"] == "llama"
    assert meta["llama.context_length"] == 8192
    assert "tokenizer.ggml.tokens" not in meta  # arrays are left out
    assert "SmolLM2" in repr(lm) or "llama" in repr(lm)


# -- generation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompt",
    ["The capital of France is", "Les trois couleurs du drapeau français sont", "1, 2, 3, 5, 8, 13, 21,"],
)
def test_greedy_generation_equals_rust(lm, prompt):
    ids, text = rust_generate(prompt=prompt, max_tokens=24)
    assert len(ids) > 0
    stream = lm.generate(prompt, max_tokens=24, stream=True)
    pieces = list(stream)
    assert stream.finished
    assert stream.ids == ids
    assert "".join(pieces) == text
    assert all(pieces), "empty pieces are not yielded"
    assert lm.generate(prompt, max_tokens=24) == text
    # The prompt as ids gives the same generation.
    assert lm.generate(lm.tokenize(prompt), max_tokens=24) == text
    stats = stream.stats
    assert stats["prompt_tokens"] == len(lm.tokenize(prompt))
    assert stats["generated_tokens"] == len(ids)


def test_chat_generation_equals_rust(lm):
    message = "What is the capital of France?"
    ids, text = rust_generate(chat=message, max_tokens=16)
    assert lm.generate(message, chat=True, max_tokens=16) == text
    assert lm.chat([{"role": "user", "content": message}], max_tokens=16) == text
    stream = lm.chat([{"role": "user", "content": message}], max_tokens=16, stream=True)
    assert "".join(stream) == text and stream.ids == ids


def test_sampling_with_a_seed_equals_rust(lm):
    sampling = dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, seed=7)
    ids, text = rust_generate(prompt="Once upon a time", max_tokens=20, **sampling)
    stream = lm.generate("Once upon a time", max_tokens=20, stream=True, **sampling)
    assert "".join(stream) == text and stream.ids == ids
    assert lm.generate("Once upon a time", max_tokens=20, **sampling) == text
    other = lm.generate("Once upon a time", max_tokens=20, **{**sampling, "seed": 8})
    assert isinstance(other, str)


def test_stop_strings_equal_rust(lm):
    prompt = "The capital of France is"
    full = lm.generate(prompt, max_tokens=24)
    assert "\n" in full
    ids, text = rust_generate(prompt=prompt, max_tokens=24, stop=["\n"])
    assert lm.generate(prompt, max_tokens=24, stop="\n") == text == full[: full.index("\n")]
    stream = lm.generate(prompt, max_tokens=24, stop=["\n", "zzz"], stream=True)
    assert "".join(stream) == text and stream.ids == ids


def test_generation_stops_at_a_full_context():
    small = strata.LanguageModel(MODEL, n_threads=1, n_ctx=12)
    assert small.n_ctx == 12
    prompt = small.tokenize("The capital of France is")  # 5 tokens
    stream = small.generate(prompt, max_tokens=100, stream=True)
    list(stream)
    assert len(stream.ids) == 12 - len(prompt) + 1  # the last token is sampled, never run
    with pytest.raises(strata.InvalidArgument, match="context"):
        small.generate(list(range(100, 120)), max_tokens=4)


def test_close_ends_a_stream_early(lm):
    stream = lm.generate("The capital of France is", max_tokens=24, stream=True)
    first = next(stream)
    assert first and not stream.finished
    stream.close()
    assert stream.finished and list(stream) == []
    assert len(stream.ids) >= 1
    # A stream left unfinished gives its session back when dropped.
    for piece in lm.generate("Once upon a time", max_tokens=24, stream=True):
        break
    assert piece


def test_threads_share_one_model_with_the_gil_released():
    lm = strata.LanguageModel(MODEL, n_threads=1)
    prompts = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "1, 2, 3,"]
    serial = [lm.generate(p, max_tokens=8) for p in prompts]
    assert lm._native.idle_sessions() == 1
    barrier = threading.Barrier(len(prompts))
    results = [None] * len(prompts)

    def work(i):
        barrier.wait()
        results[i] = lm.generate(prompts[i], max_tokens=8)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == serial
    # Generations overlapped (each on a session of its own): only possible with the GIL
    # released while tokens are computed. Serial calls reuse one session.
    assert lm._native.idle_sessions() >= 2


# -- bad arguments ------------------------------------------------------------------------------


def test_bad_files_raise(tmp_path):
    with pytest.raises(strata.NoSuchFile, match="missing.gguf"):
        strata.LanguageModel(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(strata.InvalidGraph, match="junk.gguf.*GGUF"):
        strata.LanguageModel(junk)
    with pytest.raises(strata.InvalidArgument, match="n_ctx"):
        strata.LanguageModel(MODEL, n_ctx=0)
    with pytest.raises(TypeError):
        strata.LanguageModel(MODEL, n_threads="2")


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"temperature": -1.0}, strata.InvalidArgument, "temperature"),
        ({"top_p": 0.0}, strata.InvalidArgument, "top_p"),
        ({"min_p": 2.0}, strata.InvalidArgument, "min_p"),
        ({"repeat_penalty": 0.0}, strata.InvalidArgument, "repetition_penalty"),
        ({"max_tokens": -1}, strata.InvalidArgument, "max_tokens"),
        ({"top_k": -5}, strata.InvalidArgument, "top_k"),
        ({"max_tokens": "8"}, TypeError, "max_tokens"),
        ({"temperature": "hot"}, TypeError, "temperature"),
        ({"stop": [1]}, TypeError, "stop"),
    ],
)
def test_bad_sampling_arguments_raise(lm, kwargs, error, match):
    with pytest.raises(error, match=match):
        lm.generate("Hello", **kwargs)


def test_bad_prompts_and_ids_raise(lm):
    with pytest.raises(strata.InvalidArgument, match="no tokens"):
        lm.generate("", max_tokens=2)
    with pytest.raises(strata.InvalidArgument, match="outside the vocabulary"):
        lm.generate([1, 49152], max_tokens=2)
    with pytest.raises(strata.InvalidArgument, match="outside the vocabulary"):
        lm.detokenize([-1])
    with pytest.raises(TypeError):
        lm.detokenize("abc")
    with pytest.raises(TypeError):
        lm.generate(3.5)
    with pytest.raises(TypeError):
        lm.tokenize(42)
    with pytest.raises(strata.InvalidArgument, match="chat=True"):
        lm.generate([1, 2], chat=True)
    with pytest.raises(strata.InvalidArgument, match="empty"):
        lm.chat([])
    with pytest.raises(strata.InvalidArgument, match="role"):
        lm.chat([{"role": "user"}])
    with pytest.raises(TypeError):
        lm.chat("hello")
    # The model still works after the errors.
    assert lm.generate("The capital of France is", max_tokens=2)
