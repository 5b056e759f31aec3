"""Key functions of the credit questions: each computes a question's answer fields from the raw
tables and the definitions (rules.py), independently of the gold queries.

Signature: `fn(tables, **params) -> {field: value}`; the params come from the question's YAML.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from .rules import RANK, Tables, credit, investment_grade

Fields = dict[str, Any]


def _date(value: Any) -> dt.date:
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def _country(tables: Tables, name: str) -> dict[str, Any]:
    return next(r for r in tables["countries"] if r["name"] == name)


# --- L1 / L2: no definition needed ------------------------------------------------------------

def sovereign_rating(tables: Tables, *, country: str) -> Fields:
    return {"rating": _country(tables, country)["sovereign_rating"]}


def maturity_date(tables: Tables, *, isin: str) -> Fields:
    row = next(r for r in tables["instruments"] if r["isin"] == isin)
    return {"maturity_date": row["maturity_date"]}


def country_count(tables: Tables) -> Fields:
    return {"count": len(tables["countries"])}


def issuer_country(tables: Tables, *, lei: str) -> Fields:
    return {"country": next(r["country_code"] for r in tables["issuers"] if r["lei"] == lei)}


def _issuer_ids_in(tables: Tables, country: str) -> set[str]:
    return {r["issuer_id"] for r in tables["issuers"] if r["country_code"] == country}


def amount_in_country(tables: Tables, *, country: str) -> Fields:
    ids = _issuer_ids_in(tables, country)
    return {"total_mn": sum(r["amount_mn"] for r in tables["instruments"] if r["issuer_id"] in ids)}


def covered_bonds_in_country(tables: Tables, *, country: str) -> Fields:
    ids = _issuer_ids_in(tables, country)
    isins = sorted(r["isin"] for r in tables["instruments"]
                   if r["issuer_id"] in ids and r["instrument_type"] == "covered_bond")
    return {"isins": isins, "count": len(isins)}


def downgrades_in_country(tables: Tables, *, country: str) -> Fields:
    ids = _issuer_ids_in(tables, country)
    n = sum(1 for a in tables["rating_actions"] if a["entity_type"] == "issuer"
            and a["entity_id"] in ids and a["action_type"] == "downgrade")
    return {"count": n}


def top_currency_in_country(tables: Tables, *, country: str) -> Fields:
    ids = _issuer_ids_in(tables, country)
    totals: dict[str, float] = {}
    for r in tables["instruments"]:
        if r["issuer_id"] in ids:
            totals[r["currency"]] = totals.get(r["currency"], 0.0) + r["amount_mn"]
    best = max(sorted(totals), key=lambda c: totals[c])
    return {"currency": best, "total_mn": totals[best]}


def sovereign_of_issuer(tables: Tables, *, name: str) -> Fields:
    code = next(r["country_code"] for r in tables["issuers"] if r["legal_name"] == name)
    return {"rating": next(c["sovereign_rating"] for c in tables["countries"]
                           if c["country_code"] == code)}


# --- L3: the definitions decide ------------------------------------------------------------------

def rating_on(tables: Tables, *, name: str, date: Any) -> Fields:
    c = credit(tables)
    # an entity with no rating on the date (never rated, or withdrawn) is stated as unrated:
    # a key is never null, so "I cannot determine" (null) never matches it
    return {"rating": c.rating_on(c.lei_by_name(name), _date(date)) or "unrated"}


def investment_grade_throughout(tables: Tables, *, start: Any, end: Any) -> Fields:
    """Issuers investment grade on every day of [start, end]."""
    c = credit(tables)
    a, b = _date(start), _date(end)
    out = []
    for lei in c.entities:
        if not investment_grade(c.rating_on(lei, a)):
            continue
        if all(investment_grade(rating) for when, _, rating in c.periods(lei) if a < when <= b):
            out.append(lei)
    return {"issuers": sorted(out), "count": len(out)}


def issuers_in_sector(tables: Tables, *, sector: str) -> Fields:
    c = credit(tables)
    return {"count": sum(1 for e in c.entities.values() if e.sector == sector)}


def amount_in_currency(tables: Tables, *, currency: str) -> Fields:
    c = credit(tables)
    return {"total_mn": sum(r["amount_mn"] for r in c.instruments.values()
                            if r["currency"] == currency)}


def countries_at_or_above(tables: Tables, *, rating: str) -> Fields:
    codes = sorted(r["country_code"] for r in tables["countries"]
                   if RANK[r["sovereign_rating"]] <= RANK[rating])
    return {"countries": codes, "count": len(codes)}


def investment_grade_count(tables: Tables, *, date: Any) -> Fields:
    c = credit(tables)
    d = _date(date)
    return {"count": sum(1 for lei in c.entities if investment_grade(c.rating_on(lei, d)))}


def effective_rating(tables: Tables, *, name: str, date: Any) -> Fields:
    c = credit(tables)
    return {"rating": c.effective_rating_on(c.lei_by_name(name), _date(date))}


def effective_instrument_rating(tables: Tables, *, isin: str, date: Any) -> Fields:
    return {"rating": credit(tables).effective_instrument_rating_on(isin, _date(date))}


def instrument_rating(tables: Tables, *, isin: str, date: Any) -> Fields:
    return {"rating": credit(tables).instrument_rating_on(isin, _date(date))}


def capped_issuers(tables: Tables, *, date: Any) -> Fields:
    c = credit(tables)
    d = _date(date)
    out = sorted(lei for lei in c.entities
                 if c.rating_on(lei, d) is not None
                 and c.effective_rating_on(lei, d) != c.rating_on(lei, d))
    return {"issuers": out, "count": len(out)}


def ultimate_parent(tables: Tables, *, name: str) -> Fields:
    c = credit(tables)
    return {"issuer": c.ultimate_parent(c.lei_by_name(name))}


def group_size(tables: Tables, *, name: str) -> Fields:
    c = credit(tables)
    return {"count": len(c.group(c.lei_by_name(name)))}


def controls(tables: Tables, *, parent: str, child: str) -> Fields:
    c = credit(tables)
    return {"controls": c.controls(c.lei_by_name(parent), c.lei_by_name(child))}


def fallen_angels(tables: Tables, *, start: Any, end: Any) -> Fields:
    out = sorted(credit(tables).fallen_angels(_date(start), _date(end)))
    return {"issuers": out, "count": len(out)}


def negative_outlook_downgraded(tables: Tables, *, date: Any, start: Any, end: Any) -> Fields:
    """Issuers rated with a negative outlook on `date` that were downgraded in [start, end]."""
    c = credit(tables)
    d, a, b = _date(date), _date(start), _date(end)
    out = sorted(lei for lei in c.entities
                 if c.rating_on(lei, d) is not None and c.outlook_on(lei, d) == "negative"
                 and any(kind == "downgrade" and a <= when <= b
                         for when, kind, _, _ in c.issuer_actions.get(lei, [])))
    return {"issuers": out, "count": len(out)}


def record_count(tables: Tables, *, name: str) -> Fields:
    """Issuer records (rows, across source systems) of the issuer one of whose records is named."""
    c = credit(tables)
    return {"count": len(c.entities[c.lei_by_name(name)].records)}


def period_end(tables: Tables, *, name: str, date: Any) -> Fields:
    """The end (exclusive) of the rating period in force on `date`; None if still open."""
    c = credit(tables)
    d = _date(date)
    for start, end, _ in c.periods(c.lei_by_name(name)):
        if start <= d and (end is None or end > d):
            return {"valid_to": end}
    return {"valid_to": None}


# --- issue 34: more L3 questions ------------------------------------------------------------------

def instrument_count(tables: Tables, *, name: str) -> Fields:
    """Instruments of the issuer one of whose records is named, on any of its records."""
    c = credit(tables)
    ids = c.entities[c.lei_by_name(name)].ids
    return {"count": sum(1 for r in c.instruments.values() if r["issuer_id"] in ids)}


def action_count(tables: Tables, *, name: str) -> Fields:
    """Rating actions on the issuer one of whose records is named, on any of its records."""
    c = credit(tables)
    return {"count": len(c.issuer_actions.get(c.lei_by_name(name), []))}


def issuer_count_in_country(tables: Tables, *, country: str) -> Fields:
    c = credit(tables)
    return {"count": sum(1 for e in c.entities.values() if e.country == country)}


def issued_amount_in_country(tables: Tables, *, country: str) -> Fields:
    """Issued amount of the instruments of the issuers domiciled in a country (tests excluded)."""
    c = credit(tables)
    return {"total_mn": sum(r["amount_mn"] for r in c.instruments.values()
                            if c.entities[c.lei_of[r["issuer_id"]]].country == country)}


def covered_bond_count(tables: Tables) -> Fields:
    c = credit(tables)
    return {"count": sum(1 for r in c.instruments.values()
                         if r["instrument_type"] == "covered_bond")}


def downgrades_between(tables: Tables, *, country: str, start: Any, end: Any) -> Fields:
    """Downgrade actions in [start, end] on issuers domiciled in a country."""
    c = credit(tables)
    a, b = _date(start), _date(end)
    return {"count": sum(1 for lei, acts in c.issuer_actions.items()
                         if c.entities[lei].country == country
                         for when, kind, _, _ in acts if kind == "downgrade" and a <= when <= b)}


def best_sovereign(tables: Tables) -> Fields:
    best = min(tables["countries"], key=lambda r: (RANK[r["sovereign_rating"]], r["country_code"]))
    return {"country": best["country_code"]}


def became_fallen_angel(tables: Tables, *, name: str, start: Any, end: Any) -> Fields:
    c = credit(tables)
    return {"fallen_angel": c.lei_by_name(name) in c.fallen_angels(_date(start), _date(end))}


def negative_outlook_on(tables: Tables, *, date: Any) -> Fields:
    """Issuers whose rating on `date` carries a negative outlook."""
    c = credit(tables)
    d = _date(date)
    out = sorted(lei for lei in c.entities
                 if c.rating_on(lei, d) is not None and c.outlook_on(lei, d) == "negative")
    return {"issuers": out, "count": len(out)}


def downgrade_count(tables: Tables, *, name: str, start: Any, end: Any) -> Fields:
    c = credit(tables)
    a, b = _date(start), _date(end)
    return {"count": sum(1 for when, kind, _, _ in c.issuer_actions.get(c.lei_by_name(name), [])
                         if kind == "downgrade" and a <= when <= b)}


def ceiling_uplift(tables: Tables, *, country: str) -> Fields:
    return {"uplift": int(_country(tables, country)["ceiling_uplift"])}


def issuer_sector(tables: Tables, *, lei: str) -> Fields:
    return {"sector": next(r["sector"] for r in tables["issuers"] if r["lei"] == lei)}


def country_ceiling(tables: Tables, *, country: str) -> Fields:
    c = credit(tables)
    return {"rating": c.ceiling(_country(tables, country)["country_code"])}


def investment_grade_on(tables: Tables, *, name: str, date: Any) -> Fields:
    c = credit(tables)
    return {"investment_grade": investment_grade(c.rating_on(c.lei_by_name(name), _date(date)))}
