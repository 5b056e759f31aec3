"""The seams: settings checked once, before anything runs; pure modules free of pytest; the
registry refusing a name twice; and a third-party plugin adding an agent, a metric and a field
kind with no edit to the plugin."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, run_records

BAD_OPTIONS = [
    (["--agent", "nosuch"], "ERROR: --agent: unknown agent 'nosuch' (known: anthropic, "
                            "claude-cli, gemini, gold, openai, replay, synthetic, trap)"),
    (["--agent", "synthetic", "--synthetic", "D1=1.5"],
     "ERROR: --synthetic: 'D1=1.5' is not CONDITION=PROBABILITY (0 to 1)"),
    (["--sparql-engine", "jena"], "ERROR: --sparql-engine: unknown sparql engine 'jena' "
                                  "(known: endpoint, rdflib, oxigraph)"),
    (["--agent", "replay"], "ERROR: --replay-run: the replay agent needs the run to replay"),
    (["--agent", "replay", "--replay-run", "never-ran"],
     "ERROR: --replay-run: {reports}/never-ran holds no answers.jsonl"),
    (["--query-timeout", "-5"], "ERROR: --query-timeout: must be more than 0, got -5"),
    (["--item-timeout", "0"], "ERROR: --item-timeout: must be more than 0, got 0"),
    (["--max-rounds", "0"], "ERROR: --max-rounds: must be at least 1, got 0"),
    (["--model-reruns", "-1"], "ERROR: --model-reruns: must be at least 0, got -1"),
    (["--repeats", "two"], "ERROR: --repeats: 'two' is not a whole number"),
    (["--max-tokens", "lots"], "ERROR: --max-tokens: 'lots' is not a whole number"),
    (["--dataset-seed", "1.5"], "ERROR: --dataset-seed: '1.5' is not a whole number"),
    (["--ask", "sometimes"], "ERROR: --ask: 'sometimes' is neither 'apart' nor 'together'"),
    (["--condition", "R99"], "ERROR: --condition: unknown condition 'R99' (known: R1, R2, R3, "
                             "R4, R5, R6, R7, R8, R9, R10, D1, D2, D3, D4, D5, D6, all, "
                             "reading, querying)"),
    (["--resume", "no-such-run"], "ERROR: --resume: no run 'no-such-run' under {reports} "
                                  "(nothing to resume; leave --resume out to start a new run)"),
    (["--model", "sonet", "--agent", "anthropic"],
     "ERROR: --model: 'sonet' is neither an alias (haiku, opus, sonnet) nor a model id"),
]


@pytest.mark.parametrize(("args", "line"), BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_and_exit_4_before_anything_runs(project, args, line,
                                                                  monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")  # the credential is not what is bad
    p = project()
    result = p.runpytest("questions", "--condition", "R1", "-k", "Q01", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    expected = line.format(reports=p.path / "reports")
    assert result.stderr.str().strip() == expected
    assert "collected" not in result.stdout.str() and "Traceback" not in result.stdout.str()
    assert not (p.path / "reports").exists()  # no run folder was made


def test_an_unknown_key_function_is_caught_by_collect_only(project) -> None:
    text = (REPO / "questions" / "credit.yaml").read_text(encoding="utf-8")
    p = project(text.replace("key: keys.rating_on\n", "key: keys.rating_of_nothing\n", 1))
    result = p.runpytest("questions", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # one line, before anything is collected
    result.stderr.fnmatch_lines(["*pack.yaml: question credit-Q*: field 'key': keys module has "
                                 "no function 'rating_of_nothing'*"])


PURE = ("questions", "grading", "fieldkinds", "metrics", "stats", "report", "costs", "settings",
        "registry", "record", "cases", "conditions", "answers", "together", "judge", "power",
        "html_report", "runtime", "rescore", "validate", "stores", "prompts", "cli", "runs")


def test_pure_modules_import_no_pytest() -> None:
    code = textwrap.dedent(f"""
        import importlib, sys
        for name in {PURE!r}:
            importlib.import_module("pytest_kgbench." + name)
        from pytest_kgbench.run.shipped import shipped
        shipped()  # finding the shipped pieces imports every agent and engine module
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("pytest", "_pytest",
                                                                    "xdist")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_name_registered_twice_is_refused() -> None:
    from pytest_kgbench.core.errors import InputError
    from pytest_kgbench.run.shipped import shipped

    reg = shipped()
    gold = reg.agents["gold"]
    with pytest.raises(InputError, match="registers agent 'gold', which "
                                         "pytest_kgbench.agents.reference.gold registered already"):
        reg.add("agents", gold, "plugin other")


