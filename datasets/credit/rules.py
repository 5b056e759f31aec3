"""The credit definitions (ontology/credit/definitions.ttl), applied in code.

Key functions and (later) the executed tables are computed with these, never with the gold
queries, so a key that agrees with gold SQL and gold SPARQL is three independent readings
agreeing. Every function takes the raw tables (typed rows, as read from the built CSV files).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pytest_kgbench.packs import once_per_tables

SCALE = ("AAA", "AA+", "AA", "AA-", "A+", "A", "A-", "BBB+", "BBB", "BBB-", "BB+", "BB", "BB-",
         "B+", "B", "B-", "CCC+", "CCC", "CCC-", "CC", "C", "D")
RANK = {r: i for i, r in enumerate(SCALE)}  # 0 is best
INVESTMENT_GRADE_FLOOR = RANK["BBB-"]
SANDBOX = "sandbox"
CONTROL_THRESHOLD = 50.0   # control is strictly more than this share
COVERED_BOND_EXTRA = 2     # notches a covered bond may exceed the ceiling by

Tables = dict[str, list[dict[str, Any]]]
Event = tuple[dt.date, str, "str | None", "str | None"]  # date, action type, rating, outlook


def notch(rating: str, notches: int) -> str:
    """`rating` moved down by `notches` (up when negative), clamped to the scale."""
    return SCALE[min(max(RANK[rating] + notches, 0), len(SCALE) - 1)]


def investment_grade(rating: str | None) -> bool:
    return rating is not None and RANK[rating] <= INVESTMENT_GRADE_FLOOR


def cap(rating: str | None, ceiling: str) -> str | None:
    """A rating capped at a ceiling (the worse of the two)."""
    if rating is None:
        return None
    return rating if RANK[rating] >= RANK[ceiling] else ceiling


@dataclass
class Entity:
    """One issuer: every non-test record sharing an LEI."""

    lei: str
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ids(self) -> set[str]:
        return {r["issuer_id"] for r in self.records}

    @property
    def country(self) -> str:
        return self.records[0]["country_code"]

    @property
    def sector(self) -> str:
        return self.records[0]["sector"]

    @property
    def names(self) -> set[str]:
        return {r["legal_name"] for r in self.records}


class Credit:
    """The definitions over one dataset, computed once (use `credit(tables)`)."""

    def __init__(self, tables: Tables) -> None:
        self.t = tables
        self.test_ids = {r["issuer_id"] for r in tables["issuers"]
                         if r["source_system"] == SANDBOX}
        self.entities: dict[str, Entity] = {}
        self.lei_of: dict[str, str] = {}
        for row in tables["issuers"]:
            if row["issuer_id"] in self.test_ids:
                continue
            self.entities.setdefault(row["lei"], Entity(row["lei"])).records.append(row)
            self.lei_of[row["issuer_id"]] = row["lei"]
        self.countries = {r["country_code"]: r for r in tables["countries"]}
        self.instruments = {r["isin"]: r for r in tables["instruments"]
                            if r["issuer_id"] not in self.test_ids}
        issuer_actions: dict[str, list[Event]] = defaultdict(list)
        instrument_actions: dict[str, list[Event]] = defaultdict(list)
        for a in tables["rating_actions"]:
            event = (a["action_date"], a["action_type"], a["rating"], a["outlook"])
            if a["entity_type"] == "issuer" and a["entity_id"] in self.lei_of:
                issuer_actions[self.lei_of[a["entity_id"]]].append(event)
            elif a["entity_type"] == "instrument" and a["entity_id"] in self.instruments:
                instrument_actions[a["entity_id"]].append(event)
        self.issuer_actions = {k: sorted(v) for k, v in issuer_actions.items()}
        self.instrument_actions = {k: sorted(v) for k, v in instrument_actions.items()}
        holder: dict[str, tuple[str, float]] = {}
        self.links: list[tuple[str, str, float]] = []
        for link in tables["ownership"]:
            parent = self.lei_of.get(link["parent_id"])
            child = self.lei_of.get(link["child_id"])
            if parent is None or child is None:
                continue  # a link touching a test record is excluded with it
            self.links.append((parent, child, float(link["share"])))
            if float(link["share"]) > CONTROL_THRESHOLD:
                holder[child] = (parent, float(link["share"]))
        self.majority_holder = {child: parent for child, (parent, _) in holder.items()}

    # --- identity ---------------------------------------------------------------------------------

    def lei_by_name(self, name: str) -> str:
        """The LEI of the issuer one of whose records bears `name` (exactly)."""
        for lei, ent in self.entities.items():
            if name in ent.names:
                return lei
        raise KeyError(name)

    # --- time -----------------------------------------------------------------------------------

    @staticmethod
    def _on(actions: list[Event], date: dt.date) -> str | None:
        current: str | None = None
        for when, kind, rating, _ in actions:
            if when > date:
                break
            current = None if kind == "withdraw" else rating
        return current

    def rating_on(self, lei: str, date: dt.date) -> str | None:
        """The rating of the latest action on or before `date`; None if unrated then."""
        return self._on(self.issuer_actions.get(lei, []), date)

    def outlook_on(self, lei: str, date: dt.date) -> str | None:
        """The outlook stated by the latest action on or before `date` (None if withdrawn)."""
        current: str | None = None
        for when, kind, _, outlook in self.issuer_actions.get(lei, []):
            if when > date:
                break
            current = None if kind == "withdraw" else outlook
        return current

    def periods(self, lei: str) -> list[tuple[dt.date, dt.date | None, str | None]]:
        """(valid_from, valid_to exclusive or None, rating) of each action of an issuer."""
        acts = self.issuer_actions.get(lei, [])
        out = []
        for i, (when, kind, rating, _) in enumerate(acts):
            until = acts[i + 1][0] if i + 1 < len(acts) else None
            out.append((when, until, None if kind == "withdraw" else rating))
        return out

    def instrument_rating_on(self, isin: str, date: dt.date) -> str | None:
        """Own rating if it has one on that date, else derived from its issuer's rating."""
        own = self._on(self.instrument_actions.get(isin, []), date)
        if own is not None:
            return own
        inst = self.instruments[isin]
        issuer = self.rating_on(self.lei_of[inst["issuer_id"]], date)
        if issuer is None:
            return None
        if inst["instrument_type"] == "subordinated":
            return notch(issuer, 1)
        if inst["instrument_type"] == "senior_unsecured":
            return issuer
        return None

    # --- ceilings ---------------------------------------------------------------------------------

    def ceiling(self, country_code: str) -> str:
        row = self.countries[country_code]
        return notch(row["sovereign_rating"], -int(row["ceiling_uplift"]))

    def effective_rating_on(self, lei: str, date: dt.date) -> str | None:
        return cap(self.rating_on(lei, date), self.ceiling(self.entities[lei].country))

    def effective_instrument_rating_on(self, isin: str, date: dt.date) -> str | None:
        rating = self.instrument_rating_on(isin, date)
        inst = self.instruments[isin]
        ceiling = self.ceiling(self.entities[self.lei_of[inst["issuer_id"]]].country)
        if inst["instrument_type"] == "covered_bond":
            ceiling = notch(ceiling, -COVERED_BOND_EXTRA)
        return cap(rating, ceiling)

    # --- groups -----------------------------------------------------------------------------------

    def ancestors(self, lei: str) -> list[str]:
        """The controllers of an issuer, nearest first (majority links followed up)."""
        out: list[str] = []
        current = lei
        while current in self.majority_holder:
            current = self.majority_holder[current]
            if current in out or current == lei:
                break  # a cycle of majority links would be a generator bug; stop, do not loop
            out.append(current)
        return out

    def ultimate_parent(self, lei: str) -> str:
        chain = self.ancestors(lei)
        return chain[-1] if chain else lei

    def controls(self, a: str, b: str) -> bool:
        return a in self.ancestors(b)

    def group(self, top: str) -> set[str]:
        """The ultimate parent `top` and every issuer it controls."""
        return {lei for lei in self.entities if self.ultimate_parent(lei) == top}

    # --- transitions ------------------------------------------------------------------------------

    def fallen_angels(self, start: dt.date, end: dt.date) -> set[str]:
        """Issuers moved from investment grade to below it by one action within [start, end]."""
        out = set()
        for lei, acts in self.issuer_actions.items():
            previous: str | None = None
            for when, kind, rating, _ in acts:
                now = None if kind == "withdraw" else rating
                if (start <= when <= end and investment_grade(previous) and now is not None
                        and not investment_grade(now)):
                    out.add(lei)
                previous = now
        return out


credit = once_per_tables(Credit)
