"""Prompts: what a condition shows the model, built from a built variant.

A prompt has three parts: `system` (the instructions, the same for every item of a condition),
`context` (the data or the store's description, plus the definitions the condition gives — the
large block, the same for every question of a condition, so it can be cached) and `question`
(the question and the fields of the closing JSON block). Personal columns the persona may not
read are left out of the context: the guard acts before the model ever sees them.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.core.conditions import SCHEMA_ARMS, Condition
from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.core.questions import Question
from pytest_kgbench.engines.stores import guard_for
from pytest_kgbench.packs.reading import csv_block, rdf_block

if TYPE_CHECKING:
    from pytest_kgbench.packs.build import Built

RENDERED = "<rendered>"  # an artefact the build renders: the Markdown form of definitions.ttl

ANSWER_RULES = """\
End your answer with exactly one fenced ```json block holding one object with these fields:
{fields}
Use null for a value you cannot determine. If the data cannot answer the question, set
"abstain": true and say why. If you will not do what is asked, set "declined": true and say why.
Optionally add "definitions_used": [the definitions you relied on] and
"records_used": [identifiers of the records you used]."""

FLOOR_RULES = """\
End your answer with one fenced ```json block holding one object with these fields:
{fields}"""

SYSTEM_FLOOR = "Answer the question about this data."

SYSTEM_READING = """\
You are a careful data analyst. The data you need is below, in full{withheld}. Work the answer
out from it yourself; answer the question in a sentence or two, citing the records you used."""
WITHHELD_NOTE = " (but for the columns withheld from you, named under each table)"

SYSTEM_QUERYING = """\
You are a careful data analyst. You cannot see the data: you reach it only through the tools,
which list and describe what the store holds and run your {language} queries (read-only). You
have {budget}; a query running past {timeout} is stopped and reported as failed. Answer the
question in a sentence or two, citing the records you used."""

# --schema none: one tool, and nothing says what the store holds
SYSTEM_QUERY_ONLY = """\
You are a careful data analyst. You cannot see the data: you reach it only through the tool
run_query, which runs your {language} queries (read-only). You have {budget}; a query running
past {timeout} is stopped and reported as failed. Answer the question in a sentence or two,
citing the records you used."""

# --schema tools: the store's description is left out, in its place this line
UNDESCRIBED_STORE = """\
## The store ({language})

It is not described here: list_tables and describe show what it holds."""


def _wrap(text: str) -> str:
    """A system text as one paragraph wrapped at 96 columns (its parts are filled in)."""
    import textwrap

    return textwrap.fill(" ".join(text.split()), width=96)


def _seconds(timeout: float) -> str:
    return f"{timeout:g} seconds" if timeout != 1 else "1 second"


def _budget(max_rounds: int, questions: int) -> str:
    """The tool budget as the model is told it: per question, and in all when asked together
    (a question keeps its budget either way)."""
    if questions <= 1:
        return f"at most {max_rounds} rounds of tool calls"
    return (f"at most {max_rounds} rounds of tool calls per question, {max_rounds * questions} "
            f"in all for the {questions} questions")


@dataclass(frozen=True)
class Prompt:
    system: str
    context: str
    question: str

    @functools.cached_property
    def text(self) -> str:
        return f"{self.system}\n\n{self.context}\n\n{self.question}\n"

    @property
    def sha256(self) -> str:
        """SHA-256 of `text`: the shared head (system and context) is hashed once per process
        and continued with each item's question block."""
        digest = _head_digest(self.system, self.context).copy()
        digest.update(f"{self.question}\n".encode())
        return str(digest.hexdigest())

    @property
    def context_sha256(self) -> str:
        return _sha256_hex(self.context)


# Every item of a condition shares its prompt's system and context (tens of kilobytes): their
# hashes are made once per process, not per item (hashlib lets go of the GIL on such inputs,
# and under --concurrency getting it back behind the threads answering ahead is the cost).
# Items run grouped by context (collect.order_by_context), so a few entries suffice; the
# strings they key on are the runtime's own cached prompt parts, not copies.

@functools.lru_cache(maxsize=32)
def _head_digest(system: str, context: str) -> Any:
    """The SHA-256 state after a prompt's head: `system`, a blank line, `context`, a blank
    line (copy it before continuing: the cached state is shared)."""
    return hashlib.sha256(f"{system}\n\n{context}\n\n".encode())


