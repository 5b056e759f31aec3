"""An entity grades the same whichever condition's spelling the model copied (issue 30, item 1).

For every entity and entity-list question of the shipped packs (credit, research; ck25 and
cwd-acme have no entity fields), every entity of the key is looked up in what each condition
shows: the prompt's text for a reading condition (CSV cells, Turtle's prefixed names, its
literals, and the IRIs its @prefix lines make of them), the store for a querying one (SQL cells;
the graph's IRIs and literals, and the prefixed names the store's description declares). Each
spelling found there, and nothing written here by hand, must grade C; the same spelling of an
entity not in the key must not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pytest

from pytest_kgbench.asking.prompts import build_prompt
from pytest_kgbench.core.conditions import BY_ID
from pytest_kgbench.engines.stores import open_store
from pytest_kgbench.packs.schema import normalise_id
from pytest_kgbench.scoring.answer_key import compute_key
from pytest_kgbench.scoring.answers import Answer
from pytest_kgbench.scoring.grading import grade

CONDITIONS = ("R1", "R2", "R5", "R6", "R10", "D1", "D2", "D3", "D4", "D5", "D6")
ENTITY_KINDS = ("entity", "entity_list")
# a token of a prompt: an IRI in angle brackets, or a run of what may be in an id or a name
TOKEN = re.compile(r"<[^<>\s]+>|[^\s,;\"'`|()\[\]{}<>]+")
TURTLE_PREFIX = re.compile(r"@prefix\s+([\w.-]*):\s*<([^>]*)>", re.I)
QUERY_PREFIX = re.compile(r"PREFIX\s+([\w.-]*):\s*<([^>]*)>")


class Entities:
    """Every entity of one kind on a built variant: canonical id -> (column, value) of each
    of its ids and aliases, read from the pack's tables."""

    def __init__(self, built: Any, kind: str) -> None:
        spec = built.pack.entities[kind]
        self.values: dict[str, list[tuple[str, str]]] = {}
        for row in built.tables[spec["table"]]:
            canonical = row.get(spec["id"])
            if canonical is None:
                continue
            found = self.values.setdefault(normalise_id(canonical), [])
            for col in [spec["id"], *spec.get("aliases", [])]:
                if row.get(col) is not None and (col, str(row[col])) not in found:
                    found.append((col, str(row[col])))

    def other(self, avoid: set[str], column: str) -> str | None:
        """A value in `column` of an entity not among `avoid` (canonical ids)."""
        for canonical in sorted(self.values):
            if canonical not in avoid:
                for col, value in self.values[canonical]:
                    if col == column:
                        return value
        return None


class Shown:
    """What one condition shows of the data, as strings an id may be spelt in: for each
    value, the spellings that end with it (the value itself, a prefixed name, an IRI)."""

    def __init__(self) -> None:
        self.by_value: dict[str, set[str]] = {}

    def add(self, value: str, spelling: str) -> None:
        self.by_value.setdefault(value, set()).add(spelling)

    def spellings(self, value: str) -> set[str]:
        return self.by_value.get(value, set())


TURTLE_BLOCK = re.compile(r"```turtle\n(.*?)```", re.S)
LOCAL_ESCAPE = re.compile(r"\\(.)")


def _ends_with(spelling: str, value: str) -> bool:
    """Whether a spelling is the value, or ends with it after ':', '/' or '#'."""
    plain = spelling.strip("<>").replace("\\", "")
    return plain == value or (plain.endswith(value) and plain[-len(value) - 1] in ":/#")


def _nodes(graph: Any, values: set[str]) -> dict[str, set[str]]:
    """value -> the IRIs of the nodes that carry it as a literal (the entity's own node: an
    issuer's has its LEI and issuer_id, an authorship only points at an institution)."""
    from rdflib import Literal, URIRef

    out: dict[str, set[str]] = {}
    for s, _, o in graph:
        if isinstance(o, Literal) and isinstance(s, URIRef) and str(o) in values:
            out.setdefault(str(o), set()).add(str(s))
    return out


