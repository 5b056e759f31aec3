"""Key functions of the research questions: each computes a question's answer fields from the raw
tables and the definitions (rules.py), independently of the gold queries.

Signature: `fn(tables, **params) -> {field: value}`; the params come from the question's YAML.
`_records`, where given, names the records a key depends on (the citations metric).
Persons are named by ORCID, or by author_id for a record without one (the pack's `person`
entity); works by work_id; institutions by institution_id.
"""

from __future__ import annotations

from typing import Any

from .rules import Tables, research

Fields = dict[str, Any]


def _work(tables: Tables, work_id: str) -> dict[str, Any]:
    return next(r for r in tables["works"] if r["work_id"] == work_id)


def _inst(tables: Tables, name: str) -> dict[str, Any]:
    return next(r for r in tables["institutions"] if r["display_name"] == name)


# --- L1 / L2: no definition needed ------------------------------------------------------------

def work_year(tables: Tables, *, work_id: str) -> Fields:
    return {"year": _work(tables, work_id)["publication_year"]}


def work_doi(tables: Tables, *, work_id: str) -> Fields:
    return {"doi": _work(tables, work_id)["doi"]}


def orcid_of(tables: Tables, *, author_id: str) -> Fields:
    return {"orcid": next(r["orcid"] for r in tables["authors"] if r["author_id"] == author_id)}


def institution_country(tables: Tables, *, name: str) -> Fields:
    return {"country": _inst(tables, name)["country_code"]}


def institutions_of_type(tables: Tables, *, institution_type: str) -> Fields:
    return {"count": sum(1 for r in tables["institutions"]
                         if r["institution_type"] == institution_type)}


def parent_of(tables: Tables, *, name: str) -> Fields:
    return {"institution": _inst(tables, name)["parent_id"]}


def countries_of_work(tables: Tables, *, work_id: str) -> Fields:
    insts = {r["institution_id"] for r in tables["authorships"] if r["work_id"] == work_id}
    codes = sorted({r["country_code"] for r in tables["institutions"]
                    if r["institution_id"] in insts})
    return {"countries": codes, "count": len(codes)}


def corresponding_author(tables: Tables, *, work_id: str) -> Fields:
    """The author record marked corresponding on the work record: its author_id (the record,
    not the person: another record sharing its ORCID is another answer)."""
    return {"author": next(r["author_id"] for r in tables["authorships"]
                           if r["work_id"] == work_id and r["is_corresponding"])}


def citation_rows_to_year(tables: Tables, *, year: int) -> Fields:
    ids = {r["work_id"] for r in tables["works"] if r["publication_year"] == year}
    return {"count": sum(1 for r in tables["citations"] if r["cited_work_id"] in ids)}


def authorship_rows_in_country(tables: Tables, *, country: str) -> Fields:
    insts = {r["institution_id"] for r in tables["institutions"] if r["country_code"] == country}
    return {"count": sum(1 for r in tables["authorships"] if r["institution_id"] in insts)}


def work_title(tables: Tables, *, work_id: str) -> Fields:
    return {"title": _work(tables, work_id)["title"]}


def record_type(tables: Tables, *, work_id: str) -> Fields:
    """The work_type of one work record, as the record has it."""
    return {"type": _work(tables, work_id)["work_type"]}


def record_retracted(tables: Tables, *, work_id: str) -> Fields:
    return {"retracted": bool(_work(tables, work_id)["is_retracted"])}


def author_name(tables: Tables, *, author_id: str) -> Fields:
    return {"name": next(r["display_name"] for r in tables["authors"]
                         if r["author_id"] == author_id)}


def institution_type(tables: Tables, *, name: str) -> Fields:
    return {"type": _inst(tables, name)["institution_type"]}


def authorship_rows(tables: Tables, *, work_id: str) -> Fields:
    return {"count": sum(1 for r in tables["authorships"] if r["work_id"] == work_id)}


def citing_rows(tables: Tables, *, work_id: str) -> Fields:
    """Citation rows whose citing record is `work_id`."""
    return {"count": sum(1 for r in tables["citations"] if r["citing_work_id"] == work_id)}


def first_author(tables: Tables, *, work_id: str) -> Fields:
    return {"author": next(r["author_id"] for r in tables["authorships"]
                           if r["work_id"] == work_id and r["author_position"] == "first")}


def children_of(tables: Tables, *, name: str) -> Fields:
    """Institution records whose parent_id is the named institution."""
    parent = _inst(tables, name)["institution_id"]
    return {"count": sum(1 for r in tables["institutions"] if r["parent_id"] == parent)}


def records_of_type_in_country(tables: Tables, *, work_type: str, country: str) -> Fields:
    """Work records of one type with an authorship row listing an institution of a country."""
    insts = {r["institution_id"] for r in tables["institutions"] if r["country_code"] == country}
    kinds = {r["work_id"] for r in tables["works"] if r["work_type"] == work_type}
    return {"count": len({r["work_id"] for r in tables["authorships"]
                          if r["work_id"] in kinds and r["institution_id"] in insts})}


# --- L3: the definitions decide ------------------------------------------------------------------

