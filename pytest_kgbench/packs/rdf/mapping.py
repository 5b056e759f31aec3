"""Tables -> RDF: a small, explicit mapping declared in a pack's manifest.

We chose an explicit mapping over an R2RML engine: a pack's tables are flat and typed, so each
row becomes one subject of one class, each non-null cell one triple. The manifest says, per table:

```yaml
rdf:
  vocab: cr                                  # prefix of default predicates
  prefixes: {cr: "https://.../def#", cri: "https://.../id/"}
  tables:
    issuers:
      class: cr:Issuer
      subject: "cri:issuer/{issuer_id}"      # template over the row's columns
      columns:
        country_code: {predicate: cr:country, ref: "cri:country/{country_code}"}
        internal_note: skip
```

A column not listed maps to `<vocab>:<camelCase(column)>`, typed by its SQL type (xsd:integer,
xsd:decimal, xsd:date, xsd:boolean; VARCHAR as a plain string). A `ref` makes the object an IRI
built from the template; a template may use any column of the row, so a polymorphic reference
(`"cri:{entity_type}/{entity_id}"`) needs no special case. It is the same information an R2RML
TriplesMap holds, read by 60 lines instead of an engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import quote

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.packs.schema import Tables, TableSpec

_XSD = "http://www.w3.org/2001/XMLSchema#"
XSD_OF_SQL = {
    "INTEGER": "integer", "BIGINT": "integer", "DOUBLE": "decimal", "DECIMAL": "decimal",
    "DATE": "date", "BOOLEAN": "boolean", "TIMESTAMP": "dateTime",
}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def expand(curie: str, prefixes: Mapping[str, str]) -> str:
    """A CURIE (or <iri>) as a full IRI."""
    if curie.startswith("<") and curie.endswith(">"):
        return curie[1:-1]
    prefix, sep, local = curie.partition(":")
    if sep and prefix in prefixes:
        return prefixes[prefix] + local
    if curie.startswith(("http://", "https://", "urn:")):
        return curie
    raise InputError("pack.yaml", f"unknown prefix in '{curie}'", field="rdf")


def fill(template: str, row: Mapping[str, Any], prefixes: Mapping[str, str]) -> str | None:
    """Fill an IRI template from a row; None when a referenced cell is empty."""
    missing = False

    def sub(match: re.Match[str]) -> str:
        nonlocal missing
        value = row.get(match.group(1))
        if value is None:
            missing = True
            return ""
        return quote(str(value), safe="-._~")

    filled = re.sub(r"\{(\w+)\}", sub, template)
    return None if missing else expand(filled, prefixes)



def column_entry(columns: Mapping[str, Any], col: str, vocab: str | None,
                 where: str) -> dict[str, Any] | None:
    """A column's entry of a table's RDF mapping as both mappers read it: None for `skip`, a
    bare string as its predicate, and a missing predicate as the vocabulary's camel-cased
    column name (an error naming the field where the pack has no rdf.vocab)."""
    entry = columns.get(col)
    if entry == "skip":
        return None
    if isinstance(entry, str):
        entry = {"predicate": entry}
    entry = dict(entry or {})
    if "predicate" not in entry:
        if not vocab:
            raise InputError("pack.yaml", "needs a predicate (or rdf.vocab)",
                             field=f"{where}.columns.{col}")
        entry["predicate"] = f"{vocab}:{camel(col)}"
    return entry

def map_tables(tables: Tables, specs: Mapping[str, TableSpec], mapping: Mapping[str, Any]) -> Any:
    """The RDF graph of the tables under the manifest's mapping, with a prefix bound for each
    namespace of its ids (`bind_id_namespaces`)."""
    from rdflib import RDF, Graph, Literal, URIRef
    from rdflib.namespace import XSD

    prefixes = dict(mapping.get("prefixes") or {})
    vocab = mapping.get("vocab")
    graph = Graph()
    for prefix, iri in prefixes.items():
        graph.bind(prefix, iri)
    graph.bind("xsd", _XSD)
    for name, tmap in (mapping.get("tables") or {}).items():
        if name not in specs:
            raise InputError("pack.yaml", f"maps table '{name}', which the pack does not have",
                             field=f"rdf.tables.{name}")
        spec = specs[name]
        cls = URIRef(expand(tmap["class"], prefixes))
        columns = tmap.get("columns") or {}
        plan = []
        for col, ctype in spec.columns:
            entry = column_entry(columns, col, vocab, f"rdf.tables.{name}")
            if entry is None:
                continue
            plan.append((col, ctype, URIRef(expand(entry["predicate"], prefixes)),
                         entry.get("ref")))
        for row in tables[name]:
            subject_iri = fill(tmap["subject"], row, prefixes)
            if subject_iri is None:
                raise InputError("pack.yaml", "subject template uses an empty cell",
                                 field=f"rdf.tables.{name}.subject")
            subject = URIRef(subject_iri)
            graph.add((subject, RDF.type, cls))
            for col, ctype, predicate, ref in plan:
                value = row.get(col)
                if value is None:
                    continue
                if ref:
                    target = fill(ref, row, prefixes)
                    if target is not None:
                        graph.add((subject, predicate, URIRef(target)))
                    continue
                xsd = XSD_OF_SQL.get(ctype)
                if xsd is None:
                    graph.add((subject, predicate, Literal(str(value))))
                elif xsd == "decimal":
                    graph.add((subject, predicate, Literal(Decimal(str(value)))))
                else:
                    graph.add((subject, predicate, Literal(value, datatype=XSD[xsd])))
    bind_id_namespaces(graph, mapping)
    return graph


def bind_id_namespaces(graph: Any, mapping: Mapping[str, Any]) -> None:
    """Bind a prefix for every class namespace of the graph's own ids ("issuer:" for
    <…/id/issuer/>; `id_prefixes`), so that the Turtle a reading prompt shows writes
    `issuer:ISS-86607`, not a full IRI per subject: RDF then carries the facts at a length
    nearer CSV's, and a condition does not differ from another by length alone."""
    from rdflib import URIRef

    taken = {p for p, _ in graph.namespace_manager.namespaces()}
    found: set[str] = set()
    for s, _, o in graph:
        for node in (s, o):
            if isinstance(node, URIRef) and "/" in str(node):
                found.add(str(node).rsplit("/", 1)[0] + "/")
    for name, ns in id_prefixes(found, mapping, taken):
        graph.bind(name, ns, override=True, replace=True)