def text_spellings(text: str, values: Iterable[str]) -> Shown:
    """The spellings a prompt's text gives each value: the value where it stands alone (a
    CSV cell, a literal), and, where the text holds Turtle, how the text writes the node that
    carries the value (a prefixed name under the text's @prefix lines, or an IRI in angle
    brackets), with the IRI that prefixed name stands for."""
    import rdflib

    values = set(values)
    shown = Shown()
    prefixes = dict(TURTLE_PREFIX.findall(text))
    tokens: set[str] = set()
    written: dict[str, set[str]] = {}  # IRI -> how the text writes it
    for m in TOKEN.finditer(text):
        token = m.group(0) if m.group(0).startswith("<") else m.group(0).rstrip(".")
        tokens.add(token)
        if token.startswith("<"):
            written.setdefault(token[1:-1], set()).add(token)
        else:
            prefix, colon, local = token.partition(":")
            if colon and prefix in prefixes and local:
                written.setdefault(prefixes[prefix] + LOCAL_ESCAPE.sub(r"\1", local),
                                   set()).add(token)
    for value in values:
        if value in tokens or (re.search(r"[\s,;()]", value) and re.search(
                rf"(?<![\w-]){re.escape(value)}(?![\w-])", text)):
            shown.add(value, value)
    for block in TURTLE_BLOCK.findall(text):
        graph = rdflib.Graph().parse(data=block, format="turtle")
        for value, iris in _nodes(graph, values).items():
            for iri in iris:
                for token in written.get(iri, ()):
                    shown.add(value, token)
                    shown.add(value, iri)
    return shown


def _sparql_list(values: Iterable[str]) -> str:
    return " ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)


def store_spellings(store: Any, language: str, values: list[str]) -> Shown:
    """The spellings a store gives each value: SQL cells equal to it; the graph's literals
    equal to it, the IRI of the node that carries it, and that IRI as a prefixed name under
    each prefix the store's description declares."""
    shown = Shown()
    if language == "sql":
        for info in store.catalog():
            for column, sql_type in info.columns:
                if sql_type.upper() != "VARCHAR":
                    continue
                result = store.run(f'SELECT DISTINCT "{column}" FROM "{info.name}" WHERE '
                                   f'"{column}" IN ({", ".join(_sql(v) for v in values)})')
                assert result.ok, result.error or result.refused
                for (cell,) in result.rows:
                    shown.add(cell, cell)
        return shown
    prefixes = dict(QUERY_PREFIX.findall(store.store_block()))
    for at in range(0, len(values), 40):  # each result well within the store's caps
        batch = values[at:at + 40]
        found = store.run(f"SELECT DISTINCT ?t ?o WHERE {{ VALUES ?o {{ {_sparql_list(batch)} }} "
                          f"?t ?p ?o FILTER(isIRI(?t)) }}")
        assert found.ok and not found.truncated, found.error or found.refused
        for iri, value in found.rows:
            shown.add(value, value)
            shown.add(value, iri)
            shown.add(value, f"<{iri}>")
            for prefix, ns in prefixes.items():
                if iri.startswith(ns) and len(iri) > len(ns):
                    shown.add(value, f"{prefix}:{iri[len(ns):]}")
    return shown


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@pytest.fixture(scope="module", params=["credit", "research"])
def pack_case(request):
    """(built base variant, [(question, key)] of its entity questions, its entities by kind,
    shown(cid, question) -> Shown: what that condition shows the question's persona of every
    entity's ids and aliases)."""
    built = request.getfixturevalue(f"{request.param}_base")
    questions = request.getfixturevalue(f"{request.param}_questions").questions
    cases = [(q, compute_key(q, built)) for q in questions
             if q.expect == "answer" and (not q.variants or "base" in q.variants)
             and any(f.kind in ENTITY_KINDS for f in q.fields)]
    assert cases, f"{request.param} has entity questions to check"
    artefacts: dict[tuple[str, str], Any] = {}
    shown_cache: dict[tuple[str, str], Shown] = {}
    entities = {kind: Entities(built, kind) for kind in built.pack.entities}
    values = sorted({v for e in entities.values() for found in e.values.values() for _, v in found})

    def shown(cid: str, question: Any) -> Shown:
        cond = BY_ID[cid]
        where = (cid, question.persona)
        if where not in shown_cache:
            if cond.mode == "reading":
                shown_cache[where] = text_spellings(
                    build_prompt(cond, built, question).context, values)
            else:
                artefacts[where] = store = open_store(built, cond, question.persona)
                shown_cache[where] = store_spellings(store, cond.language, values)
        return shown_cache[where]

    yield built, cases, entities, shown
    for store in artefacts.values():
        store.close()


