"""--batch: single-turn requests through the provider's batch API, at its batch price, while
every item stays a pytest item, graded and banked the moment its own result is fetched.

How a run goes (one `Batcher` per agent and process; every process collects the same items):

1. The first batch-eligible item a process runs (a reading condition asked apart) takes the
   run folder's batch lock (`<run>/batches.json.lock`) and reads `<run>/batches.json`. If no
   batch holds its request, the process builds the request of every batch-eligible item of
   the session (the agent's `batch_plan`), leaves out those the response cache already answers
   and those a batch of this run already holds, and submits the rest: one batch per model.
   Each request's `custom_id` is its response-cache key (the SHA-256 of the exact request and
   the repeat index, agents/support/cache.py), so a custom_id names one request whoever builds it.
   Under xdist the first worker submits; the others, waiting on the lock, find the batch id.
2. Each item then polls its batch (every --batch-poll seconds, a progress line at most every
   PROGRESS_EVERY seconds) until the batch has ended. The process that first sees it ended
   downloads the results under the lock, writing each to `<run>/batch-results/<custom_id>.json`
   and each answer to the response cache, and settling its cost (at the batch price) in the
   spending ledger. The item reads its own result, and is graded and banked.
3. A killed run resumed with --resume finds the batch id in the run folder and fetches the
   results without submitting again (and without paying twice: a fetched result is in the run
   folder and in the response cache).

What a result that is not an answer means (the fault classes of agents/support/faults.py):
- `errored` with a status the harness owns (401/403: halt; 400/404: halt; a prompt too long:
  the item is skipped with the reason) raises that class;
- `expired`, `canceled`, or `errored` with a transient cause (overload, 5xx, rate limit): the
  item is asked again interactively, at the interactive price, and its record says why
  (`sent.batch_fallback`);
- a results stream cut mid-line keeps the results before the cut; an item whose result was
  after it is a `TransientModelError` (rerun, never graded), and its rerun downloads again.

The spending cap (--max-cost) is checked once for a batch, when it is submitted: its worst case
(every request's input at the dearest batch input price plus every output token it may write)
is reserved in the ledger; a batch whose worst case would pass the cap is not submitted
(`BudgetReached`: the run halts, nothing spent). Each fetched result turns its share of the
reservation into its cost. --item-timeout does not bound the wait: a batch takes up to 24 hours,
after which the provider expires what it did not answer.

The judge stays interactive: its input is the answer, which the batch is still making.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_kgbench.agents.support.cache import Budget, ResponseCache, request_key, worst_case
from pytest_kgbench.agents.support.faults import classify_status
from pytest_kgbench.core.errors import HarnessBroken, TransientModelError
from pytest_kgbench.core.pricing import batch_price, dollars

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings

STATE = "batches.json"
RESULTS = "batch-results"
PROGRESS_EVERY = 5.0  # seconds between two progress lines of one process
LOOK_FAILURES = 5     # a batch that cannot be looked at this many times in a row: the item fails
log = logging.getLogger("pytest_kgbench.batch")

# the Messages API's error types, as the status the interactive API would send
ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401,
                "billing_error": 402, "permission_error": 403, "not_found_error": 404,
                "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
                "overloaded_error": 529}


class Truncated(Exception):
    """The results stream ended in the middle of a line."""


@dataclass
class Pending:
    """One request a batch may carry: its key (the custom_id), the request, and what its
    worst case is computed from."""

    key: str
    request: dict[str, Any]
    model_id: str
    max_tokens: int


@dataclass
class Fetched:
    """An item's result: `kind` is succeeded, errored, expired or canceled."""

    kind: str
    batch_id: str
    custom_id: str
    response: dict[str, Any] | None = None
    error: str | None = None
    status: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


