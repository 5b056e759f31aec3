"""What each shipped pack declares to the pack contract (tests/packs/test_pack_contract.py) in code,
because its pack.yaml has no field for it yet: the facts its definitions derive, read twice (from
the executed tables and from the graph after the SHACL rules), and how often its generator plants
each trap in base's raw tables. Also the check-digit rules of the identifier schemes the packs
use (pack.yaml names no scheme for a column). benchmarks/build_scale.py reads the facts too."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, NamedTuple

Tables = dict[str, list[dict[str, Any]]]
Facts = dict[str, set]


# --- identifier schemes ---------------------------------------------------------------------

def lei_ok(lei: str) -> bool:
    """ISO 17442: the LEI read as base-36 digits is 1 modulo 97."""
    return int("".join(str(int(ch, 36)) for ch in lei)) % 97 == 1


def isin_ok(isin: str) -> bool:
    """ISO 6166: Luhn over the ISIN's base-36 digits."""
    digits = "".join(str(int(ch, 36)) for ch in isin)
    total = 0
    for i, d in enumerate(reversed(digits)):
        n = int(d) * (2 if i % 2 else 1)
        total += n // 10 + n % 10
    return total % 10 == 0


def orcid_ok(orcid: str) -> bool:
    """ISO 7064 11,2 over the ORCID iD's first 15 digits; 10 is written X."""
    digits = orcid.replace("-", "")
    total = 0
    for ch in digits[:15]:
        total = (total + int(ch)) * 2
    check = (12 - total % 11) % 11
    return digits[15] == ("X" if check == 10 else str(check))


CHECK_DIGITS: dict[str, Callable[[str], bool]] = {"LEI": lei_ok, "ISIN": isin_ok,
                                                  "ORCID": orcid_ok}


class DerivedFacts(NamedTuple):
    """The facts a pack's definitions derive: from its executed tables (code upstream, R10/D3)
    and from its graph after the SHACL rules (D6), held by the rdflib store `store`."""

    from_tables: Callable[[Tables], Facts]
    from_graph: Callable[[Any], Facts]
    store: str


# --- credit ---------------------------------------------------------------------------------

CR = "https://kgbench.example/credit/def#"


def credit_facts_from_tables(ex: Tables) -> Facts:
    return {
        "entities": {r["lei"] for r in ex["issuers"]},
        "records": {(r["issuer_id"], r["lei"]) for r in ex["issuer_records"]},
        "ancestors": {(r["lei"], r["ancestor_lei"]) for r in ex["control_chains"]},
        "controlled_by": {(r["lei"], r["ancestor_lei"]) for r in ex["control_chains"]
                          if r["depth"] == 1},
        "ultimate": {(r["lei"], r["ultimate_parent_lei"]) for r in ex["groups"]},
        "ceilings": {(r["country_code"], r["ceiling"]) for r in ex["countries"]},
        "periods": {(r["entity_type"], r["entity_id"], str(r["valid_from"]),
                     str(r["valid_to"]) if r["valid_to"] else None, r["rating_rank"],
                     r["investment_grade"], r["effective_rating"]) for r in ex["rating_periods"]},
    }


def credit_facts_from_graph(graph: Any) -> Facts:
    def rows(query: str) -> set:
        return {tuple(None if v is None else v.toPython() if hasattr(v, "toPython") else str(v)
                      for v in row) for row in graph.query(f"PREFIX cr: <{CR}> {query}")}

    def pairs(prop: str) -> set:
        return rows(f"SELECT ?a ?b WHERE {{ ?x cr:{prop} ?y . ?x cr:lei ?a . ?y cr:lei ?b . "
                    f"?x a cr:LegalEntity . ?y a cr:LegalEntity }}")

    periods = rows("""SELECT ?type ?id ?from ?to ?rank ?ig ?eff WHERE {
        ?a cr:periodOf ?x ; cr:validFrom ?from ; cr:entityType ?type .
        OPTIONAL { ?a cr:validTo ?to } OPTIONAL { ?a cr:ratingRank ?rank }
        OPTIONAL { ?a cr:investmentGrade ?ig } OPTIONAL { ?a cr:effectiveRating ?eff }
        { ?x a cr:LegalEntity ; cr:lei ?id } UNION { ?x cr:isin ?id } }""")
    return {
        "entities": {r[0] for r in rows("SELECT ?l WHERE { ?e a cr:LegalEntity ; cr:lei ?l }")},
        "records": rows("SELECT ?id ?l WHERE { ?r cr:entity ?e ; cr:issuerId ?id . ?e cr:lei ?l }"),
        "ancestors": pairs("ancestor"),
        "controlled_by": pairs("controlledBy"),
        "ultimate": pairs("ultimateParent"),
        "ceilings": rows("SELECT ?c ?ceiling WHERE { ?x cr:countryCode ?c ; cr:ceiling ?ceiling }"),
        "periods": {(t, i, str(f), str(to) if to else None, rank, ig, eff)
                    for t, i, f, to, rank, ig, eff in periods},
    }