def test_every_shipped_agent_declares_what_it_overrides() -> None:
    """A capability is read from its declaration, never probed: an agent that gives
    `complete` says `completes` (or the judge would not ask through it), one that batches says
    `batches`, and only a model agent says either."""
    from pytest_kgbench.agents import BaseAgent
    from pytest_kgbench.agents.support.batch import Batching
    from pytest_kgbench.run.shipped import shipped

    agents = shipped().agents
    assert {"anthropic", "openai", "gemini", "claude-cli", "gold", "replay"} <= set(agents)
    for name, cls in agents.items():
        assert cls.completes == (cls.complete is not BaseAgent.complete), name
        assert cls.batches == issubclass(cls, Batching), name
        assert cls.kind == "model" or not (cls.completes or cls.batches), name


def test_a_piece_that_is_not_of_its_kinds_base_class_is_refused_by_name() -> None:
    """Each table takes only what its domain's base class says (no member is probed for
    later): an agent must subclass BaseAgent, a field kind be a FieldKind, and so on."""
    from pytest_kgbench.core.errors import InputError
    from pytest_kgbench.run.shipped import shipped

    class Loose:
        name, kind = "loose", "model"

        def ask(self, task):  # noqa: ANN001, ANN201 - the duck a Protocol once accepted
            return None

    class LooseKind:
        name, is_list = "loose", False

    reg = shipped()
    with pytest.raises(InputError, match=r"plugin p: registers agent .*Loose.*, which is not a "
                                         r"subclass of pytest_kgbench\.agents\.BaseAgent"):
        reg.add("agents", Loose, "plugin p")
    with pytest.raises(InputError, match=r"which is not an instance of "
                                         r"pytest_kgbench\.core\.questions\.FieldKind"):
        reg.add("field_kinds", LooseKind(), "plugin p")
    assert "loose" not in reg.agents and "loose" not in reg.field_kinds


PLUGIN = '''
"""A tiny third-party plugin: an agent, a field kind, a metric, a condition and an engine, none
of them known to pytest_kgbench."""
from pytest_kgbench.agents import BaseAgent
from pytest_kgbench.core.conditions import Condition
from pytest_kgbench.core.questions import FieldKind
from pytest_kgbench.engines.sql import DuckDBStore
from pytest_kgbench.scoring.answers import Answer, answer_text
from pytest_kgbench.metrics import RateMetric

SYNONYMS = {"crimson": "red", "scarlet": "red", "navy": "blue"}


class ColourKind(FieldKind):
    name = "colour"
    is_list = False

    def describe(self, spec):
        return "a colour name"

    def compare(self, spec, expected, got, aliases):
        norm = lambda v: SYNONYMS.get(str(v).strip().lower(), str(v).strip().lower())
        return norm(expected) == norm(got), None


class PoetAgent(BaseAgent):
    name = "poet"
    kind = "model"
    judged = False

    def ask(self, task):
        fields = {f.name: "Crimson" for f in task.question.fields}
        return Answer(text=answer_text(fields, "The sky at dusk is crimson."), block=fields)


class SaysColour(RateMetric):
    name = "says_colour"
    title = "says a colour"
    help = "the prose names a colour"
    order = 5

    def measure(self, item):
        return any(w in item.answer.text.lower() for w in ("crimson", "red", "blue"))


def pytest_kgbench_agents():
    return [PoetAgent]


def pytest_kgbench_field_kinds():
    return [ColourKind()]


class NamedDuckDB(DuckDBStore):
    name = "duckdb_named"
    default = False


def pytest_kgbench_metrics():
    return [SaysColour()]


def pytest_kgbench_conditions():
    return [Condition("R20", "csv, once more", "reading", "sql", "csv", ())]


def pytest_kgbench_stores():
    return [NamedDuckDB()]
'''

