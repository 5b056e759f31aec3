"""Issue 30, item 16: a pack's namespaces are declared once in its Turtle, every reading of it
(the build's data.ttl, a persona's prompt) spells ids alike, and the build stays byte-stable."""

from __future__ import annotations

import re
from pathlib import Path

import rdflib

from pytest_kgbench.asking.prompts import build_prompt
from pytest_kgbench.core.conditions import BY_ID
from pytest_kgbench.engines.stores import guard_for
from pytest_kgbench.packs.rdf import mapping as rdfmap
from pytest_kgbench.packs.reading import rdf_block, turtle_blocks

PREFIX = re.compile(r"^@prefix ([\w.-]*): <([^>]*)> \.$", re.M)


def _prefixes(text: str) -> dict[str, str]:
    return dict(PREFIX.findall(text))


def test_research_declares_each_namespace_once(research_base) -> None:
    """413 prefixes before, one per authorship (`A2256702338_____:`): now the pack's own, one
    per class namespace of its ids, and xsd."""
    text = research_base.data_ttl.read_text(encoding="utf-8")
    declared = _prefixes(text)
    assert declared == {
        "rs": "https://kgbench.example/research/def#",
        "rsi": "https://kgbench.example/research/id/", "xsd": rdfmap._XSD,
        **{name: f"https://kgbench.example/research/id/{name}/" for name in (
            "author", "authorship", "citation", "email", "institution", "work")}}
    # an id deeper than its class namespace keeps it, its slashes escaped as Turtle allows
    assert re.search(r"^authorship:W\d+\\/A\d+\\/I\d+ a rs:Authorship ;$", text, re.M)
    assert re.search(r"^citation:W\d+\\/W\d+ a rs:Citation ;$", text, re.M)
    # entity ids stay readable prefixed names a model can copy
    assert re.search(r"rs:author author:A\d+ ;", text)
    assert re.search(r"rs:institution institution:I\d+ ;", text)


def test_id_prefixes_bind_class_namespaces_only() -> None:
    mapping = {"prefixes": {"ex": "http://example.org/def#", "exi": "http://example.org/id/"}}
    spaces = {"http://example.org/id/thing/", "http://example.org/id/pair/a1/b2/",
              "http://example.org/id/pair/a1/b3/", "http://example.org/id/9x/",
              "http://elsewhere.org/id/"}
    assert rdfmap.id_prefixes(spaces, mapping, {"ex", "thing"}) == [
        ("n9x", "http://example.org/id/9x/"), ("pair", "http://example.org/id/pair/"),
        ("thing_", "http://example.org/id/thing/")]


def test_a_personas_turtle_is_the_builds_without_its_withheld_predicates(research_base) -> None:
    """The analyst may not read author emails: the prompt's Turtle is data.ttl without them,
    with the same prefixes and the same spelling of every id (it was rdflib's serialisation,
    which re-declared a prefix per authorship), and it parses back to that graph."""
    guard = guard_for(research_base, "analyst")
    withheld = guard.withheld_predicates()
    assert withheld
    (body,) = turtle_blocks(rdf_block(research_base, guard))
    full = research_base.data_ttl.read_text(encoding="utf-8")
    assert set(_prefixes(body).items()) <= set(_prefixes(full).items())
    assert len(_prefixes(body)) <= 9
    shown = rdflib.Graph().parse(data=body, format="turtle")
    graph = rdflib.Graph().parse(data=full, format="turtle")
    assert set(shown) == {t for t in graph if str(t[1]) not in withheld}
    ids = set(re.findall(r"^(authorship:\S+) a ", body, re.M))
    assert ids and ids == set(re.findall(r"^(authorship:\S+) a ", full, re.M))


def test_the_rdf_prompts_shrank_and_read_back(research_base, research_questions) -> None:
    """R2 of research/base was 203,471 characters (4.5× R1's 45,050); the gold agent reads the
    prompt's Turtle back to the same graph."""
    q = next(q for q in research_questions.questions if q.persona == "analyst"
             and "reading" in q.modes)
    r1 = build_prompt(BY_ID["R1"], research_base, q).text
    r2 = build_prompt(BY_ID["R2"], research_base, q).text
    assert len(r2) < 185_000 and len(r2) / len(r1) < 4.2
    assert "_____:" not in r2 and "@prefix A" not in r2


def test_the_build_is_byte_stable(research_pack, credit_pack, research_questions,
                                  credit_questions, tmp_path: Path) -> None:
    """Same pack, same seed, two caches: the same bytes, and the same R2 prompt."""
    from pytest_kgbench.packs.build import build_variant

    for pack, qset in ((research_pack, research_questions), (credit_pack, credit_questions)):
        one = build_variant(pack, "base", tmp_path / "one")
        two = build_variant(pack, "base", tmp_path / "two")
        for name in ("data.ttl", "restricted/data.nt", "derived.nt", "definitions.md"):
            assert (one.dir / name).read_bytes() == (two.dir / name).read_bytes(), name
        q = next(q for q in qset.questions if q.persona == "analyst")
        assert build_prompt(BY_ID["R2"], one, q).text == build_prompt(BY_ID["R2"], two, q).text
