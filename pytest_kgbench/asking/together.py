"""`--ask together`: one model session answers every selected question of a variant at once, as
the original ladder study asked them; each item then grades its own slice of that session.

A session is one condition x repeat x model x persona of one pack variant (`group_name`). Its
prompt is the condition's usual system and data block, then the numbered questions, each to be
answered in a sentence or two beginning with its id, then one closing JSON block keyed by
question id (`prompts.together_block`). In a querying condition `run_query` takes the id of the
question a query serves, so every query is banked with the item it belongs to.

`split` turns the session's one answer into one answer per question: the question's object from
the closing block (its id in full or without the pack's prefix), its prose (from the line that
starts with its id) followed by that object as its own closing block, and the queries and tool
calls tagged with it. A question the session gave no answer object for is `skipped` (a miss).
What the session spent (tokens, latency, rounds) and its whole transcript (full text, every tool
call, queries that named no question) are banked once, on the item that asked the session, so a
run's totals are the sessions' totals, even when a run halts right after that item. `combine` is
the inverse, used by the reference agents (gold, trap, synthetic), which answer per question:
their answers are joined into one session text and block and split again, so a gold run with
--ask together proves the slicing as well as the prompt.

Pure module: no pytest, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_kgbench.scoring.answers import Answer, extract_block, prose

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
GROUP_PREFIX = "kgbench."


def group_name(pack: str, variant: str, condition: str, model: str, repeat: int,
               persona: str) -> str:
    """The xdist group (and session) of an item asked together."""
    raw = f"{pack}.{variant}.{condition}.{model}.r{repeat}.{persona}"
    return GROUP_PREFIX + _UNSAFE.sub("_", raw)


def session_scope(nodeid: str) -> str | None:
    """The scheduling scope of a question item under -n: its file and parameters without the
    question ("questions/credit.yaml::[D1-sonnet-r1]"), so one worker gets a whole session
    (its personas too). None for a node id that is not a question item's."""
    path, sep, rest = nodeid.partition("::")
    name, bracket, params = rest.partition("[")
    if not sep or not bracket or not name or not params.endswith("]"):
        return None
    return f"{path}::[{params}"


def short_ids(qid: str) -> tuple[str, ...]:
    """The ways a model may write a question id: in full ("credit-Q07") or without the pack's
    prefix ("Q07")."""
    head, sep, tail = qid.partition("-")
    return (qid, tail) if sep and tail else (qid,)


def serves(tag: Any, qid: str) -> bool:
    """Whether a tag (a query's question, a closing-block key) names this question: its id, in
    any case, with or without the pack's prefix ("credit-Q07", "q07")."""
    tag = str(tag or "").strip().casefold()
    return bool(tag) and tag in {x.casefold() for x in short_ids(qid)}


def _marker(qid: str) -> re.Pattern[str]:
    # a line that starts, after markdown decoration or a list number, with the id:
    # "**Q07.**", "### credit-Q07", "Q07:", "1. **Q07**", "Question Q07"
    ids = "|".join(re.escape(x) for x in short_ids(qid))
    return re.compile(rf"(?mi)^[ \t>*#_\-]*(?:\d+[.)][ \t]*)?[*_]*(?:question[ \t]+)?"
                      rf"(?<![\w-])(?:{ids})\b(?!-)")


def text_slices(text: str, qids: Sequence[str]) -> dict[str, str]:
    """Each question's part of a session text: from the line that starts with its id to the
    next such line (or the closing JSON block). A question with no such line gets ''."""
    body = prose(text)
    starts: list[tuple[int, str]] = []
    for qid in qids:
        m = _marker(qid).search(body)
        if m:
            starts.append((m.start(), qid))
    starts.sort()
    out = {qid: "" for qid in qids}
    for i, (pos, qid) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(body)
        out[qid] = body[pos:end].strip()
    return out


def block_for(block: Mapping[str, Any] | None, qid: str) -> dict[str, Any] | None:
    """The answer object a session's closing block holds for one question (its key matched
    exactly, else by `serves`), or None when it holds none."""
    if not block:
        return None
    value = block.get(qid)
    if value is None:
        value = next((v for k, v in block.items() if serves(k, qid)), None)
    return dict(value) if isinstance(value, dict) else None