def per_id_namespaces(namespaces: Iterable[str], mapping: Mapping[str, Any]) -> set[str]:
    """The namespaces of the graph's own ids that hold one id each, or a handful: those two or
    more segments below a declared base whose first segment is shared with another
    (`rsi:authorship/{work}/{author}/{institution}` binds one namespace per work and author).
    bind_id_namespaces binds them so Turtle stays short; a store's description leaves them
    out, or research's lists some 420 of them (a prompt of 10,000 tokens for 450 of meaning).
    A namespace the mapping declares is never one of them."""
    declared = {str(iri) for iri in (mapping.get("prefixes") or {}).values()}
    groups: dict[tuple[str, str], list[str]] = {}
    for ns in set(namespaces) - declared:
        base = max((b for b in declared if ns.startswith(b) and ns != b), key=len, default=None)
        if base is None:
            continue
        rest = ns[len(base):].strip("/").split("/")
        if len(rest) >= 2:
            groups.setdefault((base, rest[0]), []).append(ns)
    return {ns for members in groups.values() if len(members) > 1 for ns in members}


def to_turtle(graph: Any) -> str:
    """Turtle with subjects, predicates and objects in a stable order (same graph, same
    bytes): the graph's bound prefixes that it uses, sorted; each subject's triples together,
    rdf:type first (as `a`), four-space indents and a blank line between subjects.

    Written by pyoxigraph's serializer, in time linear in the graph (rdflib's Turtle writer
    grows faster than the graph: 28 s of a 1,000-issuer credit build)."""
    import pyoxigraph as ox

    triples = ox.parse(graph.serialize(format="nt"), format=ox.RdfFormat.N_TRIPLES)
    return _turtle_of(triples, {str(p): str(ns) for p, ns in
                                graph.namespace_manager.namespaces()})


def turtle_without(path: Path, predicates: Iterable[str]) -> str:
    """A Turtle file of to_turtle's (a build's data.ttl) without the triples of `predicates`
    (full IRIs), as to_turtle writes it: the same prefixes (those still used), the same order
    and layout, local names as the file spells them. What a persona who may not read those
    predicates is shown."""
    import pyoxigraph as ox

    drop = set(predicates)
    text = path.read_bytes()
    bound = dict(re.findall(r"^@prefix\s+([\w.-]*):\s*<([^>]*)>\s*\.",
                            text.decode("utf-8"), re.M))
    return _turtle_of((t for t in ox.parse(text, format=ox.RdfFormat.TURTLE)
                       if t.predicate.value not in drop), bound)


