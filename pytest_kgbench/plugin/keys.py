"""Every StashKey the plugin uses, declared once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_kgbench.asking.cases import Case
    from pytest_kgbench.core.interrupt import Interrupt
    from pytest_kgbench.core.questions import QuestionSet
    from pytest_kgbench.core.record import ItemRecord
    from pytest_kgbench.core.registry import Registry
    from pytest_kgbench.core.settings import Settings
    from pytest_kgbench.plugin.runstore import RunStore

REGISTRY: pytest.StashKey[Registry] = pytest.StashKey()
"""The session's agents, stores, field kinds, metrics and conditions, on every process."""

SETTINGS: pytest.StashKey[Settings] = pytest.StashKey()
"""The session's parsed options, on every process."""

RUNSTORE: pytest.StashKey[RunStore] = pytest.StashKey()
"""The run folder writer: on the controller only."""

CASE: pytest.StashKey[Case] = pytest.StashKey()
"""The item's question x condition x model x repeat, set at collection."""

GROUP: pytest.StashKey[tuple[Any, ...]] = pytest.StashKey()
"""Asked together: the selected questions of the item's session, in order (set after
deselection, so `-k` and --resume shape the session)."""

BROKEN: pytest.StashKey[str] = pytest.StashKey()
"""Why the harness broke during this item (HarnessBroken): the run halts after it."""

ESTIMATE: pytest.StashKey[list[str]] = pytest.StashKey()
"""--estimate: the table of the selected items' estimated tokens and dollars."""

RECORD: pytest.StashKey[ItemRecord | None] = pytest.StashKey()
"""The item's banked record, set by the item's call and attached to its call report once."""

ASKABLE: pytest.StashKey[bool] = pytest.StashKey()
"""Whether an item is a question item not marked skip (--concurrency's look ahead)."""

POSITIONS: pytest.StashKey[dict[int, int]] = pytest.StashKey()
"""Each item's place in session.items (by id), for --concurrency's look ahead."""

SCOPES: pytest.StashKey[dict[str, str]] = pytest.StashKey()
"""An xdist worker's items' scheduling scopes (cases.scope_groups), for the look ahead."""

PREBUILT: pytest.StashKey[Any] = pytest.StashKey()
"""The Runtime that built the session's variants before the first item (serial runs only):
the session fixture's own, so the first item does not load the packs and check their builds
again."""

INTERRUPT: pytest.StashKey[Interrupt] = pytest.StashKey()
"""Ctrl-C for this process of the run (core/interrupt.py): on the controller and on each worker."""

NOT_BANKED: pytest.StashKey[str] = pytest.StashKey()
"""Why the item's answer was dropped, never banked (Ctrl-C while it was asked, a replay with
nothing to give): the run lists it as missing, and --resume asks it again."""

QUESTION_SETS: pytest.StashKey[dict[tuple[str, str], QuestionSet]] = pytest.StashKey()
"""The question files read this session, by path and pack (the preflight's, then collection's)."""

SHARD: pytest.StashKey[Any] = pytest.StashKey()
"""--kgbench-shard: the session's shard (run/shards.Shard) and the run's whole budgets, on
the controller of a sharded run."""

CUT_RUNTIME: pytest.StashKey[Any] = pytest.StashKey()
"""The Runtime that built the whole selection's variants to cut it into shards: the
prebuild's, so nothing is loaded twice (None once taken)."""
