"""The field kinds that ship with the plugin: how a value of each kind is described to the
model, normalised, and compared with the key. A plugin adds a kind by returning an object with
the same four members from `pytest_kgbench_field_kinds` (registry.FieldKind).

Pure module: no pytest, no I/O. Nothing here raises for a value a model wrote.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_kgbench.packs import normalise_id

if TYPE_CHECKING:
    from pytest_kgbench.questions import FieldSpec

Aliases = Mapping[str, Mapping[str, str]]

# "I cannot determine it": null in the block, or one of these words. It never matches a key (a
# key is never null: an entity with no rating has the explicit rating "unrated").
_NONE_WORDS = {"", "null", "none", "n/a", "na", "unknown"}
# every dash a model may type for the minus of a rating or a number
_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2212\ufe63\uff0d"), "-")
UNRATED = "UNRATED"
_UNRATED_WORDS = {"unrated", "not rated", "nr", "n.r.", "withdrawn", "wr", "no rating"}
_RATING = re.compile(r"(AAA|AA|A|BBB|BB|B|CCC|CC|C|D)([+-]?)")
# what may follow a rating and be ignored: its outlook or watch, never a second rating
_ANNOTATION = re.compile(
    r"(?:[\s/,;:()\[\]*+-]|outlook|watch|credit|rating|cw|rw|on|with|positive|negative|"
    r"stable|developing|evolving|pos|neg|sta|dev)*", re.IGNORECASE)


def is_none(value: Any) -> bool:
    """Whether a value says "cannot determine" (null, "none", "unknown", ...)."""
    return value is None or (isinstance(value, str) and value.strip().casefold() in _NONE_WORDS)


def norm_text(value: Any) -> str:
    """Text with Unicode compatibility forms folded (NFKC) and every dash made '-'."""
    return unicodedata.normalize("NFKC", str(value)).translate(_DASHES)


def norm_rating(value: Any) -> str | None:
    """A rating on the scale, upper case ("aa−" -> "AA-"); "unrated", "withdrawn", "NR" and
    the like are the explicit UNRATED. An outlook or watch after the rating is ignored
    ("AA- (negative outlook)", "BBB+/Stable", "A *-" -> the rating); anything else after it is
    kept, so it cannot match."""
    if is_none(value):
        return None
    text = re.sub(r"\s+", " ", norm_text(value)).strip()
    if text.casefold() in _UNRATED_WORDS:
        return UNRATED
    m = _RATING.match(text.upper())
    if m and _ANNOTATION.fullmatch(text[m.end():]):
        return m.group(1) + m.group(2)
    return text.upper().replace(" ", "")


_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def norm_number(value: Any) -> float | None:
    """A number as a float: thousands separators, currency signs and spaces dropped, Unicode
    minus read as minus, a trailing % divided by 100 ("84.25%" is 0.8425). None for anything
    else, NaN and infinities included; a number too large for a float is infinite (it equals
    no key, and never raises)."""
    if is_none(value) or isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    text = re.sub(r"[\s_$€£]", "", norm_text(value))
    percent = text.endswith("%")
    text = text.rstrip("%")
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    if not re.fullmatch(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", text):
        return None
    number = float(text)
    if not math.isfinite(number):
        return math.inf if number > 0 else -math.inf
    return number / 100 if percent else number


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


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                       r"(?:Z|[+-]\d{2}:?\d{2})?")


def norm_date(value: Any) -> str | None:
    """An ISO date (YYYY-MM-DD): the whole value must be one ("2032-11-271" is not), or a date
    and a time whose date is taken; anything else is kept as written, so it cannot match."""
    if is_none(value):
        return None
    text = norm_text(value).strip()
    m = _DATE.fullmatch(text) or _DATETIME.fullmatch(text)
    if m is None:
        return text
    try:
        return dt.date.fromisoformat(m.group(1) if m.re is _DATETIME else text).isoformat()
    except ValueError:
        return text


def norm_string(value: Any) -> str | None:
    if is_none(value):
        return None
    return re.sub(r"\s+", " ", norm_text(value)).strip().strip(".,;:").casefold()


def _iri_tails(text: str) -> list[str]:
    """The ids an IRI (or a CURIE) may stand for: its last path segment, then its last two
    (a DOI's prefix and suffix), ... — an id given as the graph conditions return it."""
    body = text.strip().strip("<>")
    if not re.match(r"^[A-Za-z][\w+.-]*:", body):
        return []
    parts = [p for p in re.split(r"[/#]", body.split(":", 1)[1]) if p]
    return ["/".join(parts[-n:]) for n in range(1, len(parts))]


def norm_entity(value: Any, aliases: Mapping[str, str]) -> str | None:
    """An entity's canonical id: the value itself, an alias of it (issuer_id for an LEI, a
    DOI for a work), or either as the IRI a graph returns."""
    if is_none(value):
        return None
    text = norm_text(value)
    key = normalise_id(text)
    if key in aliases:
        return normalise_id(aliases[key])
    for tail in _iri_tails(text):
        tail_key = normalise_id(tail)
        if tail_key in aliases:
            return normalise_id(aliases[tail_key])
    return key


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
        want = self.normalise(expected, table)
        return want is not None and want == self.normalise(got, table), None


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
        if e is None or g is None or not math.isfinite(g):
            return False, None  # a count or measure never matches "cannot determine"
        if self.exact:
            return e == g, None
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
    ScalarKind("rating", 'a rating on the scale (e.g. BBB+), or "unrated" if it had none',
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
