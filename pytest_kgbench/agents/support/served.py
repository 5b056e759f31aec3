"""What an OpenAI-compatible server says of the models it serves, and how fast it answers here.

A local server (llama.cpp's `llama-server`, Ollama, vLLM, LM Studio) serves models under names
of its own (`mistral`, `qwen2.5:7b`, `gemma3-270m`), with a context window set when it was
started and no price. So for a model asked at a `--base-url`:

- its name is checked against `GET {base_url}/models`, the list every such server answers
  (`served`): a name the server does not serve is refused before the first item, and any name
  it serves is taken, whatever it looks like;
- its window is what the server says, where it says it: llama.cpp's `meta.n_ctx` (the context
  the server was started with, not the model's `n_ctx_train`), vLLM's `max_model_len`, or
  LM Studio's `loaded_context_length` (`GET /api/v0/models`). Ollama's list gives none: the
  window is then the project's table ([tool.kgbench.windows]) or the default;
- what a run costs is time, not dollars: `measure_speed` asks the server twice — a long prompt
  with one output token, then a short one with 64 — and divides the tokens its usage reports by
  the wall time of each call. The figure is this machine's, under its load at that moment.

Standard library only (urllib): no SDK is needed to read a list, and the probe is two plain
Chat Completions calls.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

ASK_TIMEOUT = 10.0  # seconds for the list of models: a server that is up answers at once
PROBE_TIMEOUT = 300.0  # seconds for each speed probe (a small model on a loaded CPU)
PROBE_PROMPT_WORDS = 600  # the prompt probe: ~600 tokens, one output token
PROBE_OUTPUT = 64  # the output probe: a short prompt, 64 tokens out


class ServerUnanswered(Exception):
    """The server did not answer what was asked of it, or not in the shape asked."""


@dataclass(frozen=True)
class Served:
    """The models one server serves: each name (its id and any alias it answers to) and, where
    the server says, the window it serves it with."""

    base_url: str
    names: tuple[str, ...]
    windows: Mapping[str, int] = field(default_factory=dict)

    def serves(self, name: str) -> bool:
        return name in self.names


@dataclass(frozen=True)
class Speed:
    """Tokens per second on this machine, as measured: prompt tokens read, output tokens made."""

    prompt: float
    output: float

    def seconds(self, read: int, made: int) -> float:
        return read / self.prompt + made / self.output


def _headers() -> dict[str, str]:
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    key = os.environ.get("OPENAI_API_KEY")
    if key:  # vLLM started with --api-key wants it; a server that takes none ignores it
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _http(url: str, body: Mapping[str, Any] | None, timeout: float) -> Any:
    """GET `url` (no body) or POST it a JSON body; the JSON answer, or ServerUnanswered
    naming the method, the URL and what went wrong."""
    method = "GET" if body is None else "POST"
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=_headers()),
                                    timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        raise ServerUnanswered(f"{method} {url} answered HTTP {exc.code}") from exc
    except (OSError, ValueError) as exc:
        raise ServerUnanswered(f"{method} {url} failed: {exc}") from exc


def _get(url: str, timeout: float) -> Any:
    return _http(url, None, timeout)


def _post(url: str, body: Mapping[str, Any], timeout: float) -> Any:
    return _http(url, body, timeout)


def _root(base_url: str) -> str:
    """The server's own root: `http://host:port` of `http://host:port/v1`."""
    parts = urllib.parse.urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}"


def _window(entry: Mapping[str, Any]) -> int | None:
    for value in (entry.get("max_model_len"),  # vLLM
                  (entry.get("meta") or {}).get("n_ctx"),  # llama.cpp: what it serves with
                  entry.get("loaded_context_length")):  # LM Studio (/api/v0/models)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def served(base_url: str, timeout: float = ASK_TIMEOUT) -> Served:
    """The models the server at `base_url` serves (`GET {base_url}/models`), with the windows
    it gives. Raises ServerUnanswered, naming the URL, when it does not answer with a list."""
    url = base_url.rstrip("/") + "/models"
    body = _get(url, timeout)
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list) or not all(isinstance(e, Mapping) for e in data):
        raise ServerUnanswered(f"GET {url} did not answer an OpenAI list of models "
                               "({\"data\": [{\"id\": ...}, ...]})")
    names: list[str] = []
    windows: dict[str, int] = {}
    for entry in data:
        ids = [entry.get("id"), *(entry.get("aliases") or [])]
        window = _window(entry)
        for name in ids:
            if isinstance(name, str) and name:
                names.append(name)
                if window:
                    windows[name] = window
    if names and not windows:  # LM Studio gives the loaded window on its own REST API only
        try:
            extra = _get(_root(base_url) + "/api/v0/models", timeout)
        except ServerUnanswered:
            extra = None
        listed = extra.get("data") if isinstance(extra, Mapping) else None
        for entry in listed if isinstance(listed, list) else []:
            window = _window(entry) if isinstance(entry, Mapping) else None
            if window and entry.get("id") in names:
                windows[str(entry["id"])] = window
    return Served(base_url, tuple(dict.fromkeys(names)), windows)


