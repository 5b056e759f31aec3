"""Question files: YAML -> validated `Question` objects, hashed when read.

Pure module: no pytest. A question file is one YAML list of questions (docs/questions.md), or
a mapping `{generate: "module:function"}`: the pack's function, called with the pack, returns
the list (a pack whose questions are read from published data at run time). Either way every
question is validated the same, and every error names the file, the question id and the field.

Two keys mark a question whose published references cannot both be trusted:
`disagreement: "<cause>"`: its SQL and SPARQL references disagree on the pack's data (the key
stays the one it names; the gold agent does not run the other reference); `skip: "<reason>"`:
it cannot be graded at all (its key query fails), and is skipped under every agent.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, cast

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.registry import Registry, given


class QuestionSource(Protocol):
    """The pack a `{generate: "module:function"}` question file names (packs.schema.Pack)."""

    def callable(self, ref: str, *, field_name: str) -> Callable[..., Any]: ...


TIERS = ("L1", "L2", "L3", "L4", "L5")
EXPECTS = ("answer", "abstain", "block")
REFERENCE_KEYS = ("sql", "sparql", "executed")  # executed: SQL over the executed tables
RESERVED_FIELDS = ("abstain", "declined", "definitions_used", "records_used")
_TOP_KEYS = {
    "id", "tier", "variants", "text", "answer", "key", "params", "hand_key", "gold", "trap",
    "why", "needs", "expect", "persona", "must_not_contain", "checklist", "modes", "inverted",
    "disagreement", "skip", "family", "trap_why", "wording_why",
}
MODES = ("reading", "querying")
KEY_QUERIES = ("gold.sql", "gold.sparql")  # a key taken from running that reference query


class FieldKind(ABC):
    """A kind of answer field: how it is explained to the model and compared with the key.
    The shipped kinds are in scoring/fieldkinds.py; a plugin registers its own through
    `pytest_kgbench_field_kinds`."""

    name: str = ""
    is_list: bool = False
    whole_result: bool = False  # a reference query gives it its whole result (rows)

    @abstractmethod
    def describe(self, spec: FieldSpec) -> str:
        """The field's value as the prompt explains it ("an integer", "a list of ...")."""

    @abstractmethod
    def compare(self, spec: FieldSpec, expected: Any, got: Any,
                aliases: Mapping[str, Mapping[str, str]]) -> tuple[bool, float | None]:
        """(whether `got` is the key's `expected` value, F1 for a list or None). Never
        raises: any value a model writes is graded."""


def field_kind(name: str, registry: Registry | None = None) -> FieldKind:
    """The field kind `name` of `registry` (the shipped kinds where none is passed)."""
    kinds = given(registry).field_kinds
    try:
        return cast(FieldKind, kinds[name])
    except KeyError:
        raise KeyError(f"unknown field kind '{name}' (known: "
                       f"{', '.join(sorted(kinds))})") from None


@dataclass(frozen=True)
class FieldSpec:
    """One field of the closing JSON answer block."""

    name: str
    kind: str
    entity: str | None = None
    count_of: str | None = None
    rel_tol: float = 0.005
    abs_tol: float = 0.0
    ordered: bool = False
    piece: FieldKind | None = field(default=None, compare=False, repr=False)
    """The kind itself, as the registry the question was read with knows it (None: looked up
    among the shipped kinds)."""

    def kind_of(self) -> FieldKind:
        """The field's kind: how it is described and compared."""
        return self.piece if self.piece is not None else field_kind(self.kind)

    @property
    def is_list(self) -> bool:
        return self.kind_of().is_list

    @property
    def whole_result(self) -> bool:
        """Whether the field is a query's whole result (a kind with `whole_result`, `rows`):
        every row, every column in query order, whatever the columns are named."""
        return self.kind_of().whole_result

    def describe(self) -> str:
        """How the field is explained to a model (its kind says, scoring/fieldkinds.py)."""
        what = self.kind_of().describe(self)
        if self.ordered:
            what += ", in the order the question asks"
        return what


