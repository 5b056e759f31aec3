"""The credit pack, what is credit's own: the variants have the shape they promise (300 issuers,
chains eight levels deep), and both SPARQL engines agree on every reference query. That every
question checks out (on every variant, at any seed), that the generator is deterministic and
plants every trap, and the data's agreement across CSV, Markdown and RDF are the pack contract's
(tests/packs/test_pack_contract.py)."""

from __future__ import annotations

import pytest

from pytest_kgbench.packs.build import build_variant
from pytest_kgbench.run.validate import check_questions


def test_the_variants_have_the_shape_they_promise(credit_pack, kg_cache) -> None:
    from collections import defaultdict

    large = build_variant(credit_pack, "large", kg_cache)
    assert len({r["lei"] for r in large.tables["issuers"]
                if r["source_system"] != "sandbox"}) >= 300
    chains = build_variant(credit_pack, "chains", kg_cache)

    rules = credit_pack.module("rules")
    c = rules.credit(chains.tables)
    depths = [len(c.ancestors(lei)) for lei in c.entities]
    assert sum(d >= 8 for d in depths) >= 10, "many chains at least 8 levels deep"
    # the gold SPARQL unrolls 12 majority links: every chain must be shallower
    assert max(depths) < 12
    shares = defaultdict(list)
    for r in chains.tables["ownership"]:
        shares[float(r["share"]) > 50].append(r)
    assert len(shares[False]) >= 5, "minority and 50% links mixed in"


@pytest.mark.slow
def test_both_sparql_engines_agree_on_every_reference_query(credit_questions, credit_base,
                                                              credit_checks) -> None:
    """rdflib (the session's checks on base) and Oxigraph give the same fields for every gold
    and trap SPARQL query on base."""
    ox = {c.question: c for c in check_questions(list(credit_questions.questions), credit_base,
                                                 engines={"sparql": "oxigraph"})}
    for qid, c in credit_checks.items():
        assert ox[qid].gold.get("sparql") == c.gold.get("sparql"), qid
        assert ox[qid].trap.get("sparql") == c.trap.get("sparql"), qid