def _slice_text(text: str, block: dict[str, Any] | None) -> str:
    """An item's text as an answer asked apart reads: its prose, then its own closing block,
    so leaks, figures and the judge see the same kind of text in both modes."""
    if block is None:
        return text
    body = json.dumps(block, indent=2, ensure_ascii=False, default=str)
    return f"{text}\n\n```json\n{body}\n```\n".lstrip()


def split(session: Answer, qids: Sequence[str], session_id: str, *,
          asker: str | None = None) -> dict[str, Answer]:
    """One answer per question from a session's answer (see the module's docstring).

    What the session spent (tokens, latency, rounds) and its whole transcript are banked once,
    on `asker`, the item whose call asked the session (the first question by default), so a
    run's totals are the sessions' totals even when it halts right after that item."""
    asker = asker if asker in qids else (qids[0] if qids else None)
    texts = text_slices(session.text, qids)
    errors = dict((session.session or {}).get("errors") or {})
    out: dict[str, Answer] = {}
    for i, qid in enumerate(qids):
        block = block_for(session.block, qid)
        spent = qid == asker
        answer = Answer(
            text=_slice_text(texts[qid], block), block=block, status=session.status,
            error=session.error,
            queries=[q for q in session.queries if serves(q.question, qid)],
            tool_calls=[c for c in session.tool_calls
                        if serves((c.get("input") or {}).get("question"), qid)],
            rounds=session.rounds if spent else 0,
            tokens={k: v if spent else 0 for k, v in session.tokens.items()},
            latency_s=session.latency_s if spent else 0.0)
        if qid in errors:  # a reference agent's own failure on this question
            answer.status, answer.error = "error", errors[qid]
        elif session.status == "answered" and block is None:
            answer.status = "skipped"
            answer.error = (f"the together session gave no answer object for {qid}"
                            if session.block is not None
                            else "the together session ended without its closing JSON block")
        answer.session = {"id": session_id, "mode": "together", "index": i, "size": len(qids),
                          "questions": list(qids), "asked_by": asker, "tokens":
                          dict(session.tokens), "latency_s": session.latency_s,
                          "rounds": session.rounds}
        if spent:
            answer.session["transcript"] = {
                "text": session.text, "tool_calls": list(session.tool_calls),
                "untagged_queries": [q.to_dict() for q in session.queries
                                     if not any(serves(q.question, x) for x in qids)]}
        out[qid] = answer
    return out


def combine(answers: Sequence[tuple[str, Answer]]) -> Answer:
    """One session answer from per-question answers: each text under its id, one closing block
    keyed by id, every query tagged with its question, tokens and latency summed, and each
    question the agent failed on kept with its error (`session["errors"]`) for `split`."""
    parts: list[str] = []
    block: dict[str, Any] = {}
    errors: dict[str, str] = {}
    out = Answer(tokens={}, rounds=0)
    for qid, a in answers:
        parts.append(f"**{qid}.** {prose(a.text).strip()}")
        if a.block is not None:
            block[qid] = a.block
        for q in a.queries:
            q.question = qid
            out.queries.append(q)
            if not a.tool_calls:  # an agent that ran its queries without calling a tool
                out.tool_calls.append({"name": "run_query",
                                       "input": {"query": q.statement, "question": qid},
                                       "output": q.preview()[:4000]})
        for call in a.tool_calls:
            out.tool_calls.append({**call, "input": {**(call.get("input") or {}),
                                                     "question": qid}})
        for k, v in a.tokens.items():
            out.tokens[k] = out.tokens.get(k, 0) + v
        out.latency_s = round(out.latency_s + a.latency_s, 4)
        out.rounds += a.rounds
        if a.status == "timeout":
            out.status, out.error = "timeout", a.error
        elif a.status == "error":
            errors[qid] = a.error or "the agent failed on this question"
    out.session = {"errors": errors} if errors else None
    out.text = "\n\n".join(parts) + "\n\n```json\n" + json.dumps(
        block, indent=2, ensure_ascii=False, default=str) + "\n```\n"
    out.block = extract_block(out.text)
    return out