@dataclass(frozen=True)
class Question:
    """One validated question. `raw` keeps the parsed YAML mapping for questions.json."""

    id: str
    tier: str
    text: str
    fields: tuple[FieldSpec, ...]
    expect: str
    file: str
    index: int
    variants: tuple[str, ...] | None = None
    key: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    hand_key: Mapping[str, Any] | None = None
    gold: Mapping[str, str] = field(default_factory=dict)
    trap: Mapping[str, str] = field(default_factory=dict)
    why: str | None = None
    needs: tuple[str, ...] = ()
    persona: str = "analyst"
    must_not_contain: tuple[str, ...] = ()
    checklist: tuple[str, ...] = ()
    modes: tuple[str, ...] = MODES  # the kinds of condition the question is asked under
    inverted: bool = False  # the naive reading is right here; the trap is an over-correction
    disagreement: str | None = None  # why its SQL and SPARQL references disagree
    skip: str | None = None  # why it cannot be asked or graded anywhere
    family: str | None = None  # the trap family an L3 question belongs to (pack.yaml's families)
    trap_why: str | None = None  # why a strong model could plausibly give the trap answer
    wording_why: str | None = None  # why its text may hold a flagged term or key value
    sha256: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)
    pack_name: str = ""  # the pack asked (a folder pack's questions.yaml); else the file's stem

    @property
    def pack(self) -> str:
        return self.pack_name or Path(self.file).stem


@dataclass(frozen=True)
class QuestionSet:
    """The questions of one file, with the fingerprint taken when the file was read."""

    path: str
    questions: tuple[Question, ...]
    sha256: str

    @property
    def count(self) -> int:
        return len(self.questions)


