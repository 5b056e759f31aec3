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

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.questions import Question
from pytest_kgbench.core.registry import Registry, given
from pytest_kgbench.engines import WHOLE, Executor
from pytest_kgbench.engines.stores import open_store
from pytest_kgbench.packs.build import Built
from pytest_kgbench.packs.evidence import walk
from pytest_kgbench.scoring.answer_key import compute_key
from pytest_kgbench.scoring.answers import fields_from_rows
from pytest_kgbench.scoring.grading import grade_field


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
    """One store per reference kind and persona over a built variant, opened on first use,
    handing over whole results (`WHOLE`): a reference query is checked against a key that is
    never cut, so its result must not be cut either (a model's store keeps the caps)."""

    def __init__(self, built: Built, timeout: float = 60.0,
                 engines: Mapping[str, str] | None = None,
                 registry: Registry | None = None) -> None:
        self.built = built
        self.timeout = timeout
        self.engines = dict(engines or {})
        self.registry = registry
        self._open: dict[tuple[str, str], Executor] = {}

    def get(self, reference: str, persona: str) -> Executor:
        """The store a reference query (`sql`, `sparql`, `executed`) runs on."""
        key = (reference, persona)
        if key not in self._open:
            self._open[key] = open_store(self.built, reference, persona, engines=self.engines,
                                         timeout=self.timeout, registry=self.registry,
                                         caps=WHOLE)
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
                    engines: Mapping[str, str] | None = None,
                    registry: Registry | None = None) -> list[QuestionCheck]:
    """Check every question that runs on this variant (on the `engines` named per language,
    else each language's default, among `registry`'s engines); a question marked `skip` is not
    checked (it has no key)."""
    stores = Stores(built, timeout, engines, registry)
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
    it cannot be tested that way (None, `why`). An untested need carries the `reason` it
    cannot be: the question's own (it is inverted, expects no answer, has no gold SQL) or the
    one the pack declares (`untested_needs:` in pack.yaml); None is a need no one has said
    why it goes untested, which `kgbench check` fails."""

    question: str
    need: str
    exercised: bool | None
    why: str
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """Exercised by the data, or untested with a reason."""
        return self.exercised is True or (self.exercised is None and bool(self.reason))


def untested_reasons(manifest: Mapping[str, Any], questions: list[Question], where: str, *,
                     every: bool = True) -> dict[tuple[str, str], tuple[str, bool]]:
    """(question, need) -> (reason, whether it was given for that question alone), from the
    manifest's `untested_needs`: per need, the reason no question needing it can be tested by
    taking its evidence out (text), or a mapping of question ids to each one's reason.
    InputError (naming the file and the field) on a reason that is not text, or — when
    `questions` are `every` question of the pack — a need no question needs or a question
    that does not need it (a stale or misspelt entry)."""
    declared = manifest.get("untested_needs") or {}
    if not isinstance(declared, Mapping):
        raise InputError(where, "must map each need to the reason it cannot be tested by "
                         "ablation (or to question ids and their reasons)",
                         field="untested_needs")
    needing: dict[str, set[str]] = {}
    for q in questions:
        for need in q.needs:
            needing.setdefault(need, set()).add(q.id)
    out: dict[tuple[str, str], tuple[str, bool]] = {}
    for need, entry in declared.items():
        field_name = f"untested_needs.{need}"
        if need not in needing and every:
            raise InputError(where, f"no question needs {need}", field=field_name)
        alone = isinstance(entry, Mapping)
        per = entry if alone else {qid: entry for qid in needing.get(need, ())}
        if not alone and not isinstance(entry, str):
            raise InputError(where, "must be the reason (text) or a mapping of question ids "
                             "to their reasons", field=field_name)
        for qid, why in per.items():
            if qid not in needing.get(need, ()) and every:
                raise InputError(where, f"question {qid} does not need {need}",
                                 field=f"{field_name}.{qid}")
            if not isinstance(why, str) or not why.strip():
                raise InputError(where, "a reason must be a sentence saying why the need "
                                 "cannot be tested by taking its evidence out",
                                 field=f"{field_name}.{qid}" if alone else field_name)
            out[(str(qid), str(need))] = (" ".join(why.split()), alone)
    return out


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


def check_needs(questions: list[Question], builts: list[Built], *, timeout: float = 60.0,
                every: bool = False) -> list[NeedCheck]:
    """For each (question, need) pair: does taking the need's evidence out of the gold SQL
    query change the answer on some of the built variants? A pair that cannot be tested so
    carries its reason (NeedCheck.reason), or None when no one has given one. A pair whose
    filter the data never exercises fails, unless the pack says, for that question alone,
    why the filter is not what the question tests (then it is untested, with that reason).
    `every`: `questions` are all the pack's, so a reason naming none of them is an error."""
    out: list[NeedCheck] = []
    stores = {b.variant: Stores(b, timeout) for b in builts}
    pack = builts[0].pack
    declared = untested_reasons(pack.manifest, questions, str(pack.dir / "pack.yaml"),
                                every=every)
    evidence = pack.manifest.get("evidence") or {}
    try:
        for q in questions:
            for need in q.needs:
                check = _check_need(q, need, evidence, builts, stores)
                reason, alone = declared.get((q.id, need), (None, False))
                if check.exercised is None and check.reason is None:
                    check.reason = reason
                elif check.exercised is False and alone:
                    # the filter is not what this question tests, and the pack says why: the
                    # pair is untested (shown so), never exercised without a word
                    check = NeedCheck(q.id, need, None, check.why, reason=reason)
                out.append(check)
    finally:
        for s in stores.values():
            s.close()
    return out


