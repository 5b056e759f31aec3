"""Definitions: SKOS in Turtle is the single source; the Markdown form is rendered from it.

Pure module (rdflib only). What is rendered, per skos:Concept of the scheme, in the order of
`skos:notation` (then label): the preferred label, the CURIE, `skos:definition`, every
`skos:scopeNote`, `skos:example`, and the concepts it is related to. A `skos:OrderedCollection`
renders its members in list order. Nothing else is rendered, so the two forms carry the same
definitions by construction.

A file with no skos:Concept (a published OWL or RDFS vocabulary, such as a pack's
`definitions: {definitions.ttl: ...}` taken from elsewhere) renders its vocabulary instead:
each class, then each property, with its rdfs:label, its rdfs:comment or skos:definition,
and a property's domain and range (`vocabulary`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _graph(ttl: str) -> Any:
    import rdflib

    graph = rdflib.Graph()
    graph.parse(data=ttl, format="turtle")
    return graph


def _one(graph: Any, subject: Any, predicate: Any) -> str | None:
    values = sorted(str(v) for v in graph.objects(subject, predicate))
    return values[0] if values else None


def _curie(graph: Any, iri: Any) -> str:
    try:
        return str(graph.namespace_manager.curie(iri, generate=False))
    except (ValueError, KeyError):
        return f"<{iri}>"


def concepts(ttl: str) -> list[dict[str, Any]]:
    """Every concept: {iri, curie, label, definition, notes, examples, related}, in order."""
    from rdflib import RDF, URIRef
    from rdflib.namespace import SKOS

    graph = _graph(ttl)
    out: list[dict[str, Any]] = []
    for concept in set(graph.subjects(RDF.type, SKOS.Concept)):
        if not isinstance(concept, URIRef):
            continue
        out.append({
            "iri": str(concept),
            "curie": _curie(graph, concept),
            "label": _one(graph, concept, SKOS.prefLabel) or _curie(graph, concept),
            "notation": _one(graph, concept, SKOS.notation) or "",
            "definition": _one(graph, concept, SKOS.definition) or "",
            "notes": sorted(str(v) for v in graph.objects(concept, SKOS.scopeNote)),
            "examples": sorted(str(v) for v in graph.objects(concept, SKOS.example)),
            "related": sorted(_label(graph, r) for r in graph.objects(concept, SKOS.related)),
        })
    out.sort(key=lambda c: (_notation_key(c["notation"]), c["label"]))
    return out


def _notation_key(notation: str) -> tuple[int, str]:
    return (int(notation), "") if notation.isdigit() else (10**9, notation)


def _label(graph: Any, node: Any) -> str:
    from rdflib.namespace import SKOS

    return _one(graph, node, SKOS.prefLabel) or _curie(graph, node)


def vocabulary(ttl: str) -> list[dict[str, Any]]:
    """Every class and property of an OWL/RDFS vocabulary: {curie, label, kind, definition,
    domain, range}, classes first, each group by label."""
    from rdflib import OWL, RDF, RDFS, URIRef
    from rdflib.namespace import SKOS

    graph = _graph(ttl)
    kinds = [(OWL.Class, "class"), (RDFS.Class, "class"), (OWL.ObjectProperty, "relation"),
             (OWL.DatatypeProperty, "attribute"), (RDF.Property, "property")]
    seen: dict[Any, str] = {}
    for rdf_type, kind in kinds:
        for node in graph.subjects(RDF.type, rdf_type):
            if isinstance(node, URIRef) and node not in seen:
                seen[node] = kind
    out = []
    for node, kind in seen.items():
        out.append({
            "curie": _curie(graph, node), "kind": kind,
            "label": _one(graph, node, RDFS.label) or _curie(graph, node),
            "definition": (_one(graph, node, SKOS.definition)
                           or _one(graph, node, RDFS.comment) or ""),
            "domain": sorted(_curie(graph, d) for d in graph.objects(node, RDFS.domain)),
            "range": sorted(_curie(graph, r) for r in graph.objects(node, RDFS.range)),
        })
    out.sort(key=lambda v: (v["kind"] != "class", str(v["label"]).casefold(), str(v["curie"])))
    return out


def render_markdown(ttl: str) -> str:
    """The Markdown form of a SKOS Turtle file of definitions."""
    from rdflib import RDF
    from rdflib.collection import Collection
    from rdflib.namespace import DCTERMS, RDFS, SKOS

    graph = _graph(ttl)
    lines: list[str] = []
    schemes = sorted(graph.subjects(RDF.type, SKOS.ConceptScheme), key=str)
    for scheme in schemes:
        title = (_one(graph, scheme, DCTERMS.title) or _one(graph, scheme, SKOS.prefLabel)
                 or "Definitions")
        lines += [f"# {title}", ""]
        desc = (_one(graph, scheme, DCTERMS.description) or _one(graph, scheme, SKOS.definition)
                or _one(graph, scheme, RDFS.comment))
        if desc:
            lines += [desc, ""]
    if not schemes:
        lines += ["# Definitions", ""]
    for c in concepts(ttl):
        lines += [f"## {c['label']} (`{c['curie']}`)", "", c["definition"], ""]
        for note in c["notes"]:
            lines.append(f"- Note: {note}")
        for example in c["examples"]:
            lines.append(f"- Example: {example}")
        if c["related"]:
            lines.append(f"- Related: {', '.join(c['related'])}")
        if c["notes"] or c["examples"] or c["related"]:
            lines.append("")
    if not any(graph.subjects(RDF.type, SKOS.Concept)):
        for v in vocabulary(ttl):
            lines += [f"## {v['label']} (`{v['curie']}`, {v['kind']})", ""]
            if v["definition"]:
                lines += [v["definition"], ""]
            if v["domain"] or v["range"]:
                lines += [f"- Domain: {', '.join(v['domain']) or '-'}; "
                          f"range: {', '.join(v['range']) or '-'}", ""]
    for coll in sorted(graph.subjects(RDF.type, SKOS.OrderedCollection), key=str):
        label = _label(graph, coll)
        head = graph.value(coll, SKOS.memberList)
        members = [_label(graph, m) for m in Collection(graph, head)] if head else []
        lines += [f"## {label} (`{_curie(graph, coll)}`)", ""]
        desc = _one(graph, coll, SKOS.definition)
        if desc:
            lines += [desc, ""]
        lines += ["In order, from first to last: " + " > ".join(members), ""]
    return "\n".join(lines).rstrip() + "\n"


def run_rules(data: Any, shapes_ttl: str, *, store: str = "direct") -> Any:
    """The triples a pack's SHACL rules derive from `data` (SHACL-AF SPARQL rules), as a graph
    of their own, so the raw graph stays as it was.

    `direct` (the default) runs each rule's CONSTRUCT once, in the order pyshacl applies them
    (shapes by sh:order, then each shape's rules by sh:order), straight on a pyoxigraph store,
    every rule's triples added before the next rule runs: the same engine pyshacl's Oxigraph
    path uses, without pyshacl's per-triple traffic through rdflib (`direct_rules`). A rule
    set direct execution cannot mirror exactly (a rule using $this, a sh:condition, a shape
    targeting anything but fixed nodes, an iterating rule) runs through pyshacl instead.
    `Oxigraph` and `default` run pyshacl itself, on an oxrdflib or an rdflib store: the
    reference a test compares the direct path with.
    """
    if store == "direct":
        plan = rule_plan(shapes_ttl)
        if plan is not None:
            return direct_rules(data, plan)
        store = "Oxigraph"
    import rdflib
    from pyshacl import shacl_rules

    work = rdflib.Graph(store=store) if store != "default" else rdflib.Graph()
    for triple in data:
        work.add(triple)
    before = set(work)
    shapes = rdflib.Graph()
    shapes.parse(data=shapes_ttl, format="turtle")
    shacl_rules(work, shacl_graph=shapes, advanced=True, inplace=True)
    derived = rdflib.Graph()
    for s, p, o in work:
        if (s, p, o) not in before:
            derived.add((s, p, _plain_string(o)))
    return derived


def _plain_string(o: Any) -> Any:
    """RDF 1.1: an xsd:string literal is the plain literal, written as the raw data is."""
    import rdflib
    from rdflib.namespace import XSD

    if isinstance(o, rdflib.Literal) and o.datatype == XSD.string:
        return rdflib.Literal(str(o))
    return o


def rule_plan(shapes_ttl: str) -> list[str] | None:
    """The CONSTRUCT queries of a shapes file's SPARQL rules, prefixes declared, in the order
    pyshacl applies them; None when direct execution could not mirror pyshacl exactly."""
    import rdflib
    from rdflib.namespace import RDF, SH

    g = _graph(shapes_ttl)

    def order(node: Any) -> float:
        value = g.value(node, SH.order)
        return float(value) if value is not None else 0.0

    shapes = sorted({s for s in g.subjects(SH.rule, None)}, key=lambda s: (order(s), str(s)))
    targets = (SH.targetClass, SH.targetSubjectsOf, SH.targetObjectsOf)
    plan: list[str] = []
    for shape in shapes:
        if any(g.value(shape, t) is not None for t in targets) or \
                (shape, RDF.type, RDF.type) in g or g.value(shape, SH.targetNode) is None:
            return None
        rules = list(g.objects(shape, SH.rule))
        for rule in sorted(rules, key=lambda r: order(r)):  # stable: pyshacl's tie order
            if (rule, RDF.type, SH.SPARQLRule) not in g:
                return None  # a triple rule or JavaScript rule: pyshacl's
            if g.value(rule, SH.condition) is not None or \
                    g.value(rule, SH.deactivated) == rdflib.Literal(True):
                return None
            for construct in g.objects(rule, SH.construct):
                text = str(construct)
                if "$this" in text or "?this" in text:
                    return None
                plan.append(_declared(g, rule) + text)
    return plan


def rule_predicates(shapes_ttl: str) -> frozenset[str] | None:
    """Every predicate IRI the direct rules of a shapes file read (their WHERE clauses, paths
    and EXISTS included) or write (their templates): a graph's triples of other predicates
    cannot change what they derive, so derive_file may be given only these (a build loads
    half the graph instead of all of it). None when that is not known: a rule pyshacl runs, a
    variable or negated predicate, a GRAPH or SERVICE clause, a query rdflib cannot parse."""
    io = rule_io(shapes_ttl)
    if io is None:
        return None
    return frozenset().union(*(reads | writes for reads, writes in io))


def rule_io(shapes_ttl: str) -> list[tuple[frozenset[str], frozenset[str]]] | None:
    """For each query of rule_plan, in its order: the predicate IRIs it reads (its WHERE
    clause) and those it writes (its template); None as rule_predicates says."""
    return plan_io(rule_plan(shapes_ttl))


def plan_io(plan: list[str] | None) -> list[tuple[frozenset[str], frozenset[str]]] | None:
    """rule_io of a plan already made (rule_plan)."""
    out = []
    for query in plan or []:
        found = _query_io(query)
        if found is None:
            return None
        out.append(found)
    return out if plan is not None else None


def _query_io(query: str) -> tuple[frozenset[str], frozenset[str]] | None:
    from rdflib import URIRef
    from rdflib.paths import AlternativePath, InvPath, MulPath, NegatedPath, SequencePath
    from rdflib.plugins.sparql import prepareQuery
    from rdflib.plugins.sparql.parserutils import CompValue

    reads: set[str] = set()
    writes: set[str] = set()

    def predicate(p: Any, found: set[str]) -> bool:
        if isinstance(p, URIRef):
            found.add(str(p))
            return True
        if isinstance(p, (SequencePath, AlternativePath)):
            return all(predicate(a, found) for a in p.args)
        if isinstance(p, InvPath):
            return predicate(p.arg, found)
        if isinstance(p, MulPath):
            return predicate(p.path, found)
        return False  # a variable, a negated path (NegatedPath: any predicate but some)

    def triples_ok(groups: Any, found: set[str]) -> bool:
        # a BGP's triples are (s, p, o); a TriplesBlock the parser left (inside EXISTS)
        # holds flat lists of terms, three by three
        flat = [t for group in groups for t in group]
        return not len(flat) % 3 and all(predicate(p, found) for p in flat[1::3])

    def walk(node: Any) -> bool:
        if isinstance(node, CompValue):
            if node.name in ("Graph", "ServiceGraphPattern"):
                return False
            # dict.get: CompValue.get answers a missing key with the key's name
            if not triples_ok(list(dict.get(node, "triples") or []), reads):
                return False
            if node.name == "ConstructQuery" and \
                    not triples_ok(list(dict.get(node, "template") or []), writes):
                return False
            return all(walk(v) for k, v in node.items()
                       if k not in ("triples", "template", "_vars"))
        if isinstance(node, NegatedPath):
            return False
        if isinstance(node, (list, tuple)):
            return all(walk(v) for v in node)
        return True

    try:
        algebra = prepareQuery(query).algebra
    except Exception:  # noqa: BLE001 - a query rdflib cannot read: no claim about it
        return None
    if not walk(algebra):
        return None
    return frozenset(reads), frozenset(writes)


def deferred_rules(io: list[tuple[frozenset[str], frozenset[str]]]) -> set[int]:
    """The rules (indexes into rule_plan) that may run last, all at once, as CONSTRUCT
    queries on the store the others leave, giving what running every rule in turn gives: a
    rule whose output no later rule reads, and whose input no later rule that is not itself
    deferred writes (rdf:type counts as any other predicate)."""
    chosen = {i for i, (_, writes) in enumerate(io)
              if not any(writes & reads for reads, _ in io[i + 1:])}
    while True:  # a rule kept in turn may write what an earlier deferred one reads
        kept = {i for i in chosen if not any(io[j][1] & io[i][0] for j in
                                             range(i + 1, len(io)) if j not in chosen)}
        if kept == chosen:
            return chosen
        chosen = kept


def _declared(g: Any, rule: Any) -> str:
    """The PREFIX lines of a rule's sh:prefixes declarations."""
    from rdflib.namespace import SH

    lines = []
    for holder in g.objects(rule, SH.prefixes):
        for decl in g.objects(holder, SH.declare):
            prefix, ns = g.value(decl, SH.prefix), g.value(decl, SH.namespace)
            if prefix is not None and ns is not None:
                lines.append(f"PREFIX {prefix}: <{ns}>\n")
    return "".join(sorted(set(lines)))


def direct_rules(data: Any, plan: list[str]) -> Any:
    """Run `plan` (rule_plan) on a pyoxigraph store holding `data`; the triples the rules
    added, as an rdflib graph."""
    import pyoxigraph as ox
    import rdflib

    from pytest_kgbench.core.errors import InputError

    store = ox.Store()
    store.load(data.serialize(format="nt"), format=ox.RdfFormat.N_TRIPLES)
    before = len(store)
    raw = {q.triple for q in store}
    for query in plan:
        triples = store.query(query)
        if not isinstance(triples, ox.QueryTriples):
            raise InputError("shapes.ttl", f"a SPARQL rule is not a CONSTRUCT: {query[:200]}")
        store.extend([ox.Quad(t.subject, t.predicate, t.object, ox.DefaultGraph())
                      for t in triples])
    derived = rdflib.Graph()
    if len(store) == before:
        return derived
    text = ox.serialize([q.triple for q in store if q.triple not in raw],
                        format=ox.RdfFormat.N_TRIPLES) or b""
    for s, p, o in rdflib.Graph().parse(data=text.decode("utf-8"), format="nt"):
        derived.add((s, p, _plain_string(o)))
    return derived


def to_sorted_ntriples(graph: Any) -> str:
    """N-Triples, one per line, sorted: the same graph always gives the same bytes — each
    term in pyoxigraph's canonical N-Triples, as the build writes its files."""
    import pyoxigraph as ox

    text = ox.serialize(ox.parse(graph.serialize(format="nt", encoding="utf-8"),
                                 format=ox.RdfFormat.N_TRIPLES),
                        format=ox.RdfFormat.N_TRIPLES) or b""
    return "".join(sorted(line + "\n" for line in text.decode("utf-8").splitlines()
                          if line.strip()))


DERIVED = "urn:kgbench:derived"  # the named graph the rules' triples are gathered in


# many parameters: the graph, the rules, where, and four choices a test forces one at a time
def derive_file(ntriples: Path, shapes_ttl: str, out: Path, work: Path | None = None, *,
                defer: bool | None = None, on_disk: bool | None = None,
                groups: frozenset[str] = frozenset(), part_bytes: int | None = None) -> int:
    """Run a pack's SHACL rules on the graph of `ntriples` (a file, sorted N-Triples) and
    write the triples they derive, sorted N-Triples (to_sorted_ntriples' bytes), into `out`;
    returns how many.

    The direct path of run_rules without any rdflib graph, or any triple in Python:
    pyoxigraph loads the file, each rule's CONSTRUCT runs as the SPARQL update inserting its
    template (`as_insert`; the same solutions, every rule seeing what the rules before it
    added), the store is dumped to a file (derive_dump), and DuckDB writes its lines sorted
    (sort_dump). A rule set direct execution cannot mirror runs through pyshacl on the
    parsed graph (run_rules). `work` (default: the system's temporary folder) holds the
    dump, an on-disk store (derive_dump's `on_disk`) and whatever DuckDB spills."""
    import tempfile

    work = Path(work or tempfile.gettempdir())
    done = derive_dump(ntriples, shapes_ttl, out, work, defer=defer, on_disk=on_disk,
                       groups=groups, part_bytes=part_bytes)
    return done if isinstance(done, int) else sort_dump(done, out, work)


DEFER_FROM = 32 << 20  # bytes of input from which derive_dump runs the last rules apart
ON_DISK_FROM = 3 << 29  # bytes of input (1.5 GiB) from which derive_dump's store is on disk
#                         (RocksDB; 200,000 issuers' 1.0 GiB stays in memory: 4.4 GB and 198 s
#                         there, 2.5 GB and 669 s on disk)


# many parameters: derive_file's
def derive_dump(ntriples: Path, shapes_ttl: str, out: Path, work: Path, *,
                defer: bool | None = None, on_disk: bool | None = None,
                groups: frozenset[str] = frozenset(), part_bytes: int | None = None
                ) -> list[Path] | int:
    """derive_file up to its dump: the files in `work` of the triples the rules derived that
    the raw graph does not hold, a line each, in no order (for sort_dump); or, where pyshacl
    ran the rules, how many it derived, written into `out` already.

    The rules whose output no later rule reads (deferred_rules) are not inserted: once the
    others have run, they run together, as CONSTRUCT queries on threads of their own (the
    store answers queries side by side; its updates do not), each written to a file of its
    own beside the store's dump — unless one of them writes a predicate the raw graph uses
    (what it derives could be there already): then every rule is inserted in turn. `defer`
    says whether to look for such rules; by default, from DEFER_FROM bytes of input (on a
    small graph the threads and rdflib's reading of the rules cost more than they save).

    `on_disk` puts the store in a folder of `work` (_disk_store), by default from
    ON_DISK_FROM bytes of input (in memory: 16 GB and growing for 5.39 GB of input) — unless
    the pack names the predicates its rules join nodes by (`groups`, rule_parts): then, from
    ON_DISK_FROM bytes (or whenever `part_bytes` is given; 0: never), the graph is split into
    parts of about `part_bytes` (rule_parts.PART_BYTES) and the rules run on each part in
    memory in turn (_derive_in_parts)."""
    import pyoxigraph as ox

    plan = rule_plan(shapes_ttl)
    updates = [as_insert(q) for q in plan] if plan is not None else []
    if plan is None or any(u is None for u in updates):
        return _derive_by_pyshacl(ntriples, shapes_ttl, out)
    parts = _parts(ntriples, groups, part_bytes)
    if parts is not None:
        return _derive_in_parts(ntriples, shapes_ttl, out, work, (groups, parts), defer=defer)
    raw, mine = f"<{DERIVED}/raw>", f"<{DERIVED}>"
    stem = f"{out.name}.{os.getpid()}"
    if on_disk is None:
        on_disk = ntriples.stat().st_size >= ON_DISK_FROM
    folder = work / f"{stem}.store" if on_disk else None
    store = _disk_store(ntriples, raw, folder) if folder is not None else \
        _memory_store(ntriples, raw)
    in_raw = _predicates(store, raw)
    later = _later(plan, in_raw, ntriples.stat().st_size >= DEFER_FROM if defer is None
                   else defer)
    for k, update in enumerate(updates):  # each reads the raw graph and what rules added
        if k not in later:
            _insert(store, plan[k], str(update), (raw, mine),
                    work / f"{stem}.rule" if folder is not None else None)
    _drop_held(store, (raw, mine), in_raw)
    dumps = [work / f"{stem}.all"]
    files, wait = _construct_apart(store, {k: plan[k] for k in sorted(later)},
                                   f"FROM {raw} FROM {mine}", work, stem)
    dumps += files
    store.dump(str(dumps[0]), ox.RdfFormat.N_TRIPLES, from_graph=ox.NamedNode(mine[1:-1]))
    wait()
    if folder is not None:  # the store's files, gigabytes at 1,000,000 issuers, not kept
        import shutil

        del store
        shutil.rmtree(folder, ignore_errors=True)
    return dumps


def _drop_held(store: Any, graphs: tuple[str, str], in_raw: set[str]) -> None:
    """What the rules derived (the second of `graphs`) that the raw graph (the first, its
    predicates `in_raw`) holds already is not theirs: looked for only under the predicates
    both graphs use (a scan of each graph's predicates, not a probe of raw for every derived
    triple: 7 s at 100,000 issuers)."""
    raw, mine = graphs
    shared = _predicates(store, mine) & in_raw
    if shared:
        store.update(f"DELETE {{ GRAPH {mine} {{ ?s ?p ?o }} }} WHERE {{ VALUES ?p "
                     f"{{ {' '.join(sorted(shared))} }} GRAPH {mine} {{ ?s ?p ?o }} "
                     f"GRAPH {raw} {{ ?s ?p ?o }} }}")


def _later(plan: list[str], in_raw: set[str], defer: bool) -> set[int]:
    """The rules derive_dump runs last, apart (deferred_rules; none unless `defer`, or when
    one of them writes a predicate of the raw graph, `in_raw`)."""
    io = plan_io(plan) if defer else None
    later = deferred_rules(io) if io is not None else set()
    if io is not None and any(f"<{p}>" in in_raw for i in later for p in io[i][1]):
        return set()
    return later


def _parts(ntriples: Path, groups: frozenset[str], part_bytes: int | None) -> int | None:
    """How many parts derive_dump splits the graph into (its `groups` and `part_bytes`), or
    None: the rules run on the whole graph."""
    from pytest_kgbench.packs.rdf import rule_parts

    if not groups or part_bytes == 0 or \
            (part_bytes is None and ntriples.stat().st_size < ON_DISK_FROM):
        return None
    count = rule_parts.part_count(ntriples, part_bytes or rule_parts.PART_BYTES)
    return count if count > 1 else None


def _derive_in_parts(ntriples: Path, shapes_ttl: str, out: Path, work: Path,
                     parts: tuple[frozenset[str], int], *, defer: bool | None) -> list[Path]:
    """derive_dump on each part of the graph in turn (rule_parts.split_parts: `parts` is the
    predicates the groups are joined by and how many parts), in memory: every part's dumps.
    A triple derived in two parts (from the shared triples) is one line after sort_dump."""
    import shutil

    from pytest_kgbench.packs.rdf import rule_parts

    stem = f"{out.name}.{os.getpid()}"
    try:
        files = rule_parts.split_parts(ntriples, parts[0], work, parts[1], stem)
    finally:
        shutil.rmtree(work / f"{stem}.spill", ignore_errors=True)
    dumps: list[Path] = []
    try:
        for k, part in enumerate(files):
            done = derive_dump(part, shapes_ttl, out.with_name(f"{out.name}.part{k}"), work,
                               defer=defer, on_disk=False, part_bytes=0)
            assert isinstance(done, list)  # derive_dump read the same plan
            dumps += done
            part.unlink()
            trim_heap()  # the part's store freed before the next one's is built
    except BaseException:
        for dump in dumps:
            dump.unlink(missing_ok=True)
        raise
    finally:
        for part in files:
            part.unlink(missing_ok=True)
    return dumps


def _memory_store(ntriples: Path, graph: str) -> Any:
    """A pyoxigraph store in memory holding `ntriples` in the named graph `graph` (lenient:
    the file is the build's own N-Triples, its terms written by DuckDB from the mapping's
    checked templates or by a serializer; a quarter of the load's time)."""
    import pyoxigraph as ox

    store = ox.Store()
    store.load(path=str(ntriples), format=ox.RdfFormat.N_TRIPLES,
               to_graph=ox.NamedNode(graph[1:-1]), lenient=True)
    return store


def _insert(store: Any, rule: str, update: str, graphs: tuple[str, str],
            scratch: Path | None) -> None:
    """One rule of the plan run against the raw graph and what rules added (`graphs`: the
    raw graph's and the derived graph's names, bracketed), its triples added to the derived
    graph: as the SPARQL update `update` (as_insert's) in memory, or, with `scratch` (an
    on-disk store), as its CONSTRUCT bulk-loaded through that file (_insert_by_load)."""
    raw, mine = graphs
    if scratch is not None:
        _insert_by_load(store, rule, f"FROM {raw} FROM {mine}", mine, scratch)
    else:
        store.update(update.format(into=f"GRAPH {mine}", using=f"USING {raw} USING {mine}"))


def _disk_store(ntriples: Path, graph: str, folder: Path) -> Any:
    """A pyoxigraph store in `folder` (RocksDB) holding `ntriples` in the named graph
    `graph`: bulk_load writes its index files a batch at a time, so the process holds a
    batch, not the graph (lenient as derive_dump's in-memory load)."""
    import shutil

    import pyoxigraph as ox

    shutil.rmtree(folder, ignore_errors=True)  # a killed worker's, of the same pid
    store = ox.Store(str(folder))
    store.bulk_load(path=str(ntriples), format=ox.RdfFormat.N_TRIPLES,
                    to_graph=ox.NamedNode(graph[1:-1]), lenient=True)
    return store


def _insert_by_load(store: Any, rule: str, dataset: str, graph: str, scratch: Path) -> None:
    """A rule's CONSTRUCT over `dataset` added to the named graph `graph`: its triples
    written to `scratch` and bulk-loaded, not inserted by a SPARQL update (an on-disk store
    runs an update as one transaction, which holds every triple it adds in memory). The same
    triples as as_insert's update: an INSERT's template instantiated by the same solutions,
    a store holding each triple once."""
    import pyoxigraph as ox

    query = construct_from(rule, dataset)
    assert query is not None  # as_insert read it
    triples = store.query(query)
    assert isinstance(triples, ox.QueryTriples)
    try:
        with scratch.open("wb") as fh:
            ox.serialize(triples, fh, ox.RdfFormat.N_TRIPLES)
        del triples  # the query's hold on the store let go before it is written
        store.bulk_load(path=str(scratch), format=ox.RdfFormat.N_TRIPLES,
                        to_graph=ox.NamedNode(graph[1:-1]), lenient=True)
    finally:
        scratch.unlink(missing_ok=True)


def _derive_by_pyshacl(ntriples: Path, shapes_ttl: str, out: Path) -> int:
    """The rules run by pyshacl (rules that are not plain SPARQL CONSTRUCTs), their sorted
    N-Triples written into `out`: how many lines."""
    import rdflib

    derived = run_rules(rdflib.Graph().parse(ntriples, format="nt"), shapes_ttl)
    text = to_sorted_ntriples(derived)
    out.write_text(text, encoding="utf-8")
    return text.count("\n")


def _predicates(store: Any, graph: str) -> set[str]:
    """The distinct predicates of one named graph of a pyoxigraph store."""
    import pyoxigraph as ox

    rows = store.query(f"SELECT DISTINCT ?p WHERE {{ GRAPH {graph} {{ ?s ?p ?o }} }}")
    assert isinstance(rows, ox.QuerySolutions)
    return {str(row[0]) for row in rows}  # the solutions, which hold the store, let go


def _construct_apart(store: Any, rules: dict[int, str], dataset: str, work: Path,
                     stem: str) -> tuple[list[Path], Callable[[], None]]:
    """The rules (CONSTRUCTs by their place in the plan) started on threads of their own over
    `dataset`, each dumped to a file of its own in `work`: the files, and a function that
    waits for every thread and raises the first failure."""
    import threading

    import pyoxigraph as ox

    failed: list[BaseException] = []

    def construct(query: str, path: Path) -> None:
        try:
            triples = store.query(query)
            assert isinstance(triples, ox.QueryTriples)  # as_insert read a CONSTRUCT
            with path.open("wb") as fh:
                ox.serialize(triples, fh, ox.RdfFormat.N_TRIPLES)
        except BaseException as exc:  # noqa: BLE001 - raised below, on the caller's thread
            failed.append(exc)

    files: list[Path] = []
    threads = []
    for k, rule in rules.items():
        query = construct_from(rule, dataset)
        assert query is not None  # as_insert read it
        files.append(work / f"{stem}.{k}")
        threads.append(threading.Thread(target=construct, args=(query, files[-1]),
                                        name=f"kgbench-rule-{k}", daemon=True))
        threads[-1].start()

    def wait() -> None:
        for thread in threads:
            thread.join()
        if failed:
            raise failed[0]

    return files, wait


def sort_dump(dumps: list[Path], out: Path, work: Path) -> int:
    """derive_dump's files written into `out` as one, sorted and distinct (and removed); how
    many lines."""
    import duckdb

    trim_heap()  # a freed store's memory back to the system before DuckDB takes its own
    con = duckdb.connect(config={"threads": 2, "memory_limit": "1GB",
                                 "temp_directory": str(work / "duckdb-spill")})
    # a store holds a triple once and N-Triples writes a term one way: one dump's lines are
    # distinct already, and only sorted here; a rule run apart may give a line twice
    distinct = "DISTINCT " if len(dumps) > 1 else ""
    try:
        count = con.execute(f"COPY (SELECT {distinct}line FROM read_csv(?, columns = "
                            "{'line': 'VARCHAR'}, header = false, delim = '\t', quote = '', "
                            "escape = '', auto_detect = false) ORDER BY line) TO ? (FORMAT "
                            "csv, HEADER false, QUOTE '', ESCAPE '', DELIMITER '\t')",
                            [[str(d) for d in dumps], str(out)]).fetchone()
    finally:
        con.close()
        for d in dumps:
            d.unlink(missing_ok=True)
    if not count or not count[0]:
        out.write_text("", encoding="utf-8")
        return 0
    return int(count[0])


def derive_apart(ntriples: Path, shapes_ttl: str, out: Path, work: Path,
                 groups: frozenset[str] = frozenset()) -> Callable[[], int]:
    """derive_file (its `groups` too) in a process of its own, started now, so that a build
    goes on beside it (pyoxigraph holds the GIL: a thread would not run beside Python).
    Returns the wait: it returns derive_file's count once `out` is written. The worker stops
    at its dump (derive_dump) and exits without freeing its store (3 s of a gigabytes-large
    store's teardown, left to the OS); the dump is sorted here, once it has gone. A worker that
    fails is not second-guessed: derive_file runs again here, raising what it raises."""
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pytest_kgbench.packs.rdf.ontology import "
         "_derive_worker; _derive_worker(sys.argv[1:])", str(ntriples), str(out), str(work),
         json.dumps(sorted(groups))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdin is not None
    proc.stdin.write(shapes_ttl.encode("utf-8"))
    proc.stdin.close()

    return _Worker(proc, (ntriples, shapes_ttl, out, work), groups)


class _Worker:
    """derive_apart's worker under way: called, waits for it (derive_file's count, once `out`
    is written); stop() ends it unawaited (a build that failed beside it: the worker would
    otherwise go on alone, holding its store, gigabytes at 200,000 issuers)."""

    def __init__(self, proc: Any, args: tuple[Path, str, Path, Path],
                 groups: frozenset[str]) -> None:
        self.proc, self.args, self.groups = proc, args, groups

    def __call__(self) -> int:
        ntriples, shapes_ttl, out, work = self.args
        proc = self.proc
        assert proc.stdout is not None
        stdout = proc.stdout.read()
        proc.stdout.close()
        if proc.wait() == 0:
            done = json.loads(stdout.decode("utf-8").strip().splitlines()[-1])
            if "count" in done:
                return int(done["count"])
            return sort_dump([Path(d) for d in done["dumps"]], out, work)
        return derive_file(ntriples, shapes_ttl, out, work, groups=self.groups)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _derive_worker(argv: list[str]) -> None:
    """derive_apart's process: derive_dump(argv[0], the shapes on stdin, argv[1], argv[2]),
    what it gives printed, and out at once (os._exit: no store freed on the way)."""
    import json
    import sys

    # the answer's pipe kept for the answer: anything else written to stdout (a library's
    # progress bar) would fill the pipe, which the build reads only once it waits, and stop
    # the worker until then
    answer = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    done = derive_dump(Path(argv[0]), sys.stdin.read(), Path(argv[1]), Path(argv[2]),
                       groups=frozenset(json.loads(argv[3])))
    answer.write(json.dumps({"count": done} if isinstance(done, int)
                            else {"dumps": [str(d) for d in done]}) + "\n")
    answer.flush()
    os._exit(0)


def trim_heap() -> None:
    """Hand the C heap's free memory back to the system (glibc's malloc_trim; elsewhere
    nothing): a freed store's pages otherwise stay counted in the process's RSS."""
    import ctypes
    import ctypes.util
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # pragma: no cover - a libc without it (musl)
            pass


def _construct_parts(construct: str) -> tuple[str, str, str] | None:
    """A rule's `CONSTRUCT { T } WHERE { W }` as (what precedes it, T, `WHERE { W }`), or None
    when it is not that plain form (CONSTRUCT WHERE, a solution modifier after it, a FROM
    clause)."""
    import re

    head = re.search(r"\bCONSTRUCT\s*\{", construct, re.IGNORECASE)
    if head is None:
        return None
    depth, i, text = 0, head.end() - 1, construct
    while i < len(text):
        ch = text[i]
        if ch in "\"'":  # a string: skip to its closing quote
            close = text.find(ch, i + 1)
            while close > 0 and text[close - 1] == "\\":
                close = text.find(ch, close + 1)
            if close < 0:
                return None
            i = close
        elif ch == "#":  # a comment, to the end of the line
            i = text.find("\n", i)
            if i < 0:
                return None
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        i += 1
    else:
        return None
    rest = text[i + 1:]
    if not re.match(r"\s*WHERE\s*\{", rest, re.IGNORECASE) or \
            re.search(r"\b(LIMIT|OFFSET|ORDER\s+BY)\b", rest, re.IGNORECASE):
        return None
    return text[:head.start()], text[head.end():i], rest


def as_insert(construct: str) -> str | None:
    """A rule's `CONSTRUCT { T } WHERE { W }` as the template of the update
    `INSERT { {into} { T } } {using} WHERE { W }` (str.format fills in a GRAPH and the USING
    clauses; its PREFIX lines kept), or None when it is not that plain form (CONSTRUCT
    WHERE, a solution modifier after it, a FROM clause)."""
    parts = _construct_parts(construct)
    if parts is None:
        return None
    head, body, where = (x.replace("{", "{{").replace("}", "}}") for x in parts)
    return head + "INSERT {{ {into} {{ " + body + " }} }} {using}" + where


def construct_from(construct: str, dataset: str) -> str | None:
    """The same CONSTRUCT with `dataset` (FROM clauses) before its WHERE; None as as_insert."""
    parts = _construct_parts(construct)
    if parts is None:
        return None
    head, body, where = parts
    return f"{head}CONSTRUCT {{{body}}} {dataset} {where}"


def defined_names(ttl: str) -> list[str]:
    """The local names and CURIEs of everything a Turtle file of axioms or shapes defines."""
    graph = _graph(ttl)
    out: set[str] = set()
    for subject in set(graph.subjects()):
        text = str(subject)
        if text.startswith(("http://", "https://")):
            local = text.rsplit("#", 1)[-1].rsplit("/", 1)[-1]
            if local:
                out.add(local)
                out.add(_curie(graph, subject))
    return sorted(out)