def _key_entities(key: dict[str, Any], spec: Any) -> list[str]:
    value = key[spec.name]
    return [str(v) for v in (value if spec.kind == "entity_list" else [value])]


@pytest.mark.parametrize("cid", CONDITIONS)
def test_every_spelling_a_condition_shows_grades_as_its_entity(pack_case, cid) -> None:
    built, cases, entities, shown = pack_case
    wrong_graded_right, right_graded_wrong, unseen, checked = [], [], [], 0
    for question, key in cases:
        for spec in (f for f in question.fields if f.kind in ENTITY_KINDS):
            kind = entities[spec.entity]
            keyed = _key_entities(key, spec)
            canon = {normalise_id(built.aliases[spec.entity][normalise_id(k)]) for k in keyed}
            spellings = shown(cid, question)
            for position, entity in enumerate(keyed):
                values = kind.values[normalise_id(entity)]
                found = {s for _, v in values for s in spellings.spellings(v)}
                if not found:
                    unseen.append(f"{question.id} {entity}")
                for spelling in sorted(found):
                    # the same spelling of another entity: the id it ends with replaced
                    col, value = max(((c, v) for c, v in values if _ends_with(spelling, v)),
                                     key=lambda cv: len(cv[1]), default=(None, ""))
                    checks = [(spelling, True)]
                    if col is not None:
                        wrong_value = kind.other(canon, col)
                        assert wrong_value is not None, (question.id, col)
                        at = spelling.rfind(value)
                        checks.append((spelling[:at] + wrong_value + spelling[at + len(value):],
                                       False))
                    for written, right in checks:
                        block = dict(key)
                        if spec.kind == "entity_list":
                            block[spec.name] = [written if i == position else k
                                                for i, k in enumerate(keyed)]
                        else:
                            block[spec.name] = written
                        result = grade(question, key, Answer(text="", block=block),
                                       built.aliases)
                        field = next(f for f in result.fields if f.name == spec.name)
                        checked += 1
                        if right and (result.grade != "correct" or not field.ok):
                            right_graded_wrong.append(f"{question.id} {written!r}")
                        if not right and field.ok:
                            wrong_graded_right.append(f"{question.id} {written!r}")
                        if not right and len(question.fields) == 1:
                            assert result.grade == "wrong", (question.id, written)
    assert not unseen, f"{cid} shows no spelling of: {unseen}"
    assert not right_graded_wrong, f"{cid}: the key's entity, as {cid} spells it, graded " \
        f"wrong: {right_graded_wrong[:10]} ({len(right_graded_wrong)} in all)"
    assert not wrong_graded_right, f"{cid}: another entity graded right: {wrong_graded_right[:10]}"
    assert checked


def test_the_spellings_found_include_the_prefixed_names_and_iris(pack_case) -> None:
    """The derivation finds what the issue names: in R2 a prefixed name for every entity kind
    asked about, in D4 a full IRI (so the test above is not checking bare ids alone)."""
    built, cases, entities, shown = pack_case
    kinds_prefixed, kinds_iri = set(), set()
    for question, key in cases:
        for spec in (f for f in question.fields if f.kind in ENTITY_KINDS):
            entity = _key_entities(key, spec)[0]
            values = [v for _, v in entities[spec.entity].values[normalise_id(entity)]]
            r2 = {s for v in values for s in shown("R2", question).spellings(v)}
            d4 = {s for v in values for s in shown("D4", question).spellings(v)}
            if any(re.fullmatch(r"[\w.-]+:\S+", s) and "//" not in s for s in r2):
                kinds_prefixed.add(spec.entity)
            if any(s.startswith("http") for s in d4):
                kinds_iri.add(spec.entity)
    wanted = {spec.entity for q, _ in cases for spec in q.fields if spec.kind in ENTITY_KINDS}
    assert kinds_prefixed == wanted
    assert kinds_iri == wanted
