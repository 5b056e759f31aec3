"""SPARQL JSON results (the SPARQL 1.1 Query Results JSON Format) as the endpoint engine reads
them: as they arrive, keeping the bindings a capped result can show and counting the rest,
and stopping the read once the count is past its cap, so a result of any size costs the
harness what the caps keep (a cross join of the graph, 200 MiB of JSON, once took 831 MiB of
the harness's memory read whole). Closing the connection there also ends the server's work
on a query whose results it streams (Oxigraph's)."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pytest_kgbench.engines import CAPS, Caps, QueryResult, fill_capped, jsonable

_BINDINGS = re.compile(r'"bindings"\s*:\s*\[')
_VARS = re.compile(r'"vars"\s*:\s*(\[[^\]]*\])')
_SPACE = " \t\r\n,"


def term(binding: Mapping[str, Any] | None) -> Any:
    """A SPARQL JSON term as the in-process engines give its cell: a literal's Python value
    (rdflib's conversion of its datatype, then `jsonable`), an IRI or a blank node's label."""
    if binding is None:
        return None
    kind = binding.get("type")
    value = str(binding.get("value", ""))
    if kind in ("literal", "typed-literal"):
        from rdflib import Literal, URIRef

        datatype = binding.get("datatype")
        return jsonable(Literal(value, lang=binding.get("xml:lang"),
                                datatype=URIRef(datatype) if datatype else None).toPython())
    return value


def fill_results(result: QueryResult, doc: Mapping[str, Any], caps: Caps = CAPS) -> None:
    """SPARQL JSON results into `result`, capped as the in-process engines cap theirs."""
    if "boolean" in doc:
        fill_capped(result, ["ask"], [[bool(doc["boolean"])]], lambda v: v, caps)
        return
    names = [str(v) for v in (doc.get("head") or {}).get("vars") or []]
    bindings = (doc.get("results") or {}).get("bindings") or []

    def rows() -> Iterator[list[Any]]:
        for b in bindings:
            yield [b.get(n) for n in names]

    fill_capped(result, names, rows(), term, caps)


class ResultStream:
    """SPARQL JSON read chunk by chunk (`feed`, False once no more is needed): the head's
    variables, the first `caps.rows` bindings, and how many bindings there were, up to one
    past `caps.count_rows`. A document not laid out as head, then the bindings (an ASK's
    boolean, say) is kept whole and read at the end (`finish`)."""

    def __init__(self, caps: Caps = CAPS) -> None:
        self.caps = caps
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = ""              # what is not read yet (all of it until the bindings)
        self.vars: list[str] | None = None
        self.kept: list[dict[str, Any]] = []
        self.count = 0
        self.streaming = False      # inside the bindings' array
        self.done = False           # the array ended, or the count passed its cap
        self.tail = ""              # the last characters seen, for a server's error message
        self._json = json.JSONDecoder()

    def feed(self, chunk: bytes) -> bool:
        """Take the next chunk of the reply; False: the rest is not needed (stop reading)."""
        text = self.decoder.decode(chunk)
        self.tail = (self.tail + text)[-1000:]
        self.text += text
        if not self.streaming and not self.done:
            found = _BINDINGS.search(self.text)
            if found is None:
                return True
            head = _VARS.search(self.text, 0, found.start())
            if head is None:
                return True  # no head before the bindings: read whole at the end
            self.vars = [str(v) for v in json.loads(head.group(1))]
            self.text = self.text[found.end():]
            self.streaming = True
        if self.streaming:
            self._read_bindings()
        return not self.done

    def _read_bindings(self) -> None:
        pos, text = 0, self.text
        while True:
            while pos < len(text) and text[pos] in _SPACE:
                pos += 1
            if pos >= len(text):
                break
            if text[pos] == "]":
                self.done, self.streaming = True, False
                break
            try:
                binding, end = self._json.raw_decode(text, pos)
            except ValueError:
                break  # a binding not all here yet (or not JSON: `finish` says so)
            self.count += 1
            if len(self.kept) < self.caps.rows:
                self.kept.append(binding if isinstance(binding, dict) else {})
            pos = end
            if self.count > self.caps.count_rows:
                self.done, self.streaming = True, False
                break
        self.text = text[pos:]

    def finish(self) -> dict[str, Any] | None:
        """At the end of the reply: the whole document when it was not streamed (None when it
        was). Raises ValueError when the reply is not SPARQL JSON (or ended inside it)."""
        if self.done:
            return None
        if self.streaming:
            raise ValueError("the reply ended inside its bindings")
        doc = json.loads(self.text + self.decoder.decode(b"", final=True))
        if not isinstance(doc, dict):
            raise ValueError("the reply is not a JSON object")
        return doc

    def fill(self, result: QueryResult) -> None:
        """The streamed bindings into `result`, capped as `fill_results` caps a document: the
        bindings past the kept ones are counted, never held."""
        names = list(self.vars or [])
        kept = self.kept

        def rows() -> Iterator[list[Any]]:
            for b in kept:
                yield [b.get(n) for n in names]
            for _ in range(self.count - len(kept)):
                yield []  # past caps.rows: counted by fill_capped, never converted

        fill_capped(result, names, rows(), term, self.caps)
