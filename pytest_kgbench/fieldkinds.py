"""The field kinds that ship with the plugin: how a value of each kind is described to the
model, normalised, and compared with the key. A plugin adds a kind by returning an object with
the same four members from `pytest_kgbench_field_kinds` (registry.FieldKind).

Pure module: no pytest, no I/O. Nothing here raises for a value a model wrote.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_kgbench.packs import normalise_id

if TYPE_CHECKING:
    from pytest_kgbench.questions import FieldSpec

Aliases = Mapping[str, Mapping[str, str]]
_NONE_WORDS = {"", "null", "none", "unrated", "not rated", "nr", "n/a", "withdrawn", "wr"}


# --- normalisation -------------------------------------------------------------------------------

def is_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().casefold() in _NONE_WORDS)


def norm_rating(value: Any) -> str | None:
    if is_none(value):
        return None
    text = str(value).strip().upper()
    text = text.replace("\u2212", "-").replace("\u2013", "-").replace("\u2014", "-")
    return re.sub(r"\s+", "", text)


def norm_number(value: Any) -> float | None:
    if is_none(value) or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return None if isinstance(value, float) and math.isnan(value) else float(value)
    text = re.sub(r"[,\s_$€£]", "", str(value)).rstrip("%")
    try:
        return float(text)
    except ValueError:
        return None


def norm_yesno(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if is_none(value):
        return None
    text = str(value).strip().casefold()
    if text in ("yes", "true", "y", "1"):
        return True
    if text in ("no", "false", "n", "0"):
        return False
    return None


def norm_date(value: Any) -> str | None:
    if is_none(value):
        return None
    text = str(value).strip()[:10]
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        return text


def norm_string(value: Any) -> str | None:
    if is_none(value):
        return None
    return re.sub(r"\s+", " ", str(value)).strip().strip(".,;:").casefold()


def norm_entity(value: Any, aliases: Mapping[str, str]) -> str | None:
    if is_none(value):
        return None
    key = normalise_id(str(value))
    return normalise_id(aliases.get(key, str(value)))


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        return list(value)
    if isinstance(value, str):
        return [v for v in re.split(r"[,;\n]", value) if v.strip()]
    return [value]


def f1(expected: list[Any], got: list[Any]) -> float:
    exp, hit = set(expected), set(got)
    if not exp and not hit:
        return 1.0
    tp = len(exp & hit)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(hit), tp / len(exp)
    return round(2 * precision * recall / (precision + recall), 6)


# --- the kinds ---------------------------------------------------------------------------------

class ScalarKind:
    """A single value compared after normalising both sides the same way."""

    is_list = False

    def __init__(self, name: str, what: str,
                 normalise: Callable[[Any, Mapping[str, str]], Any]) -> None:
        self.name = name
        self.what = what
        self.normalise = normalise

    def describe(self, spec: FieldSpec) -> str:
        return self.what.format(entity=spec.entity or "entity")

    def compare(self, spec: FieldSpec, expected: Any, got: Any,
                aliases: Aliases) -> tuple[bool, float | None]:
        table = aliases.get(spec.entity or "", {})
        return self.normalise(expected, table) == self.normalise(got, table), None


class NumberKind:
    """A count (compared exactly) or a measure (within the field's tolerance)."""

    is_list = False

    def __init__(self, name: str, exact: bool) -> None:
        self.name = name
        self.exact = exact

    def describe(self, spec: FieldSpec) -> str:
        return "an integer" if self.exact else "a number"

    def compare(self, spec: FieldSpec, expected: Any, got: Any,
                aliases: Aliases) -> tuple[bool, float | None]:
        e, g = norm_number(expected), norm_number(got)
        if e is None or g is None:
            return e is None and g is None, None
        if self.exact:
            return round(e) == g, None
        return abs(e - g) <= max(spec.abs_tol, spec.rel_tol * abs(e)), None


class ListKind:
    """A list of values: as a set (one value listed twice is the identity mistake), or in
    order when the field is `ordered`; F1 beside the verdict."""

    is_list = True

    def __init__(self, name: str, what: str,
                 normalise: Callable[[Any, Mapping[str, str]], Any]) -> None:
        self.name = name
        self.what = what
        self.normalise = normalise

    def describe(self, spec: FieldSpec) -> str:
        return self.what.format(entity=spec.entity or "entity")

    def compare(self, spec: FieldSpec, expected: Any, got: Any,
                aliases: Aliases) -> tuple[bool, float | None]:
        table = aliases.get(spec.entity or "", {})
        exp = [x for x in (self.normalise(v, table) for v in as_list(expected)) if x is not None]
        out = [x for x in (self.normalise(v, table) for v in as_list(got)) if x is not None]
        ok = (exp == out) if spec.ordered else (set(exp) == set(out) and len(out) == len(set(out)))
        return ok, f1(exp, out)


def _plain(fn: Callable[[Any], Any]) -> Callable[[Any, Mapping[str, str]], Any]:
    return lambda value, _aliases: fn(value)


FIELD_KINDS = (
    ScalarKind("rating", "a rating on the scale (e.g. BBB+), or null if unrated",
               _plain(norm_rating)),
    NumberKind("integer", exact=True),
    NumberKind("number", exact=False),
    ScalarKind("yesno", "true or false", _plain(norm_yesno)),
    ScalarKind("date", "a date, YYYY-MM-DD", _plain(norm_date)),
    ScalarKind("string", "a string", _plain(norm_string)),
    ScalarKind("entity", "one {entity} identifier", norm_entity),
    ListKind("entity_list", "a list of {entity} identifiers", norm_entity),
    ListKind("string_list", "a list of strings", _plain(norm_string)),
)