class BatchAPI(Protocol):
    """A provider's batch endpoints, through its SDK client."""

    def submit(self, client: Any, requests: list[tuple[str, dict[str, Any]]]) -> str: ...

    def look(self, client: Any, batch_id: str) -> tuple[bool, dict[str, int]]: ...

    def results(self, client: Any, batch_id: str
                ) -> Iterator[tuple[str, str, dict[str, Any] | None, str | None, int | None]]:
        """(custom_id, kind, the response as JSON, the error's message, its status) per
        result; raises Truncated after the last whole line of a cut stream."""
        ...


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class Batcher:
    """The batches of one agent in one process, shared with the run's other processes
    through the run folder."""

    def __init__(self, settings: Settings, api: BatchAPI, client: Callable[[], Any], *,
                 provider: str, cache: ResponseCache | None,
                 say: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.api = api
        self.client = client
        self.provider = provider
        self.cache = cache
        self.say = say
        self.dir = Path(settings.run_dir)
        self.state_path = self.dir / STATE
        self.results_dir = self.dir / RESULTS
        self.budget = (Budget(self.dir, settings.limits.max_cost)
                       if settings.limits.max_cost is not None else None)
        self._looked: dict[str, tuple[float, bool, dict[str, int]]] = {}
        self._said = 0.0

    # --- the run folder ------------------------------------------------------------------

    def _lock(self) -> Any:
        from filelock import FileLock

        self.dir.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.state_path) + ".lock")

    def _state(self) -> dict[str, Any]:
        state = _read(self.state_path)
        return state if isinstance(state, dict) else {"batches": []}

    def result(self, key: str) -> Fetched | None:
        """This run's fetched result of a request, or None."""
        data = _read(self.results_dir / f"{key}.json")
        if not isinstance(data, dict):
            return None
        return Fetched(kind=data["kind"], batch_id=data["batch_id"], custom_id=key,
                       response=data.get("response"), error=data.get("error"),
                       status=data.get("status"))

    def _holding(self, state: Mapping[str, Any], key: str) -> dict[str, Any] | None:
        return next((b for b in state["batches"] if key in b["keys"]), None)

    # --- submitting ----------------------------------------------------------------------

    def _submit(self, state: dict[str, Any], pending: list[Pending]) -> None:
        held = {k for b in state["batches"] for k in b["keys"]}
        todo: dict[str, Pending] = {}
        for p in pending:
            if p.key in held or p.key in todo:
                continue
            if self.cache is not None and self.cache.get(p.key) is not None:
                continue  # answered before: the item is a cache hit, never sent again
            todo[p.key] = p
        by_model: dict[str, list[Pending]] = {}
        for p in todo.values():
            by_model.setdefault(p.model_id, []).append(p)
        for model_id, group in sorted(by_model.items()):
            price = batch_price(self.settings.model.prices.get(model_id))
            worst = {p.key: worst_case(price or {}, p.request, p.max_tokens) for p in group}
            token = None
            if self.budget is not None:
                from pytest_kgbench.core.errors import BudgetReached

                if not price:
                    raise BudgetReached(f"budget: --max-cost needs a price for {model_id}")
                try:
                    token = self.budget.reserve(sum(worst.values()),
                                                token=f"batch:{group[0].key[:16]}")
                except BudgetReached as exc:
                    raise BudgetReached(
                        f"budget: a batch of {len(group)} request(s) to {model_id} is submitted "
                        f"at once and could cost up to ${sum(worst.values()):.4f} at batch "
                        f"prices; ${self.budget.spent():.4f} is spent of --max-cost "
                        f"${self.budget.cap:g}: it is not submitted (select fewer items, raise "
                        "the cap, or run without --batch)") from exc
            try:
                batch_id = self.api.submit(self.client(), [(p.key, p.request) for p in group])
            except BaseException:
                if token is not None and self.budget is not None:
                    self.budget.settle(token, None)
                raise
            state["batches"].append({
                "id": batch_id, "provider": self.provider, "model": model_id,
                "submitted": time.time(), "requests": len(group), "keys": [p.key for p in group],
                "worst_case": {k: round(v, 9) for k, v in worst.items()},
                "reservation": token, "ended": False})
            _write(self.state_path, state)
            self._tell(f"submitted batch {batch_id}: {len(group)} request(s) to {model_id} "
                       f"at batch prices (at most ${sum(worst.values()):.4f})", force=True)

    # --- fetching ------------------------------------------------------------------------

    def fetch(self, mine: Pending, plan: Callable[[], list[Pending]]) -> Fetched:
        """The result of `mine`, submitting the session's batch first if no batch of this run
        holds it, and waiting for the batch to end."""
        found = self.result(mine.key)
        if found is not None:
            return found
        with self._lock():
            state = self._state()
            if self._holding(state, mine.key) is None:
                self._submit(state, [*plan(), mine])
                state = self._state()
            batch = self._holding(state, mine.key)
        if batch is None:  # answered by the cache after all (another process wrote it)
            raise TransientModelError("the request was answered by the response cache while "
                                      "its batch was being made: asked again")
        failures = 0
        while True:
            found = self.result(mine.key)
            if found is not None:
                return found
            try:
                ended, counts = self._look(batch)
                failures = 0
            except (HarnessBroken, TransientModelError) as exc:
                if isinstance(exc, HarnessBroken):
                    raise
                failures += 1
                if failures >= LOOK_FAILURES:
                    raise
                log.warning("batch %s: %s", batch["id"], exc)
                ended, counts = False, {}
            if ended:
                with self._lock():
                    if self.result(mine.key) is None:
                        self._download(batch)
                found = self.result(mine.key)
                if found is not None:
                    return found
                raise TransientModelError(
                    f"batch {batch['id']} has ended but its results hold none for this item "
                    f"(custom_id {mine.key[:12]}…; the stream was cut?): fetched again on rerun")
            self._progress(batch, counts)
            time.sleep(self.settings.limits.batch_poll)

    def _look(self, batch: dict[str, Any]) -> tuple[bool, dict[str, int]]:
        if batch.get("ended"):
            return True, {}
        seen = self._looked.get(batch["id"])
        now = time.monotonic()
        if seen is not None and (seen[1] or now - seen[0] < self.settings.limits.batch_poll):
            return seen[1], seen[2]
        ended, counts = self.api.look(self.client(), batch["id"])
        self._looked[batch["id"]] = (now, ended, counts)
        return ended, counts

    def _progress(self, batch: dict[str, Any], counts: Mapping[str, int]) -> None:
        done = sum(v for k, v in counts.items() if k not in ("processing", "total"))
        total = counts.get("total") or batch["requests"]
        waited = time.time() - float(batch["submitted"])
        self._tell(f"batch {batch['id']}: {done}/{total} request(s) done, waited "
                   f"{waited:.0f} s")

    def _tell(self, line: str, *, force: bool = False) -> None:
        log.info(line)
        now = time.monotonic()
        if self.say is not None and (force or now - self._said >= PROGRESS_EVERY):
            self._said = now
            self.say(line)

    def _download(self, batch: dict[str, Any]) -> None:
        """Every result of an ended batch not yet in the run folder (called under the lock):
        written to the run folder and the response cache, its cost settled in the ledger."""
        keys = set(batch["keys"])
        price = batch_price(self.settings.model.prices.get(batch["model"]))
        cut: Truncated | None = None
        results = self.api.results(self.client(), batch["id"])
        try:
            for custom_id, kind, response, error, status in results:
                if custom_id not in keys or (self.results_dir / f"{custom_id}.json").exists():
                    continue
                cost = None
                if kind == "succeeded" and response is not None:
                    usage = self._usage(response)
                    billed = dollars(usage, price)
                    cost = billed["billed"] if billed else None
                if self.budget is not None and batch.get("reservation"):
                    self.budget.settle(batch["reservation"], cost,
                                       part=float(batch["worst_case"].get(custom_id, 0.0)))
                if kind == "succeeded" and response is not None and self.cache is not None:
                    self.cache.put(custom_id, response)
                _write(self.results_dir / f"{custom_id}.json",
                       {"kind": kind, "batch_id": batch["id"], "response": response,
                        "error": error, "status": status})
        except Truncated as exc:
            cut = exc
        if cut is not None:
            log.warning("batch %s: the results stream was cut: %s", batch["id"], cut)
            return
        state = self._state()
        for b in state["batches"]:
            if b["id"] == batch["id"]:
                b["ended"] = True
        _write(self.state_path, state)

    @staticmethod
    def _usage(response: Mapping[str, Any]) -> dict[str, int]:
        """A response's tokens, whichever API's shape it has."""
        usage = response.get("usage") or {}
        if "prompt_tokens" in usage:  # Chat Completions
            cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            return {"input": int(usage.get("prompt_tokens") or 0) - cached,
                    "output": int(usage.get("completion_tokens") or 0), "cache_read": cached,
                    "cache_write": 0}
        return {"input": int(usage.get("input_tokens") or 0),
                "output": int(usage.get("output_tokens") or 0),
                "cache_read": int(usage.get("cache_read_input_tokens") or 0),
                "cache_write": int(usage.get("cache_creation_input_tokens") or 0)}