COLOUR_QUESTION = '''
- id: credit-Q90
  tier: L1
  text: What colour is the sky at dusk in this data's world?
  answer: {colour: {kind: colour}}
  hand_key: {colour: red}
  gold: {sql: "SELECT 'red' AS colour"}
'''


def test_a_third_party_plugin_adds_an_agent_a_metric_and_a_field_kind(project) -> None:
    """Each piece reaches the session through the registry it passes down (nothing global):
    the plugin's condition is collected and marked, its engine is the one D1's store and the
    run folder name, its field kind grades and its metric measures on every worker."""
    p = project(COLOUR_QUESTION)
    p.makepyfile(kgbench_poet=PLUGIN)
    p.syspathinsert()
    result = p.runpytest_subprocess("-p", "kgbench_poet", "questions", "--agent", "poet",
                                    "--condition", "R1,D1,R20", "--sql-engine", "duckdb_named",
                                    "--strict-markers", "-m", "R20 or not R20",
                                    "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    records = run_records(p)
    # the field kind graded "Crimson" as the key's "red"; the metric measured each item
    assert {(r["condition"], r["grade"], r["metrics"]["says_colour"]) for r in records} == \
        {("R1", "correct", True), ("D1", "correct", True), ("R20", "correct", True)}
    assert {r["agent_kind"] for r in records} == {"model"}
    run = next((p.path / "reports").iterdir())
    report = json.loads((run / "report.json").read_text())
    assert report["engines"]["sql"] == "duckdb_named"
    assert report["conditions"]["R1"]["metrics"]["says_colour"] == {"rate": 1.0, "n": 1}
    md = (run / "report.md").read_text()
    assert "| arm | says a colour |" in md and "| R1 | 100.0% (1) |" in md
    assert "- says a colour: the prose names a colour" in md
    # the prompt describes the field as the plugin's kind says
    assert '- "colour": a colour name' in records[0]["prompt"]["question"]


def test_an_engine_argument_reaches_the_kind_that_takes_one() -> None:
    """`--sparql-engine NAME=ARG` (endpoint=URL): the part after `=` goes to the kind's
    `configure`, case kept; a kind without `configure` refuses an argument by name."""
    from pytest_kgbench.core.errors import InputError
    from pytest_kgbench.engines.stores import StoreKind, find_kind
    from pytest_kgbench.run.shipped import shipped

    class Bound(StoreKind):
        language, default = "sparql", False

        def __init__(self, argument: str = "") -> None:
            self.name, self.argument = "bound", argument

        def configure(self, argument: str) -> Bound:
            return Bound(argument)

        def open(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
            raise NotImplementedError

        def classify(self, guard, statement):  # noqa: ANN001, ANN201
            return None

    reg = shipped()
    reg.add("stores", Bound(), "test")
    kind = find_kind(reg, "sparql", "bound=http://127.0.0.1:7878/Query")
    assert isinstance(kind, Bound) and kind.argument == "http://127.0.0.1:7878/Query"
    with pytest.raises(InputError, match="takes no '=x'"):
        find_kind(reg, "sparql", "rdflib=x")
    with pytest.raises(InputError, match="unknown sparql engine 'nope'"):
        find_kind(reg, "sparql", "nope=x")
