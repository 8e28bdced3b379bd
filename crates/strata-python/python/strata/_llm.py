"""``LanguageModel``: GGUF language models (llama, mistral, qwen2) with generation, streaming,
chat templates and the tokenizer, over strata's Rust crate strata-llm."""

import numbers
import os
import random

from . import _strata
from ._errors import InvalidArgument


def _int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise InvalidArgument(f"{name} is {value}, must be >= {minimum}")
    return int(value)


def _float(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    return float(value)


def _messages(messages):
    """``[(role, content)]`` from OpenAI-style dicts, ``(role, content)`` pairs or objects with
    ``role`` and ``content`` attributes."""
    if isinstance(messages, (str, bytes)) or not hasattr(messages, "__iter__"):
        raise TypeError("messages must be a list of {'role': ..., 'content': ...} dicts")
    pairs = []
    for index, message in enumerate(messages):
        if isinstance(message, dict):
            role, content = message.get("role"), message.get("content")
        elif isinstance(message, (tuple, list)) and len(message) == 2:
            role, content = message
        else:
            role, content = getattr(message, "role", None), getattr(message, "content", None)
        if not isinstance(role, str) or not isinstance(content, str):
            raise InvalidArgument(
                f"message {index}: needs a str 'role' and a str 'content', got {message!r}"
            )
        pairs.append((role, content))
    if not pairs:
        raise InvalidArgument("messages is empty")
    return pairs


class LanguageModel:
    """A GGUF language model::

        lm = strata.LanguageModel("SmolLM2-135M-Instruct.Q4_1.gguf", n_threads=2)
        print(lm.generate("The capital of France is", max_tokens=16))
        for piece in lm.chat([{"role": "user", "content": "Hi!"}], stream=True):
            print(piece, end="", flush=True)

    ``n_threads``: intra-op threads (None: one per core). ``n_ctx``: positions a generation can
    hold, prompt included (None: the model's context length). One model serves many Python
    threads at once: each generation runs on a session (KV cache) of its own from a pool, with
    the GIL released while tokens are computed.
    """

    def __init__(self, path, n_threads=None, n_ctx=None):
        path = os.fspath(path)
        threads = 0 if n_threads is None else _int("n_threads", n_threads, 1)
        context = None if n_ctx is None else _int("n_ctx", n_ctx, 1)
        self.path = path
        self._native = _strata.LanguageModel(path, threads=threads, context=context)
        self._info = self._native.info()

    def __repr__(self):
        return (
            f"LanguageModel({self.path!r}, architecture={self.architecture!r}, "
            f"n_ctx={self.n_ctx}, vocab_size={self.vocab_size})"
        )

    # -- metadata -------------------------------------------------------------------------------

    architecture = property(lambda self: self._info["architecture"], doc="llama, mistral, qwen2")
    context_length = property(
        lambda self: self._info["context_length"], doc="Positions the model was trained for."
    )
    n_ctx = property(lambda self: self._info["n_ctx"], doc="Positions one generation can hold.")
    vocab_size = property(lambda self: self._info["vocab_size"])
    n_layers = property(lambda self: self._info["n_layers"])
    n_embd = property(lambda self: self._info["n_embd"])
    n_heads = property(lambda self: self._info["n_heads"])
    n_kv_heads = property(lambda self: self._info["n_kv_heads"])
    n_threads = property(lambda self: self._info["n_threads"])
    bos_token_id = property(lambda self: self._info["bos_token_id"])
    eos_token_id = property(lambda self: self._info["eos_token_id"])
    chat_template = property(
        lambda self: self._info["chat_template"], doc="The file's Jinja chat template, or None."
    )

    @property
    def info(self):
        """Every model constant above and a few more (``n_ff``, ``head_dim``, ``rope_base``,
        ``rms_epsilon``, ``end_of_generation_ids``, ``adds_bos``) as a dict."""
        return dict(self._info)

    @property
    def metadata(self):
        """The GGUF file's metadata keys with scalar values (arrays such as the vocabulary are
        left out)."""
        return self._native.metadata()

    # -- tokenizer ------------------------------------------------------------------------------

    def tokenize(self, text, add_special=True, parse_special=True):
        """Token ids of ``text`` (str, or UTF-8 bytes) as llama.cpp makes them: ``add_special``
        adds BOS/EOS where the model asks for them, ``parse_special`` recognizes special tokens
        written in the text (``<|im_start|>`` …)."""
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        if not isinstance(text, str):
            raise TypeError(f"text must be str or bytes, not {type(text).__name__}")
        return self._native.tokenize(text, bool(add_special), bool(parse_special))

    def detokenize(self, ids, render_special=False):
        """The text of ``ids`` (ints, or a numpy array of them); special tokens are left out
        unless ``render_special``."""
        return self._native.detokenize(self._ids(ids, "ids"), bool(render_special))

    def render_chat(self, messages, add_generation_prompt=True):
        """``messages`` through the file's chat template, ending with the assistant's turn
        opened (unless ``add_generation_prompt`` is False): the text ``chat`` generates after."""
        return self._native.render_chat(_messages(messages), bool(add_generation_prompt))

    # -- generation -----------------------------------------------------------------------------

    def generate(
        self,
        prompt,
        max_tokens=128,
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        min_p=0.0,
        repeat_penalty=1.0,
        seed=0,
        stop=None,
        chat=False,
        stream=False,
    ):
        """Continues ``prompt`` and returns the generated text, or with ``stream=True`` an
        iterator of text pieces (a character split across tokens comes out whole).

        ``prompt`` is text (tokenized with BOS and special tokens as llama.cpp does) or a list
        of token ids. ``chat=True`` makes the text a user message rendered with the model's chat
        template. Generation ends at an end-of-generation token, before any string of ``stop``
        (a str or a list; the stop string is not returned), after ``max_tokens``, or when the
        context is full. Sampling: ``temperature`` 0 is greedy (the default); ``top_k`` 0,
        ``top_p`` 1, ``min_p`` 0 and ``repeat_penalty`` 1 turn those filters off; ``seed`` makes
        sampling reproducible (None draws one).

        The stream's ``ids`` holds the generated token ids and ``stats`` the token counts and
        speeds; ``close()`` ends it early.
        """
        if chat:
            if not isinstance(prompt, str):
                raise InvalidArgument("chat=True needs the user's message as a str prompt")
            prompt = self.render_chat([("user", prompt)])
        return self._generate(prompt, max_tokens, temperature, top_k, top_p, min_p,
                              repeat_penalty, seed, stop, stream)

    def chat(self, messages, stream=False, **sampling):
        """Renders ``messages`` (``[{"role": "system" | "user" | "assistant", "content": str}]``)
        with the model's chat template and generates the assistant's reply; the keyword
        arguments are ``generate``'s."""
        if "chat" in sampling:
            raise TypeError("chat() renders the template itself; it takes no 'chat' argument")
        return self.generate(self.render_chat(messages), stream=stream, **sampling)

    def _generate(self, prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty,
                  seed, stop, stream):
        if isinstance(prompt, str):
            ids = self.tokenize(prompt)
        elif isinstance(prompt, (bytes, bytearray)):
            ids = self.tokenize(prompt)
        else:
            ids = self._ids(prompt, "prompt")
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        else:
            stop = list(stop)
            for s in stop:
                if not isinstance(s, str):
                    raise TypeError(f"stop strings must be str, got {type(s).__name__}")
        if seed is None:
            seed = random.getrandbits(64)
        args = (
            ids,
            _int("max_tokens", max_tokens, 0),
            _float("temperature", temperature),
            _int("top_k", top_k, 0),
            _float("top_p", top_p),
            _float("min_p", min_p),
            _float("repeat_penalty", repeat_penalty),
            _int("seed", seed, 0),
            stop,
        )
        if stream:
            return self._native.stream(*args)
        text, _ids, _stats = self._native.generate(*args)
        return text

    def _ids(self, ids, what):
        if isinstance(ids, (str, bytes)):
            raise TypeError(f"{what} must be a list of token ids")
        try:
            items = list(ids)
        except TypeError:
            raise TypeError(f"{what} must be a list of token ids, not {type(ids).__name__}") from None
        out = []
        for index, id_ in enumerate(items):
            if isinstance(id_, bool) or not isinstance(id_, numbers.Integral):
                raise TypeError(f"{what}[{index}] is a {type(id_).__name__}, not a token id")
            if not 0 <= id_ < self.vocab_size:
                raise InvalidArgument(
                    f"{what}[{index}]: token id {id_} is outside the vocabulary of "
                    f"{self.vocab_size} tokens"
                )
            out.append(int(id_))
        return out