def _turtle_of(triples: Iterable[Any], namespaces: Mapping[str, str]) -> str:
    """pyoxigraph triples as to_turtle lays them out, with those of the `namespaces` (prefix
    -> IRI) that some name of theirs uses."""
    import pyoxigraph as ox

    rdf_type = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
    ordered = sorted(triples, key=lambda t: (str(t.subject), t.predicate.value != rdf_type,
                                             str(t.predicate), str(t.object)))
    names = {t.value for q in ordered for t in (q.subject, q.predicate, q.object)
             if isinstance(t, ox.NamedNode)} - {rdf_type}  # rdf:type is written `a`
    names |= {q.object.datatype.value for q in ordered if isinstance(q.object, ox.Literal)}
    # every namespace a name could be written in: its IRI cut after each '/' or '#'
    spaces = {n[:m.end()] for n in names for m in re.finditer(r"[/#]", n)}
    bound = sorted((p, ns) for p, ns in namespaces.items() if p and ns in spaces)
    body = ox.serialize(ordered, format=ox.RdfFormat.TURTLE, prefixes=dict(bound))
    return "".join(_turtle_layout(bound, (body or b"").decode("utf-8").splitlines(True)))


def _turtle_layout(bound: list[tuple[str, str]], lines: Any) -> Any:
    """pyoxigraph's Turtle (`lines`, each with its end) laid out as to_turtle writes it: the
    prefixes first, a blank line before each subject, four-space indents."""
    for p, ns in bound:
        yield f"@prefix {p}: <{ns}> .\n"
    for line in lines:
        if line.startswith("\t"):
            yield "    " + line[1:]
        elif not line.startswith("@prefix "):
            yield "\n" + line  # a new subject


def turtle_file(ntriples: Path, bound: list[tuple[str, str]], out: Path) -> None:
    """Write `ntriples` (a file in to_turtle's order, write_ntriples) as to_turtle's Turtle
    into `out`, streaming: pyoxigraph parses and serialises into a writer that lays its
    Turtle out a block of whole lines at a time (_LaidOut), so no graph is held in memory and
    no Turtle but the laid-out one is written."""
    import pyoxigraph as ox

    with out.open("wb") as dst:
        dst.write("".join(_turtle_layout(bound, [])).encode("utf-8"))
        laid = _LaidOut(dst)
        # lenient: the file is write_ntriples' own, each IRI checked when its template was
        # read (_sql_template) and each literal escaped as pyoxigraph escapes it (_nt_string):
        # the checks a strict parse repeats for every term cost 12 s of 21 at 100,000 issuers
        ox.serialize(ox.parse(path=str(ntriples), format=ox.RdfFormat.N_TRIPLES, lenient=True),
                     cast("IO[bytes]", laid), ox.RdfFormat.TURTLE, prefixes=dict(bound))
        laid.close()


class _LaidOut:
    """The binary file pyoxigraph's Turtle serializer writes into: whole lines passed on to
    `dst` through _layout_block, _LAYOUT_CHUNK bytes or more at a time, the rest at close()."""

    def __init__(self, dst: Any) -> None:
        self.dst = dst
        self.pending = bytearray()

    def write(self, data: bytes) -> int:
        self.pending += data
        if len(self.pending) >= _LAYOUT_CHUNK:
            cut = self.pending.rfind(b"\n") + 1  # whole lines only
            if cut:
                self.dst.write(_layout_block(bytes(self.pending[:cut])))
                del self.pending[:cut]
        return len(data)

    def flush(self) -> None:
        """Nothing: a line is laid out whole, once it has ended (or at close)."""

    def close(self) -> None:
        if self.pending:
            self.dst.write(_layout_block(bytes(self.pending)))
            self.pending.clear()


_LAYOUT_CHUNK = 1 << 24  # bytes of Turtle laid out at a time


def _layout_block(data: bytes) -> bytes:
    """_turtle_layout (without its prefixes) of whole lines of pyoxigraph's Turtle, in bytes:
    every line end doubled, then a doubled end before a tab undone and the tab made four
    spaces — the same bytes as a line at a time, without a Python step per line. Lines a
    text file would cut otherwise (a carriage return) or an @prefix line after the first
    ones go a line at a time."""
    while data.startswith(b"@prefix "):  # pyoxigraph's own prefix lines: dropped
        end = data.find(b"\n")
        data = data[end + 1:] if end >= 0 else b""
    if not data:
        return b""
    if b"\r" in data or b"\n@prefix " in data:
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        parts = text.split("\n")
        lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        return "".join(_turtle_layout([], lines)).encode("utf-8")
    out = data.replace(b"\n", b"\n\n").replace(b"\n\n\t", b"\n    ")
    if data.endswith(b"\n"):
        out = out[:-1]  # the last line's end, doubled for no line after it
    return b"    " + out[1:] if out.startswith(b"\t") else b"\n" + out