class Batching:
    """What an agent that sends reading items through a batch API holds (`batches = True`):
    the session's batch-eligible tasks and its progress line (set by the runtime), one
    `Batcher` made on first use, and the item's request answered through it. The agent gives
    its client, its first request and output limit, the provider's adapter (`batch_api`) and
    the endpoint its cache keys name (`batch_endpoint`)."""

    settings: Settings
    gate: Any
    batch_plan: Callable[[], list[Any]] | None = None
    batch_say: Callable[[str], None] | None = None
    _batcher: Batcher | None = None

    def client(self) -> Any:
        raise NotImplementedError

    def first_request(self, task: Any) -> dict[str, Any]:
        raise NotImplementedError

    def token_limit(self, task: Any) -> int:
        raise NotImplementedError

    def batch_api(self) -> BatchAPI:
        raise NotImplementedError

    def batch_endpoint(self) -> str | None:
        raise NotImplementedError

    def batcher(self) -> Batcher:
        if self._batcher is None:
            self._batcher = Batcher(self.settings, self.batch_api(), self.client,
                                    provider=self.gate.provider, cache=self.gate.cache,
                                    say=self.batch_say)
        return self._batcher

    def batched(self, task: Any) -> bool:
        """Whether the item's one request goes through its batch (--batch, a reading
        condition asked apart)."""
        return bool(self.settings.model.batch and self.batch_plan is not None
                    and task.condition.mode == "reading" and not task.together)

    def through_batch(self, task: Any, *, load: Callable[[dict[str, Any]], Any],
                      interactive: Callable[[], tuple[Any, int, bool]]
                      ) -> tuple[Any, int, bool]:
        """The item's one request answered through the session's batch (`answered`)."""
        endpoint = self.batch_endpoint()

        def pending(t: Any) -> Pending:
            request = self.first_request(t)
            return pending_of(self.gate.provider, endpoint, request, t.repeat,
                              max_tokens=self.token_limit(t))

        plan = self.batch_plan or (lambda: [])
        return answered(self.batcher(), pending(task), lambda: [pending(t) for t in plan()],
                        sent=task.sent, load=load, interactive=interactive)


