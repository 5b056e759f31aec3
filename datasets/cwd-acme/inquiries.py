"""The pack's questions: the 44 inquiries of investigation/acme-benchmark.ttl, read at run time
(questions/cwd-acme.yaml is `{generate: "inquiries:questions"}`).

Each inquiry becomes one question: its QandA:prompt (whitespace normalised) as the text, one
`rows` answer field, the published SQL as gold.sql (for an inquiry with two, the first that
runs on DuckDB) and the published SPARQL, rewritten as README.md says, as gold.sparql. The key
is the SQL's result (gold.sql). findings.yaml names the inquiries whose references disagree.

SPARQL rewrites (nothing else is changed):
  R1 every `SERVICE [SILENT] <iri>|prefix:local {` becomes `{`: the service block, the virtual
     graph the mapping makes on data.world, becomes a group over the default graph, which is
     the materialised mapping. The service IRI must end in /mapped.
  R2 rdf:, rdfs:, xsd:, owl: used but not declared (data.world predeclares them) get their
     standard PREFIX line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

BENCH = "external:cwd-benchmark-data/ACME_Insurance/investigation/acme-benchmark.ttl"
QA = "http://models.data.world/benchmarks/QandA#"
DWT = "https://templates.data.world/"
STD_PREFIXES = {"rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
                "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
                "xsd": "http://www.w3.org/2001/XMLSchema#",
                "owl": "http://www.w3.org/2002/07/owl#"}
SERVICE_RE = re.compile(
    r"SERVICE\s+(?:SILENT\s+)?(<[^>\s]*>|[A-Za-z][\w.-]*:[\w.-]*|:[\w.-]*)\s*\{", re.I)
PREFIX_RE = re.compile(r"PREFIX\s+([\w.-]*):\s*<([^>]*)>", re.I)


def short_id(iri: str) -> str:
    """IQ_03fc5a5571db... -> IQ_03fc5a55."""
    local = iri.rsplit("/", 1)[-1]
    return local[:11]


def rewrite_sparql(query: str) -> str:
    """R1 and R2 of the module docstring."""
    prefixes = dict(PREFIX_RE.findall(query))

    def unwrap(m: re.Match[str]) -> str:
        ref = m.group(1)
        if ref.startswith("<"):
            iri = ref[1:-1]
        else:
            pfx, local = ref.split(":", 1)
            iri = prefixes[pfx] + local
        if not iri.endswith("/mapped"):
            raise ValueError(f"a SERVICE other than the mapped graph: {iri}")
        return "{"

    out = SERVICE_RE.sub(unwrap, query)
    body = PREFIX_RE.sub("", out)
    missing = [p for p in STD_PREFIXES
               if p not in prefixes and re.search(rf"(?<![\w:<]){p}:", body)]
    return "".join(f"PREFIX {p}: <{STD_PREFIXES[p]}>\n" for p in missing) + out


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def read_inquiries(path: Path) -> list[dict[str, Any]]:
    """[{iri, id, text, sql: [...], sparql: [...]}] in IRI order."""
    import rdflib

    graph = rdflib.Graph().parse(path, format="turtle")
    qa, dwt = rdflib.Namespace(QA), rdflib.Namespace(DWT)
    out = []
    for inq in sorted(graph.subjects(rdflib.RDF.type, qa.Inquiry)):
        prompts = sorted({_one_line(p) for p in graph.objects(inq, qa.prompt)})
        if len(prompts) != 1:
            raise ValueError(f"{path}: {inq} has {len(prompts)} distinct prompts")
        rec: dict[str, Any] = {"iri": str(inq), "id": short_id(str(inq)), "text": prompts[0],
                               "sql": [], "sparql": []}
        for q in sorted(graph.objects(inq, qa.expects)):
            text = str(graph.value(q, qa.queryText))
            if (q, rdflib.RDF.type, dwt.SqlQuery) in graph:
                rec["sql"].append(text)
            elif (q, rdflib.RDF.type, dwt.SparqlQuery) in graph:
                rec["sparql"].append(text)
        out.append(rec)
    return out


def findings(pack: Any) -> dict[str, dict[str, str]]:
    import yaml

    data = yaml.safe_load((pack.dir / "findings.yaml").read_text(encoding="utf-8")) or {}
    return {str(k): dict(v) for k, v in data.items()}


def questions(pack: Any) -> list[dict[str, Any]]:
    """The question dicts (validated by the plugin like a YAML file's)."""
    import duckdb

    from pytest_kgbench.packs import tables as tabledata

    inquiries = read_inquiries(pack.resolve_file(BENCH))
    found = findings(pack)
    where = str(pack.dir / "findings.yaml")
    stale = sorted(set(found) - {i["id"] for i in inquiries})
    if stale:
        raise ValueError(f"{where}: {stale} name no inquiry of the benchmark")
    con = tabledata.load(pack.data, loader=pack.data_loader())
    out = []
    try:
        for inq in inquiries:
            finding = found.get(inq["id"], {})
            if len(inq["sparql"]) != 1 or not inq["sql"]:
                raise ValueError(f"{inq['iri']}: expected SQL and one SPARQL query")
            sql, result, errors = None, None, []
            for text in inq["sql"]:
                try:
                    result = con.execute(text).fetchall()
                except duckdb.Error as exc:
                    errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                    continue
                sql = text
                break
            if sql is None and "skip" not in finding:
                raise ValueError(f"{where}: {inq['id']}'s SQL fails ({errors[0]}), and no "
                                 "finding says why (skip)")
            if sql is not None and "skip" in finding:
                raise ValueError(f"{where}: {inq['id']} is skipped because its SQL fails, "
                                 "but it now runs: the finding is stale")
            single = (result is not None and len(result) == 1 and len(result[0]) == 1
                      and isinstance(result[0][0], int))
            question: dict[str, Any] = {
                "id": f"cwd-acme-{inq['id']}",
                "tier": "L1" if single else "L2",
                "text": inq["text"],
                "answer": {"rows": {"kind": "rows"}},
                "gold": {"sql": sql if sql is not None else inq["sql"][0],
                         "sparql": rewrite_sparql(inq["sparql"][0])},
                "key": "gold.sql",
            }
            if finding:
                question["disagreement"] = f"{finding['cause']}: {_one_line(finding['why'])}"
            if "skip" in finding:
                question["skip"] = _one_line(finding["skip"])
            out.append(question)
    finally:
        con.close()
    return out