def personal_properties(personal: Mapping[str, frozenset[str]], mapping: Mapping[str, Any]
                        ) -> list[tuple[str, str, str, str | None]]:
    """(predicate IRI, table, column, class IRI) for every personal column the mapping turns
    into triples: what a restricted graph leaves out and what a guard names when refusing."""
    prefixes = dict(mapping.get("prefixes") or {})
    vocab = mapping.get("vocab")
    out = []
    for table, cols in sorted(personal.items()):
        tmap = (mapping.get("tables") or {}).get(table) or {}
        klass = expand(tmap["class"], prefixes) if tmap.get("class") else None
        columns = tmap.get("columns") or {}
        for col in sorted(cols):
            entry = columns.get(col)
            if entry == "skip":
                continue
            pred = entry if isinstance(entry, str) else (entry or {}).get("predicate")
            if pred is None and vocab:
                pred = f"{vocab}:{camel(col)}"
            if pred:
                out.append((expand(pred, prefixes), table, col, klass))
    return out


def template_columns(template: str) -> set[str]:
    """The columns a subject or reference template fills in (`{col}`)."""
    import re

    return set(re.findall(r"\{(\w+)\}", template))


# --- the same mapping, run by DuckDB over the variant's database -----------------------------
#
# A build maps the tables in SQL (`write_ntriples`): each term is spelt in N-Triples the way
# pyoxigraph writes it, the triples deduplicated and sorted by DuckDB (spilling to disk when it
# must) and written straight to a file, so no graph of Python objects is ever held. Values the
# fast path cannot spell exactly (an IRI piece needing percent-encoding is handled by DuckDB's
# url_encode, which is urllib's quote(safe="-._~"); a string with a quote, a backslash or a
# control character; a float whose text is not a plain decimal) go through a Python function
# that spells them as map_tables does. A test holds the two mappings to the same graph.

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
_PLAIN_DECIMAL = r"-?[0-9]+\.[0-9]+"
_NEEDS_ESCAPE = '[\\x00-\\x1f\\x7f"\\\\]'


def _nt_string(value: str) -> str:
    """The N-Triples body of a string literal, escaped as pyoxigraph escapes it."""
    import pyoxigraph as ox

    return str(ox.Literal(value))[1:-1]


def _nt_decimal(value: float) -> str:
    """The lexical form map_tables gives a float (rdflib's of Decimal(str(value)))."""
    from rdflib import Literal

    return str(Literal(Decimal(str(value))))


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_template(template: str, types: Mapping[str, str], prefixes: Mapping[str, str],
                  where: str) -> tuple[str, list[str]]:
    """A SQL expression spelling `<iri>` from an IRI template over the row's columns (NULL when
    a cell it uses is empty), and the columns it uses."""
    marks: dict[str, str] = {}

    def mark(match: re.Match[str]) -> str:
        marks[f"\x00{len(marks)}\x00"] = match.group(1)
        return f"\x00{len(marks) - 1}\x00"

    try:
        expanded = expand(re.sub(r"\{(\w+)\}", mark, template), prefixes)
    except InputError:
        raise InputError("pack.yaml", f"template '{template}' starts with no known prefix "
                         "or IRI", field=where) from None
    parts = ["'<'"]
    for piece in re.split(r"(\x00\d+\x00)", expanded):
        if piece in marks:
            col = marks[piece]
            if col not in types:
                raise InputError("pack.yaml", f"template '{template}' names column {col}, "
                                 "which the table does not have", field=where)
            if types[col] in ("VARCHAR", "INTEGER", "BIGINT", "DATE"):
                parts.append(f'url_encode(CAST("{col}" AS VARCHAR))')
            else:  # str() of a float, a boolean or a timestamp, as map_tables fills it
                parts.append(f'url_encode(kg_str("{col}"))')
        elif piece:
            if "\x00" in piece or "{" in piece:
                raise InputError("pack.yaml", f"cannot map template '{template}'", field=where)
            parts.append(_sql_str(piece))
    parts.append("'>'")
    _check_iri(expanded, template, where)
    return " || ".join(parts), list(marks.values())


def _check_iri(expanded: str, template: str, where: str) -> None:
    """Raise unless every IRI the template `expanded` (its columns marked) can spell is a
    valid absolute IRI: its text before the first column names a scheme, and with each column
    as a letter it is an IRI (a cell comes in url_encode'd: unreserved characters and %XX
    only, valid wherever a letter is)."""
    import pyoxigraph as ox

    head = re.split(r"\x00\d+\x00", expanded, maxsplit=1)[0]
    sample = re.sub(r"\x00\d+\x00", "x", expanded)
    try:
        if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", head):
            raise ValueError("no scheme before the first column")
        ox.NamedNode(sample)
    except ValueError as exc:
        raise InputError("pack.yaml", f"'{template}' does not make an IRI "
                         f"({sample}: {exc})", field=where) from None


