"""Shared fixtures of the plugin's own tests."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Bytecode is written, whatever the environment says (PYTHONDONTWRITEBYTECODE): the suite starts
# a hundred Python processes (pytester's subprocess runs, xdist workers, the stores' workers),
# and pytest does not cache its assertion rewriting of the plugins' own modules without it, so
# each process would compile some 180 modules again (about 2 s each).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Native modules are imported here, before any pytester run: pytester's inline runs drop the
# modules first imported inside them, and a native module imported a second time aborts (duckdb)
# or refuses to load (numpy).
import duckdb  # noqa: F401
import hypothesis  # noqa: F401,E402 - its pytest plugin imports it at every run's end
import matplotlib.figure  # noqa: F401 - a second matplotlib mixes classes of two imports
import numpy  # noqa: F401
import pyshacl  # noqa: F401 - imports the importlib_metadata backport, which moves distribution

#                  discovery off the stdlib finder onto its own sys.meta_path entry; an inline
#                  run that imported it first would leave later runs unable to find any plugin
import pytest
import rdflib  # noqa: F401
import scipy.stats  # noqa: F401

import pytest_kgbench.analysis.html_report  # noqa: F401,E402
import pytest_kgbench.core.registry  # noqa: F401,E402
import pytest_kgbench.plugin  # noqa: F401,E402

# The plugin's own modules too: a test that imports one of them before an inline run would
# otherwise leave the next inline run with half a package.
import pytest_kgbench.plugin.collect  # noqa: F401,E402
import pytest_kgbench.run.runtime  # noqa: F401,E402

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]


def subprocess_project(root: Path, kg_cache: Path, ini: str = "") -> Path:
    """A project for sessions run in subprocesses of their own (killed, interrupted): the
    repository's credit question file and a pytest.ini pointing at the repository's packs and
    the session's build cache, plus `ini`."""
    (root / "questions").mkdir()
    (root / "questions" / "credit.yaml").write_text(
        (REPO / "questions" / "credit.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (root / "pytest.ini").write_text(
        "[pytest]\n"
        f"kgbench_datasets = {REPO / 'datasets'}\n"
        f"kgbench_ontology = {REPO / 'ontology'}\n"
        f"kgbench_cache = {kg_cache}\n" + ini)
    return root


# the starter pack's tables (kgbench init), declared with their types
STARTER_TABLES = {
    "customers": {"columns": {"customer_id": "VARCHAR", "name": "VARCHAR", "country": "VARCHAR",
                              "email": "VARCHAR"}, "primary_key": "customer_id"},
    "orders": {"columns": {"order_id": "VARCHAR", "customer_id": "VARCHAR", "placed": "DATE",
                           "amount": "DOUBLE", "status": "VARCHAR", "is_test": "BOOLEAN"},
               "primary_key": "order_id"}}


def starter_pack(folder: Path, **manifest: Any) -> Path:
    """The starter pack written by `kgbench init` into `folder`, its pack.yaml's top-level
    keys replaced by `manifest`."""
    import yaml

    from pytest_kgbench.cli import main

    assert main(["init", str(folder)]) == 0
    data = yaml.safe_load((folder / "pack.yaml").read_text(encoding="utf-8"))
    data.update(manifest)
    (folder / "pack.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return folder


def credit_on_base(tier: str | None = None) -> int:
    """How many credit questions (of a tier) run on base: the items a selection of the
    repository's question file gives per condition (counted from the file, never by hand)."""
    from pytest_kgbench.core.questions import load_questions

    return sum(1 for q in load_questions(REPO / "questions" / "credit.yaml").questions
               if (q.variants is None or "base" in q.variants) and tier in (None, q.tier))


def only_run(p: pytest.Pytester) -> Path:
    """The one run folder a pytester project's run wrote."""
    return next((p.path / "reports").iterdir())


def has_result(body: dict) -> bool:
    """Whether a Messages API request already carries a tool result (the model's next turn)."""
    return any(isinstance(m.get("content"), list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in m["content"])
        for m in body.get("messages", []))


@contextlib.contextmanager
def cli_session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, script: Callable[..., Any]):
    """The real Claude Code CLI (KGBENCH_CLAUDE), with a HOME of its own, talking to a fake
    Messages API that answers with `script`; yields the fake."""
    from fake_api import FakeMessagesAPI

    from pytest_kgbench.agents.models.claude_cli import find_claude

    binary = find_claude(str(REPO))
    assert binary, ("the Claude Code CLI is needed for this test: "
                    "npm install --prefix .tools @anthropic-ai/claude-code")
    monkeypatch.setenv("KGBENCH_CLAUDE", binary)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    with FakeMessagesAPI(script) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
        yield api


def wait_until(ready: Callable[[], Any], timeout: float, proc: Any = None,
               every: float = 0.05) -> bool:
    """Poll `ready` until it holds or `timeout` seconds pass; whether it held. With `proc` (a
    Popen), fail at once if the process ends first, with what it printed."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the process ended first: {proc.communicate()[0]}")
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
    return True


def untimed(conditions: dict) -> dict:
    """report.json's arms without their median latency, the arm's and each tier's (a timing:
    serial and parallel runs agree on everything else)."""
    def drop(c: dict) -> dict:
        return {**c, "effort": {k: v for k, v in (c.get("effort") or {}).items()
                                if k != "latency_s"}}

    return {arm: {**drop(c), "by_tier": {t: drop(b) for t, b in (c.get("by_tier") or {}).items()}}
            for arm, c in conditions.items()}


def transient_never_graded(p: pytest.Pytester, *args: str) -> None:
    """One item asked in a subprocess with reruns off (`args`: the agent, its endpoint and
    model), every call of which fails transiently: the item fails with TransientModelError and
    nothing is banked (it is never graded)."""
    result = p.runpytest_subprocess("questions", *args, "--condition", "R1", "-k", "Q01",
                                    "--model-reruns", "0")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TransientModelError*"])
    answers = only_run(p) / "answers.jsonl"
    assert not answers.exists() or answers.read_text() == ""


def run_records(p: pytest.Pytester) -> list[dict]:
    """Every record of that run's answers.jsonl, each line parsed strictly."""
    import json

    return [json.loads(x) for x in (only_run(p) / "answers.jsonl").read_text().splitlines()]