def pending_of(provider: str, endpoint: str | None, request: Mapping[str, Any], repeat: int,
               *, max_tokens: int) -> Pending:
    """A request as a batch carries it, keyed as the response cache keys it."""
    sent = json.loads(json.dumps(request))
    return Pending(key=request_key(provider, endpoint, sent, repeat), request=sent,
                   model_id=str(sent["model"]), max_tokens=max_tokens)


def answered(batcher: Batcher, mine: Pending, plan: Callable[[], list[Pending]], *,
             sent: dict[str, Any], load: Callable[[dict[str, Any]], Any],
             interactive: Callable[[], tuple[Any, int, bool]]) -> tuple[Any, int, bool]:
    """An item's one request answered through its batch: (the response, 0 attempts, whether
    it was a response-cache hit), or asked interactively (`interactive`) when its batch
    request expired, was canceled or errored transiently (the record says why)."""
    found = batcher.result(mine.key)
    if found is None and batcher.cache is not None:
        stored = batcher.cache.get(mine.key)
        if stored is not None:  # answered before this run's batch: a cache hit
            return load(stored), 0, True
    if found is None:
        found = batcher.fetch(mine, plan)
    where = {"id": found.batch_id, "custom_id": found.custom_id, "result": found.kind}
    if found.kind == "succeeded" and found.response is not None:
        sent["batch"] = where
        return load(found.response), 0, False
    reason = found.kind
    if found.kind == "errored":
        problem = classify_status(found.status, found.error or "errored")
        if not isinstance(problem, TransientModelError):
            raise problem
        reason = f"errored ({found.status}): {found.error}"
    sent["batch_fallback"] = {**where, "reason": f"the batch request {reason}: asked "
                              "interactively, at the interactive price"}
    return interactive()