def _sql_literal(col: str, ctype: str) -> str:
    """A SQL expression spelling the N-Triples literal of a cell (NULL for an empty cell)."""
    c = f'"{col}"'
    xsd = XSD_OF_SQL.get(ctype)
    if xsd is None:
        text = f"CAST({c} AS VARCHAR)"
        return (f"'\"' || CASE WHEN regexp_matches({text}, {_sql_str(_NEEDS_ESCAPE)}) "
                f"THEN kg_nt_string({text}) ELSE {text} END || '\"'")
    dtype = f"'\"^^<{_XSD}{xsd}>'"
    if xsd == "decimal":
        text = f"CAST(CAST({c} AS DOUBLE) AS VARCHAR)"
        body = (f"CASE WHEN regexp_full_match({text}, '{_PLAIN_DECIMAL}') THEN {text} "
                f"ELSE kg_nt_decimal(CAST({c} AS DOUBLE)) END")
    elif xsd == "dateTime":
        body = f"kg_iso({c})"
    else:  # integer, date, boolean: DuckDB's text is the XSD lexical form
        body = f"CAST({c} AS VARCHAR)"
    return f"'\"' || {body} || {dtype}"


def triples_sql(specs: Mapping[str, TableSpec], mapping: Mapping[str, Any]) -> str:
    """One SQL query over the tables giving every triple of the mapping as (s, p, o), each
    an N-Triples term: the graph map_tables builds, in DuckDB."""
    prefixes = dict(mapping.get("prefixes") or {})
    vocab = mapping.get("vocab")
    selects = []
    for name, tmap in (mapping.get("tables") or {}).items():
        if name not in specs:
            raise InputError("pack.yaml", f"maps table '{name}', which the pack does not have",
                             field=f"rdf.tables.{name}")
        spec = specs[name]
        types = dict(spec.columns)
        where = f"rdf.tables.{name}"
        subject, used = _sql_template(str(tmap["subject"]), types, prefixes, f"{where}.subject")
        table = f'"{name}"'
        cls = f"<{expand(tmap['class'], prefixes)}>"
        _check_iri(cls[1:-1], str(tmap["class"]), f"{where}.class")
        notnull = " AND ".join(f'"{c}" IS NOT NULL' for c in used) or "TRUE"
        # a subject template over an empty cell is the pack's error, as map_tables says
        selects.append(f"SELECT {subject} AS s, '<{RDF_TYPE}>' AS p, {_sql_str(cls)} AS o, "
                       f"NOT ({notnull}) AS bad FROM {table}")
        columns = tmap.get("columns") or {}
        for col, ctype in spec.columns:
            entry = column_entry(columns, col, vocab, where)
            if entry is None:
                continue
            iri = expand(entry["predicate"], prefixes)
            _check_iri(iri, str(entry["predicate"]), f"{where}.columns.{col}")
            pred = _sql_str(f"<{iri}>")
            if entry.get("ref"):
                obj, ref_used = _sql_template(str(entry["ref"]), types, prefixes,
                                              f"{where}.columns.{col}")
                cond = " AND ".join(f'"{c}" IS NOT NULL' for c in {col, *ref_used})
            else:
                obj, cond = _sql_literal(col, ctype), f'"{col}" IS NOT NULL'
            selects.append(f"SELECT {subject} AS s, {pred} AS p, {obj} AS o, FALSE AS bad "
                           f"FROM {table} WHERE {cond}")
    if not selects:
        return "SELECT NULL::VARCHAR AS s, NULL::VARCHAR AS p, NULL::VARCHAR AS o WHERE FALSE"
    return "\nUNION ALL\n".join(selects)


def _udfs(con: Any) -> None:
    import datetime as dt

    from duckdb.sqltypes import DOUBLE, TIMESTAMP, VARCHAR

    con.create_function("kg_nt_string", _nt_string, [VARCHAR], VARCHAR)
    con.create_function("kg_nt_decimal", _nt_decimal, [DOUBLE], VARCHAR)
    con.create_function("kg_iso", lambda v: v.isoformat() if isinstance(v, dt.datetime)
                        else str(v), [TIMESTAMP], VARCHAR)
    con.create_function("kg_str", lambda v: str(v), [DOUBLE], VARCHAR)


def _one(con: Any, sql: str) -> Any:
    row = con.execute(sql).fetchone()
    return row[0] if row else None