@functools.cache
def _credit_questions():
    from pytest_kgbench.core.questions import load_questions

    return load_questions(REPO / "questions" / "credit.yaml").questions


def credit_question(qid: str):
    """One question of the repository's credit question file (read once per process)."""
    return next(q for q in _credit_questions() if q.id == qid)


@pytest.fixture(scope="session")
def kg_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """One build cache for the whole test session, shared by its xdist workers: a variant is
    built once, by the first worker to need it (build_variant builds under a file lock, so a
    second worker waits for it and reads it back)."""
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":  # each worker's basetemp is a folder of the session's own
        root = root.parent
    cache = root / "kgbench-cache"
    cache.mkdir(exist_ok=True)
    return cache


@pytest.fixture(scope="session")
def credit_pack():
    from pytest_kgbench.packs.schema import find_pack

    return find_pack("credit", REPO / "datasets", REPO / "ontology")


@pytest.fixture(scope="session")
def credit_base(credit_pack, kg_cache: Path):
    """credit/base, built at the pack's own seed."""
    from pytest_kgbench.packs.build import build_variant

    return build_variant(credit_pack, "base", kg_cache)


@pytest.fixture(scope="session")
def credit_questions():
    from pytest_kgbench.core.questions import load_questions

    return load_questions(REPO / "questions" / "credit.yaml")


@pytest.fixture(scope="session")
def credit_checks(credit_questions, credit_base):
    """validate.check_questions of every credit question on base (SPARQL on rdflib), by id."""
    from pytest_kgbench.run.validate import check_questions

    return {c.question: c for c in check_questions(list(credit_questions.questions), credit_base)}


