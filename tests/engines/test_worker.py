"""The graph engines' worker process: no network (a SERVICE attempt from inside fails and the
sentinel server hears nothing), killed at the deadline (no engine thread runs on), replaced
when killed or dead, and never outliving its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from peaks import Lateness
from sentinel_http import SentinelServer

from conftest import wait_until
from pytest_kgbench.engines import CAPS
from pytest_kgbench.engines.sparql import PARSE_HERE, WORKER_MODULE, SparqlExecutor
from pytest_kgbench.engines.stores import guard_for, open_store
from pytest_kgbench.engines.worker import Worker, sandbox

ENGINES = ("rdflib", "oxigraph")
HEAVY = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }"

SERVICE_SCRIPT = textwrap.dedent("""
    import sys
    url, engine = sys.argv[1], sys.argv[2]
    query = "SELECT * WHERE { SERVICE <" + url + "/sparql> { ?s ?p ?o } }"
    try:
        if engine == "oxigraph":
            import pyoxigraph
            list(pyoxigraph.Store().query(query))
        elif engine == "rdflib":
            import rdflib
            list(rdflib.Graph().query(query))
        else:
            import urllib.request
            urllib.request.urlopen(url + "/raw", timeout=5).read()
        print("ran")
    except Exception as exc:
        print("failed", type(exc).__name__, exc)
""")


def _gone(pid: int) -> bool:
    """The process is no more (or a zombie nobody will run again)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in "ZX"


def _ends(pid: int | None) -> bool:
    """The process is gone, or goes within 10 s: a killed process may take a moment to exit
    on a loaded machine (a run with two CPU-bound processes beside it saw one still there the
    instant after its timeout); one left running never does."""
    return pid is not None and wait_until(lambda: _gone(pid), 10, every=0.05)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def sandboxed() -> tuple[str, ...]:
    prefix, what = sandbox()
    if not prefix:  # pragma: no cover - this machine has unshare; CI images may not
        pytest.skip(f"no network namespace on this system: {what}")
    return prefix


def test_the_worker_runs_in_a_network_namespace_of_its_own(credit_base, sandboxed) -> None:
    ex = open_store(credit_base, "sparql", "analyst")
    assert ex.info
    assert os.readlink(f"/proc/{ex.worker.pid}/ns/net") != os.readlink("/proc/self/ns/net")
    assert "network namespace" in ex.worker.sandbox
    ex.close()


@pytest.mark.parametrize("engine", [*ENGINES, "urllib"])
def test_a_network_call_inside_the_sandbox_fails_and_reaches_nothing(sandboxed,
                                                                     engine: str) -> None:
    """The OS wall by itself, with the guard out of the way: the engine is asked for a
    SERVICE call in a process started as the worker is. Beside it, the same call without the
    sandbox reaches the sentinel: the test sees a leak when there is one."""
    with SentinelServer() as sentinel:
        inside = subprocess.run([*sandboxed, sys.executable, "-c", SERVICE_SCRIPT,
                                 sentinel.url, engine], capture_output=True, text=True,
                                timeout=60)
        assert not sentinel.requests, inside.stdout
        assert not inside.stdout.startswith("ran"), inside.stdout + inside.stderr
        outside = subprocess.run([sys.executable, "-c", SERVICE_SCRIPT, sentinel.url, engine],
                                 capture_output=True, text=True, timeout=60)
        assert sentinel.requests, outside.stdout + outside.stderr  # the control reaches it


def test_the_workers_audit_hook_is_a_second_wall(tmp_path: Path) -> None:
    """Where no namespace can be made, Python-level calls are still refused in the worker."""
    path = tmp_path / "service.py"
    path.write_text(SERVICE_SCRIPT)
    script = ("import sys; from pytest_kgbench.engines.sparql_worker import _audit; "
              "sys.addaudithook(_audit); exec(open(sys.argv[3]).read())")
    with SentinelServer() as sentinel:
        for engine in ("rdflib", "urllib"):
            done = subprocess.run([sys.executable, "-c", script, sentinel.url, engine,
                                   str(path)], capture_output=True, text=True, timeout=60)
            assert "failed" in done.stdout, done.stdout + done.stderr
        assert not sentinel.requests