def credit_planted(t: Tables) -> dict[str, tuple[int, int]]:
    """Each trap credit's generator plants: (how often base holds it, the least it must)."""
    leis = Counter(r["lei"] for r in t["issuers"])
    ratings = {r["rating"] for r in t["rating_actions"] if r["rating"]}
    names = {r["legal_name"] for r in t["issuers"]}
    return {
        "identity: LEIs with several records": (sum(1 for n in leis.values() if n > 1), 3),
        "test records": (sum(r["source_system"] == "sandbox" for r in t["issuers"]), 3),
        "withdrawals": (sum(r["action_type"] == "withdraw" for r in t["rating_actions"]), 2),
        "exactly-50% links": (sum(float(r["share"]) == 50 for r in t["ownership"]), 2),
        "minority links": (sum(float(r["share"]) <= 50 for r in t["ownership"]), 3),
        "scale: a rating just below the line (BB+ or BB)": (len({"BB+", "BB"} & ratings), 1),
        "scale: a rating in the A range": (sum(r.startswith("A") for r in ratings), 1),
        "one issuer under two spellings (Norvik)": (
            len({"Norvik Holdings plc", "NORVIK HOLDINGS PLC."} & names), 2),
    }


# --- research -------------------------------------------------------------------------------

RS = "https://kgbench.example/research/def#"


def research_facts_from_tables(ex: Tables) -> Facts:
    return {
        "persons": {(r["person_id"], r["orcid"]) for r in ex["persons"]},
        "records": {(r["author_id"], r["person_id"]) for r in ex["author_records"]},
        "versions": {(r["record_id"], r["work_id"]) for r in ex["work_records"]},
        "works": {r["work_id"] for r in ex["works"]},
        "counted": {r["work_id"] for r in ex["works"] if r["counted"]},
        "ancestors": {(r["institution_id"], r["ancestor_id"]) for r in ex["institution_ancestors"]
                      if r["depth"] > 0},
        "work_persons": {(r["work_id"], r["person_id"], round(r["share"], 6))
                         for r in ex["work_persons"]},
        "credited": {(r["work_id"], r["person_id"], r["institution_id"], round(r["credit"], 6))
                     for r in ex["credited_authorships"]},
        "counting_citations": {(r["citing_work_id"], r["cited_work_id"])
                               for r in ex["counting_citations"]},
    }


def research_facts_from_graph(graph: Any) -> Facts:
    def rows(query: str) -> set:
        return {tuple(None if v is None else v.toPython() for v in row)
                for row in graph.query(f"PREFIX rs: <{RS}> {query}")}

    shares = rows("""SELECT ?w ?p ?n WHERE {
        ?work rs:byPerson ?person ; rs:personCount ?n ; rs:workId ?w . ?person rs:personId ?p }""")
    credited = rows("""SELECT ?w ?p ?i ?credit WHERE {
        ?c a rs:CreditedAuthorship ; rs:credit ?credit ; rs:creditWork/rs:workId ?w ;
           rs:creditPerson/rs:personId ?p ; rs:creditInstitution/rs:institutionId ?i }""")
    return {
        "persons": rows("SELECT ?id ?o WHERE { ?p a rs:Person ; rs:personId ?id "
                        "OPTIONAL { ?p rs:orcid ?o } }"),
        "records": rows("SELECT ?a ?p WHERE { ?r rs:person ?x ; rs:authorId ?a . "
                        "?x rs:personId ?p }"),
        "versions": rows("SELECT ?r ?w WHERE { ?x rs:versionOf ?y . ?x rs:workId ?r . "
                         "?y rs:workId ?w }"),
        "works": {r[0] for r in rows("SELECT ?w WHERE { ?x a rs:MergedWork ; rs:workId ?w }")},
        "counted": {r[0] for r in rows("SELECT ?w WHERE { ?x a rs:CountedWork ; rs:workId ?w }")},
        "ancestors": rows("SELECT ?i ?a WHERE { ?x rs:ancestor ?y . ?x rs:institutionId ?i . "
                          "?y rs:institutionId ?a }"),
        "work_persons": {(w, p, round(1 / n, 6)) for w, p, n in shares},
        "credited": {(w, p, i, round(float(c), 6)) for w, p, i, c in credited},
        "counting_citations": rows("SELECT ?a ?b WHERE { ?x rs:countedCitation ?y . "
                                   "?x rs:workId ?a . ?y rs:workId ?b }"),
    }