@pytest.fixture(scope="session")
def research_pack():
    from pytest_kgbench.packs.schema import find_pack

    return find_pack("research", REPO / "datasets", REPO / "ontology")


@pytest.fixture(scope="session")
def research_base(research_pack, kg_cache: Path):
    """research/base, built at the pack's own seed."""
    from pytest_kgbench.packs.build import build_variant

    return build_variant(research_pack, "base", kg_cache)


@pytest.fixture(scope="session")
def research_large(research_pack, kg_cache: Path):
    from pytest_kgbench.packs.build import build_variant

    return build_variant(research_pack, "large", kg_cache)


@pytest.fixture(scope="session")
def research_questions():
    from pytest_kgbench.core.questions import load_questions

    return load_questions(REPO / "questions" / "research.yaml")


@pytest.fixture(scope="session")
def research_checks(research_questions, research_base):
    """validate.check_questions of every research question on base (SPARQL on rdflib), by id."""
    from pytest_kgbench.run.validate import check_questions

    return {c.question: c for c in check_questions(list(research_questions.questions),
                                                   research_base)}


def unrendered(built) -> list[str]:
    """What of a pack's definitions.ttl is missing from its rendered Markdown: each concept's
    definition, its CURIE and every note (an empty list when the rendering carries them all)."""
    from pytest_kgbench.packs.rdf.ontology import concepts

    md = built.definitions_md.read_text(encoding="utf-8")
    missing = []
    for c in concepts(built.pack.definitions_ttl.read_text(encoding="utf-8")):
        if not c["definition"] or c["definition"] not in md:
            missing.append(f"{c['curie']}: definition")
        if f"`{c['curie']}`" not in md:
            missing.append(f"{c['curie']}: curie")
        missing += [f"{c['curie']}: note" for note in c["notes"] if note not in md]
    return missing


def decoy_checks(ontology: Path, built, questions) -> tuple[float, set[str], str]:
    """A pack's decoy against its definitions: the length ratio, the labels of the definitions
    the questions need, and the decoy's text (the tests assert on all three)."""
    from pytest_kgbench.packs.rdf.ontology import concepts

    decoy = (ontology / "decoy.md").read_text(encoding="utf-8")
    definitions = built.definitions_md.read_text(encoding="utf-8")
    needed = {n.split(":", 1)[1] for q in questions.questions for n in q.needs}
    labels = {c["label"] for c in concepts((ontology / "definitions.ttl").read_text())
              if c["curie"].split(":", 1)[1] in needed}
    return len(decoy) / len(definitions), labels, decoy


@pytest.fixture
def project(pytester: pytest.Pytester, kg_cache: Path) -> Callable[..., pytest.Pytester]:
    """A pytester project using the repository's packs and the session's build cache.

    `project(questions_yaml=None, ini="")` writes questions/credit.yaml (the real file unless
    given) and a pytest.ini pointing the plugin at the repository's datasets/ and ontology/.
    """

    def make(questions_yaml: str | None = None, ini: str = "") -> pytest.Pytester:
        qdir = pytester.path / "questions"
        qdir.mkdir(exist_ok=True)
        text = questions_yaml if questions_yaml is not None else \
            (REPO / "questions" / "credit.yaml").read_text(encoding="utf-8")
        (qdir / "credit.yaml").write_text(text, encoding="utf-8")
        pytester.makeini(
            "[pytest]\n"
            f"kgbench_datasets = {REPO / 'datasets'}\n"
            f"kgbench_ontology = {REPO / 'ontology'}\n"
            f"kgbench_cache = {kg_cache}\n" + ini)
        return pytester

    return make


@pytest.fixture
def api(monkeypatch):
    """A fake Messages API on 127.0.0.1, with the SDK's base URL and a dummy key pointing at
    it (tests/fake_api.py scripts its replies)."""
    from fake_api import FakeMessagesAPI

    with FakeMessagesAPI() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
        yield server