def persons_named(tables: Tables, *, name: str) -> Fields:
    r = research(tables)
    return {"count": len({r.person_of[a["author_id"]] for a in tables["authors"]
                          if a["display_name"] == name})}


def persons_total(tables: Tables) -> Fields:
    return {"count": len(set(research(tables).person_of.values()))}


def persons_on_work(tables: Tables, *, work_id: str) -> Fields:
    return {"count": len(research(tables).persons(work_id)), "_records": [work_id]}


def person_counted_works(tables: Tables, *, person: str, year: int | None = None) -> Fields:
    r = research(tables)
    works = sorted(r.counted_works(person=r.person(person), year=year))
    return {"works": works, "count": len(works)}


def person_counted_count(tables: Tables, *, person: str, year: int | None = None) -> Fields:
    r = research(tables)
    works = sorted(r.counted_works(person=r.person(person), year=year))
    return {"count": len(works), "_records": works}


def institution_counted_works(tables: Tables, *, name: str, year: int | None = None) -> Fields:
    r = research(tables)
    works = sorted(r.counted_works(inst=r.by_name(name), year=year))
    return {"works": works, "count": len(works)}


def _output(r: Any, year: int | None, method: str, **whose: Any) -> Fields:
    """Counted output of one institution or person, full or fractional, with its works."""
    value = r.output(year=year, fractional=method == "fractional", **whose)
    return {"output": round(value, 6) if method == "fractional" else int(value),
            "_records": sorted(r.counted_works(year=year, **whose))}


def institution_output(tables: Tables, *, name: str, year: int | None = None,
                       method: str = "full") -> Fields:
    r = research(tables)
    return _output(r, year, method, inst=r.by_name(name))


def person_output(tables: Tables, *, person: str, year: int | None = None,
                  method: str = "full") -> Fields:
    r = research(tables)
    return _output(r, year, method, person=r.person(person))


def institution_share(tables: Tables, *, work_id: str, name: str) -> Fields:
    r = research(tables)
    return {"credit": round(r.institution_share(work_id, r.by_name(name)), 6),
            "_records": [work_id]}


def credited_institutions(tables: Tables, *, work_id: str) -> Fields:
    insts = sorted(research(tables).credited(work_id))
    return {"institutions": insts, "count": len(insts)}


def counted_total(tables: Tables, *, year: int | None = None) -> Fields:
    works = sorted(research(tables).counted_works(year=year))
    return {"count": len(works), "_records": works}


def versions_of(tables: Tables, *, preprint: str, published: str) -> Fields:
    """The work two records belong to, and how many works they make."""
    r = research(tables)
    return {"work": r.work_of[published],
            "count": len({r.work_of[preprint], r.work_of[published]})}


def work_year_counted(tables: Tables, *, work_id: str) -> Fields:
    r = research(tables)
    return {"year": r.year(work_id), "_records": [r.work_of[work_id]]}


def citations_to(tables: Tables, *, work_id: str) -> Fields:
    citing = sorted(research(tables).citing(work_id))
    return {"citations": len(citing), "_records": citing}


def citation_counts(tables: Tables, *, citing: str, cited: str) -> Fields:
    """Whether one citation counts, and the persons the two works share (if any)."""
    r = research(tables)
    a, b = r.work_of[citing], r.work_of[cited]
    shared = sorted(r.shared_persons(a, b))
    return {"counts": (a, b) in r.citations(), "shared_person": shared[0] if shared else None,
            "_records": [citing, cited]}


def persons_with_output(tables: Tables) -> Fields:
    """Persons credited with at least one counted work."""
    r = research(tables)
    return {"count": len(set().union(*(r.persons(w) for w in r.counted)))}


def shares_person(tables: Tables, *, a: str, b: str) -> Fields:
    """Whether the works of two records have a person among their authors in common."""
    r = research(tables)
    return {"shared": bool(r.shared_persons(a, b)), "_records": [a, b]}


def person_share(tables: Tables, *, work_id: str, person: str) -> Fields:
    r = research(tables)
    return {"share": round(r.person_share(r.work_of[work_id], r.person(person)), 6),
            "_records": [work_id]}


def institution_credited(tables: Tables, *, work_id: str, name: str) -> Fields:
    """Institution credit: whether the work is credited to the named institution."""
    r = research(tables)
    return {"credited": r.by_name(name) in r.credited(work_id), "_records": [work_id]}


def institution_full_credit(tables: Tables, *, work_id: str, name: str) -> Fields:
    """Full counting: 1 for a credited institution, whatever the work's co-authors."""
    r = research(tables)
    return {"credit": 1 if r.by_name(name) in r.credited(work_id) else 0,
            "_records": [work_id]}


def record_counted(tables: Tables, *, work_id: str) -> Fields:
    """Whether the work a record belongs to is counted output."""
    r = research(tables)
    return {"counted": r.work_of[work_id] in r.counted, "_records": [work_id]}


def work_type_counted(tables: Tables, *, work_id: str) -> Fields:
    """The type of the work a record belongs to: its published version's."""
    r = research(tables)
    return {"type": r.records[r.work_of[work_id]]["work_type"], "_records": [work_id]}
