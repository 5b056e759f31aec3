"""The key of a question on a built variant: what its answer fields must hold, computed by the
pack's key function from the data and its definitions (or written by hand for a fixed pack),
independently of the gold queries that must reproduce it. Pure module: no pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_kgbench.core.errors import HarnessBroken, InputError
from pytest_kgbench.core.questions import KEY_QUERIES, Question
from pytest_kgbench.engines import jsonable
from pytest_kgbench.packs.build import Built

_QUERIED: dict[tuple[str, str, str], dict[str, Any]] = {}


def compute_key(question: Question, built: Built) -> dict[str, Any] | None:
    """A question's key on a variant: the pack's key function over the built data, or the
    hand-written key for a fixed pack without one; None for abstain/block questions."""
    if question.expect != "answer":
        return None
    if question.key in KEY_QUERIES:
        return _plain_fields(question, query_key(question, built))
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
    return _plain_fields(question, value, f"key function '{question.key}'")


def _plain_fields(question: Question, value: Mapping[str, Any],
                  source: str = "the gold query") -> dict[str, Any]:
    value = {k: v for k, v in value.items() if k != "_records"}
    missing = [f.name for f in question.fields if f.name not in value]
    if missing:
        raise InputError(question.file, f"{source} gives no value for {missing}",
                         question=question.id, field="key")
    null = [f.name for f in question.fields if value[f.name] is None]
    if null:
        raise InputError(question.file, f"{source} gives null for {null} on this variant: a "
                         "key states its answer (e.g. 'unrated', 0, []); null is what a model "
                         "writes when it cannot determine a value",
                         question=question.id, field="key")
    return {name: _plain(v) for name, v in value.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple, set)):
        items = [_plain(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set) else items
    return jsonable(value)


_KEY_STORES: dict[tuple[str, str, str], Any] = {}


def close_key_stores() -> None:
    """Close the stores the gold-query keys were computed on (at exit, or when a caller is
    done with them)."""
    while _KEY_STORES:
        _, store = _KEY_STORES.popitem()
        store.close()


def query_key(question: Question, built: Built) -> dict[str, Any]:
    """The fields the question's gold query gives on the built data (a pack without key
    functions: the key is the reference's result). The query failing is the harness's failure,
    never a grade: HarnessBroken."""
    from pytest_kgbench.engines import WHOLE
    from pytest_kgbench.engines.stores import open_store
    from pytest_kgbench.scoring.answers import fields_from_rows

    language = question.key.split(".", 1)[1] if question.key else "sql"
    cache = (str(built.dir), question.id, question.sha256)
    if cache not in _QUERIED:
        where = (str(built.dir), language, question.persona)
        if where not in _KEY_STORES:  # one store per variant, language and persona
            if not _KEY_STORES:
                import atexit

                atexit.register(close_key_stores)
            # whole results: a key cut at the caps a model's query has would grade a whole
            # answer wrong (ck25-39: 485 rows, 435 within 30,000 characters)
            _KEY_STORES[where] = open_store(built, language, question.persona, timeout=300.0,
                                            caps=WHOLE)
        result = _KEY_STORES[where].run(question.gold[language])
        if not result.ok or result.truncated:
            raise HarnessBroken(f"{question.file}: question {question.id}: its key is the result "
                                f"of its gold {language} query, which {_why_not(result)}")
        try:
            _QUERIED[cache] = fields_from_rows(question.fields, result.columns, result.rows)
        except KeyError as exc:
            raise InputError(question.file, f"its gold {language} query {exc.args[0]}",
                             question=question.id, field=f"gold.{language}") from exc
    return _QUERIED[cache]


def _why_not(result: Any) -> str:
    """Why a gold query's result cannot be a key: refused, failed, or cut even with the caps
    lifted (a cell past `WHOLE.cell_chars`, rows past `WHOLE.rows`): a key is never cut."""
    if result.refused or not result.ok:
        return (f"{'was refused' if result.refused else 'failed'}: "
                f"{result.refused or result.error}")
    return (f"is cut even with the caps lifted ({result.row_count:,} rows, "
            f"{len(result.rows):,} kept; cells cut: {result.cells_cut}): a key must be whole; "
            "give the question a key function (docs/packs.md)")