@dataclass(frozen=True)
class NtTarget:
    """One N-Triples file write_ntriples writes: the graph without the triples of `without`
    (full IRIs), or only those of `only`; sorted by line (`line`: the bytes
    to_sorted_ntriples gives the same graph), in to_turtle's order (`turtle`: by subject, its
    rdf:type first) or in no order at all (`any`: a store's input, which may hold a triple
    twice). A target with `consume` is read as it is written: write_ntriples writes it into
    a pipe made at its path and calls consume(path, ids, heads) (the namespaces it returns)
    to read it, so the file never reaches the disk (where the OS has no named pipes, it is a
    file, read once written)."""

    without: frozenset[str] = frozenset()
    only: frozenset[str] | None = None
    order: str = "line"
    consume: Callable[[Path, set[str], set[str]], None] | None = None


_TYPE = _sql_str(f"<{RDF_TYPE}>")  # rdf:type as a mapped term, an SQL string
_LINES = "(SELECT line, split_part(line, ' ', 2) AS p FROM kg_s)"  # kg_s, each line's predicate


def write_ntriples(database: Path, specs: Mapping[str, TableSpec], mapping: Mapping[str, Any],
                   targets: Mapping[Path, NtTarget], work: Path,
                   early: Callable[[], None] | None = None
                   ) -> tuple[int, set[str], set[str]]:
    """Map the tables of `database` (a DuckDB file) to N-Triples, once per target file (see
    NtTarget). `work` is a scratch folder DuckDB may spill to. A target in no order (`any`) is
    written first, straight from the mapped rows (a triple two rows map to is written twice),
    and then `early` is called: what reads it (a build's rules) may start before the graph
    is sorted.
    Returns the number of triples of the whole graph, the namespaces (cut after the last
    '/') of its subject and object IRIs, and those (cut after the last '/' or '#') of every
    IRI it names but rdf:type — what bind_id_namespaces and to_turtle's prefixes look at.

    The graph is sorted once: when no predicate sorts before rdf:type (as in every shipped
    pack: `<http://www.w3.org/…#type>` < `<https://…>`), the lines in order are already
    to_turtle's order too, and every sorted file is a filtered scan of one sorted table."""
    import duckdb

    con = duckdb.connect(str(database), read_only=True,
                         config={"threads": 2, "memory_limit": "1GB",
                                 "temp_directory": str(work),
                                 "preserve_insertion_order": False})
    try:
        con.execute("SET enable_progress_bar = false")  # a COPY runs on a thread (_copy_into)
        _udfs(con)
        # the mapping is a query, computed again by each statement below that reads it (2 s
        # at 100,000 issuers): held as a table, its triples spilled to disk and were read
        # back by each (5 GB written)
        mapped = f"({triples_sql(specs, mapping)})"
        if _one(con, f"SELECT count(*) FROM {mapped} WHERE bad"):
            raise InputError("pack.yaml", "subject template uses an empty cell",
                             field="rdf.tables")
        for path, target in targets.items():
            if target.order == "any":
                _copy_lines(con, f"SELECT s || ' ' || p || ' ' || o || ' .' FROM {mapped} "
                            f"{_target_where(target)}", path)
        if early is not None:
            early()
        ids, heads = _namespaces(con, mapped)
        count, in_table = _sorted_lines(con, mapped, {t.order for t in targets.values()},
                                         work)
        for path, target in targets.items():
            if target.order == "any":
                continue  # written already
            order = "" if target.order in in_table else (
                f"ORDER BY split_part(line, ' ', 1), p <> {_TYPE}, line")  # s, rdf:type first
            query = f"SELECT line FROM {_LINES} {_target_where(target)} {order}"
            if target.consume is None:
                _copy_lines(con, query, path)
            else:
                _copy_into(con, query, path, partial(target.consume, path, ids, heads))
    finally:
        con.close()
    return count, {ns for ns in ids if ns}, {ns for ns in heads if ns}


def _namespaces(con: Any, mapped: str) -> tuple[set[str], set[str]]:
    """The namespaces of the mapped graph's subject and object IRIs (cut after the last '/'),
    and of every IRI it names but rdf:type (after the last '/' or '#'); "" among them."""
    # each distinct term once through the regular expression (7x faster than once per
    # triple; a duplicate triple adds nothing to a DISTINCT)
    spaces = con.execute(
        f"WITH terms AS MATERIALIZED (SELECT DISTINCT id, t FROM (SELECT TRUE AS id, s AS t "
        f"FROM {mapped} UNION ALL SELECT TRUE, o FROM {mapped} WHERE o LIKE '<%' UNION ALL "
        f"SELECT FALSE, p FROM {mapped} WHERE p <> {_TYPE} UNION ALL SELECT FALSE, "
        f"regexp_extract(o, '\\^\\^(<[^>]*>)$', 1) FROM {mapped} WHERE o LIKE '\"%>')) "
        "SELECT DISTINCT TRUE, regexp_extract(t, '^<(.*/)[^/]*>$', 1) FROM terms WHERE id "
        "UNION ALL SELECT DISTINCT FALSE, regexp_extract(t, '^<(.*[/#])[^/#]*>$', 1) "
        "FROM terms").fetchall()
    ids = {ns for is_id, ns in spaces if is_id}
    heads = {ns for is_id, ns in spaces if not is_id}
    return ids, heads


