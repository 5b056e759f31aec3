"""Checking a pack's questions against its data: the key (code), the gold SQL and the gold SPARQL
must agree; every L3 trap must differ from the key; on base the key must equal the hand-written
one; a question expecting a block must have its reference query refused by the guard.

Used by the pack tests, the seed-property tests and `kgbench check`. No pytest here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_kgbench.answer_key import compute_key
from pytest_kgbench.answers import fields_from_rows
from pytest_kgbench.build import Built
from pytest_kgbench.evidence import walk
from pytest_kgbench.executors import Executor
from pytest_kgbench.grading import grade_field
from pytest_kgbench.questions import Question
from pytest_kgbench.stores import open_store


@dataclass
class QuestionCheck:
    """What one question's queries and key gave on one built variant."""

    question: str
    tier: str
    variant: str
    key: Mapping[str, Any] | None
    gold: dict[str, Any] = field(default_factory=dict)
    trap: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class Stores:
    """One store per reference kind and persona over a built variant, opened on first use."""

    def __init__(self, built: Built, timeout: float = 60.0,
                 engines: Mapping[str, str] | None = None) -> None:
        self.built = built
        self.timeout = timeout
        self.engines = dict(engines or {})
        self._open: dict[tuple[str, str], Executor] = {}

    def get(self, reference: str, persona: str) -> Executor:
        """The store a reference query (`sql`, `sparql`, `executed`) runs on."""
        key = (reference, persona)
        if key not in self._open:
            self._open[key] = open_store(self.built, reference, persona, engines=self.engines,
                                         timeout=self.timeout)
        return self._open[key]

    def close(self) -> None:
        for ex in self._open.values():
            ex.close()