@functools.lru_cache(maxsize=32)
def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _turtle(title: str, files: list[tuple[str, str]]) -> str:
    blocks = [f"### {name}\n```turtle\n{text.strip()}\n```" for name, text in files]
    return f"## {title}\n\n" + "\n\n".join(blocks)


def _markdown(title: str, text: str) -> str:
    # nest the document's headings under this section's
    body = "\n".join("##" + line if line.startswith("#") else line
                     for line in text.strip().splitlines())
    return f"## {title}\n\n{body}"


@dataclass(frozen=True)
class Artefact:
    """A kind of definitions a condition may show: its section title, its files (the name the
    prompt shows, and where it comes from: a file of the pack's ontology folder, or the
    variant's rendered `definitions.md`), and their form."""

    title: str
    files: tuple[tuple[str, str], ...]
    form: str  # "markdown" | "turtle"


ARTEFACTS: dict[str, Artefact] = {
    "markdown": Artefact("Definitions (Markdown)", (("definitions.md", RENDERED),), "markdown"),
    # the decoy is shown exactly as the Markdown definitions are: R3 and R4 differ in content
    "decoy": Artefact("Definitions (Markdown)", (("definitions.md", "decoy.md"),), "markdown"),
    "ontology": Artefact("Definitions (SKOS, Turtle)", (("ontology.ttl", "definitions.ttl"),),
                         "turtle"),
    "neutral": Artefact("Definitions (SKOS, Turtle)", (("ontology.ttl", "neutral.ttl"),),
                        "turtle"),
    "axioms": Artefact("Axioms and rules (OWL, SHACL; Turtle)",
                       (("axioms.ttl", "axioms.ttl"), ("shapes.ttl", "shapes.ttl")), "turtle"),
}


def _substance(form: str, text: str) -> bool:
    """Whether an artefact says anything: Turtle with at least one triple, Markdown with a
    line that is not a heading. A definitions file cut to its prefixes would otherwise run a
    condition that shows nothing while calling it "with definitions"."""
    if form == "turtle":
        import rdflib

        try:
            return len(rdflib.Graph().parse(data=text, format="turtle")) > 0
        except Exception:  # noqa: BLE001 - an unreadable artefact is not substance
            return False
    return any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines())


def artefact_texts(built: Built, cond: Condition) -> list[tuple[str, str, str]]:
    """(kind, shown name, text) of every artefact a condition shows; HarnessBroken when one
    is missing or says nothing."""
    pack = built.pack
    out = []
    for kind in cond.definitions:
        art = ARTEFACTS.get(kind)
        if art is None:
            raise HarnessBroken(f"condition {cond.id} shows '{kind}', which no artefact is")
        for shown, source in art.files:
            if source == RENDERED:
                path: Path | None = built.definitions_md
            else:
                path = pack.ontology_file(source)
            if path is None or not path.is_file():
                raise HarnessBroken(f"condition {cond.id} needs ontology/{pack.name}/{source}")
            text = path.read_text(encoding="utf-8")
            if not _substance(art.form, text):
                where = "ontology/" + pack.name + "/" + (
                    "definitions.ttl (rendered to Markdown)" if source == RENDERED else source)
                raise HarnessBroken(f"condition {cond.id} would show {where}, which holds no "
                                    "definition: the condition would measure nothing")
            out.append((kind, shown, text))
    return out


def definitions_blocks(built: Built, cond: Condition) -> list[str]:
    """The definition artefacts a condition shows, each as one section of the prompt."""
    out = []
    for kind in cond.definitions:
        art = ARTEFACTS[kind]
        files = [(shown, text) for k, shown, text in artefact_texts(built, cond) if k == kind]
        if art.form == "markdown":
            out += [_markdown(art.title, text) for _, text in files]
        else:
            out.append(_turtle(art.title, files))
    return out


def contrast_problem(built: Built, cond: Condition, other: Condition) -> str | None:
    """Why a comparison of two conditions would measure nothing: they show the same data the
    same way and artefacts of the same text (a neutral file identical to the definitions, a
    decoy identical to them). None when they differ as they should."""
    same_data = (cond.mode, cond.language, cond.data, cond.load_ontology) == \
        (other.mode, other.language, other.data, other.load_ontology)
    if not same_data:
        return None
    mine = [t for _, _, t in artefact_texts(built, cond)]
    theirs = [t for _, _, t in artefact_texts(built, other)]
    if mine == theirs:
        return (f"conditions {other.id} and {cond.id} would show the same prompt on "
                f"{built.pack.name}/{built.variant}: their comparison measures nothing")
    return None


