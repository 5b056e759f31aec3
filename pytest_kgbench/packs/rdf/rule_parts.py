"""A pack's rules run on a group of the graph at a time.

A pack may say which predicates its rules join nodes by (pack.yaml's `rules: {grouped_by:
[CURIEs]}`; not in shapes.ttl, which a condition shows the model as it is). The groups are
then the connected components of the graph under those predicates; a node no such predicate
touches (a country, a scale) is in every group. The pack vouches that no rule joins two nodes
of different groups except through such a shared node, and that what a rule derives about a
shared node is the same from every group (a country's ceiling, not a count of its issuers); a
test runs its rules whole and in many parts and compares the bytes.

A big build (ontology.derive_dump) then runs the rules part after part, each part some groups
whole and every shared triple, in a store that holds one part: the memory of a part, not of
the graph (1,000,000 credit issuers: 5.4 GB of rules' input, past 16 GB in one store).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_kgbench.packs.schema import Pack

PART_BYTES = 512 << 20  # bytes of rules' input a part holds, about (100,000 credit issuers)

_LINES = ("read_csv(?, columns = {'line': 'VARCHAR'}, header = false, delim = '\t', "
          "quote = '', escape = '', auto_detect = false)")
_WRITE = "(FORMAT csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\t')"


def rule_groups(pack: Pack) -> frozenset[str]:
    """The predicate IRIs a pack's manifest says its rules (shapes.ttl) join nodes by
    (`rules: {grouped_by: [CURIE, ...]}`, CURIEs of rdf.prefixes): a big build may run the
    rules a group of the graph at a time. Empty: it may not."""
    from pytest_kgbench.core.errors import InputError
    from pytest_kgbench.packs.rdf.mapping import expand

    entry = pack.manifest.get("rules") or {}
    where = str(pack.dir / "pack.yaml")
    if not isinstance(entry, Mapping) or set(entry) - {"grouped_by"}:
        raise InputError(where, "must be a mapping with one key, grouped_by", field="rules")
    raw = entry.get("grouped_by") or []
    if not isinstance(raw, list):
        raise InputError(where, "must list predicates (CURIEs)", field="rules.grouped_by")
    out = set()
    for curie in raw:
        try:
            out.add(expand(str(curie), pack.rdf.get("prefixes") or {}))
        except InputError:
            raise InputError(where, f"'{curie}' is neither an IRI nor a CURIE of "
                             "rdf.prefixes", field="rules.grouped_by") from None
    return frozenset(out)


def split_parts(ntriples: Path, links: frozenset[str], work: Path, parts: int,
                stem: str) -> list[Path]:
    """`ntriples` (one triple a line, as the build writes them) written into `parts` files of
    `work`: each group of the graph under `links` (the connected components of the nodes the
    triples of those predicates join) whole in one file, chosen by a hash of the group, and
    every triple whose subject is in no group in every file. The files, in order."""
    import duckdb

    con = duckdb.connect(config={"threads": 2, "memory_limit": "2GB",
                                 "temp_directory": str(work / f"{stem}.spill")})
    try:
        con.execute("SET enable_progress_bar = false")  # stdout: a rules' worker's pipe
        _components(con, ntriples, links)
        # hash(NULL) is a number: a subject in no group must stay NULL (in every part)
        con.execute(f"CREATE TABLE tp AS SELECT t.line, CASE WHEN g.rep IS NOT NULL THEN "
                    f"hash(g.rep) % {parts} END AS part "
                    f"FROM {_LINES} t LEFT JOIN subj g ON g.n = split_part(t.line, ' ', 1)",
                    [str(ntriples)])
        files = []
        for k in range(parts):
            files.append(work / f"{stem}.in{k}")
            con.execute(f"COPY (SELECT line FROM tp WHERE part = {k} OR part IS NULL) "
                        f"TO ? {_WRITE}", [str(files[-1])])
        return files
    finally:
        con.close()


def _components(con: object, ntriples: Path, links: frozenset[str]) -> None:
    """Table `subj` (n: a node's term as N-Triples writes it, rep: its group's smallest term,
    the same whatever order the engine numbered the nodes in) of every node a triple of
    `links` joins: connected components by the smallest number reached (label propagation
    with pointer jumping, a pass per round until nothing changes)."""
    run = con.execute  # type: ignore[attr-defined]
    # line = s ' ' p ' ' o ' .': the subject and predicate hold no space (IRIs, blank nodes)
    run(f"CREATE TABLE e AS SELECT s, substr(line, length(s) + length(p) + 3, "
        f"length(line) - length(s) - length(p) - 4) AS o FROM (SELECT line, "
        f"split_part(line, ' ', 1) AS s, split_part(line, ' ', 2) AS p FROM {_LINES}) "
        f"WHERE p IN (SELECT unnest(?::VARCHAR[]))",
        [str(ntriples), [f"<{p}>" for p in sorted(links)]])
    run("CREATE TABLE nodes AS SELECT n, (row_number() OVER ())::BIGINT AS id "
        "FROM (SELECT s AS n FROM e UNION SELECT o FROM e)")
    run("CREATE TABLE ei AS SELECT a.id AS a, b.id AS b FROM e "
        "JOIN nodes a ON a.n = e.s JOIN nodes b ON b.n = e.o")
    run("DROP TABLE e")
    run("CREATE TABLE lab AS SELECT id, id AS c FROM nodes")
    while True:
        run("CREATE OR REPLACE TABLE step AS SELECT l.id, least(l.c, coalesce(m.c, l.c)) AS c "
            "FROM lab l LEFT JOIN (SELECT x AS id, min(c) AS c FROM ("
            "SELECT ei.a AS x, lb.c FROM ei JOIN lab lb ON lb.id = ei.b UNION ALL "
            "SELECT ei.b AS x, la.c FROM ei JOIN lab la ON la.id = ei.a) GROUP BY x) m "
            "USING (id)")
        run("CREATE OR REPLACE TABLE step AS SELECT s.id, least(s.c, j.c) AS c "
            "FROM step s JOIN step j ON j.id = s.c")  # a jump: the label's own label
        changed = run("SELECT count(*) FROM step JOIN lab USING (id) WHERE step.c <> lab.c"
                      ).fetchone()[0]
        run("DROP TABLE lab")
        run("ALTER TABLE step RENAME TO lab")
        if not changed:
            break
    run("CREATE TABLE subj AS SELECT nodes.n, min(nodes.n) OVER (PARTITION BY lab.c) AS rep "
        "FROM nodes JOIN lab USING (id)")


def part_count(ntriples: Path, part_bytes: int) -> int:
    """How many parts `ntriples` is split into for parts of about `part_bytes` each."""
    return max(1, math.ceil(ntriples.stat().st_size / max(part_bytes, 1)))
