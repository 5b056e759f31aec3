"""Prompts: what a condition shows the model, built from a built variant.

A prompt has three parts: `system` (the instructions, the same for every item of a condition),
`context` (the data or the store's description, plus the definitions the condition gives — the
large block, the same for every question of a condition, so it can be cached) and `question`
(the question and the fields of the closing JSON block). Personal columns the persona may not
read are left out of the context: the guard acts before the model ever sees them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_kgbench.conditions import Condition
from pytest_kgbench.errors import HarnessBroken
from pytest_kgbench.questions import Question
from pytest_kgbench.reading import csv_block, rdf_block
from pytest_kgbench.stores import guard_for

if TYPE_CHECKING:
    from pytest_kgbench.build import Built

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
You are a careful data analyst. The data you need is below, in full. Work the answer out from it
yourself; answer the question in a sentence or two, citing the records you used."""

SYSTEM_QUERYING = """\
You are a careful data analyst. You cannot see the data: you reach it only through the tools,
which list and describe what the store holds and run your {language} queries (read-only). You
have at most {rounds} rounds of tool calls; a query running past the time limit fails. Answer
the question in a sentence or two, citing the records you used."""


@dataclass(frozen=True)
class Prompt:
    system: str
    context: str
    question: str

    @property
    def text(self) -> str:
        return f"{self.system}\n\n{self.context}\n\n{self.question}\n"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def context_sha256(self) -> str:
        return hashlib.sha256(self.context.encode("utf-8")).hexdigest()


def _turtle(title: str, files: list[tuple[str, str]]) -> str:
    blocks = [f"### {name}\n```turtle\n{text.strip()}\n```" for name, text in files]
    return f"## {title}\n\n" + "\n\n".join(blocks)


def _markdown(title: str, text: str) -> str:
    # nest the document's headings under this section's
    body = "\n".join("##" + line if line.startswith("#") else line
                     for line in text.strip().splitlines())
    return f"## {title}\n\n{body}"


def definitions_blocks(built: Built, cond: Condition) -> list[str]:
    """The definition artefacts a condition shows, each as one section of the prompt.

    The decoy glossary (R3) is shown exactly as the Markdown definitions are (R4), so the two
    conditions differ in content only.
    """
    pack = built.pack

    def read(name: str) -> str:
        path = pack.ontology_file(name)
        if path is None:
            raise HarnessBroken(f"condition {cond.id} needs ontology/{pack.name}/{name}")
        return path.read_text(encoding="utf-8")

    out = []
    for kind in cond.definitions:
        if kind == "markdown":
            out.append(_markdown("Definitions (Markdown)",
                                 built.definitions_md.read_text(encoding="utf-8")))
        elif kind == "decoy":
            out.append(_markdown("Definitions (Markdown)", read("decoy.md")))
        elif kind == "ontology":
            out.append(_turtle("Definitions (SKOS, Turtle)",
                               [("ontology.ttl", read("definitions.ttl"))]))
        elif kind == "neutral":
            out.append(_turtle("Definitions (SKOS, Turtle)",
                               [("ontology.ttl", read("neutral.ttl"))]))
        elif kind == "axioms":
            out.append(_turtle("Axioms and rules (OWL, SHACL; Turtle)",
                               [("axioms.ttl", read("axioms.ttl")),
                                ("shapes.ttl", read("shapes.ttl"))]))
        else:  # pragma: no cover - a condition naming an artefact this module cannot show
            raise ValueError(f"unknown definitions kind {kind!r}")
    return out


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


def build_prompt(cond: Condition, built: Built, question: Question, *, executor: Any = None,
                 max_rounds: int = 8, floor: bool = False,
                 together: tuple[Question, ...] = ()) -> Prompt:
    """The prompt of one item (or, with `together`, of a session asking all those questions).
    Querying conditions need the executor (for the catalog). `floor`: the minimal instruction
    of the floor arm, nothing about checking or citing."""
    guard = guard_for(built, question.persona)
    if cond.mode == "reading":
        system = SYSTEM_READING
        if cond.data == "rdf":
            data = rdf_block(built, guard)
        elif cond.data == "executed":
            data = csv_block(built.pack.executed_tables, built.executed, guard)
        else:
            data = csv_block(built.pack.tables, built.tables, guard)
    else:
        # asked together, a question keeps its budget: the session gets every question's rounds
        rounds = max_rounds * max(1, len(together))
        system = SYSTEM_QUERYING.format(language=cond.language.upper(), rounds=rounds)
        data = executor.store_block()
    context = "\n\n".join([f"# {built.pack.title} — {built.variant}", data,
                           *definitions_blocks(built, cond)])
    if floor:
        system = SYSTEM_FLOOR
    if together:
        system = re.sub(r"([Aa]nswer)(\s+)the(\s+)question", r"\1\2each\3question", system)
        return Prompt(system=system, context=context,
                      question=together_block(together, floor=floor,
                                              querying=cond.mode == "querying"))
    return Prompt(system=system, context=context, question=question_block(question, floor=floor))