class AnthropicBatches:
    """The Message Batches API (anthropic SDK `messages.batches`)."""

    def submit(self, client: Any, requests: list[tuple[str, dict[str, Any]]]) -> str:
        import anthropic

        try:
            batch = client.messages.batches.create(
                requests=[{"custom_id": k, "params": r} for k, r in requests])
        except anthropic.APIStatusError as exc:
            raise classify_status(exc.status_code, str(exc)) from exc
        except anthropic.APIError as exc:
            raise TransientModelError(f"the batch could not be submitted: {exc}") from exc
        return str(batch.id)

    def look(self, client: Any, batch_id: str) -> tuple[bool, dict[str, int]]:
        import anthropic

        try:
            batch = client.messages.batches.retrieve(batch_id)
        except anthropic.APIStatusError as exc:
            raise classify_status(exc.status_code, str(exc)) from exc
        except anthropic.APIError as exc:
            raise TransientModelError(f"batch {batch_id} could not be looked at: {exc}") from exc
        counts = batch.request_counts.model_dump() if batch.request_counts else {}
        return batch.processing_status == "ended", {k: int(v) for k, v in counts.items()}

    def results(self, client: Any, batch_id: str
                ) -> Iterator[tuple[str, str, dict[str, Any] | None, str | None, int | None]]:
        import anthropic

        try:
            for line in client.messages.batches.results(batch_id):
                result = line.result
                if result.type == "succeeded":
                    yield (line.custom_id, "succeeded",
                           result.message.model_dump(mode="json", exclude_unset=True), None, None)
                elif result.type == "errored":
                    error = getattr(result.error, "error", None)
                    kind = str(getattr(error, "type", "") or "")
                    yield (line.custom_id, "errored", None,
                           str(getattr(error, "message", "") or kind), ERROR_STATUS.get(kind))
                else:
                    yield line.custom_id, str(result.type), None, None, None
        except ValueError as exc:  # json.JSONDecodeError: a line cut in the middle
            raise Truncated(str(exc)) from exc
        except anthropic.APIStatusError as exc:
            raise classify_status(exc.status_code, str(exc)) from exc
        except anthropic.APIError as exc:
            raise Truncated(str(exc)) from exc


OPENAI_ENDED = ("completed", "expired", "cancelled")


class OpenAIBatches:
    """OpenAI's Batch API: the requests as a JSONL file (files.create, purpose "batch"), a
    batch over /v1/chat/completions, its output and error files."""

    endpoint = "/v1/chat/completions"

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        import openai

        try:
            return call()
        except openai.APIStatusError as exc:
            raise classify_status(exc.status_code, str(exc)) from exc
        except openai.APIError as exc:
            raise TransientModelError(f"{what}: {exc}") from exc

    def submit(self, client: Any, requests: list[tuple[str, dict[str, Any]]]) -> str:
        lines = "".join(json.dumps({"custom_id": k, "method": "POST", "url": self.endpoint,
                                    "body": r}) + "\n" for k, r in requests)
        upload = self._call("the batch's requests could not be uploaded", lambda: (
            client.files.create(file=("kgbench-batch.jsonl", lines.encode("utf-8")),
                                purpose="batch")))
        batch = self._call("the batch could not be submitted", lambda: client.batches.create(
            input_file_id=upload.id, endpoint=self.endpoint, completion_window="24h"))
        return str(batch.id)

    def look(self, client: Any, batch_id: str) -> tuple[bool, dict[str, int]]:
        batch = self._call(f"batch {batch_id} could not be looked at",
                           lambda: client.batches.retrieve(batch_id))
        if batch.status == "failed":
            errors = [e.message for e in (getattr(batch.errors, "data", None) or [])]
            raise HarnessBroken(f"batch {batch_id} failed: {'; '.join(map(str, errors))}")
        counts = batch.request_counts.model_dump() if batch.request_counts else {}
        return batch.status in OPENAI_ENDED, {k: int(v) for k, v in counts.items()}

    def results(self, client: Any, batch_id: str
                ) -> Iterator[tuple[str, str, dict[str, Any] | None, str | None, int | None]]:
        batch = self._call(f"batch {batch_id} could not be looked at",
                           lambda: client.batches.retrieve(batch_id))
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            try:
                raw = client.files.content(file_id).content
            except Exception as exc:  # noqa: BLE001 - a download cut short: fetched again
                raise Truncated(f"file {file_id}: {exc}") from exc
            for line in raw.decode("utf-8", "replace").splitlines():
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise Truncated(f"file {file_id}: {exc}") from exc
                yield self._row(row)

    @staticmethod
    def _row(row: Mapping[str, Any]
             ) -> tuple[str, str, dict[str, Any] | None, str | None, int | None]:
        custom_id = str(row.get("custom_id"))
        response = row.get("response") or {}
        error = row.get("error") or {}
        code = str(error.get("code") or "")
        if response.get("status_code") == 200 and response.get("body"):
            return custom_id, "succeeded", dict(response["body"]), None, None
        if code == "batch_expired":
            return custom_id, "expired", None, error.get("message"), None
        if code == "batch_cancelled":
            return custom_id, "canceled", None, error.get("message"), None
        body_error = (response.get("body") or {}).get("error") or {}
        return (custom_id, "errored", None,
                str(body_error.get("message") or error.get("message") or code),
                response.get("status_code"))
