"""The research definitions (ontology/research/definitions.ttl), applied in code.

Key functions are computed with these, never with the gold queries, so a key that agrees with
gold SQL and gold SPARQL is three independent readings agreeing. Every function takes the raw
tables (typed rows, as read from the built CSV files).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pytest_kgbench.packs import once_per_tables

COUNTED_TYPES = ("article", "review", "preprint")   # datasets are not output

Tables = dict[str, list[dict[str, Any]]]


class Research:
    """The definitions over one dataset, computed once (use `research(tables)`)."""

    def __init__(self, tables: Tables) -> None:
        self.t = tables
        self.records = {r["work_id"]: r for r in tables["works"]}
        self.authors = {r["author_id"]: r for r in tables["authors"]}
        self.inst = {r["institution_id"]: r for r in tables["institutions"]}
        # Person: one per ORCID; a record without ORCID is a person of its own
        self.person_of = {a["author_id"]: a["orcid"] or a["author_id"]
                          for a in tables["authors"]}
        # Work: a preprint belongs to the work of its published version
        self.work_of = {wid: r["published_version_id"] or wid for wid, r in self.records.items()}
        self.works = {wid for wid, key in self.work_of.items() if key == wid}
        self.counted = {wid for wid in self.works
                        if self.records[wid]["work_type"] in COUNTED_TYPES
                        and not self.records[wid]["is_retracted"]}
        # the persons of a work and each person's institutions on it: from its own record
        # (for a published work, the published version's authorships)
        affil: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for s in tables["authorships"]:
            affil[s["work_id"]][self.person_of[s["author_id"]]].add(s["institution_id"])
        self.affil = {w: {p: set(i) for p, i in ps.items()} for w, ps in affil.items()}
        self._citations: set[tuple[str, str]] | None = None

    # --- identity ------------------------------------------------------------------------------

    def person(self, who: str) -> str:
        """The person an ORCID or author id names."""
        return self.person_of.get(who, who)

    def persons(self, work: str) -> set[str]:
        return set(self.affil.get(self.work_of[work], {}))

    def year(self, work: str) -> int:
        return int(self.records[self.work_of[work]]["publication_year"])

    # --- institutions -------------------------------------------------------------------------

    def ancestors(self, inst: str) -> list[str]:
        """`inst` and every institution above it, nearest first."""
        out = [inst]
        while self.inst[out[-1]]["parent_id"]:
            out.append(self.inst[out[-1]]["parent_id"])
        return out

    def listed(self, work: str) -> set[str]:
        return set().union(*self.affil.get(self.work_of[work], {}).values())

    def credited(self, work: str) -> set[str]:
        """Institution credit: every listed institution and every institution above it."""
        return {a for i in self.listed(work) for a in self.ancestors(i)}

    def by_name(self, name: str) -> str:
        return next(i for i, r in self.inst.items() if r["display_name"] == name)

    # --- counting ---------------------------------------------------------------------------------

    def person_share(self, work: str, person: str) -> float:
        """Fractional counting: 1 split equally among the work's persons."""
        persons = self.persons(work)
        return 1.0 / len(persons) if person in persons else 0.0

    def institution_share(self, work: str, inst: str) -> float:
        """Fractional counting: each person's share split equally among that person's
        institutions on the work; an institution gets the shares of its own listings and of
        every listing below it."""
        affil = self.affil.get(self.work_of[work], {})
        total = 0.0
        for insts in affil.values():
            below = sum(1 for i in insts if inst in self.ancestors(i))
            total += below / len(insts) / len(affil)
        return total

    def output(self, *, inst: str | None = None, person: str | None = None,
               year: int | None = None, fractional: bool = False) -> float:
        """Counted output of an institution or a person, full or fractional."""
        total = 0.0
        for work in self.counted:
            if year is not None and self.year(work) != year:
                continue
            if inst is not None:
                if inst in self.credited(work):
                    total += self.institution_share(work, inst) if fractional else 1.0
            elif person is not None:
                if person in self.persons(work):
                    total += self.person_share(work, person) if fractional else 1.0
        return total

    def counted_works(self, *, inst: str | None = None, person: str | None = None,
                      year: int | None = None) -> set[str]:
        return {w for w in self.counted
                if (year is None or self.year(w) == year)
                and (inst is None or inst in self.credited(w))
                and (person is None or person in self.persons(w))}

    # --- citations ----------------------------------------------------------------------------

    def shared_persons(self, a: str, b: str) -> set[str]:
        return self.persons(a) & self.persons(b)

    def citations(self) -> set[tuple[str, str]]:
        """Citations that count: (citing work, cited work) between counted works, after merging
        versions, without self-citations."""
        if self._citations is not None:
            return self._citations
        out = set()
        for row in self.t["citations"]:
            citing = self.work_of[row["citing_work_id"]]
            cited = self.work_of[row["cited_work_id"]]
            if citing == cited or citing not in self.counted or cited not in self.counted:
                continue
            if self.shared_persons(citing, cited):
                continue
            out.add((citing, cited))
        self._citations = out
        return out

    def citing(self, work: str) -> set[str]:
        key = self.work_of[work]
        return {a for a, b in self.citations() if b == key}


research = once_per_tables(Research)