def question_block(question: Question, *, floor: bool = False) -> str:
    fields = _fields(question)
    rules = FLOOR_RULES if floor else ANSWER_RULES
    return f"## Question {question.id}\n\n{question.text}\n\n" + rules.format(fields=fields)


TOGETHER_RULES = """\
Answer every question in turn, in a sentence or two each, citing the records you used. Begin
each answer on a new line with its id in bold, as **{first}.**
{tagging}
End your whole reply with exactly one fenced ```json block holding one object keyed by question
id ({ids}); each value is an object with that question's fields, as listed under it. Use null for
a value you cannot determine. If the data cannot answer a question, set "abstain": true in its
object and say why. If you will not do what a question asks, set "declined": true in its object
and say why. Optionally add "definitions_used" and "records_used" to each question's object."""

TOGETHER_FLOOR_RULES = """\
Answer every question, each on a new line beginning with its id, as **{first}.**
{tagging}
End with one fenced ```json block holding one object keyed by question id ({ids}); each value is
an object with that question's fields, as listed under it."""

TOGETHER_TAGGING = """\
Each time you run a query, give the id of the question it serves as run_query's "question"."""


def _fields(question: Question) -> str:
    return "\n".join(f'- "{f.name}": {f.describe()}' for f in question.fields) or \
        "- (no fields: say what you did)"


def together_block(questions: list[Question] | tuple[Question, ...], *, floor: bool = False,
                   querying: bool = False) -> str:
    """The question part of a together session: every question with its fields, numbered by
    id, then how to lay out the answers and the closing JSON block keyed by id."""
    parts = [f"## Questions ({len(questions)})", ""]
    for q in questions:
        parts += [f"### {q.id}", "", q.text.strip(), "", "Fields:", _fields(q), ""]
    ids = ", ".join(f'"{q.id}"' for q in questions)
    rules = TOGETHER_FLOOR_RULES if floor else TOGETHER_RULES
    text = rules.format(first=questions[0].id if questions else "Q01", ids=ids,
                        tagging=TOGETHER_TAGGING if querying else "")
    return "\n".join(parts) + "\n" + re.sub(r"\n\n+", "\n", text)


# many parameters: keyword-only options with defaults
def build_prompt(cond: Condition, built: Built, question: Question, *, executor: Any = None,
                 max_rounds: int = 8, floor: bool = False, query_timeout: float = 60.0,
                 together: tuple[Question, ...] = ()) -> Prompt:
    """The prompt of one item (or, with `together`, of a session asking all those questions).
    Querying conditions need the executor (for the catalog). `floor`: the minimal instruction
    of the floor arm, nothing about checking or citing. What the prompt says of the data, the
    budget and the time limit is what the run enforces."""
    guard = guard_for(built, question.persona)
    if cond.mode == "reading":
        specs = built.pack.executed_tables if cond.data == "executed" else built.pack.tables
        hidden = any(guard.withheld_columns(name) for name in specs) or (
            cond.data == "rdf" and bool(guard.withheld_predicates()))
        system = SYSTEM_READING.format(withheld=WITHHELD_NOTE if hidden else "")
        if cond.data == "rdf":
            data = rdf_block(built, guard)
        elif cond.data == "executed":
            data = csv_block(built.pack.executed_tables, built.executed, guard)
        else:
            data = csv_block(built.pack.tables, built.tables, guard)
    else:
        # asked together, a question keeps its budget: the session gets every question's rounds
        arm = SCHEMA_ARMS[cond.schema]
        system = (SYSTEM_QUERYING if arm.discovery else SYSTEM_QUERY_ONLY).format(
            language=cond.language.upper(), budget=_budget(max_rounds, len(together)),
            timeout=_seconds(query_timeout))
        if arm.described:
            data = executor.store_block()
        elif arm.discovery:
            data = UNDESCRIBED_STORE.format(language=cond.language.upper())
        else:
            data = ""
        floor = floor or arm.floor
    context = "\n\n".join(part for part in [f"# {built.pack.title} — {built.variant}", data,
                                             *definitions_blocks(built, cond)] if part)
    if floor:
        system = SYSTEM_FLOOR
    if together:
        system = re.sub(r"([Aa]nswer)(\s+)the(\s+)question", r"\1\2each\3question", system)
    system = _wrap(system) if not floor else system
    if together:
        return Prompt(system=system, context=context,
                      question=together_block(together, floor=floor,
                                              querying=cond.mode == "querying"))
    return Prompt(system=system, context=context, question=question_block(question, floor=floor))
