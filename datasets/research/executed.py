"""The research definitions applied upstream, in code: the executed tables of R10 and D3.

Author records become persons (one per ORCID; a record without one is a person of its own), work
records become works (a preprint with a published version is that version's work; one row per
work, with its counted flag), each institution is listed with every institution above it, each
work's credit is spelt out per person (full and fractional) and per credited institution (every
listed institution and every one above it), and the citations that count are listed between
works. The raw rows stay readable beside them (authorships, citation records, work records), each
with the person and the work it belongs to. The SHACL rules of ontology/research/shapes.ttl
derive the same facts in the graph (D6); a test holds the two to agreement.
"""

from __future__ import annotations

from typing import Any

from .rules import Tables, research

Row = dict[str, Any]


def executed_tables(tables: Tables) -> dict[str, list[Row]]:
    """Every executed table from the raw tables."""
    r = research(tables)
    persons = sorted({(r.person_of[a["author_id"]], a["orcid"]) for a in tables["authors"]})
    author_records = [{"author_id": a["author_id"], "person_id": r.person_of[a["author_id"]],
                       "display_name": a["display_name"], "orcid": a["orcid"]}
                      for a in sorted(tables["authors"], key=lambda a: a["author_id"])]
    works = []
    for wid in sorted(r.works):
        row = r.records[wid]
        works.append({"work_id": wid, "doi": row["doi"], "title": row["title"],
                      "publication_year": row["publication_year"], "work_type": row["work_type"],
                      "is_retracted": row["is_retracted"], "counted": wid in r.counted})
    work_records = [{"record_id": row["work_id"], "work_id": r.work_of[row["work_id"]],
                     "doi": row["doi"], "title": row["title"],
                     "publication_year": row["publication_year"], "work_type": row["work_type"],
                     "is_retracted": row["is_retracted"]}
                    for row in sorted(tables["works"], key=lambda w: w["work_id"])]
    institutions = sorted(tables["institutions"], key=lambda i: i["institution_id"])
    ancestors = [{"institution_id": i["institution_id"], "ancestor_id": anc, "depth": depth}
                 for i in institutions
                 for depth, anc in enumerate(r.ancestors(i["institution_id"]))]
    authorships = [{"record_id": s["work_id"], "work_id": r.work_of[s["work_id"]],
                    "author_id": s["author_id"], "person_id": r.person_of[s["author_id"]],
                    "author_position": s["author_position"], "institution_id": s["institution_id"],
                    "is_corresponding": s["is_corresponding"]} for s in tables["authorships"]]
    work_persons: list[Row] = []
    credited: list[Row] = []
    for wid in sorted(r.works):
        affil = r.affil.get(wid, {})
        for person in sorted(affil):
            work_persons.append({"work_id": wid, "person_id": person,
                                 "share": round(r.person_share(wid, person), 6)})
            listed = affil[person]
            reached: dict[str, int] = {}
            for inst in listed:
                for anc in r.ancestors(inst):
                    reached[anc] = reached.get(anc, 0) + 1
            for inst in sorted(reached):
                credited.append({"work_id": wid, "person_id": person, "institution_id": inst,
                                 "credit": round(reached[inst] / len(listed) / len(affil), 6)})
    citation_records = [{"citing_record_id": c["citing_work_id"],
                         "cited_record_id": c["cited_work_id"],
                         "citing_work_id": r.work_of[c["citing_work_id"]],
                         "cited_work_id": r.work_of[c["cited_work_id"]]}
                        for c in tables["citations"]]
    counting = [{"citing_work_id": a, "cited_work_id": b} for a, b in sorted(r.citations())]
    emails = [{"author_id": e["author_id"], "person_id": r.person_of[e["author_id"]],
               "email": e["email"]} for e in tables["author_emails"]]
    return {
        "persons": [{"person_id": p, "orcid": o} for p, o in persons],
        "author_records": author_records, "works": works, "work_records": work_records,
        "institutions": institutions, "institution_ancestors": ancestors,
        "authorships": authorships, "work_persons": work_persons,
        "credited_authorships": credited, "citation_records": citation_records,
        "counting_citations": counting, "author_emails": emails,
    }
