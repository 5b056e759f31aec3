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
from collections.abc import Mapping
from decimal import Decimal
from typing import Any
from urllib.parse import quote

from pytest_kgbench.errors import InputError
from pytest_kgbench.packs import Tables, TableSpec

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
            entry = columns.get(col)
            if entry == "skip":
                continue
            if isinstance(entry, str):
                entry = {"predicate": entry}
            entry = dict(entry or {})
            if "predicate" not in entry:
                if not vocab:
                    raise InputError("pack.yaml", "needs a predicate (or rdf.vocab)",
                                     field=f"rdf.tables.{name}.columns.{col}")
                entry["predicate"] = f"{vocab}:{camel(col)}"
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
    """Bind a prefix for every namespace of the graph's own ids ("issuer:" for
    <…/id/issuer/>), so that the Turtle a reading prompt shows writes `issuer:ISS-86607`, not
    a full IRI per subject: RDF then carries the facts at a length comparable to CSV's, and a
    condition does not differ from another by length alone."""
    from rdflib import URIRef

    bases = [str(iri) for iri in (mapping.get("prefixes") or {}).values()]
    taken = {p for p, _ in graph.namespace_manager.namespaces()}
    found: set[str] = set()
    for s, _, o in graph:
        for node in (s, o):
            if isinstance(node, URIRef) and "/" in str(node):
                ns = str(node).rsplit("/", 1)[0] + "/"
                if any(ns.startswith(b) and ns != b for b in bases):
                    found.add(ns)
    for ns in sorted(found):
        name = re.sub(r"[^A-Za-z0-9_-]", "_", ns.rstrip("/").rsplit("/", 1)[-1])
        if not name or not name[0].isalpha():
            name = "n" + name
        while name in taken:
            name += "_"
        graph.bind(name, ns, override=True, replace=True)
        taken.add(name)


def to_turtle(graph: Any) -> str:
    """Turtle with subjects, predicates and objects in a stable order (same graph, same
    bytes): the graph's bound prefixes that it uses, sorted; each subject's triples together,
    rdf:type first (as `a`), four-space indents and a blank line between subjects.

    Written by pyoxigraph's serializer, in time linear in the graph (rdflib's Turtle writer
    grows faster than the graph: 28 s of a 1,000-issuer credit build)."""
    import pyoxigraph as ox

    rdf_type = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
    triples = sorted(ox.parse(graph.serialize(format="nt"), format=ox.RdfFormat.N_TRIPLES),
                     key=lambda t: (str(t.subject), t.predicate.value != rdf_type,
                                    str(t.predicate), str(t.object)))
    names = {t.value for q in triples for t in (q.subject, q.predicate, q.object)
             if isinstance(t, ox.NamedNode)} - {rdf_type}  # rdf:type is written `a`
    names |= {q.object.datatype.value for q in triples if isinstance(q.object, ox.Literal)}
    # every namespace a name could be written in: its IRI cut after each '/' or '#'
    spaces = {n[:m.end()] for n in names for m in re.finditer(r"[/#]", n)}
    bound = sorted((str(p), str(ns)) for p, ns in graph.namespace_manager.namespaces()
                   if p and str(ns) in spaces)
    body = ox.serialize(triples, format=ox.RdfFormat.TURTLE, prefixes=dict(bound))
    lines = [line for line in (body or b"").decode("utf-8").splitlines()
             if not line.startswith("@prefix ")]
    out = [f"@prefix {p}: <{ns}> ." for p, ns in bound]
    for line in lines:
        if not line.startswith("\t"):
            out.append("")  # a new subject
        out.append("    " + line[1:] if line.startswith("\t") else line)
    return "\n".join(out) + "\n"


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
