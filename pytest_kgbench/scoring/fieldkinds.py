"""The field kinds that ship with the plugin: how a value of each kind is described to the
model, normalised, and compared with the key. Each is a `core.questions.FieldKind`; a plugin adds
a kind by returning an instance of its own subclass from `pytest_kgbench_field_kinds`.

Pure module: no pytest, no I/O. Nothing here raises for a value a model wrote.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
import unicodedata
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from pytest_kgbench.core.questions import FieldKind, FieldSpec
from pytest_kgbench.packs.schema import bare_id, id_candidates, normalise_id, scheme_id

Aliases = Mapping[str, Mapping[str, str]]

# "I cannot determine it": null in the block, or one of these words. It never matches a key (a
# key is never null: an entity with no rating has the explicit rating "unrated").
_NONE_WORDS = {"", "null", "none", "n/a", "na", "unknown"}
# every dash a model may type for the minus of a rating or a number
_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2212\ufe63\uff0d"), "-")
UNRATED = "UNRATED"
_GRADE = r"(?:AAA|AA|A|BBB|BB|B|CCC|CC|C|D)"
_RATING = re.compile(rf"({_GRADE})([+-]?)")
# the modifier typed apart: "A +" ("+" is never a separator), "A -" ending the value or before
# a bracket ("A - (stable)"); "A - stable" is A, the dash a separator
_SPACED = re.compile(r" (?:\+|-(?=$|\s*[(\[/,;]))")
# "it is rated A+", "rating: A+", "the rating is unrated": what a sentence puts before the value
_PREAMBLE = re.compile(r"(?:(?:it|the issuer|the instrument|the rating|its rating)(?:'s| is| was)"
                       r"(?: rated)?|rated|rating ?:|(?:an? )?rating (?:is|of)) ", re.IGNORECASE)
# what may follow a rating and be ignored: its outlook or watch, never a second rating and
# never a second modifier ("A++", "A+-"); a dash between spaces is a separator ("A - stable")
_ANNOTATION = re.compile(
    r"(?:[\s/,;:()\[\]]| - |\*[+-]?|\b(?:outlook|watch|credit|rating|cw|rw|on|with|for|"
    r"under|review|possible|upgrade|downgrade|positive|negative|stable|developing|evolving|"
    r"pos|neg|sta|dev)\b"
    # its history in brackets: "(upgraded from A)", "(previously BBB+)"
    rf"|\((?:(?:upgraded|downgraded|raised|lowered|up|down) )?(?:from|was|previously|"
    rf"formerly) {_GRADE}[+-]?\))*", re.IGNORECASE)
_MODIFIER_WORDS = re.compile(r"\s*\b(plus|minus)\b", re.IGNORECASE)  # "A minus" is A-
# "no rating", in the words a model may use, and what may stand beside them: more such words,
# a date, the rating it had before ("unrated (rating withdrawn)", "NR (previously A+)")
_UNRATED_PHRASE = (r"(?:unrated|not (?:currently )?rated|no longer rated|no rating|"
                   r"rating (?:was )?withdrawn|withdrawn|n\.?r\.?|wr|wd)")
_UNRATED_CONTEXT = (rf"(?:(?:(?:since|on|as of|effective|after) )?\d{{4}}-\d{{2}}-\d{{2}}|"
                    rf"(?:previously|formerly|was|last|from) (?:rated )?{_GRADE}[+-]?)")
_UNRATED = re.compile(rf"{_UNRATED_PHRASE}(?:[\s,;:()\[\]/-]+(?:{_UNRATED_PHRASE}|"
                      rf"{_UNRATED_CONTEXT}))*[\s)\]]*", re.IGNORECASE)
_MAX_RATING_CHARS = 200  # a rating with its annotation is short; past this it is not read


def is_none(value: Any) -> bool:
    """Whether a value says "cannot determine" (null, "none", "unknown", ...)."""
    return value is None or (isinstance(value, str) and value.strip().casefold() in _NONE_WORDS)


def norm_text(value: Any) -> str:
    """Text with Unicode compatibility forms folded (NFKC) and every dash made '-'."""
    return unicodedata.normalize("NFKC", str(value)).translate(_DASHES)


def norm_rating(value: Any) -> str | None:
    """A rating on the scale, upper case ("aa−" -> "AA-", "A +" -> "A+", "A+." -> "A+", "it is
    rated A+" -> "A+"); "unrated", "not rated (withdrawn)", "NR" and the like are the explicit
    UNRATED. An outlook
    or watch after the rating is ignored ("AA- (negative outlook)", "BBB+/Stable", "A *-" ->
    the rating); anything else after it ("A++", "A+-", "AA or A+") makes it unreadable: a
    value that matches no key."""
    if is_none(value):
        return None
    text = re.sub(r"\s+", " ", norm_text(value)).strip().rstrip(".!;,").strip()
    unread = "?" + text.upper()
    if len(text) > _MAX_RATING_CHARS:
        return unread
    preamble = _PREAMBLE.match(text)
    if preamble:
        text = text[preamble.end():]
    text = _MODIFIER_WORDS.sub(lambda m: "+" if m.group(1).casefold() == "plus" else "-", text)
    if _UNRATED.fullmatch(text):
        return UNRATED
    m = _RATING.match(text.upper())
    if m is None:
        return unread
    modifier, rest = m.group(2), text[m.end():]
    spaced = None if modifier else _SPACED.match(rest)
    if spaced:
        modifier, rest = spaced.group(0).strip(), rest[spaced.end():]
    if _ANNOTATION.fullmatch(rest):
        return m.group(1) + modifier
    return unread


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


# a number with a unit or a currency code beside it: "12 issuers", "1,200.5 EUR", "USD 1,200"
_WITH_UNIT = re.compile(r"(?:[A-Z]{3} )?([^A-Za-z]+?)(?: ([A-Za-z][A-Za-z .'-]*))?")
# words that change what the number says: a hedge, a range, a scale, a rate
_NOT_UNITS = frozenset({
    "approx", "approximately", "about", "around", "roughly", "nearly", "almost", "maybe",
    "or", "to", "and", "at", "least", "most", "more", "less", "over", "under", "than", "up",
    "million", "millions", "billion", "billions", "thousand", "thousands", "hundred", "bn",
    "mn", "m", "k", "b", "mm", "percent", "pct", "per", "cent", "e", "x", "times", "of",
    "not", "no", "none", "unknown", "between"})


_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def _spelt_number(text: str) -> int | None:
    """A count written in words, nought to ninety-nine ("twelve", "forty-two"), or "none"
    (in a count field "none" is zero; null is what says "cannot determine")."""
    if text in ("none", "no", "nil"):
        return 0
    if text in _UNITS:
        return _UNITS.index(text)
    tens, _, unit = text.replace(" ", "-").partition("-")
    if tens in _TENS and (not unit or unit in _UNITS[1:10]):
        return 20 + 10 * _TENS.index(tens) + (_UNITS.index(unit) if unit else 0)
    return None


def norm_quantity(value: Any) -> float | None:
    """A number field's value: a number (`norm_number`), a count in words ("twelve", "none"),
    or a number with a unit or currency code beside it ("12 issuers", "1,200.5 EUR",
    "USD 1,200") — never with a word that changes what it says ("about 12", "12 or 13",
    "1.2 million", "12 percent")."""
    number = norm_number(value)
    if number is not None or not isinstance(value, str):
        return number
    text = re.sub(r"\s+", " ", norm_text(value)).strip()
    spelt = _spelt_number(text.casefold().rstrip("."))
    if spelt is not None:
        return float(spelt)
    m = _WITH_UNIT.fullmatch(text)
    if m is None or (m.group(2) is None and not re.match(r"[A-Z]{3} ", text)):
        return None
    words = re.findall(r"[a-z]+", (m.group(2) or "").casefold())
    if any(w in _NOT_UNITS for w in words):
        return None
    return norm_number(m.group(1))


def norm_yesno(value: Any) -> bool | None:
    """A boolean: true/false, yes/no, y/n, 1/0 in any case, with a final full stop or
    exclamation mark ("No." is false), or followed by a reason after a comma, colon or dash
    ("No, it does not"); not when the reason doubts or hedges ("no, I cannot tell"), or
    without the punctuation ("yes and no")."""
    if isinstance(value, bool):
        return value
    if is_none(value):
        return None
    text = re.sub(r"\s+", " ", norm_text(value)).strip().rstrip(".!").strip().casefold()
    explained = _EXPLAINED.fullmatch(text)
    if explained and not _HEDGED.search(explained.group(2)):
        text = explained.group(1)  # "no, it does not"; never "no, I cannot tell"
    if text in _YES:
        return True
    if text in _NO:
        return False
    return None


_YES = frozenset({"yes", "true", "y", "1", "yep", "yeah", "yup"})
_NO = frozenset({"no", "false", "n", "0", "nope", "nah"})
# a verdict, then a reason: "No, it does not", "Yes - through Ardent Holdings (60%)"
_EXPLAINED = re.compile(r"(yes|no|true|false|yep|yeah|nope) ?[,;:\-] ?(.+)")
# what makes the reason not a plain reason: another verdict, doubt, a condition
_HEDGED = re.compile(r"\b(?:yes|no|true|false|cannot|can't|unknown|unsure|not sure|unclear|"
                     r"determine|tell|idea|maybe|perhaps|possibly|probably|if|unless|depends|"
                     r"or)\b")


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                       r"(?:Z|[+-]\d{2}:?\d{2})?")


_NUMERIC_DATE = re.compile(r"(\d{1,2})[/.](\d{1,2})[/.](\d{4})")
_LOOSE_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_MONTH_DATES = ("%d %B %Y", "%d %b %Y", "%B %d, %Y", "%b %d, %Y", "%B %d %Y", "%b %d %Y")


def norm_date(value: Any) -> str | None:
    """An ISO date (YYYY-MM-DD): the whole value must be one ("2032-11-271" is not), or a date
    and a time whose date is taken, or a date with its month named ("27 November 2032",
    "Nov 27, 2032"), or a numeric day and month that can be read only one way ("27/11/2032",
    "11/27/2032"), a final full stop allowed; anything else ("05/06/2032", two dates) is kept
    as written, so it cannot match."""
    if is_none(value):
        return None
    text = re.sub(r"\s+", " ", norm_text(value)).strip().removesuffix(".")
    m = _DATE.fullmatch(text) or _DATETIME.fullmatch(text)
    loose = _LOOSE_DATE.fullmatch(text)
    if m is None and loose:  # "2024-6-30": an ISO date without its zeros
        try:
            return dt.date(*map(int, loose.groups())).isoformat()
        except ValueError:
            return text
    numeric = _NUMERIC_DATE.fullmatch(text)
    if m is None and numeric:  # "27/11/2032": a day and month only one way round
        first, second, year = map(int, numeric.groups())
        if first == second or (first > 12) != (second > 12):
            day, month = (first, second) if first > 12 or first == second else (second, first)
            try:
                return dt.date(year, month, day).isoformat()
            except ValueError:
                return text
        return text
    if m is None:
        for form in _MONTH_DATES:
            try:
                return dt.datetime.strptime(text, form).date().isoformat()
            except ValueError:
                continue
        return text
    try:
        return dt.date.fromisoformat(m.group(1) if m.re is _DATETIME else text).isoformat()
    except ValueError:
        return text


def norm_string(value: Any) -> str | None:
    if is_none(value):
        return None
    return re.sub(r"\s+", " ", norm_text(value)).strip().strip(".,;:").casefold()


def entity_of(text: str, aliases: Mapping[str, str]) -> str | None:
    """The canonical id `text` names through the aliases (`packs.id_candidates`: the text
    itself, else the id its IRI or prefixed name ends with), or None."""
    for candidate in id_candidates(text):
        key = normalise_id(candidate)
        if key in aliases:
            return normalise_id(aliases[key])
    return None


_NAMED = re.compile(r"(.*?)\s*\(([^()]*)\)")  # "ISS-1 (Norvik Holdings plc)"


def norm_entity(value: Any, aliases: Mapping[str, str]) -> str | None:
    """An entity's canonical id: the value itself, an alias of it (issuer_id for an LEI, a
    DOI for a work), either as an IRI or a prefixed name ('issuer:ISS-18263',
    '<https://.../issuer/ISS-18263>', Turtle's escapes undone), or an id with a name beside it
    in parentheses when only one entity is named. An id no alias names is its bare id
    (`packs.bare_id`: 'author:A123' is 'a123', the id of a record the aliases leave out),
    which matches only the same id."""
    if is_none(value):
        return None
    text = norm_text(value)
    found = entity_of(text, aliases)
    if found is not None:
        return found
    named = _NAMED.fullmatch(text.strip())
    if named:
        hits = {h for h in (entity_of(named.group(1), aliases),
                            entity_of(named.group(2), aliases)) if h is not None}
        if len(hits) == 1:
            return hits.pop()
    return normalise_id(bare_id(text))


def norm_identifier(value: Any) -> str | None:
    """An identifier with no alias table (a DOI, an ORCID iD, a code): a DOI or ORCID iD in
    any form it is cited in as its bare id (`packs.scheme_id`); anything else without
    surrounding brackets or quotes, a final full stop, inner blanks or case ('IE.' is 'ie')."""
    if is_none(value):
        return None
    text = norm_text(value)
    literal = id_candidates(text)
    body = literal[0] if literal else text
    cited = scheme_id(body)
    return cited if cited is not None else normalise_id(body)


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

class _Normalised(FieldKind):
    """A kind whose values are normalised (with the entity's aliases) before they are compared;
    `what` describes a value to the model, naming the field's entity."""

    def __init__(self, name: str, what: str,
                 normalise: Callable[[Any, Mapping[str, str]], Any]) -> None:
        self.name = name
        self.what = what
        self.normalise = normalise

    def describe(self, spec: FieldSpec) -> str:
        return self.what.format(entity=spec.entity or "entity")


class ScalarKind(_Normalised):
    """A single value compared after normalising both sides the same way."""

    is_list = False

    def compare(self, spec: FieldSpec, expected: Any, got: Any,
                aliases: Aliases) -> tuple[bool, float | None]:
        table = aliases.get(spec.entity or "", {})
        want = self.normalise(expected, table)
        return want is not None and want == self.normalise(got, table), None


class NumberKind(FieldKind):
    """A count (compared exactly) or a measure (within the field's tolerance)."""

    is_list = False

    def __init__(self, name: str, exact: bool) -> None:
        self.name = name
        self.exact = exact

    def describe(self, spec: FieldSpec) -> str:
        return "an integer" if self.exact else "a number"

    def compare(self, spec: FieldSpec, expected: Any, got: Any,
                aliases: Aliases) -> tuple[bool, float | None]:
        e, g = norm_number(expected), norm_quantity(got)
        if e is None or g is None or not math.isfinite(g):
            return False, None  # a count or measure never matches "cannot determine"
        if self.exact:
            return e == g, None
        return abs(e - g) <= max(spec.abs_tol, spec.rel_tol * abs(e)), None


class ListKind(_Normalised):
    """A list of values: as a set (one value listed twice is the identity mistake), or in
    order when the field is `ordered`; F1 beside the verdict."""

    is_list = True

    def compare(self, spec: FieldSpec, expected: Any, got: Any,
                aliases: Aliases) -> tuple[bool, float | None]:
        table = aliases.get(spec.entity or "", {})
        exp = [x for x in (self.normalise(v, table) for v in as_list(expected)) if x is not None]
        if got is None:  # null: "cannot determine", never the stated empty list
            return False, (0.0 if exp else None)
        out = [x for x in (self.normalise(v, table) for v in as_list(got)) if x is not None]
        ok = (exp == out) if spec.ordered else (set(exp) == set(out) and len(out) == len(set(out)))
        return ok, f1(exp, out)


def norm_cell(value: Any) -> Any:
    """One cell of a table, for comparing: None for null/unbound/empty; a float for a number
    (or text that is one: "1200.00", "1,200"); YYYY-MM-DD for a date, or a date-time at
    midnight ("2019-01-15T00:00:00", "2019-01-15 00:00:00"); any other date-time as ISO text
    (seconds kept); any other text stripped, spaces collapsed and case-folded."""
    if value is None or isinstance(value, bool):
        return None if value is None else str(value).casefold()
    if isinstance(value, (int, float, decimal.Decimal)):
        return norm_number(float(value) if isinstance(value, decimal.Decimal) else value)
    if isinstance(value, dt.datetime):
        value = value.isoformat()
    elif isinstance(value, dt.date):
        return value.isoformat()
    text = re.sub(r"\s+", " ", norm_text(value)).strip()
    if text.casefold() in ("", "null", "none"):
        return None
    number = norm_number(text)
    if number is not None:
        return number
    m = _DATETIME.fullmatch(text)
    if m is not None:
        time = text[len(m.group(1)) + 1:]
        if re.fullmatch(r"00:00(?::00(?:\.0+)?)?(?:Z|[+-]00:?00)?", time):
            return m.group(1)
        return m.group(1) + "T" + time
    return text.casefold()


def max_matching(left_counts: Sequence[int], right_counts: Sequence[int],
                 pairs: Iterable[tuple[int, int]]) -> int:
    """The size of a maximum matching between two multisets, each given as the counts of its
    distinct items, where `pairs` (i, j) says which distinct items may pair. A maximum flow
    (scipy): nothing recurses, and 1,000 identical rows are one node of capacity 1,000. The one
    piece behind the `rows` kind and execution accuracy's `rows_carried`."""
    edges = sorted(set(pairs))
    if not edges:
        return 0
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    n, m = len(left_counts), len(right_counts)
    sink = n + m + 1
    tails = [0] * n + [1 + i for i, _ in edges] + [1 + n + j for j in range(m)]
    heads = [1 + i for i in range(n)] + [1 + n + j for _, j in edges] + [sink] * m
    caps = [*left_counts, *(min(left_counts[i], right_counts[j]) for i, j in edges),
            *right_counts]
    graph = csr_matrix((np.asarray(caps, dtype=np.int32), (tails, heads)),
                       shape=(sink + 1, sink + 1))
    return int(maximum_flow(graph, 0, sink).flow_value)


def grouped(items: Sequence[Any], key: Callable[[Any], Hashable]) -> tuple[list[Any], list[int]]:
    """The distinct items of a sequence (by `key`, first seen kept) and how often each occurs."""
    first: dict[Hashable, int] = {}
    out: list[Any] = []
    counts: list[int] = []
    for item in items:
        k = key(item)
        if k in first:
            counts[first[k]] += 1
        else:
            first[k] = len(out)
            out.append(item)
            counts.append(1)
    return out, counts


def _tag(cell: Any) -> tuple[str, str]:
    return type(cell).__name__, repr(cell)


class _Row:
    """A normalised row as the `rows` kind pairs it: its cells that are not numbers (a sorted
    multiset, compared exactly) and its numbers (sorted, paired within the tolerance)."""

    __slots__ = ("exact", "numbers", "finite")

    def __init__(self, cells: list[Any]) -> None:
        self.exact = tuple(sorted(_tag(c) for c in cells if not isinstance(c, float)))
        numbers = sorted(c for c in cells if isinstance(c, float))
        self.finite = all(math.isfinite(x) for x in numbers)
        self.numbers = numbers

    @property
    def group(self) -> tuple[Any, ...]:
        return self.exact, len(self.numbers)

    @property
    def key(self) -> tuple[Any, ...]:
        return self.exact, tuple(self.numbers)


def _numbers_pair(expected: list[float], got: list[float],
                  tolerance: Callable[[float], float]) -> bool:
    """Whether every expected number pairs with a distinct got number within its tolerance
    (equal counts). Each expected number is an interval [a - t, a + t]; points matched to
    intervals greedily (points in order, each to the open interval that ends first) is a
    maximum matching, without a search."""
    import heapq

    intervals = sorted((a - tolerance(a), a + tolerance(a)) for a in expected)
    open_ends: list[float] = []
    k = 0
    for b in got:  # sorted
        while k < len(intervals) and intervals[k][0] <= b:
            heapq.heappush(open_ends, intervals[k][1])
            k += 1
        if not open_ends or open_ends[0] < b:
            return False  # b has no interval, or an interval ended unmatched for good
        heapq.heappop(open_ends)
    return True


def match_rows(expected: list[list[Any]], got: list[list[Any]],
               tolerance: Callable[[float], float]) -> int:
    """How many rows of `got` pair one to one with rows of `expected` (normalised cells): the
    size of a maximum matching, where two rows pair when their cells do (`_Row`). Candidate
    pairs are found without comparing every row with every other: rows pair only within a
    group of the same exact cells and count of numbers, and within a group only when their
    sorted numbers differ by at most the row's largest tolerance (necessary: sorted order is
    the pairing of least largest difference on a line), then checked exactly."""
    import numpy as np

    exp_rows, exp_counts = grouped([_Row(r) for r in expected], lambda r: r.key)
    got_rows, got_counts = grouped([_Row(r) for r in got], lambda r: r.key)
    by_group: dict[Any, list[int]] = {}
    for j, row in enumerate(got_rows):
        if row.finite:
            by_group.setdefault(row.group, []).append(j)
    pairs: list[tuple[int, int]] = []
    arrays: dict[Any, Any] = {}
    for i, row in enumerate(exp_rows):
        candidates = by_group.get(row.group, []) if row.finite else []
        if not candidates:
            continue
        if not row.numbers:
            pairs += [(i, j) for j in candidates]
            continue
        if row.group not in arrays:
            arrays[row.group] = np.array([got_rows[j].numbers for j in candidates])
        widest = max(tolerance(a) for a in row.numbers)
        near = np.abs(arrays[row.group] - np.array(row.numbers)).max(axis=1) <= widest
        pairs += [(i, candidates[c]) for c in np.flatnonzero(near)
                  if _numbers_pair(row.numbers, got_rows[candidates[c]].numbers, tolerance)]
    return max_matching(exp_counts, got_counts, pairs)


class RowsKind(FieldKind):
    """A table: a list of rows, each a list of cells (`fields_from_rows` gives the field the
    whole result, every column in query order, whatever the columns are named).

    Compared as a multiset of rows: a row missing, or listed twice where the key has it once,
    is wrong. Cells are normalised by `norm_cell`; numbers match within the field's tolerance
    (at least 1e-9 apart counts as equal), everything else exactly after normalising.

    Column order within a row is ignored, soundly: two rows match when their cells can be
    paired one to one (same count, a perfect matching of equal cells), so [a, b] matches
    [b, a] but [a, a] never matches [a, b]. SQL and SPARQL (and a model) list columns in
    their own orders, and a row's values are what the question asks; the price is that two
    columns of the same row swapped are not caught. Rows are paired by a maximum matching too,
    so near numbers cannot steal each other's partner. F1 over rows beside the verdict.
    """

    is_list = True
    whole_result = True  # fields_from_rows gives it the query's whole result
    name = "rows"

    def describe(self, spec: FieldSpec) -> str:
        return ("a table: a list of rows, each row a list of its values (one row per result, "
                "the columns the question asks for)")

    @staticmethod
    def rows(value: Any) -> list[list[Any]]:
        if value is None:
            return []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            return [[norm_cell(value)]]
        return [[norm_cell(c) for c in (row if isinstance(row, (list, tuple)) else [row])]
                for row in value]

    def compare(self, spec: FieldSpec, expected: Any, got: Any,
                aliases: Aliases) -> tuple[bool, float | None]:
        def tolerance(a: float) -> float:
            return max(spec.abs_tol, spec.rel_tol * abs(a), 1e-9)

        exp, out = self.rows(expected), self.rows(got)
        if not exp and not out:
            return True, 1.0
        if len(out) > max(4 * len(exp), 1000) or any(len(r) > 1000 for r in out):
            return False, 0.0  # far more than the key holds: wrong, and not worth matching
        matched = match_rows(exp, out, tolerance)
        ok = matched == len(exp) == len(out)
        return ok, round(2 * matched / (len(exp) + len(out)), 6)


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
    ScalarKind("identifier", "an identifier (a DOI, an ORCID iD or a code)",
               _plain(norm_identifier)),
    ScalarKind("entity", "one {entity} identifier", norm_entity),
    ListKind("entity_list", "a list of {entity} identifiers", norm_entity),
    ListKind("string_list", "a list of strings", _plain(norm_string)),
    RowsKind(),
)