def same_fields(question: Question, a: Mapping[str, Any] | None, b: Mapping[str, Any] | None,
                aliases: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The names of the answer fields on which `a` and `b` differ (the grader's comparison)."""
    a, b = a or {}, b or {}
    return [spec.name for spec in question.fields
            if not grade_field(spec, a.get(spec.name), b.get(spec.name), aliases).ok]


def run_fields(question: Question, stores: Stores, language: str, statement: str) -> Any:
    """The answer fields a query gives, or a dict {'refused': ...} / {'error': ...}."""
    result = stores.get(language, question.persona).run(statement)
    if result.refused:
        return {"refused": result.refused}
    if not result.ok:
        return {"error": result.error}
    try:
        return fields_from_rows(question.fields, result.columns, result.rows)
    except KeyError as exc:
        return {"error": str(exc)}


def check_question(question: Question, built: Built, stores: Stores) -> QuestionCheck:
    key = compute_key(question, built)
    check = QuestionCheck(question.id, question.tier, built.variant, key)
    aliases = built.aliases
    for lang, statement in question.gold.items():
        got = run_fields(question, stores, lang, statement)
        check.gold[lang] = got
        if question.expect == "block":
            if "refused" not in got:
                check.problems.append(f"gold {lang} was not refused by the guard")
        elif question.disagreement and question.key != f"gold.{lang}":
            # marked: this reference is known to disagree with the key; agreeing now is stale
            if "error" not in got and "refused" not in got and \
                    not same_fields(question, key, got, aliases):
                check.problems.append(f"gold {lang} agrees with the key, but the question is "
                                      f"marked disagreement ({question.disagreement}): stale")
        elif "error" in got or "refused" in got:
            check.problems.append(f"gold {lang} failed: {got}")
        else:
            diff = same_fields(question, key, got, aliases)
            if diff:
                check.problems.append(f"gold {lang} differs from the key on {diff}: "
                                      f"key {key}, gold {got}")
    for lang, statement in question.trap.items():
        got = run_fields(question, stores, lang, statement)
        check.trap[lang] = got
        if question.tier == "L3":
            if "error" in got or "refused" in got:
                check.problems.append(f"trap {lang} failed: {got}")
            elif not same_fields(question, key, got, aliases):
                check.problems.append(f"trap {lang} gives the key ({got}): the trap does not bite")
    if (built.variant == "base" and built.seed == built.pack.seed
            and question.hand_key is not None and question.expect == "answer"):
        diff = same_fields(question, key, question.hand_key, aliases)
        if diff:
            check.problems.append(f"key differs from hand_key on {diff}: key {key}, "
                                  f"hand_key {dict(question.hand_key)}")
    return check


def check_questions(questions: list[Question], built: Built, *, timeout: float = 60.0,
                    engines: Mapping[str, str] | None = None) -> list[QuestionCheck]:
    """Check every question that runs on this variant (on the `engines` named per language,
    else each language's default); a question marked `skip` is not checked (it has no key)."""
    stores = Stores(built, timeout, engines)
    try:
        return [check_question(q, built, stores) for q in questions
                if (q.variants is None or built.variant in q.variants) and not q.skip]
    finally:
        stores.close()


# --- needs the data exercises --------------------------------------------------------------

_TRUE = {"class": "CONSTANT", "type": "VALUE_CONSTANT", "alias": "",
         "literal": {"kind": "BOOLEAN", "text": "true"}}


@dataclass
class NeedCheck:
    """Whether one need of one question changes its answer: its evidence taken out of the gold
    SQL query, the answer differs from the key on some variant (`exercised`), on none (a need
    the data never exercises: a correct query that omits it would be marked unfaithful), or
    it cannot be tested that way (`why`)."""

    question: str
    need: str
    exercised: bool | None
    why: str


def _ablation(evidence: Mapping[str, Any], need: str) -> set[str]:
    """The columns whose filters ARE the need, as the pack declares them (`ablate:` beside the
    need's evidence): taking those filters out of the gold SQL is the naive reading."""
    return {str(c).lower() for c in ((evidence.get(need) or {}).get("ablate") or [])}


def without_filters(statement: str, columns: set[str]) -> str | None:
    """The SQL statement with every filter on a constant that reads one of `columns` replaced by
    TRUE (a comparison of such a column with a constant, in WHERE, ON or HAVING, or an
    IN/IS test of it); None when it has no such filter. DuckDB's parser and its
    json_deserialize_sql do the surgery, never text editing."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        parsed = con.execute("SELECT json_serialize_sql(?)", [statement]).fetchone()
        tree = json.loads(parsed[0]) if parsed and parsed[0] else {}
        if not tree or tree.get("error"):
            return None
        removed = [0]

        def reads(node: Any) -> bool:
            found = False
            for n in walk(node):
                if n.get("class") == "COLUMN_REF" and n.get("column_names") and \
                        str(n["column_names"][-1]).lower() in columns:
                    found = True
                if n.get("class") == "COLUMN_REF" and n.get("column_names") and \
                        str(n["column_names"][-1]).lower() not in columns:
                    return False  # a filter relating two columns is a join, not a filter
            return found

        def prune(node: Any) -> Any:
            if isinstance(node, list):
                return [prune(v) for v in node]
            if not isinstance(node, dict):
                return node
            if node.get("class") in ("COMPARISON", "OPERATOR") and reads(node):
                removed[0] += 1
                return dict(_TRUE)
            return {k: prune(v) for k, v in node.items()}

        pruned = prune(tree)
        if not removed[0]:
            return None
        row = con.execute("SELECT json_deserialize_sql(?)", [json.dumps(pruned)]).fetchone()
        return str(row[0]) if row and row[0] else None
    except (duckdb.Error, ValueError, RecursionError):
        return None
    finally:
        con.close()


def check_needs(questions: list[Question], builts: list[Built], *,
                timeout: float = 60.0) -> list[NeedCheck]:
    """For each answerable question and each of its needs: does taking the need's evidence out
    of the gold SQL query change the answer on some of the built variants?"""
    out: list[NeedCheck] = []
    stores = {b.variant: Stores(b, timeout) for b in builts}
    try:
        for q in questions:
            if q.expect != "answer" or "sql" not in q.gold:
                continue
            evidence = builts[0].pack.manifest.get("evidence") or {}
            for need in q.needs:
                if q.inverted:
                    out.append(NeedCheck(q.id, need, None, "an inverted question: the naive "
                                         "reading is right here by design, so taking the need "
                                         "out is expected to keep the key"))
                    continue
                columns = _ablation(evidence, need)
                if not columns:
                    out.append(NeedCheck(q.id, need, None, "the pack declares no ablation for "
                                         "it (evidence.<need>.ablate: the columns whose filters "
                                         "are the definition)"))
                    continue
                reduced = without_filters(q.gold["sql"], columns)
                if reduced is None:
                    out.append(NeedCheck(q.id, need, None, "the gold SQL has no filter on "
                                         f"{', '.join(sorted(columns))} to take out"))
                    continue
                moved, failed = [], ""
                for built in builts:
                    if q.variants is not None and built.variant not in q.variants:
                        continue
                    key = compute_key(q, built)
                    got = run_fields(q, stores[built.variant], "sql", reduced)
                    if "error" in got or "refused" in got:
                        failed = str(got.get("error") or got.get("refused"))
                    elif same_fields(q, key, got, built.aliases):
                        moved.append(built.variant)
                if failed and not moved:
                    out.append(NeedCheck(q.id, need, None, "the gold SQL without its filter "
                                         f"does not run: {failed[:120]}"))
                elif moved:
                    out.append(NeedCheck(q.id, need, True, "the answer changes without it on "
                                         + ", ".join(moved)))
                else:
                    out.append(NeedCheck(q.id, need, False, "the gold SQL without its filter "
                                         f"on {', '.join(sorted(columns))} gives the key on "
                                         "every variant: the data never exercises it"))
    finally:
        for s in stores.values():
            s.close()
    return out


# --- a whole pack, as `kgbench validate` checks it -------------------------------------------

@dataclass
class PackReport:
    """What `kgbench validate` found: problems (each naming file, question and field) make it
    fail; notes (conditions the pack does not support, and why) do not."""

    pack: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked: int = 0


def _said(exc: Exception) -> str:
    """An error as one line: the plugin's own as it says itself, anything else with its type."""
    from pytest_kgbench.errors import KgbenchError

    text = str(exc) if isinstance(exc, KgbenchError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def validate_pack(settings: Any, name: str, *, needs: bool = True) -> PackReport:
    """Check a pack end to end: its manifest and files, its questions, each variant's build,
    every key against the gold queries and traps, every need against the pack's evidence, and
    the artefacts of every condition it supports."""
    from pytest_kgbench.build import build_variant
    from pytest_kgbench.cases import not_run, pack_conditions
    from pytest_kgbench.conditions import registered
    from pytest_kgbench.errors import KgbenchError
    from pytest_kgbench.locate import open_pack, sources
    from pytest_kgbench.prompts import artefact_texts
    from pytest_kgbench.questions import load_questions

    report = PackReport(name)
    try:
        pack = open_pack(settings, name)
    except KgbenchError as exc:  # the manifest's problem; the questions are still read
        report.problems.append(str(exc))
        source = sources(settings).get(name)
        for path in source.question_files if source else ():
            try:
                load_questions(path, pack=name, problems=report.problems)
            except KgbenchError as exc:
                report.problems.append(str(exc))
        return report
    if pack.unavailable:
        report.problems.append(f"pack {name} cannot be checked here: {pack.unavailable}")
        return report
    where = str(pack.dir / "pack.yaml")
    for artefact, ref in (pack.manifest.get("definitions") or {}).items():
        if not pack.resolve_file(str(ref)).is_file():
            report.problems.append(f"{where}: field 'definitions.{artefact}': "
                                   f"{pack.resolve_file(str(ref))} does not exist")
    for key in ("file", "r2rml"):
        if pack.rdf.get(key) and not pack.resolve_file(str(pack.rdf[key])).is_file():
            report.problems.append(f"{where}: field 'rdf.{key}': "
                                   f"{pack.resolve_file(str(pack.rdf[key]))} does not exist")
    if not pack.question_files:
        report.problems.append(f"{pack.dir}: no question file (questions.yaml beside pack.yaml)")
    questions: list[Question] = []
    for path in pack.question_files:
        try:
            questions += load_questions(path, pack=name, source=pack,
                                        problems=report.problems).questions
        except KgbenchError as exc:
            report.problems.append(str(exc))
    evidence = pack.manifest.get("evidence") or {}
    for q in questions:
        for need in q.needs:
            if need not in evidence:
                report.problems.append(f"{q.file}: question {q.id}: field 'needs': {need} has "
                                       f"no evidence pattern in {where} (evidence.{need})")
        if q.persona not in pack.personas:
            report.problems.append(f"{q.file}: question {q.id}: field 'persona': no persona "
                                   f"'{q.persona}' in the pack")
    # every problem in one pass: the variants are built and the sound questions checked even
    # when others have problems (a question whose persona is unknown cannot be asked)
    questions = [q for q in questions if q.persona in pack.personas]
    builts = []
    for variant in pack.variants:
        try:
            builts.append(build_variant(pack, variant, Path(settings.cache_dir),
                                        seed=settings.dataset_seed))
        except Exception as exc:  # noqa: BLE001 - a problem of the pack, named, never a traceback
            report.problems.append(f"building {name}/{variant}: {_said(exc)}")
    for built in builts:
        try:
            checks = check_questions(questions, built, engines=settings.engines)
        except Exception as exc:  # noqa: BLE001 - as above
            report.problems.append(f"{name}/{built.variant}: {_said(exc)}")
            continue
        files = {q.id: q.file for q in questions}
        for c in checks:
            report.checked += 1
            report.problems += [f"{files[c.question]}: question {c.question} ({built.variant}): "
                                f"{p}" for p in c.problems]
        conds = tuple(registered().values())
        for cond in pack_conditions(pack, conds):
            try:
                artefact_texts(built, cond)
            except KgbenchError as exc:
                report.problems.append(f"{name}/{built.variant}: {exc}")
    report.notes += not_run(pack, tuple(registered().values()))
    if needs and builts and not report.problems:
        for n in check_needs(questions, builts):
            if n.exercised is False:
                report.problems.append(f"{files[n.question]}: question {n.question}: field "
                                       f"'needs': {n.need}: {n.why}")
    return report