@pytest.mark.parametrize("engine", ENGINES)
def test_a_runaway_query_is_killed_at_its_deadline(credit_base, engine: str) -> None:
    """Three runaway queries, each reported stopped at its deadline: the worker that ran it
    is gone at once, and its replacement sits idle (no core kept busy)."""
    ex = open_store(credit_base, "sparql", "analyst", engines={"sparql": engine}, timeout=2.0)
    assert ex.info
    threads = threading.active_count()
    killed = []
    for _ in range(3):
        pid = ex.worker.pid
        with Lateness(after=2.0) as late:
            started = time.monotonic()
            res = ex.run(HEAVY)
            took = time.monotonic() - started
        assert res.timed_out and not res.rows and "stopped after 2 s" in (res.error or "")
        assert took < 4.0 + late.seconds, (took, late.seconds)
        assert _ends(pid)
        killed.append(pid)
    assert ex.info  # the replacement has loaded its graph
    fresh = ex.worker.pid
    assert fresh is not None and fresh not in killed
    before = _cpu_seconds(fresh)
    time.sleep(1.0)
    assert _cpu_seconds(fresh) - before < 0.2
    assert wait_until(lambda: threading.active_count() == threads, 10, every=0.05)
    assert ex.run("SELECT ?s WHERE { ?s ?p ?o } LIMIT 1").ok
    ex.close()
    assert _ends(fresh)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_store_still_loading_is_not_the_querys_time(tmp_path, engine: str) -> None:
    """A query asked while the worker still loads its store (a fresh one, or the replacement
    of one killed at a deadline) gets its whole deadline once the store is there: the load is
    the harness's time, never a timeout charged to the model."""
    from pytest_kgbench.engines.guard import Guard

    # a load well past the deadline (rdflib: about 2.3 s quiet, Oxigraph's own parser about
    # 0.5 s), and a deadline that a trivial query keeps on a loaded machine
    triples = 100_000 if engine == "rdflib" else 400_000
    data = tmp_path / "big.nt"
    data.write_text("".join(f'<http://example.org/s{i}> <http://example.org/p> "{i}" .\n'
                            for i in range(triples)), encoding="utf-8")
    plugin = "default" if engine == "rdflib" else "Oxigraph"
    timeout = 1.0 if engine == "rdflib" else 0.3
    ex = SparqlExecutor.over(plugin, [(data, "nt")], Guard(reads_personal=True),
                             timeout=timeout)
    try:
        started = time.monotonic()
        res = ex.run("ASK { ?s ?p ?o }")  # asked at once: the worker is still loading
        waited = time.monotonic() - started
        assert waited > timeout, "the store loaded within the deadline: nothing was tested"
        assert res.ok and not res.timed_out, res.error
        assert ex.run(HEAVY).timed_out  # killed at its deadline: a replacement loads
        started = time.monotonic()
        res = ex.run("ASK { ?s ?p ?o }")
        assert time.monotonic() - started > timeout
        assert res.ok and not res.timed_out, res.error
    finally:
        ex.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_the_guards_own_parse_is_inside_the_deadline(credit_base, engine: str) -> None:
    """A long text (a comment takes it past PARSE_HERE) whose parse is the slowest the term cap
    admits still ends at the deadline: it is parsed in the worker, which is killed; a long
    text with a SERVICE in it is refused there. The deadline is a fifth of what the same
    parse took here, a moment before."""
    from pytest_kgbench.engines.guard import SPARQL_TERMS, Guard, classify_sparql, sparql_terms

    operands = ",1" * (SPARQL_TERMS // 4 - 20)  # inside brackets: each counts four
    padding = "# " + "x" * PARSE_HERE + "\n"

    def slow(space: str) -> str:
        return f"{padding}SELECT ?s WHERE {{ ?s ?p ?o FILTER(COALESCE(1{operands})){space}}}"

    assert sparql_terms(slow(" ")) <= SPARQL_TERMS and len(slow(" ")) > PARSE_HERE
    started = time.thread_time()
    assert classify_sparql(slow("  "), Guard(reads_personal=True)).runs  # a text of its own
    took = time.thread_time() - started
    ex = open_store(credit_base, "sparql", "analyst", engines={"sparql": engine},
                    timeout=took / 5)
    assert ex.info
    pid = ex.worker.pid
    res = ex.run(slow(" "))
    assert res.timed_out, res
    assert _ends(pid)
    hidden = f"{padding}SELECT * WHERE {{ ?s ?p ?o . SERVICE <http://127.0.0.1:9/> {{ }} }}"
    ex.timeout = 30.0
    res = ex.run(hidden)
    assert res.refused and "SERVICE" in res.refused, res
    ex.close()


def test_a_dead_worker_is_an_error_then_a_fresh_one(credit_base) -> None:
    guard = guard_for(credit_base, "analyst")
    files = credit_base.files(guard.view)
    config = {"plugin": "Oxigraph", "files": [[str(files.data), files.data_format]],
              "guard": guard.to_json(), "caps": asdict(CAPS), "parsers": ["oxigraph"],
              "memory_bytes": 512 << 20}
    ex = SparqlExecutor(Worker(WORKER_MODULE, config), guard, timeout=30.0)
    assert ex.info
    os.kill(ex.worker.pid, signal.SIGKILL)  # killed between queries (the OOM killer, say)
    while ex.worker.alive():
        time.sleep(0.05)
    first = ex.run("SELECT ?s WHERE { ?s ?p ?o } LIMIT 1")
    assert first.ok, first.error  # the next query restarts it
    # past its memory limit mid-query: the query's error, never an exception, then a fresh one
    res = ex.run("SELECT (STRLEN(GROUP_CONCAT(CONCAT(STR(?a), STR(?d)))) AS ?x) "
                 "WHERE { ?a ?b ?c . ?d ?e ?f }")
    assert not res.ok and not res.rows and "memory limit" in (res.error or "")
    assert ex.run("SELECT ?s WHERE { ?s ?p ?o } LIMIT 1").ok
    ex.close()


def test_a_worker_dies_with_its_parent(credit_base, kg_cache) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from pytest_kgbench.packs.build import build_variant
        from pytest_kgbench.packs.schema import find_pack
        from pytest_kgbench.engines.stores import open_store
        pack = find_pack("credit", Path({str(credit_base.pack.dir.parent)!r}),
                         Path({str(credit_base.pack.ontology_dir.parent)!r}))
        built = build_variant(pack, "base", Path({str(kg_cache)!r}))
        ex = open_store(built, "sparql", "analyst")
        assert ex.info
        print(ex.worker.pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert not _gone(pid)
        parent.kill()
        parent.wait()
        assert wait_until(lambda: _gone(pid), 10, every=0.1)
    finally:
        parent.kill()


def test_an_executor_dropped_without_close_takes_its_worker_along(credit_base) -> None:
    import gc

    ex = open_store(credit_base, "sparql", "analyst")
    assert ex.info
    pid = ex.worker.pid
    del ex
    gc.collect()
    assert _ends(pid)
