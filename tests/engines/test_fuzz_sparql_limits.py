"""The SPARQL engines' limits under fuzzing (hypothesis), on rdflib, Oxigraph and the endpoint
(a local Oxigraph server): result blow-ups (cross joins of the graph, long computed cells),
runaways (aggregates over cross joins) and slow parses (the shapes rdflib's parser is slowest
on, at sizes on both sides of the term cap), each through the tool a model calls.

Every example asserts what the limits promise: the query ends by its deadline (wall ≤ the
deadline the test sets + 1 s + the time the machine held the test's process back past the
deadline, tests/peaks.Lateness: a bound derived from that deadline and the machine's load at
the time, not a claim of speed), the
text the model receives is within the stated result cap, the engine's worker keeps under its
memory limit, the endpoint's server stops working on a query its client gave up on (its own
limit set to the same deadline), and the next query still works."""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peaks import Lateness, address_space_limit, vm_hwm

from conftest import REPO
from pytest_kgbench.asking.tools import call_tool
from pytest_kgbench.engines import CAPS, Caps, QueryResult
from pytest_kgbench.engines.guard import SPARQL_TERMS, Guard, classify_sparql, sparql_terms
from pytest_kgbench.engines.worker import WORKER_MEMORY

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

SCALE = float(os.environ.get("KGBENCH_FUZZ_SCALE", "1"))
DEADLINE = 2  # seconds: the executors' deadline and the endpoint server's own (--timeout-s)
ENGINES = ("rdflib", "oxigraph", "endpoint")
TICK = os.sysconf("SC_CLK_TCK")


def fuzz(examples: int) -> Any:
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


