"""The credit definitions applied upstream, in code: the executed tables of R10 and D3.

Test records are dropped, records sharing an LEI become one issuer, each rating action becomes
a rating period (valid_from, valid_to) with its rank, investment-grade flag and effective rating
(ceilings applied), and ownership chains are spelt out: each issuer with its controllers and its
ultimate parent. The SHACL rules of ontology/credit/shapes.ttl derive the same facts in the graph
(D6); a test holds the two to agreement.
"""

from __future__ import annotations

from typing import Any

from .rules import COVERED_BOND_EXTRA, RANK, Event, Tables, cap, credit, investment_grade, notch

Row = dict[str, Any]


def executed_tables(tables: Tables) -> dict[str, list[Row]]:
    """Every executed table from the raw tables."""
    c = credit(tables)
    issuers = []
    records = []
    for lei in sorted(c.entities):
        ent = c.entities[lei]
        core = [r for r in ent.records if r["source_system"] == "core"] or ent.records
        issuers.append({"lei": lei, "legal_name": core[0]["legal_name"],
                        "country_code": ent.country, "sector": ent.sector})
        records += [{"issuer_id": r["issuer_id"], "lei": lei, "legal_name": r["legal_name"],
                     "source_system": r["source_system"]} for r in ent.records]
    countries = [{**row, "ceiling": c.ceiling(row["country_code"])}
                 for row in sorted(tables["countries"], key=lambda r: r["country_code"])]
    instruments = [{"isin": i["isin"], "lei": c.lei_of[i["issuer_id"]],
                    "instrument_type": i["instrument_type"], "currency": i["currency"],
                    "issue_date": i["issue_date"], "maturity_date": i["maturity_date"],
                    "amount_mn": i["amount_mn"]}
                   for i in sorted(c.instruments.values(), key=lambda r: r["isin"])]
    periods = []
    for lei, acts in sorted(c.issuer_actions.items()):
        ceiling = c.ceiling(c.entities[lei].country)
        periods += _periods("issuer", lei, acts, tables, ceiling)
    for isin, acts in sorted(c.instrument_actions.items()):
        inst = c.instruments[isin]
        ceiling = c.ceiling(c.entities[c.lei_of[inst["issuer_id"]]].country)
        if inst["instrument_type"] == "covered_bond":
            ceiling = notch(ceiling, -COVERED_BOND_EXTRA)
        periods += _periods("instrument", isin, acts, tables, ceiling)
    ownership = sorted(({"parent_lei": p, "child_lei": ch, "share": s, "controls": s > 50}
                        for p, ch, s in c.links),
                       key=lambda r: (r["parent_lei"], r["child_lei"], r["share"]))
    chains = [{"lei": lei, "ancestor_lei": anc, "depth": depth}
              for lei in sorted(c.entities)
              for depth, anc in enumerate(c.ancestors(lei), 1)]
    groups = [{"lei": lei, "ultimate_parent_lei": c.ultimate_parent(lei)}
              for lei in sorted(c.entities)]
    contacts = [{"contact_id": r["contact_id"], "lei": c.lei_of[r["issuer_id"]], "name": r["name"],
                 "role": r["role"], "email": r["email"], "phone": r["phone"]}
                for r in tables["contacts"] if r["issuer_id"] in c.lei_of]
    return {"issuers": issuers, "issuer_records": records, "countries": countries,
            "instruments": instruments, "rating_periods": periods, "ownership": ownership,
            "control_chains": chains, "groups": groups, "contacts": contacts}


def _periods(kind: str, entity: str, acts: list[Event], tables: Tables,
             ceiling: str) -> list[Row]:
    """One row per action: the period it starts, and what the definitions say of its rating."""
    rows = []
    for i, (when, action, rating, outlook) in enumerate(acts):
        rows.append({
            "entity_type": kind, "entity_id": entity, "valid_from": when,
            "valid_to": acts[i + 1][0] if i + 1 < len(acts) else None,
            "action_type": action, "rating": rating, "outlook": outlook,
            "rating_rank": RANK[rating] + 1 if rating else None,
            "investment_grade": investment_grade(rating) if rating else None,
            "effective_rating": cap(rating, ceiling),
        })
    return rows
