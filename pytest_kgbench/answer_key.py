"""The key of a question on a built variant: what its answer fields must hold, computed by the
pack's key function from the data and its definitions (or written by hand for a fixed pack),
independently of the gold queries that must reproduce it. Pure module: no pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_kgbench.build import Built
from pytest_kgbench.errors import InputError
from pytest_kgbench.executors import jsonable
from pytest_kgbench.questions import Question


def compute_key(question: Question, built: Built) -> dict[str, Any] | None:
    """A question's key on a variant: the pack's key function over the built data, or the
    hand-written key for a fixed pack without one; None for abstain/block questions."""
    if question.expect != "answer":
        return None
    if question.key is None:
        hand = dict(question.hand_key or {})
        null = [f.name for f in question.fields if hand.get(f.name) is None]
        if null:
            raise InputError(question.file, f"hand_key gives no value for {null}: a key states "
                             "its answer (e.g. 'unrated', 0, [])", question=question.id,
                             field="hand_key")
        return hand
    fn = built.pack.key_function(question.key, question=question.id)
    try:
        value = fn(built.tables, **dict(question.params))
    except TypeError as exc:
        raise InputError(question.file, f"key function '{question.key}' rejected the params: "
                         f"{exc}", question=question.id, field="params") from exc
    if not isinstance(value, Mapping):
        raise InputError(question.file, f"key function '{question.key}' must return a mapping "
                         "of answer fields", question=question.id, field="key")
    value = {k: v for k, v in value.items() if k != "_records"}
    missing = [f.name for f in question.fields if f.name not in value]
    if missing:
        raise InputError(question.file, f"key function '{question.key}' gives no value for "
                         f"{missing}", question=question.id, field="key")
    null = [f.name for f in question.fields if value[f.name] is None]
    if null:
        raise InputError(question.file, f"key function '{question.key}' gives null for {null} "
                         "on this variant: a key states its answer (e.g. 'unrated', 0, []); "
                         "null is what a model writes when it cannot determine a value",
                         question=question.id, field="key")
    return {name: _plain(v) for name, v in value.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple, set)):
        items = [_plain(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set) else items
    return jsonable(value)