@pytest.fixture
def chat_api(monkeypatch):
    """A fake OpenAI-compatible Chat Completions API on 127.0.0.1 with a dummy key
    (tests/fake_openai.py scripts its replies); pass `--base-url chat_api.url`."""
    from fake_openai import FakeChatAPI

    with FakeChatAPI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
        yield server


GEMINI_ENV = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL",
              "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE",
              "GOOGLE_GENAI_API_VERSION")


@pytest.fixture
def gemini_api(monkeypatch):
    """A fake Gemini API on 127.0.0.1 with a dummy GEMINI_API_KEY and none of the machine's
    own Google settings (tests/fake_gemini.py scripts its replies); pass `--base-url
    gemini_api.url`."""
    from fake_gemini import FakeGeminiAPI

    for name in GEMINI_ENV:
        monkeypatch.delenv(name, raising=False)
    with FakeGeminiAPI() as server:
        monkeypatch.setenv("GEMINI_API_KEY", "gm-test-not-a-secret")
        yield server


@pytest.fixture
def backend(request, monkeypatch, tmp_path):
    """One model backend against its fake API on 127.0.0.1, named by the test's parameter
    (indirect): (its name, the fake, the command line that asks through it, the fake's module
    of steps). The same check run on every backend it fits (test_faults, test_model_apis)."""
    import fake_api
    import fake_gemini
    import fake_openai

    name = request.param
    if name == "gemini":
        for variable in GEMINI_ENV:
            monkeypatch.delenv(variable, raising=False)
        with fake_gemini.FakeGeminiAPI() as server:
            monkeypatch.setenv("GEMINI_API_KEY", "gm-test-not-a-secret")
            yield name, server, ["--agent", "gemini", "--base-url", server.url, "--model",
                                 "gemini-test-1"], fake_gemini
    elif name == "openai":
        with fake_openai.FakeChatAPI() as server:
            monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
            yield name, server, ["--agent", "openai", "--base-url", server.url, "--model",
                                 "gpt-test-1"], fake_openai
    elif name == "anthropic":
        with fake_api.FakeMessagesAPI() as server:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
            yield name, server, ["--model", "sonnet"], fake_api
    else:
        said = "Caldera is rated A+.\n```json\n{\"rating\": \"A+\"}\n```"
        with cli_session(monkeypatch, tmp_path, lambda body: fake_api.text(said)) as server:
            yield name, server, ["--agent", "claude-cli", "--model", "sonnet"], fake_api


@pytest.fixture(scope="session")
def pg_server():
    """A throwaway PostgreSQL server (tests/pg_server.py) for the session, stopped at its end;
    the tests that need one are skipped with the reason where the machine has no PostgreSQL
    (CI installs it: .ci/run)."""
    from pg_server import PgServer, missing

    why = missing()
    if why:
        pytest.skip(why)
    with PgServer() as server:
        yield server


@pytest.fixture(scope="session")
def oxigraph(tmp_path_factory: pytest.TempPathFactory):
    """A real Oxigraph server on 127.0.0.1 for the session (tests/oxigraph_server.py), with a
    throwaway store; skipped, with the reason, where the `oxigraph` CLI (dev extra) is
    missing."""
    from oxigraph_server import OxigraphServer, oxigraph_binary

    binary = oxigraph_binary()
    if binary is None:
        pytest.skip("the oxigraph CLI is not installed (pip install -e '.[dev]' brings it)")
    server = OxigraphServer(binary, tmp_path_factory.mktemp("oxigraph") / "store").start()
    yield server
    server.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked `realmodel` (tests/realmodel: a real model on llama-server, built by
    tools/llama_server.py in minutes) are deselected unless asked for, by `-m` naming them or
    KGBENCH_REALMODEL=1: `.ci/run` runs them in a step of their own."""
    if "realmodel" in (config.getoption("markexpr") or "") or \
            os.environ.get("KGBENCH_REALMODEL") == "1":
        return
    real = [item for item in items if item.get_closest_marker("realmodel")]
    if real:
        config.hook.pytest_deselected(items=real)
        items[:] = [item for item in items if not item.get_closest_marker("realmodel")]