@pytest.fixture(scope="module")
def bounded_server(tmp_path_factory):
    """An Oxigraph server whose own limit is the deadline (`--timeout-s`): as docs/engines.md
    says to start one, since its protocol takes no per-query limit."""
    from oxigraph_server import OxigraphServer, oxigraph_binary

    binary = oxigraph_binary()
    if binary is None:
        pytest.skip("the oxigraph CLI is not installed (pip install -e '.[dev]' brings it)")
    server = OxigraphServer(binary, tmp_path_factory.mktemp("bounded") / "store",
                            timeout_s=DEADLINE).start()
    assert server.proc is not None
    # a safety net for the machine the tests run on (docs/engines.md: Oxigraph's own limit
    # does not stop a sort of join results), as for the in-process engines' workers
    resource.prlimit(server.proc.pid, resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stores(credit_base, bounded_server):
    from pytest_kgbench.engines.stores import open_store

    engines = {"rdflib": "rdflib", "oxigraph": "oxigraph", "endpoint": bounded_server.engine}
    out = {name: open_store(credit_base, "sparql", "analyst", engines={"sparql": spec},
                            timeout=float(DEADLINE)) for name, spec in engines.items()}
    for ex in out.values():
        assert ex.info
    yield out
    for ex in out.values():
        ex.close()


def server_pid(ex: Any) -> int | None:
    """The process that evaluates `ex`'s queries: its worker, or the endpoint's server."""
    worker = getattr(ex, "worker", None)
    return worker.pid if worker is not None else None


def running(pid: int) -> bool:
    """Whether a thread of `pid` is running or waiting for a core (state R): work in progress,
    whether or not a loaded machine gives it a core just now."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "R":
                return True
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    return False


def idle(pid: int, most: float) -> float:
    """The CPU seconds `pid` spends from now until none of its threads runs (two readings a
    tenth of a second apart), waited for at most `most` seconds (then: infinity)."""
    start = cpu_seconds(pid)
    quiet = 0
    for _ in range(int(most / 0.1)):
        quiet = 0 if running(pid) else quiet + 1
        if quiet >= 2:
            return cpu_seconds(pid) - start
        time.sleep(0.1)
    return float("inf")


def check_limits(ex: Any, query: str, server: Any | None = None) -> QueryResult:
    """`query` through the model's tool on `ex`, and every limit checked (module docstring)."""
    if server is not None:
        idle(server.proc.pid, 60.0)  # what an earlier query left running, ended
    # a trivial query first, through the same path: it waits for a worker an earlier example
    # killed to be ready again (the executor does not count that as a query's time)
    assert ex.run("ASK { ?s ?p ?o }").ok
    if server is not None:
        before = cpu_seconds(server.proc.pid)
    with Lateness(after=DEADLINE) as late:
        started = time.monotonic()
        text, result = call_tool(ex, "run_query", {"query": query})
        took = time.monotonic() - started
    assert result is not None
    # past the deadline, the time the machine held this process back is not the engine's (a
    # trivial query's round trip before it did not show that: 0.8 ms, then 4.45 s for a 2 s
    # deadline with two CPU-bound processes and a second suite beside it)
    assert took <= DEADLINE + 1.0 + late.seconds, (took, late.seconds, query[:200],
                                                   result.error)
    assert len(text) <= CAPS.result_chars, (len(text), query[:200])
    pid = server_pid(ex)
    if pid is not None and ex.worker.alive():
        peak = vm_hwm(pid)
        assert peak is None or peak <= WORKER_MEMORY, peak
    if server is not None and result.timed_out:
        # the server ends the query at its own limit (the deadline, on its one evaluating
        # thread): all it spends on it, its client gone or not, is within that and a second
        idle(server.proc.pid, 60.0)
        # (a bound of twice the limit and a second: CI measured 3.92 s of the server's CPU for
        # a 2 s limit, the suite's other worker beside it; a server that runs on after its
        # client gave up spends 41-43 s, docs/engines.md)
        spent = cpu_seconds(server.proc.pid) - before
        assert spent <= 2 * DEADLINE + 1.0, (spent, query[:200])
    after = ex.run("ASK { ?s ?p ?o }")
    assert after.ok and after.rows == [[True]], after
    pid = server_pid(ex)
    if pid is not None:  # ready again (it answered): its memory limit is in force
        assert address_space_limit(pid) == WORKER_MEMORY
    return result


# --- what the fuzz sends -----------------------------------------------------------------------

RDF_TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"


@st.composite
def blowups(draw: Any, engine: str) -> str:
    """A cross join of the graph's triples (or of its typed nodes), with long computed cells.
    Not on the endpoint: a sort or DISTINCT of a join, which Oxigraph's own limit does not
    stop (docs/engines.md: its server cannot be bounded per query, and that is measured
    there); the endpoint gets them over one pattern."""
    k = draw(st.integers(1, 3))
    patterns = []
    for i in range(k):
        p = RDF_TYPE if draw(st.booleans()) else f"?p{i}"
        patterns.append(f"?s{i} {p} ?o{i} .")
    cells = ""
    if draw(st.booleans()):
        width = draw(st.integers(1, 40))
        cells = f"(CONCAT({', '.join(['STR(?s0)'] * width)}) AS ?wide) "
    head = draw(st.sampled_from(["SELECT * ", "SELECT DISTINCT * ", "SELECT ?s0 ", ""]))
    head = head or f"SELECT {cells}?s0 "
    order = draw(st.sampled_from(["", " ORDER BY ?s0", f" LIMIT {draw(st.integers(1, 10**7))}"]))
    if engine == "endpoint" and k > 1 and ("ORDER" in order or "DISTINCT" in head):
        patterns = patterns[:1]
    return f"{head}WHERE {{ {' '.join(patterns)} }}{order}"


@st.composite
def runaways(draw: Any) -> str:
    """An aggregate over a three-way cross join: no engine finishes it in the deadline."""
    what = draw(st.sampled_from(["(COUNT(*) AS ?n)", "(MAX(STR(?o2)) AS ?m)",
                                 "(SUM(STRLEN(STR(?o0))) AS ?n)"]))
    return f"SELECT {what} WHERE {{ ?s0 ?p0 ?o0 . ?s1 ?p1 ?o1 . ?s2 ?p2 ?o2 }}"


def _benchmark() -> Any:
    """benchmarks/sparql_limits.py, whose shapes the benchmark times and the fuzz sends."""
    import importlib.util
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))  # its neighbours, as `python benchmarks/…`
    spec = importlib.util.spec_from_file_location("sparql_limits",
                                                  REPO / "benchmarks" / "sparql_limits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _benchmark()
SHAPES: dict[str, tuple[str, str, str]] = BENCH.PARSE_SHAPES  # rdflib's parser's slowest


@st.composite
def slow_parses(draw: Any) -> str:
    """A shape at a size from a tenth of the term cap to twice it."""
    shape = draw(st.sampled_from(sorted(SHAPES)))
    return str(BENCH.shaped(shape, draw(st.integers(SPARQL_TERMS // 10, 2 * SPARQL_TERMS))))


# --- the fuzz ----------------------------------------------------------------------------------

@pytest.mark.slow
@fuzz(90)
@given(engine=st.sampled_from(ENGINES), data=st.data())
def test_result_blowups_stay_within_every_limit(stores, bounded_server, engine: str,
                                                data: Any) -> None:
    query = data.draw(blowups(engine))
    server = bounded_server if engine == "endpoint" else None
    result = check_limits(stores[engine], query, server)
    if result.ok:
        assert len(result.rows) <= CAPS.rows


@pytest.mark.slow
@fuzz(15)
@given(engine=st.sampled_from(ENGINES), query=runaways())
def test_runaways_end_at_the_deadline_on_the_engine_and_the_server(stores, bounded_server,
                                                                    engine: str,
                                                                    query: str) -> None:
    server = bounded_server if engine == "endpoint" else None
    result = check_limits(stores[engine], query, server)
    assert result.timed_out, result


@pytest.mark.slow
@fuzz(60)
@given(engine=st.sampled_from(ENGINES), query=slow_parses())
def test_slow_parse_shapes_are_refused_or_classified_within_the_deadline(
        stores, bounded_server, engine: str, query: str) -> None:
    server = bounded_server if engine == "endpoint" else None
    result = check_limits(stores[engine], query, server)
    if sparql_terms(query) > SPARQL_TERMS or len(query) > CAPS.query_chars:
        assert result.refused and not result.timed_out, result
        assert "terms" in result.refused or "characters long" in result.refused
    else:  # classified (what it costs: the next test); evaluated, or stopped at the deadline
        assert not (result.refused and "terms" in result.refused), result


# --- the items, one by one -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def roomy(credit_base, bounded_server):
    """The three engines with a deadline no loaded machine reaches on these queries."""
    from pytest_kgbench.engines.stores import open_store

    engines = {"rdflib": "rdflib", "oxigraph": "oxigraph", "endpoint": bounded_server.engine}
    out = {name: open_store(credit_base, "sparql", "analyst", engines={"sparql": spec},
                            timeout=120.0) for name, spec in engines.items()}
    yield out
    for ex in out.values():
        ex.close()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("query", [
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o }",
    "SELECT ?a ?b WHERE { ?a a ?x . ?b a ?y } LIMIT 3000",
    "SELECT (STR(?o) AS ?t) ?o ?o2 WHERE { ?s ?p ?o . ?s ?p ?o2 }"])
def test_a_result_as_the_model_receives_it_is_within_the_stated_cap(roomy, engine: str,
                                                                    query: str) -> None:
    """The stated cap is counted on the text the model receives (separators, line ends and
    the closing line included): 32,083 characters came back for 30,000 on rdflib."""
    text, result = call_tool(roomy[engine], "run_query", {"query": query})
    assert result is not None and result.ok and result.truncated, result
    assert len(text) <= CAPS.result_chars, len(text)
    assert len(text) > CAPS.result_chars - 2 * CAPS.cell_chars  # filled, not emptied
    assert text == result.preview()  # what the run banks is what the model saw


@given(caps=st.builds(Caps, rows=st.integers(1, 40), cell_chars=st.integers(1, 60),
                      result_chars=st.integers(400, 3_000), count_rows=st.integers(1, 80)),
       rows=st.lists(st.lists(st.text(max_size=80), min_size=2, max_size=2), max_size=90),
       chunk=st.integers(1, 300), head_last=st.booleans())
@fuzz(300)
def test_streamed_results_are_the_whole_documents_capped_alike(caps, rows, chunk,
                                                               head_last) -> None:
    """The endpoint's stream reader, fed a reply in chunks of any size, gives what reading
    the whole document gives; and either fits the cap as the model receives it."""
    from pytest_kgbench.engines.sparql_results import ResultStream, fill_results

    bindings = [{"a": {"type": "literal", "value": a}, "b": {"type": "uri", "value": b}}
                for a, b in rows]
    doc = {"head": {"vars": ["a", "b"]}, "results": {"bindings": bindings}}
    if head_last:
        doc = {"results": doc["results"], "head": doc["head"]}
    data = json.dumps(doc, indent=1 if chunk % 2 else None).encode()
    stream = ResultStream(caps)
    for i in range(0, len(data), chunk):
        if not stream.feed(data[i:i + chunk]):
            break
    whole = QueryResult(language="sparql", statement="q")
    fill_results(whole, doc, caps)
    streamed = QueryResult(language="sparql", statement="q")
    got = stream.finish()
    if got is None:
        stream.fill(streamed)
    else:
        fill_results(streamed, got, caps)
    assert streamed == whole
    assert len(whole.preview(caps)) <= caps.result_chars or not whole.rows


@pytest.mark.parametrize("engine", ENGINES)
def test_the_issue_s_slow_parses_are_refused_before_any_parse(stores, engine: str) -> None:
    """A 3,000-value VALUES (20 KB) and 1,500 FILTER(true) timed out at 5 s in the guard's
    parse on every engine: they are over the term cap, refused at once, and say why."""
    values = "SELECT ?x WHERE { VALUES ?x { " + " ".join(f"{i}.5" for i in range(3000)) + " } }"
    filters = "SELECT ?s WHERE { ?s ?p ?o " + "FILTER(true) " * 1500 + "}"
    assert len(values) < CAPS.query_chars and len(filters) < CAPS.query_chars
    for query in (values, filters):
        result = stores[engine].run(query)
        assert result.refused and "terms" in result.refused and not result.timed_out, result


@pytest.mark.slow
def test_what_the_guard_accepts_costs_a_few_reference_queries() -> None:
    """The slowest shapes the term cap admits cost the guard's parse at most a few times what
    the longest reference query costs, on the same machine at the same moment (the least CPU
    time of two parses: a ratio, not a speed; 2-3 measured, 8 allowed, where the 20,000
    characters the length cap alone admits cost 40 times); the reference queries all fall
    under the cap."""
    import yaml

    refs: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "sparql" and isinstance(value, str):
                    refs.append(value)
                else:
                    collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for name in ("credit", "research"):
        collect(yaml.safe_load((REPO / "questions" / f"{name}.yaml").read_text()))
    assert refs and all(sparql_terms(r) <= SPARQL_TERMS for r in refs)
    guard = Guard(reads_personal=True)
    classify_sparql("ASK { ?s ?p ?o }", guard)

    def cost(text: str) -> tuple[float, bool]:
        """The least CPU of two parses (texts of their own: none is cached), and whether the
        guard lets the query run."""
        times, runs = [], False
        for i in range(2):
            started = time.thread_time()
            runs = classify_sparql(text + " " * (i + 1), guard).runs
            times.append(time.thread_time() - started)
        return min(times), runs

    longest = max(refs, key=sparql_terms)
    reference, _ = cost(longest)
    for shape in SHAPES:  # each at the cap, or just under it
        text = str(BENCH.shaped(shape, SPARQL_TERMS))
        assert sparql_terms(text) <= SPARQL_TERMS
        spent, runs = cost(text)
        if not runs:
            continue  # nested past rdflib's recursion: an error at once
        assert spent <= 8 * reference, (shape, reference)