def canonical_sha256(value: Any) -> str:
    """SHA-256 of a value's canonical JSON form (sorted keys, no whitespace)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str,
                      ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def set_fingerprint(question_hashes: Mapping[str, str]) -> str:
    """The fingerprint of a set of questions: SHA-256 over their sorted (id, sha256) pairs."""
    return canonical_sha256(sorted(question_hashes.items()))


def load_questions(path: str | Path, *, pack: str | None = None,
                   source: QuestionSource | None = None,
                   problems: list[str] | None = None,
                   registry: Registry | None = None) -> QuestionSet:
    """Read and validate a question file; raise `InputError` naming file, question, field.
    `pack`: the pack the questions ask about (default: the file's stem, questions/<pack>.yaml).
    `source`: that pack, whose function a `{generate: ...}` file names. With `problems`, the
    problem of each question is appended to it instead (one line each; `kgbench validate`
    reports every one) and the questions without one are returned. `registry`: the session's
    pieces (its field kinds)."""
    import yaml

    path = Path(path)
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise InputError(where, f"not valid YAML: {exc}") from exc
    except OSError as exc:
        raise InputError(where, f"cannot be read: {exc}") from exc
    if isinstance(data, dict) and set(data) == {"generate"}:
        data = _generated(str(data["generate"]), source, where)
    if not isinstance(data, list):
        raise InputError(where, "a question file must be one YAML list of questions (or "
                         "{generate: \"module:function\"})")
    questions: list[Question] = []
    seen: set[str] = set()
    for index, entry in enumerate(data):
        try:
            question = parse_question(entry, where=where, index=index, registry=registry)
            if pack:
                question = replace(question, pack_name=pack)
            if question.id in seen:
                raise InputError(where, "duplicate question id", question=question.id,
                                 field="id")
        except InputError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
            continue
        seen.add(question.id)
        questions.append(question)
    file_sha = set_fingerprint({q.id: q.sha256 for q in questions})
    return QuestionSet(path=where, questions=tuple(questions), sha256=file_sha)


def _generated(ref: str, source: QuestionSource | None, where: str) -> Any:
    """The question list the pack's function `ref` returns."""
    if source is None:
        raise InputError(where, f"generates its questions with the pack's {ref}, but was read "
                         "without its pack", field="generate")
    fn = source.callable(ref, field_name="generate")
    try:
        return fn(source)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the pack's failure, named with the file
        raise InputError(where, f"the pack's {ref} failed: {type(exc).__name__}: {exc}",
                         field="generate") from exc


def _need(entry: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str,
          qid: str | None) -> Any:
    if name not in entry or entry[name] is None:
        raise InputError(where, "is missing", question=qid, field=name)
    value = entry[name]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InputError(where, f"must be a {names}, got {type(value).__name__}",
                         question=qid, field=name)
    return value


def _str_list(entry: Mapping[str, Any], name: str, where: str, qid: str) -> tuple[str, ...]:
    value = entry.get(name) or []
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise InputError(where, "must be a list of strings", question=qid, field=name)
    return tuple(str(v) for v in value)


def _parse_fields(entry: Mapping[str, Any], where: str, qid: str,
                  kinds: Mapping[str, FieldKind]) -> tuple[FieldSpec, ...]:
    answer = entry.get("answer") or {}
    if not isinstance(answer, dict):
        raise InputError(where, "must map field names to {kind: ...}", question=qid,
                         field="answer")
    specs: list[FieldSpec] = []
    for name, spec in answer.items():
        fname = f"answer.{name}"
        if name in RESERVED_FIELDS:
            raise InputError(where, f"'{name}' is reserved in the answer block",
                             question=qid, field=fname)
        if isinstance(spec, str):
            spec = {"kind": spec}
        if not isinstance(spec, dict):
            raise InputError(where, "must be {kind: ...}", question=qid, field=fname)
        kind = spec.get("kind")
        if not isinstance(kind, str) or kind not in kinds:
            raise InputError(where, f"kind must be one of {', '.join(kinds)}, "
                             f"got {kind!r}", question=qid, field=f"{fname}.kind")
        unknown = set(spec) - {"kind", "entity", "count_of", "tolerance", "ordered"}
        if unknown:
            raise InputError(where, f"unknown keys {sorted(unknown)}", question=qid, field=fname)
        tol = spec.get("tolerance") or {}
        if not isinstance(tol, dict):
            raise InputError(where, "must be {rel: ..., abs: ...}", question=qid,
                             field=f"{fname}.tolerance")
        specs.append(FieldSpec(
            name=str(name), kind=kind, entity=spec.get("entity"), count_of=spec.get("count_of"),
            rel_tol=float(tol.get("rel", 0.005)), abs_tol=float(tol.get("abs", 0.0)),
            ordered=bool(spec.get("ordered", False)), piece=kinds[kind],
        ))
    names = {s.name for s in specs}
    for s in specs:
        if s.count_of and s.count_of not in names:
            raise InputError(where, f"count_of names no field '{s.count_of}'", question=qid,
                             field=f"answer.{s.name}.count_of")
    return tuple(specs)


def parse_question(entry: Any, *, where: str, index: int,
                   registry: Registry | None = None) -> Question:
    """Validate one YAML entry into a `Question` (each check in the order a reader of the
    file would make it: who the question is, what it expects, its references, its scope)."""
    qid = _question_id(entry, where, index)
    tier = _need(entry, "tier", str, where, qid)
    if tier not in TIERS:
        raise InputError(where, f"must be one of {', '.join(TIERS)}", question=qid, field="tier")
    text = _need(entry, "text", str, where, qid).strip()
    expect = entry.get("expect") or {"L4": "abstain", "L5": "block"}.get(tier, "answer")
    if expect not in EXPECTS:
        raise InputError(where, f"must be one of {', '.join(EXPECTS)}", question=qid,
                         field="expect")
    fields = _parse_fields(entry, where, qid, given(registry).field_kinds)
    if expect == "answer" and not fields:
        raise InputError(where, "a question expecting an answer needs answer fields",
                         question=qid, field="answer")
    gold, trap, key = _references(entry, where, qid, tier, expect)
    params = entry.get("params") or {}
    if not isinstance(params, dict):
        raise InputError(where, "must be a mapping", question=qid, field="params")
    hand_key = _hand_key(entry, where, qid, fields)
    variants, persona, modes, must_not = _scope(entry, where, qid, expect)
    marks = _marks(entry, where, qid)
    return Question(
        id=qid, tier=tier, text=text, fields=fields, expect=expect, file=where, index=index,
        variants=variants, params=params,
        key=(key if key in KEY_QUERIES else key.split(".", 1)[-1]) if key else None,
        hand_key=hand_key, gold=dict(gold), trap=dict(trap),
        why=(entry.get("why") or None), needs=_str_list(entry, "needs", where, qid),
        persona=persona, must_not_contain=must_not,
        checklist=_str_list(entry, "checklist", where, qid), modes=tuple(modes),
        inverted=bool(entry.get("inverted", False)), sha256=canonical_sha256(entry),
        disagreement=marks["disagreement"], skip=marks["skip"],
        family=marks["family"], trap_why=marks["trap_why"], wording_why=marks["wording_why"],
        raw=entry,
    )


def _question_id(entry: Any, where: str, index: int) -> str:
    """The entry's id, once the entry is a mapping of known keys with a usable id."""
    if not isinstance(entry, dict):
        raise InputError(where, f"entry {index} must be a mapping, got {type(entry).__name__}")
    qid_raw = entry.get("id")
    if not isinstance(qid_raw, str) or not qid_raw.strip():
        raise InputError(where, f"entry {index} has no string id", field="id")
    qid = qid_raw.strip()
    if any(c in qid for c in "[]:/ "):
        raise InputError(where, "ids may not contain brackets, colons, slashes or spaces",
                         question=qid, field="id")
    unknown = set(entry) - _TOP_KEYS
    if unknown:
        raise InputError(where, f"unknown keys {sorted(unknown)}", question=qid)
    return qid


def _references(entry: Mapping[str, Any], where: str, qid: str, tier: str, expect: str
                ) -> tuple[dict[str, str], dict[str, str], str | None]:
    """(gold queries, trap queries, the key's source): a key function's name, a reference
    query the key is taken from ("gold.sql"), or None for a hand key or an abstention."""
    gold = entry.get("gold") or {}
    trap = entry.get("trap") or {}
    for name, value in (("gold", gold), ("trap", trap)):
        if not isinstance(value, dict) or not all(
                k in REFERENCE_KEYS and isinstance(v, str) for k, v in value.items()):
            raise InputError(where, f"must map {'/'.join(REFERENCE_KEYS)} to query text",
                             question=qid, field=name)
    if expect != "abstain" and not gold:
        raise InputError(where, "needs a reference query (sql and/or sparql)", question=qid,
                         field="gold")
    if tier == "L3" and not trap:
        raise InputError(where, "an L3 question needs the trap query it is built to catch",
                         question=qid, field="trap")
    key = entry.get("key")
    if key is not None and not isinstance(key, str):
        raise InputError(where, "must name a key function", question=qid, field="key")
    if expect == "answer" and key is None and entry.get("hand_key") is None:
        # a pack without code: the key is what its gold query returns on the data
        key = "gold.sql" if "sql" in gold else "gold.sparql"
    if key in KEY_QUERIES and key.split(".", 1)[1] not in gold:
        raise InputError(where, f"takes its key from {key}, which it does not have",
                         question=qid, field="key")
    return gold, trap, key


def _hand_key(entry: Mapping[str, Any], where: str, qid: str, fields: Sequence[FieldSpec]
              ) -> dict[str, Any] | None:
    """The key written by hand, naming only the answer's fields; or None."""
    hand_key = entry.get("hand_key")
    if hand_key is not None:
        if not isinstance(hand_key, dict):
            raise InputError(where, "must map answer fields to values", question=qid,
                             field="hand_key")
        extra = set(hand_key) - {f.name for f in fields}
        if extra:
            raise InputError(where, f"names fields the answer does not have: {sorted(extra)}",
                             question=qid, field="hand_key")
    return hand_key


def _scope(entry: Mapping[str, Any], where: str, qid: str, expect: str
           ) -> tuple[tuple[str, ...] | None, str, list[str] | tuple[str, ...], tuple[str, ...]]:
    """Where the question is asked: (its variants or None for all, its persona, its modes,
    what its answer must not contain)."""
    variants = entry.get("variants")
    if variants is not None:
        if not isinstance(variants, list) or not all(isinstance(v, str) for v in variants):
            raise InputError(where, "must be a list of variant names", question=qid,
                             field="variants")
        variants = tuple(variants)
    persona = entry.get("persona") or "analyst"
    if not isinstance(persona, str):
        raise InputError(where, "must be a persona name", question=qid, field="persona")
    modes = _str_list(entry, "modes", where, qid) or MODES
    if not set(modes) <= set(MODES):
        raise InputError(where, f"must list {' and/or '.join(MODES)}", question=qid,
                         field="modes")
    must_not = _str_list(entry, "must_not_contain", where, qid)
    if expect == "block" and not must_not and "reading" in modes:
        raise InputError(where, "a write request can only be refused where there is a store to "
                         "write to: set modes: [querying] (in a reading condition no model "
                         "runs a query, so none could be refused)", question=qid, field="modes")
    return variants, persona, modes, must_not


def _marks(entry: Mapping[str, Any], where: str, qid: str) -> dict[str, str | None]:
    """The question's notes that must say why, as text (disagreement, skip, family, ...)."""
    marks = {}
    for name in ("disagreement", "skip", "family", "trap_why", "wording_why"):
        value = entry.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InputError(where, "must say why, as text", question=qid, field=name)
        marks[name] = value.strip() if value else None
    return marks