def _check_need(q: Question, need: str, evidence: Mapping[str, Any], builts: list[Built],
                stores: Mapping[str, Stores]) -> NeedCheck:
    """One (question, need) pair: tested by taking the need's declared filters out of the
    gold SQL, or why not (with the question's own reason where it has one)."""
    if q.expect != "answer":
        why = f"the question expects {q.expect}: there is no answer for the need to change"
        return NeedCheck(q.id, need, None, why, reason=why)
    if "sql" not in q.gold:
        why = "the question has no gold SQL to take the need's evidence out of"
        return NeedCheck(q.id, need, None, why, reason=why)
    if q.inverted:
        why = ("an inverted question: the naive reading is right here by design, so taking "
               "the need out is expected to keep the key")
        return NeedCheck(q.id, need, None, why, reason=why)
    columns = _ablation(evidence, need)
    if not columns:
        return NeedCheck(q.id, need, None, "the pack declares no ablation for it "
                         "(evidence.<need>.ablate: the columns whose filters are the "
                         "definition)")
    reduced = without_filters(q.gold["sql"], columns)
    if reduced is None:
        return NeedCheck(q.id, need, None, "the gold SQL has no filter on "
                         f"{', '.join(sorted(columns))} to take out")
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
        return NeedCheck(q.id, need, None, "the gold SQL without its filter does not run: "
                         f"{failed[:120]}")
    if moved:
        return NeedCheck(q.id, need, True, "the answer changes without it on "
                         + ", ".join(moved))
    return NeedCheck(q.id, need, False, "the gold SQL without its filter on "
                     f"{', '.join(sorted(columns))} gives the key on every variant: the "
                     "data never exercises it")