def _chat(base_url: str, model: str, text: str, max_tokens: int, timeout: float
          ) -> tuple[dict[str, Any], float]:
    url = base_url.rstrip("/") + "/chat/completions"
    start = time.monotonic()
    answer = _post(url, {"model": model, "max_tokens": max_tokens, "temperature": 0,
                         "messages": [{"role": "user", "content": text}]}, timeout)
    usage = answer.get("usage") if isinstance(answer, Mapping) else None
    if not isinstance(usage, Mapping) or not isinstance(usage.get("prompt_tokens"), int):
        raise ServerUnanswered(f"POST {url} answered no usage (prompt_tokens, "
                               "completion_tokens): its speed cannot be measured")
    return dict(usage), time.monotonic() - start


def measure_speed(base_url: str, model: str, timeout: float = PROBE_TIMEOUT) -> Speed:
    """Prompt and output tokens per second of `model` at `base_url`, from two calls timed
    whole: a long prompt answered with one token (reading), then a short prompt answered with
    up to PROBE_OUTPUT tokens (making; the short prompt's reading taken off at the first
    call's rate). The prompts differ from run to run by a counter, so no prefix cache makes
    the reading look faster than it is."""
    salt = time.time_ns()
    usage, wall = _chat(base_url, model, f"{salt} " + "word " * PROBE_PROMPT_WORDS, 1, timeout)
    prompt_rate = usage["prompt_tokens"] / max(wall, 1e-3)
    usage, wall = _chat(base_url, model, f"{salt}: count from one to one hundred in words.",
                        PROBE_OUTPUT, timeout)
    made = int(usage.get("completion_tokens") or 0)
    if made < 1:
        raise ServerUnanswered(f"{model} at {base_url} made no output token: its speed "
                               "cannot be measured")
    making = max(wall - usage["prompt_tokens"] / prompt_rate, 1e-3)
    return Speed(prompt=prompt_rate, output=made / making)


def tokenizer(base_url: str, name: str, timeout: float = ASK_TIMEOUT
              ) -> Callable[[str], int] | None:
    """The model's own token count of a text, where its server lends its tokenizer:
    llama.cpp's `POST /tokenize {"content"}` (a list of tokens), or vLLM's `POST /tokenize
    {"model", "prompt"}` (a `count`). None where neither answers (Ollama, LM Studio): the
    estimate then counts about four characters a token. Each text is asked once."""
    url = _root(base_url) + "/tokenize"
    shapes: list[tuple[Callable[[str], dict[str, Any]], Callable[[Any], int]]] = [
        (lambda text: {"content": text}, lambda got: len(got["tokens"])),
        (lambda text: {"model": name, "prompt": text}, lambda got: int(got["count"]))]
    for ask, read in shapes:
        try:
            read(_post(url, ask("a b"), timeout))
        except (ServerUnanswered, KeyError, TypeError, ValueError):
            continue
        return _Counter(url, ask, read, timeout)
    return None


@dataclass
class _Counter:
    """A server's tokenizer as a function of a text, each text asked once."""

    url: str
    ask: Callable[[str], dict[str, Any]]
    read: Callable[[Any], int]
    timeout: float
    seen: dict[str, int] = field(default_factory=dict)

    def __call__(self, text: str) -> int:
        if text not in self.seen:
            self.seen[text] = self.read(_post(self.url, self.ask(text), self.timeout))
        return self.seen[text]


@dataclass(frozen=True)
class Facts:
    """What the server a model is asked at says of it, for the estimate: its window (None: it
    does not say), its speed here (None: not measured), its tokenizer (None: not lent), and
    why any is missing."""

    url: str
    window: int | None = None
    speed: Speed | None = None
    problem: str | None = None
    count: Callable[[str], int] | None = None


def facts(base_url: str, name: str, *, speed: bool) -> Facts:
    """The window the server at `base_url` serves `name` with and, with `speed`, its tokens
    per second measured now; a server that does not answer is a `problem`, never raised (the
    estimate says it and goes on with the project's table)."""
    try:
        server = served(base_url)
    except ServerUnanswered as exc:
        return Facts(base_url, problem=str(exc))
    if not server.serves(name):
        return Facts(base_url, problem=f"the server at {base_url} does not serve '{name}' "
                     f"(GET /models lists: {', '.join(server.names) or 'none'})")
    count = tokenizer(base_url, name)
    try:
        rate = measure_speed(base_url, name) if speed else None
    except ServerUnanswered as exc:
        return Facts(base_url, server.windows.get(name), problem=str(exc), count=count)
    return Facts(base_url, server.windows.get(name), rate, count=count)
