"""The pack's questions: the 50 questions of the CK25 dataset's questions.yml, read at run time
(questions/ck25.yaml is `{generate: "ck25:questions"}`).

Each question becomes one question of the pack: its English text, one `rows` answer field (the
result table, compared as a multiset of rows), the published reference SPARQL unchanged as
gold.sparql, and the key `gold.sparql` (the reference query's result on the pack's graph). Its
tier is L1 when the reference query is a plain lookup (features no more than SELECT/ASK and
FILTER), else L2. findings.yaml says where the reference's result here differs from the
challenge's and why, and which questions cannot be graded here (`skip`). The questions'
`features`, `classes` and `properties` are not carried into the questions; README.md says why
they are not `needs`, and the importer reads RESULT_ORDER_MATTERS from questions.yml itself.
"""

from __future__ import annotations

from typing import Any

QUESTIONS = "external:ck25-dataset/questions.yml"
LOOKUP = frozenset({"SELECT", "ASK", "FILTER"})


def qname(number: int | str, lang: str = "en") -> str:
    """The challenge's name of a question (`ck25:1-en`)."""
    return f"ck25:{number}-{lang}"


def question_id(number: int | str) -> str:
    return f"ck25-{number}"


def read_questions(pack: Any) -> dict[str, Any]:
    """questions.yml as published."""
    import yaml

    path = pack.resolve_file(QUESTIONS)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise ValueError(f"{path}: expected a mapping with a `questions` list")
    return data


def findings(pack: Any) -> dict[int, dict[str, Any]]:
    """findings.yaml: {question number: {cause, why, differs_on, skip?}}."""
    import yaml

    data = yaml.safe_load((pack.dir / "findings.yaml").read_text(encoding="utf-8")) or {}
    return {int(k): dict(v) for k, v in data.items()}


def ordered_questions(pack: Any) -> list[str]:
    """The challenge's names of the questions whose order matters (RESULT_ORDER_MATTERS)."""
    data = read_questions(pack)
    return [qname(e["id"]) for e in data["questions"]
            if "RESULT_ORDER_MATTERS" in (e.get("features") or [])]


def questions(pack: Any) -> list[dict[str, Any]]:
    """The question dicts (validated by the plugin like a YAML file's)."""
    data = read_questions(pack)
    found = findings(pack)
    stale = sorted(set(found) - {int(e.get("id", -1)) for e in data["questions"]})
    if stale:
        raise ValueError(f"{pack.dir / 'findings.yaml'}: {stale} name no question of the "
                         "dataset")
    out = []
    seen: set[str] = set()
    for entry in data["questions"]:
        number = entry.get("id")
        text = (entry.get("question") or {}).get("en")
        sparql = (entry.get("query") or {}).get("sparql")
        if number is None or not text or not sparql:
            raise ValueError(f"{QUESTIONS}: question {number!r} lacks an id, English text or "
                             "a reference SPARQL query")
        qid = question_id(number)
        if qid in seen:
            raise ValueError(f"{QUESTIONS}: question id {number} is given twice")
        seen.add(qid)
        features = [str(f) for f in entry.get("features") or []]
        question: dict[str, Any] = {
            "id": qid,
            "tier": "L1" if set(features) <= LOOKUP else "L2",
            "text": " ".join(str(text).split()),
            "answer": {"rows": {"kind": "rows"}},
            "gold": {"sparql": str(sparql)},
            "key": "gold.sparql",
        }
        skip = found.get(int(number), {}).get("skip")
        if skip:
            question["skip"] = " ".join(str(skip).split())
        out.append(question)
    return out
