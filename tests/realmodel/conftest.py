"""A real language model for the plugin's own tests: llama.cpp's llama-server (built once from a
pinned sdist, tools/llama_server.py) serving Gemma 3 270M on 127.0.0.1, CPU only.

These tests are marked `realmodel` and run only when asked for: `pytest tests/realmodel -m
realmodel` (or KGBENCH_REALMODEL=1). The first run builds llama-server (about 10 min on two
quiet cores, cached in ~/.cache/kgbench); where it cannot be built (no cmake or compiler) or
the model cannot be installed, they are skipped with the reason.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import llama_server  # noqa: E402

SERVER_LIFETIME = 3600.0  # seconds: a server older than this is stopped by the fixture's end
READY_TIMEOUT = 600.0     # loading the model under a loaded machine


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "realmodel: asks a real model (llama-server, tools/llama_server.py); "
                   "run with -m realmodel")


def wanted(config: pytest.Config) -> bool:
    """Whether the run asked for the real model: `-m` naming realmodel, or KGBENCH_REALMODEL."""
    return "realmodel" in (config.getoption("markexpr") or "") or \
        os.environ.get("KGBENCH_REALMODEL") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if wanted(config):
        return
    skip = pytest.mark.skip(reason="asks a real model (builds llama-server): -m realmodel")
    for item in items:
        if item.get_closest_marker("realmodel"):
            item.add_marker(skip)


def start_or_skip(ctx: int, log_path: Path) -> llama_server.Server:
    """A running llama-server with the cached model, or the test skipped with why not."""
    try:
        llama_server.ensure_server()
        llama_server.ensure_model()
        return llama_server.start(ctx=ctx, log_path=log_path, ready_timeout=READY_TIMEOUT)
    except llama_server.Unavailable as err:
        pytest.skip(f"no llama-server: {err}")


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[llama_server.Server]:
    """llama-server for the session (one per xdist worker), 8192 tokens of context, stopped by
    its pid at the end, or when it outlived SERVER_LIFETIME."""
    log_path = tmp_path_factory.mktemp("llama") / "llama-server.log"
    began = time.monotonic()
    server = start_or_skip(8192, log_path)
    try:
        yield server
    finally:
        server.stop()
    assert time.monotonic() - began < SERVER_LIFETIME, "the server outlived its lifetime"


@pytest.fixture(scope="session")
def small_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[llama_server.Server]:
    """A second llama-server asked for 128 tokens of context (llama.cpp makes it 256): every
    prompt of the starter pack is longer."""
    server = start_or_skip(128, tmp_path_factory.mktemp("llama-small") / "llama-server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The starter pack (`kgbench init`): four questions on two small tables, so a prompt is a
    few hundred tokens and a 270M model answers in seconds."""
    from pytest_kgbench.cli import main

    folder = tmp_path_factory.mktemp("packs") / "shop"
    assert main(["init", str(folder)]) == 0
    return folder