SORT_IN_PARTS = 256 << 20  # bytes of mapped lines from which they are made distinct and
#                            sorted a range of subjects at a time (_sorted_parts)
PART_BYTES = 192 << 20  # about the bytes of lines of one such range


def _sorted_lines(con: Any, mapped: str, orders: set[str], work: Path | None = None
                  ) -> tuple[int, set[str]]:
    """The mapped graph's distinct lines as kg_s (a temporary table, or a view of sorted files
    in `work` for a big graph: _sorted_parts), sorted when a target of `orders` reads it in an
    order the sort gives: how many lines, and the orders it is in."""
    # a subject's lines in line order start with its rdf:type when no predicate sorts
    # before it: then the one sorted table is in the turtle order too
    type_first = not _one(con, f"SELECT count(*) FROM (SELECT DISTINCT p FROM {mapped}) "
                               f"WHERE p < {_TYPE}")
    in_table = {"line", "turtle"} if type_first else {"line"}
    sort = "ORDER BY line" if orders & in_table else ""
    if sort:
        con.execute("SET preserve_insertion_order = true")  # a scan keeps the sort
    if work is not None:
        size = _one(con, f"SELECT sum(strlen(s) + strlen(p) + strlen(o) + 4) FROM {mapped}")
        if size and size >= SORT_IN_PARTS:
            count = _sorted_parts(con, mapped, int(size), work)
            return count, in_table
    # a line is its triple (a subject and a predicate hold no space): DISTINCT lines are
    # the distinct triples, and a line's predicate is its second term
    con.execute("CREATE TEMP TABLE kg_s AS SELECT DISTINCT s || ' ' || p || ' ' || o || "
                f"' .' AS line FROM {mapped} {sort}")
    return int(_one(con, "SELECT count(*) FROM kg_s")), in_table