def research_planted(t: Tables) -> dict[str, tuple[int, int]]:
    """Each trap research's generator plants: (how often base holds it, the least it must)."""
    authors = {r["author_id"]: r for r in t["authors"]}
    person = {a: r["orcid"] or a for a, r in authors.items()}
    # who is who: ORCIDs on several records; names shared by several persons
    orcids = Counter(r["orcid"] for r in t["authors"] if r["orcid"])
    names: dict[str, set[str]] = defaultdict(set)
    for a, r in authors.items():
        names[r["display_name"]].add(person[a])
    # hierarchies
    parent = {r["institution_id"]: r["parent_id"] for r in t["institutions"]}

    def depth(i: str) -> int:
        return 1 + (depth(parent[i]) if parent[i] else 0)

    depths = Counter(depth(i) for i in parent)
    # counting methods: persons with several institutions on one work
    per = Counter((r["work_id"], r["author_id"]) for r in t["authorships"])
    # versions, retractions, datasets, standalone preprints
    works = {r["work_id"]: r for r in t["works"]}
    # self-citations, one of them across two records of one person
    persons: dict[str, set[str]] = defaultdict(set)
    records: dict[str, set[str]] = defaultdict(set)
    for r in t["authorships"]:
        persons[r["work_id"]].add(person[r["author_id"]])
        records[r["work_id"]].add(r["author_id"])
    selfs = [c for c in t["citations"]
             if persons[c["citing_work_id"]] & persons[c["cited_work_id"]]]
    hidden = [c for c in selfs if not records[c["citing_work_id"]] & records[c["cited_work_id"]]]
    return {
        "records sharing an ORCID": (sum(1 for n in orcids.values() if n > 1), 2),
        "one name, several persons": (sum(1 for ps in names.values() if len(ps) > 1), 2),
        "a Mira Castellan record without ORCID": (
            sum(r["orcid"] is None for r in t["authors"] if r["display_name"] == "Mira Castellan"),
            1),
        "hierarchies four levels deep": (depths[4], 2),
        "hierarchies three levels deep or more": (sum(n for d, n in depths.items() if d >= 3), 6),
        "several institutions on one work": (sum(1 for n in per.values() if n > 1), 2),
        "preprints with a published version": (
            sum(1 for r in t["works"] if r["published_version_id"]), 3),
        "standalone preprints": (sum(1 for r in t["works"] if r["work_type"] == "preprint"
                                     and not r["published_version_id"]), 2),
        "retracted works": (sum(1 for r in t["works"] if r["is_retracted"]), 2),
        "datasets": (sum(1 for r in t["works"] if r["work_type"] == "dataset"), 3),
        "citations to preprints of published works": (
            sum(1 for c in t["citations"] if works[c["cited_work_id"]]["published_version_id"]),
            2),
        "self-citations": (len(selfs), 3),
        "self-citations across two records of one person": (len(hidden), 1),
    }


# what each pack's definitions derive, read twice (the pack contract and the build benchmark)
FACTS = {
    "credit": DerivedFacts(credit_facts_from_tables, credit_facts_from_graph, "default"),
    "research": DerivedFacts(research_facts_from_tables, research_facts_from_graph, "Oxigraph"),
}
