"""A server's own models (agents/support/served.py): the names it serves are models, the window
it serves them with is the estimate's, and a local model's cost is time measured here — against
the fake OpenAI-compatible API (tests/fake_openai.py) in the shapes llama.cpp, vLLM, Ollama and
LM Studio answer `GET /v1/models` with, and its hostile modes (an error, a body that is no list,
no server at all). The real llama-server is asked the same in tests/realmodel."""

from __future__ import annotations

import pytest
from fake_openai import text

from conftest import run_records

A_PLUS = "```json\n{\"rating\": \"A+\"}\n```"


def ask(p, api, model: str, *args: str):
    return p.runpytest("questions", "--agent", "openai", "--base-url", api.url,
                       "--model", model, *args)


def test_a_name_the_server_serves_is_a_model_whatever_it_looks_like(project, chat_api) -> None:
    """Ollama serves `mistral` under exactly that name: it was refused as "neither an alias
    nor a model id" before the server was asked."""
    chat_api.models = ["mistral", "llama3"]
    chat_api.push(text(A_PLUS))
    p = project()
    ask(p, chat_api, "mistral", "--condition", "R1", "-k", "Q01").assert_outcomes(passed=1)
    assert [r["body"]["model"] for r in chat_api.requests] == ["mistral"]
    assert run_records(p)[0]["model"] == "mistral"


def test_a_name_the_server_does_not_serve_is_refused_before_any_item(project,
                                                                     chat_api) -> None:
    chat_api.models = ["mistral", "llama3"]
    p = project()
    result = ask(p, chat_api, "mistrall", "--condition", "R1", "-k", "Q01")
    assert result.ret == 4
    err = result.stderr.str()
    assert "'mistrall' is not a model the server at" in err and "mistral, llama3" in err
    assert chat_api.requests == []  # nothing was asked
    assert not (p.path / "reports").exists()


def test_an_alias_whose_id_the_server_serves_passes(project, chat_api) -> None:
    chat_api.models = ["qwen2.5:7b"]
    chat_api.push(text(A_PLUS))
    p = project()
    (p.path / "pyproject.toml").write_text('[tool.kgbench.models]\nlocal = "qwen2.5:7b"\n')
    ask(p, chat_api, "local", "--condition", "R1", "-k", "Q01").assert_outcomes(passed=1)
    assert chat_api.requests[0]["body"]["model"] == "qwen2.5:7b"


@pytest.mark.parametrize("status", [500, 404])
def test_a_server_that_does_not_list_its_models_is_a_refusal_when_asking(project, chat_api,
                                                                         status) -> None:
    """Nothing can be asked of a server that does not answer: the run stops before its first
    item, naming the URL, and no item is graded. --collect-only asks nothing, so the names
    are taken as written then."""
    chat_api.models_status = status
    p = project()
    result = ask(p, chat_api, "mistral", "--condition", "R1", "-k", "Q01")
    assert result.ret == 4
    assert f"GET {chat_api.url}/models answered HTTP {status}" in result.stderr.str()
    assert chat_api.requests == []
    assert ask(p, chat_api, "mistral", "--condition", "R1", "-k", "Q01",
               "--collect-only", "-q").ret == 0


def test_no_server_at_the_url_is_a_refusal(project, monkeypatch) -> None:
    from oxigraph_server import free_port

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    p = project()
    result = p.runpytest("questions", "--agent", "openai", "--base-url", url, "--model",
                         "mistral", "--condition", "R1", "-k", "Q01")
    assert result.ret == 4
    assert f"GET {url}/models failed" in result.stderr.str()


def test_the_window_is_read_in_each_server_s_shape(chat_api) -> None:
    from pytest_kgbench.agents.support.served import _window, served

    # llama.cpp: meta.n_ctx is the context it was started with (--ctx), not n_ctx_train
    chat_api.models = ["gemma3-270m"]
    chat_api.model_meta = {"aliases": ["gemma"], "meta": {"n_ctx": 16384,
                                                          "n_ctx_train": 32768}}
    got = served(chat_api.url)
    assert got.names == ("gemma3-270m", "gemma")
    assert dict(got.windows) == {"gemma3-270m": 16384, "gemma": 16384}
    chat_api.model_meta = {"max_model_len": 8192}  # vLLM
    assert dict(served(chat_api.url).windows) == {"gemma3-270m": 8192}
    chat_api.model_meta = {}  # Ollama, OpenAI: no window in the list
    chat_api.models = ["mistral"]
    got = served(chat_api.url)
    assert got.names == ("mistral",) and dict(got.windows) == {}
    # LM Studio's own REST API (GET /api/v0/models): the window it loaded the model with
    assert _window({"id": "qwen", "max_context_length": 32768,
                    "loaded_context_length": 4096}) == 4096
    assert _window({"id": "x", "meta": {"n_ctx": True}}) is None  # not a number of tokens


@pytest.mark.parametrize("body", [[], {"data": "gpt"}, {"data": [1, 2]}, {"models": []}])
def test_a_list_of_models_in_no_known_shape_is_named(chat_api, monkeypatch, body) -> None:
    from pytest_kgbench.agents.support.served import ServerUnanswered, served

    monkeypatch.setattr(type(chat_api), "get", lambda self, handler, parts:
                        handler._send(200, body))
    with pytest.raises(ServerUnanswered, match=r"did not answer an OpenAI list of models"):
        served(chat_api.url)