def _sorted_parts(con: Any, mapped: str, size: int, work: Path) -> int:
    """The mapped lines made distinct and sorted a range of subjects at a time, so that DuckDB
    never holds more than one range (a DISTINCT or ORDER BY of the whole graph does not
    spill: at 200,000 issuers, 1.8 GB of lines, it failed within 1 GB): the subjects' range
    bounds are drawn from a sample of the triples, each line is written once into the file of
    its range (one pass of the mapping), and each file is sorted into a file of its own. Lines
    of one subject share a range, and a subject's lines sort together and in the order of the
    subjects (no term holds a space, the separator, and none sorts below it), so the files
    in range order are the graph's lines in order: kg_s becomes a view of them. How many
    lines."""
    import shutil

    parts = max(2, -(-size // PART_BYTES))
    sample = [s for (s,) in con.execute(
        f"SELECT s FROM {mapped} USING SAMPLE reservoir({parts * 200} ROWS) REPEATABLE (1)"
    ).fetchall()]
    sample.sort()
    # the bounds only balance the ranges: whatever they are, the files in order hold the same
    # lines (at 1,000,000 issuers: 48 ranges of the 9 GB of lines, the build at most 1.6 GB)
    bounds = sorted({sample[len(sample) * i // parts] for i in range(1, parts)})
    folder = work / "kg-parts"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    listed = "[" + ", ".join(_sql_str(b) for b in bounds) + "]"
    # no order kept while the lines are spread over the ranges' files (with it, DuckDB
    # buffers them all: out of memory at 200,000 issuers)
    con.execute("SET preserve_insertion_order = false")
    # Parquet in small row groups: DuckDB's partitioned CSV writer ran out of 1 GB at
    # 200,000 issuers where this takes under 500 MB
    con.execute(f"COPY (SELECT len(list_filter({listed}, lambda b: b <= s)) AS part, "
                f"s || ' ' || p || ' ' || o || ' .' AS line FROM {mapped}) TO "
                f"{_sql_str(str(folder))} (FORMAT parquet, PARTITION_BY (part), "
                "ROW_GROUP_SIZE 16384)")
    con.execute("SET preserve_insertion_order = true")  # the view's scans keep the sort
    count, files = 0, []
    for part in range(len(bounds) + 1):
        found = sorted((folder / f"part={part}").glob("*.parquet"))
        if not found:
            continue
        files.append(work / f"kg-sorted-{part:04d}.parquet")
        listed_files = "[" + ", ".join(_sql_str(str(f)) for f in found) + "]"
        done = con.execute(f"COPY (SELECT DISTINCT line FROM read_parquet({listed_files}) "
                           f"ORDER BY line) TO {_sql_str(str(files[-1]))} (FORMAT parquet, "
                           "ROW_GROUP_SIZE 16384)").fetchone()
        count += int(done[0]) if done else 0
        shutil.rmtree(folder / f"part={part}")
    shutil.rmtree(folder, ignore_errors=True)
    listed_files = "[" + ", ".join(_sql_str(str(f)) for f in files) + "]"
    # Parquet, read back in file and row order (a CSV reader took a 200 MB file whole)
    con.execute(f"CREATE TEMP VIEW kg_s AS SELECT line FROM read_parquet({listed_files})")
    return count


def _copy_into(con: Any, query: str, path: Path, read: Callable[[], None]) -> None:
    """_copy_lines into a named pipe made at `path`, on a thread of its own, while `read()`
    reads it here. A reader that stops early, or never opens the pipe, does not leave the
    writer waiting: the pipe is drained before its error is raised. Where the OS has no named
    pipes, `path` is a file, written and then read."""
    import os
    import threading

    if not hasattr(os, "mkfifo"):  # pragma: no cover - Windows
        _copy_lines(con, query, path)
        read()
        return
    os.mkfifo(path)
    failed: list[BaseException] = []

    def write() -> None:
        try:
            _copy_lines(con, query, path)
        except BaseException as exc:  # noqa: BLE001 - raised below, on the caller's thread
            failed.append(exc)

    writer = threading.Thread(target=write, name="kgbench-copy", daemon=True)
    writer.start()
    try:
        read()
    finally:
        if writer.is_alive():  # the reader stopped before the end: take the rest
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            try:
                while writer.is_alive():
                    try:
                        if not os.read(fd, 1 << 20):
                            writer.join(0.01)
                    except BlockingIOError:
                        writer.join(0.01)
            finally:
                os.close(fd)
        writer.join()
    if failed:
        raise failed[0]


def _copy_lines(con: Any, query: str, path: Path) -> None:
    """Write the one text column `query` selects into `path`, a line per row, as it is (no
    quoting, no header)."""
    con.execute(f"COPY ({query}) TO {_sql_str(str(path))} (FORMAT csv, HEADER false, "
                "QUOTE '', ESCAPE '', DELIMITER '\t')")


def _target_where(target: NtTarget) -> str:
    """The WHERE clause of the lines a target keeps (a table with a predicate column `p`)."""
    conds = []
    if target.without:
        marks = ", ".join(_sql_str(f"<{p}>") for p in sorted(target.without))
        conds.append(f"p NOT IN ({marks})")
    if target.only is not None:
        marks = ", ".join(_sql_str(f"<{p}>") for p in sorted(target.only))
        conds.append(f"p IN ({marks})" if marks else "FALSE")
    return f"WHERE {' AND '.join(conds)}" if conds else ""


def id_prefixes(namespaces: set[str], mapping: Mapping[str, Any], taken: set[str]
                ) -> list[tuple[str, str]]:
    """The prefixes of the graph's own ids, one per class namespace — the first segment below
    a declared base (`authorship:` for <…/id/authorship/>) — given the names already
    `taken`. `namespaces` are the ids' IRIs cut after their last '/'. An id deeper than its
    class namespace keeps it (`authorship:W1\\/A2\\/I3`, its slashes escaped as Turtle
    allows) rather than getting a prefix of its own: a per-id prefix declared once per
    authorship made research's Turtle 4.5× its CSV."""
    bases = [str(iri) for iri in (mapping.get("prefixes") or {}).values()]
    classes: set[str] = set()
    for ns in namespaces:
        base = max((b for b in bases if ns.startswith(b) and ns != b), key=len, default=None)
        if base is not None:
            classes.add(base + ns[len(base):].split("/", 1)[0] + "/")
    taken = set(taken)
    out = []
    for ns in sorted(classes):
        name = re.sub(r"[^A-Za-z0-9_-]", "_", ns.rstrip("/").rsplit("/", 1)[-1])
        if not name or not name[0].isalpha():
            name = "n" + name
        while name in taken:
            name += "_"
        out.append((name, ns))
        taken.add(name)
    return out


def used_prefixes(bound: Mapping[str, str], heads: set[str]) -> list[tuple[str, str]]:
    """The bound prefixes to_turtle writes: those whose namespace is some name of the graph
    cut after a '/' or '#' (`heads`: every name's namespace, write_ntriples), sorted."""
    spaces = {h[:m.end()] for h in heads for m in re.finditer(r"[/#]", h)}
    return sorted((p, ns) for p, ns in bound.items() if p and ns in spaces)