def need_counts(checks: list[NeedCheck]) -> dict[str, int]:
    """How a pack's (question, need) pairs stand: tested by ablation (`exercised` by the data,
    or `never`), `untested` with a reason, and `unexplained` (untested, no reason)."""
    return {"pairs": len(checks),
            "exercised": sum(c.exercised is True for c in checks),
            "never": sum(c.exercised is False for c in checks),
            "untested": sum(c.exercised is None and bool(c.reason) for c in checks),
            "unexplained": sum(c.exercised is None and not c.reason for c in checks)}


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
    from pytest_kgbench.core.errors import KgbenchError

    text = str(exc) if isinstance(exc, KgbenchError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def validate_pack(settings: Any, name: str, *, needs: bool = True,
                  registry: Registry | None = None) -> PackReport:
    """Check a pack end to end: its manifest and files, its questions, each variant's build,
    every key against the gold queries and traps, every need against the pack's evidence, and
    the artefacts of every condition it supports (the conditions and field kinds of
    `registry`, the command's; the shipped ones where none is passed)."""
    from pytest_kgbench.asking.cases import not_run
    from pytest_kgbench.core.conditions import registered
    from pytest_kgbench.core.errors import KgbenchError
    from pytest_kgbench.packs.locate import open_pack

    registry = given(registry)

    report = PackReport(name)
    try:
        pack = open_pack(settings, name)
    except KgbenchError as exc:  # the manifest's problem; the questions are still read
        report.problems.append(str(exc))
        _read_unopened_questions(settings, name, report, registry)
        return report
    if pack.unavailable:
        report.problems.append(f"pack {name} cannot be checked here: {pack.unavailable}")
        return report
    where = str(pack.dir / "pack.yaml")
    report.problems += _missing_files(pack, where)
    questions = _read_questions(pack, report, registry)
    report.problems += _question_problems(pack, questions, where)
    # every problem in one pass: the variants are built and the sound questions checked even
    # when others have problems (a question whose persona is unknown cannot be asked)
    questions = [q for q in questions if q.persona in pack.personas]
    builts = _build_variants(settings, pack, report)
    for built in builts:
        _check_variant(settings, questions, built, report, registry)
    report.notes += not_run(pack, tuple(registered(registry).values()))
    if needs and builts and not report.problems:
        _check_pack_needs(questions, builts, where, report)
    return report


def _read_unopened_questions(settings: Any, name: str, report: PackReport,
                             registry: Registry) -> None:
    """Read the question files of a pack whose manifest would not open, for their problems."""
    from pytest_kgbench.core.errors import KgbenchError
    from pytest_kgbench.core.questions import load_questions
    from pytest_kgbench.packs.locate import sources

    source = sources(settings).get(name)
    for path in source.question_files if source else ():
        try:
            load_questions(path, pack=name, problems=report.problems, registry=registry)
        except KgbenchError as exc:
            report.problems.append(str(exc))


def _missing_files(pack: Any, where: str) -> list[str]:
    """The problems of the files the manifest names (definitions, rdf) that do not exist."""
    problems = []
    for artefact, ref in (pack.manifest.get("definitions") or {}).items():
        if not pack.resolve_file(str(ref)).is_file():
            problems.append(f"{where}: field 'definitions.{artefact}': "
                            f"{pack.resolve_file(str(ref))} does not exist")
    for key in ("file", "r2rml"):
        if pack.rdf.get(key) and not pack.resolve_file(str(pack.rdf[key])).is_file():
            problems.append(f"{where}: field 'rdf.{key}': "
                            f"{pack.resolve_file(str(pack.rdf[key]))} does not exist")
    return problems


def _read_questions(pack: Any, report: PackReport, registry: Registry) -> list[Question]:
    """Every question of the pack's question files (their problems, and a missing file, noted
    in `report`)."""
    from pytest_kgbench.core.errors import KgbenchError
    from pytest_kgbench.core.questions import load_questions

    if not pack.question_files:
        report.problems.append(f"{pack.dir}: no question file (questions.yaml beside pack.yaml)")
    questions: list[Question] = []
    for path in pack.question_files:
        try:
            questions += load_questions(path, pack=report.pack, source=pack,
                                        problems=report.problems, registry=registry).questions
        except KgbenchError as exc:
            report.problems.append(str(exc))
    return questions


def _question_problems(pack: Any, questions: list[Question], where: str) -> list[str]:
    """The problems of questions naming a need without evidence or a persona the pack lacks."""
    problems = []
    evidence = pack.manifest.get("evidence") or {}
    for q in questions:
        for need in q.needs:
            if need not in evidence:
                problems.append(f"{q.file}: question {q.id}: field 'needs': {need} has "
                                f"no evidence pattern in {where} (evidence.{need})")
        if q.persona not in pack.personas:
            problems.append(f"{q.file}: question {q.id}: field 'persona': no persona "
                            f"'{q.persona}' in the pack")
    return problems


def _build_variants(settings: Any, pack: Any, report: PackReport) -> list[Built]:
    """Every variant of the pack that builds (a build's failure noted in `report`)."""
    from pytest_kgbench.packs.build import build_variant

    builts = []
    for variant in pack.variants:
        try:
            builts.append(build_variant(pack, variant, Path(settings.paths.cache_dir),
                                        seed=settings.plan.dataset_seed))
        except Exception as exc:  # noqa: BLE001 - a problem of the pack, named, never a traceback
            report.problems.append(f"building {report.pack}/{variant}: {_said(exc)}")
    return builts


def _check_variant(settings: Any, questions: list[Question], built: Built,
                   report: PackReport, registry: Registry) -> None:
    """Note in `report` the question checks on one variant and the artefacts of every condition
    the pack supports there."""
    from pytest_kgbench.asking.cases import pack_conditions
    from pytest_kgbench.asking.prompts import artefact_texts
    from pytest_kgbench.core.conditions import registered
    from pytest_kgbench.core.errors import KgbenchError

    name = report.pack
    try:
        checks = check_questions(questions, built, engines=settings.stores.engines,
                                 registry=registry)
    except Exception as exc:  # noqa: BLE001 - a problem of the pack, named, never a traceback
        report.problems.append(f"{name}/{built.variant}: {_said(exc)}")
        return
    files = {q.id: q.file for q in questions}
    for c in checks:
        report.checked += 1
        report.problems += [f"{files[c.question]}: question {c.question} ({built.variant}): "
                            f"{p}" for p in c.problems]
    conds = tuple(registered(registry).values())
    for cond in pack_conditions(built.pack, conds):
        try:
            artefact_texts(built, cond)
        except KgbenchError as exc:
            report.problems.append(f"{name}/{built.variant}: {exc}")


def _check_pack_needs(questions: list[Question], builts: list[Built], where: str,
                      report: PackReport) -> None:
    """Note in `report` every need never exercised, or untested without the pack's reason."""
    from pytest_kgbench.core.errors import KgbenchError

    try:
        need_checks = check_needs(questions, builts, every=True)
    except KgbenchError as exc:
        report.problems.append(str(exc))
        return
    files = {q.id: q.file for q in questions}
    for n in need_checks:
        if n.exercised is False:
            report.problems.append(f"{files[n.question]}: question {n.question}: field "
                                   f"'needs': {n.need}: {n.why}")
        elif not n.ok:
            report.problems.append(
                f"{files[n.question]}: question {n.question}: field 'needs': {n.need} is "
                f"not tested ({n.why}) and {where} gives no reason (untested_needs."
                f"{n.need}: why taking its evidence out cannot test it)")


# --- how long the same facts are in each reading condition ----------------------------------

RDF_RATIO = 2.5
"""How many times R1's prompt (the data as CSV) the prompt of a condition showing the data as
Turtle (RDF_CONDITIONS) may be, unless the pack says why its data need more (`prompt_ratio:
{max, why}` in pack.yaml; docs/conditions.md)."""
RDF_CONDITIONS = ("R2", "R6")


def reading_sizes(questions: list[Question], built: Built,
                  registry: Registry | None = None) -> dict[str, float]:
    """Each reading condition's median prompt size in characters over the questions it asks on
    this variant (the pack's reading conditions; a prompt per question, its data block built
    once per persona)."""
    from statistics import median

    from pytest_kgbench.asking.cases import pack_conditions
    from pytest_kgbench.asking.prompts import Prompt, build_prompt, question_block
    from pytest_kgbench.core.conditions import registered

    out: dict[str, float] = {}
    conds = [c for c in pack_conditions(built.pack, tuple(registered(registry).values()))
             if c.mode == "reading"]
    for cond in conds:
        heads: dict[str, Prompt] = {}
        sizes = []
        for q in questions:
            if "reading" not in q.modes or (q.variants and built.variant not in q.variants):
                continue
            if q.persona not in heads:
                heads[q.persona] = build_prompt(cond, built, q)
            head = heads[q.persona]
            sizes.append(len(Prompt(head.system, head.context, question_block(q)).text))
        if sizes:
            out[cond.id] = float(median(sizes))
    return out


@dataclass
class SizeCheck:
    """One reading condition's median prompt on one variant, beside R1's: `bound` is the
    ratio it must stay within (RDF_CONDITIONS only), `why` the pack's reason for a bound above
    RDF_RATIO."""

    variant: str
    condition: str
    chars: float
    ratio: float | None
    bound: float | None = None
    why: str | None = None

    @property
    def ok(self) -> bool:
        return self.bound is None or self.ratio is None or self.ratio <= self.bound


def prompt_bound(manifest: Mapping[str, Any], where: str) -> tuple[float, str | None]:
    """The ratio to R1 the pack's Turtle conditions must stay within: RDF_RATIO, or the
    manifest's `prompt_ratio: {max, why}` (InputError naming the field when it is not a
    number above RDF_RATIO with a reason)."""
    entry = manifest.get("prompt_ratio")
    if entry is None:
        return RDF_RATIO, None
    if not isinstance(entry, Mapping) or set(entry) != {"max", "why"}:
        raise InputError(where, "must be {max: N, why: the reason the same facts need more "
                         f"than {RDF_RATIO}× R1's prompt as Turtle}}", field="prompt_ratio")
    bound, why = entry["max"], entry["why"]
    if isinstance(bound, bool) or not isinstance(bound, (int, float)) or bound <= RDF_RATIO:
        raise InputError(where, f"must be a number above {RDF_RATIO} (the default bound)",
                         field="prompt_ratio.max")
    if not isinstance(why, str) or not why.strip():
        raise InputError(where, "must say why the pack's Turtle needs more",
                         field="prompt_ratio.why")
    return float(bound), why.strip()


def check_prompt_sizes(questions: list[Question], builts: list[Built],
                       registry: Registry | None = None) -> list[SizeCheck]:
    """Every reading condition's median prompt on every variant (the conditions of `registry`,
    the command's), with its ratio to R1's; the Turtle conditions (RDF_CONDITIONS) bounded by
    `prompt_bound`."""
    if not builts:
        return []
    pack = builts[0].pack
    bound, why = prompt_bound(pack.manifest, str(pack.dir / "pack.yaml"))
    out = []
    for built in builts:
        sizes = reading_sizes(questions, built, registry)
        r1 = sizes.get("R1")
        for cond, chars in sizes.items():
            rdf = cond in RDF_CONDITIONS
            out.append(SizeCheck(built.variant, cond, chars, chars / r1 if r1 else None,
                                 bound if rdf else None, why if rdf else None))
    return out


def per_id_prefixes(built: Built) -> list[str]:
    """The prefixes of the variant's Turtle that name a namespace deeper than one segment
    below a namespace the pack declares (`A2256702338_____:` for one authorship's): a prefix
    per id, where the pack's namespaces should be declared once each."""
    from pytest_kgbench.engines.sparql import turtle_prefixes

    declared = [str(v) for v in (built.pack.rdf.get("prefixes") or {}).values()]
    out = []
    for name, ns in sorted(turtle_prefixes(built.data_ttl).items()):
        base = max((b for b in declared if ns.startswith(b) and ns != b), key=len, default=None)
        if base is not None and "/" in ns[len(base):].strip("/"):
            out.append(f"{name}: <{ns}>")
    return out


def check_lines(pack: Any, needs: list[NeedCheck], sizes: list[SizeCheck],
                per_id: Mapping[str, list[str]]) -> tuple[list[str], bool]:
    """What `kgbench check` prints of a pack's needs and prompt sizes, and whether that fails
    it: a need never exercised or untested without a reason, a Turtle condition over its
    bound, a prefix per id."""
    from pytest_kgbench.core.pricing import CHARS_PER_TOKEN

    lines = []
    for n in needs:
        mark = {True: "ok ", False: "BAD", None: " - " if n.ok else "BAD"}[n.exercised]
        said = n.why
        if n.exercised is None and n.reason != n.why:  # a reason the pack gives, or none
            said += f"; reason: {n.reason}" if n.reason else \
                "; NO REASON GIVEN (pack.yaml untested_needs)"
        lines.append(f"{mark} {n.question} needs {n.need}: {said}")
    count = need_counts(needs)
    lines.append(
        f"needs of {pack.name}: {count['pairs']} (question, need) pairs across "
        f"{', '.join(pack.variants)}: {count['exercised'] + count['never']} tested by taking "
        f"their evidence out ({count['exercised']} exercised by the data, {count['never']} "
        f"never), {count['untested']} untested with a reason, {count['unexplained']} "
        "untested without one")
    for variant in pack.variants:
        row = [s for s in sizes if s.variant == variant]
        lines.append(f"prompt sizes on {pack.name}/{variant} (median, ≈ tokens): " + "; ".join(
            f"{s.condition} {int(s.chars) // CHARS_PER_TOKEN:,}"
            + ("" if s.ratio is None or s.condition == "R1" else f" ({s.ratio:.2f}× R1)")
            for s in row))
    bounded = [s for s in sizes if s.bound is not None and s.ratio is not None]
    if bounded:
        why = bounded[0].why
        lines.append(f"the Turtle conditions' bound: {bounded[0].bound:g}× R1's prompt"
                     + (f" (pack.yaml prompt_ratio: {why})" if why else
                        " (docs/conditions.md)"))
    lines += [f"{'ok ' if s.ok else 'BAD'} {s.condition} on {pack.name}/{s.variant}: "
              f"{s.ratio:.2f}× R1" + ("" if s.ok else f", more than {s.bound:g}×")
              for s in bounded]
    lines += [f"BAD {pack.name}/{variant}: its Turtle declares {len(found)} prefixes of one id "
              f"each (e.g. {found[0]}): a pack's namespaces are declared once"
              for variant, found in per_id.items() if found]
    failed = (bool(count["never"] or count["unexplained"]) or any(not s.ok for s in sizes)
              or any(per_id.values()))
    return lines, failed