def test_speed_is_the_usage_over_the_wall_time_of_two_calls(chat_api) -> None:
    """The prompt probe reads a long prompt and makes one token, the output probe makes up to
    64; each rate is the server's own token counts over the call's whole time. A server
    whose answers carry no usage cannot be measured, and says so."""
    from fake_openai import stall

    from pytest_kgbench.agents.support.served import ServerUnanswered, measure_speed

    chat_api.push(stall(0.3, text("x", prompt_tokens=600, completion_tokens=1)),
                  stall(0.5, text("one two", prompt_tokens=12, completion_tokens=64)))
    speed = measure_speed(chat_api.url, "gpt-test-1")
    first, second = (r["body"] for r in chat_api.requests)
    assert (first["max_tokens"], second["max_tokens"]) == (1, 64)
    assert len(first["messages"][0]["content"]) > 2000 > len(second["messages"][0]["content"])
    # at most 600 tokens over >= 0.3 s, and 64 over >= 0.5 s less the 12 prompt tokens' share
    assert 0 < speed.prompt <= 600 / 0.3
    assert 0 < speed.output <= 64 / (0.5 - 12 / speed.prompt)
    assert speed.seconds(600, 64) == pytest.approx(600 / speed.prompt + 64 / speed.output)
    no_usage = text("x")
    no_usage["usage"] = None
    chat_api.push(no_usage)
    with pytest.raises(ServerUnanswered, match="no usage"):
        measure_speed(chat_api.url, "gpt-test-1")


def test_the_estimate_of_a_local_model_is_its_server_s_window_and_time(project,
                                                                       chat_api) -> None:
    """No price, a server of the user's: the estimate's window is the one the server serves
    (prompts longer than it are counted as skipped), and its cost is time at the speed
    measured now, not "no price" and not dollars."""
    chat_api.models = ["gemma3-270m"]
    chat_api.model_meta = {"meta": {"n_ctx": 2048}}
    p = project()
    result = ask(p, chat_api, "gemma3-270m", "--estimate", "--condition", "R1", "-k", "Q01")
    assert result.ret == 0
    out = result.stdout.str()
    assert "time on this machine, for the models served here with no price: about" in out
    assert "gemma3-270m" in out and "prompt and" in out and "tokens/s" in out
    row = next(x for x in result.stdout.lines if x.startswith("R1 "))
    assert "(time)" in row and "$" not in row and "no price" not in row
    assert f"gemma3-270m at {chat_api.url}: serves a 2,048-token window" in out
    # credit's R1 prompt holds the whole data block: far over 2,048 tokens
    assert "more than the model's 2,048-token window; they will be skipped" in out
    assert len(chat_api.requests) == 2  # the two speed probes, no item
    # a priced model is not timed: dollars, and no probe
    (p.path / "pyproject.toml").write_text(
        '[tool.kgbench.prices."gemma3-270m"]\ninput = 1.0\noutput = 2.0\n')
    priced = ask(p, chat_api, "gemma3-270m", "--estimate", "--condition", "R1", "-k", "Q01")
    assert priced.ret == 0 and len(chat_api.requests) == 2
    assert next(x for x in priced.stdout.lines if x.startswith("R1 ")).count("$") >= 1


@pytest.mark.parametrize("shape", ["llama", "vllm"])
def test_the_model_s_own_tokenizer_counts_where_the_server_lends_it(chat_api, shape) -> None:
    """llama.cpp's and vLLM's /tokenize: the count is the server's, and each text is asked
    once however often the estimate counts it. Ollama and LM Studio lend none: None."""
    from pytest_kgbench.agents.support.served import tokenizer

    chat_api.tokenizer = shape
    count = tokenizer(chat_api.url, "gpt-test-1")
    assert count is not None
    assert count("x" * 1000) == 500 and count("x" * 1000) == 500 and count("ab") == 1
    assert chat_api.tokenized == ["a b", "x" * 1000, "ab"]  # the probe, then each text once
    chat_api.tokenizer = None
    assert tokenizer(chat_api.url, "gpt-test-1") is None


def test_the_estimate_counts_with_the_server_s_tokenizer(project, chat_api) -> None:
    """Credit's R1 prompt is about 21,400 characters: some 5,350 tokens at four characters a
    token, under an 8,192-token window; this server's tokenizer makes some 10,700 of it, so the
    estimate says the item would be skipped (as llama.cpp then skips it: its tokenizer made
    2.4 times the four-characters count of credit's data)."""
    chat_api.models = ["gemma3-270m"]
    chat_api.model_meta = {"meta": {"n_ctx": 8192}}
    p = project()
    args = ("--estimate", "--condition", "R1", "-k", "Q01")
    blind = ask(p, chat_api, "gemma3-270m", *args)
    assert blind.ret == 0 and "will be skipped" not in blind.stdout.str()
    chat_api.tokenizer = "llama"
    seen = ask(p, chat_api, "gemma3-270m", *args)
    assert seen.ret == 0
    assert "more than the model's 8,192-token window; they will be skipped" in \
        seen.stdout.str()
    row = next(x for x in seen.stdout.lines if x.startswith("R1 ")).split()
    first = next(x for x in blind.stdout.lines if x.startswith("R1 ")).split()
    assert int(row[3].replace(",", "")) > 1.8 * int(first[3].replace(",", ""))
