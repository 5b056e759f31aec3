"""Cost before and after: an estimate of a run's tokens and dollars before any call, and the
cost of the tokens a run actually used, with and without the savings of prompt caching.

Prices are dollars per million tokens, per model id (settings.DEFAULT_PRICES, overridable in
[tool.kgbench.prices]). The estimate counts about four characters a token; a querying question
is assumed to take four rounds, each resending the conversation so far, which the agent's
rolling cache breakpoint lets the API read from the cache. These are assumptions, and the
estimate says so: read it as an order of magnitude. (`Runtime.estimate` builds the prompts the
estimate counts.) Pure module: no pytest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

CHARS_PER_TOKEN = 4
QUERY_ROUNDS = 4
TOOL_RESULT_TOKENS = 300
OUTPUT_TOKENS = {"reading": 400, "querying_round": 150, "together_answer": 150}


BATCH_SHARE = 0.5  # the batch APIs' price, a share of the interactive one (settings cites it)
KINDS = ("input", "output", "cache_read", "cache_write")


def batch_price(price: Mapping[str, float] | None) -> dict[str, float] | None:
    """A model's batch price: its `batch_<kind>` prices where the table gives them, else
    BATCH_SHARE of each interactive price."""
    if not price:
        return None
    return {k: float(price.get(f"batch_{k}", price[k] * BATCH_SHARE))
            for k in KINDS if k in price}


def tokens_of(text: str) -> int:
    return max(1, len(text) // CHARS_PER_TOKEN)


def dollars(tokens: Mapping[str, int], price: Mapping[str, float] | None
            ) -> dict[str, float] | None:
    """The cost of a token count, as billed (cache reads and writes at their prices) and as it
    would be without caching (every cached token billed as plain input)."""
    if not price:
        return None
    m = 1_000_000
    inp, out = tokens.get("input", 0), tokens.get("output", 0)
    read, write = tokens.get("cache_read", 0), tokens.get("cache_write", 0)
    billed = (inp * price["input"] + out * price["output"]
              + read * price.get("cache_read", price["input"])
              + write * price.get("cache_write", price["input"])) / m
    uncached = ((inp + read + write) * price["input"] + out * price["output"]) / m
    return {"billed": billed, "without_cache": uncached}  # whole: views round


@dataclass
class Estimate:
    """Estimated tokens for the items of one condition and model."""

    condition: str
    model: str
    items: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    contexts: set[str] = field(default_factory=set)
    window: int | None = None  # the model's context window: a longer prompt is not asked
    largest: int = 0           # the largest prompt's tokens
    too_long: int = 0          # items whose prompt is longer than the window
    batchable: bool = True     # single-turn items only (reading, apart): --batch takes them
    # the provider's minimum cacheable prefix (settings.Settings.cache_minimum): a shorter
    # prefix is not cached even when marked, so it is billed as plain input every time
    cache_minimum: int = 0
    max_output: int | None = None  # --max-tokens: no call makes more output than this
    max_rounds: int | None = None  # --max-rounds: no question takes more rounds than this
    # how a text is counted in tokens: the model's own tokenizer where its server lends it
    # (a local server's /tokenize), else about four characters a token (tokens_of)
    count: Callable[[str], int] = tokens_of

    def add(self, *, mode: str, context: str, question: str, system: str,
            questions: int = 1) -> None:
        """One item (or, with `questions` > 1, one together session answering that many): its
        prompt, the rounds it is likely to take, what caching saves. A together session takes
        the rounds of all its questions in one conversation, each resending it so far."""
        self.items += questions
        self.batchable = self.batchable and mode == "reading" and questions == 1
        ctx, rest = self.count(context), self.count(system) + self.count(question)
        self.largest = max(self.largest, ctx + rest)
        if self.window is not None and ctx + rest > self.window:
            self.too_long += questions
        per = min(QUERY_ROUNDS, self.max_rounds or QUERY_ROUNDS)
        rounds = per * questions if mode == "querying" else 1
        first = context not in self.contexts
        self.contexts.add(context)
        cap = self.max_output or max(OUTPUT_TOKENS.values())
        round_out = min(OUTPUT_TOKENS["querying_round"], cap)
        step = TOOL_RESULT_TOKENS + round_out
        floor = self.cache_minimum
        # the data block's breakpoint caches what comes before it: the system block and itself
        cacheable = ctx + self.count(system) >= floor
        for r in range(rounds):
            if r == 0:  # the data block is written once per context, then read
                self.input += rest
                if not cacheable:
                    self.input += ctx
                elif first:
                    self.cache_write += ctx
                else:
                    self.cache_read += ctx
            else:  # the rolling breakpoint: the rounds so far are read, the last one written
                so_far = ctx + rest + (r - 1) * step
                if so_far >= floor:
                    self.cache_read += so_far
                else:
                    self.input += so_far
                if so_far + step >= floor:
                    self.cache_write += step
                else:
                    self.input += step
        answers = (min(OUTPUT_TOKENS["reading"], cap) if questions == 1
                   else questions * OUTPUT_TOKENS["together_answer"])
        self.output += (answers if mode == "reading" else rounds * round_out + answers)

    @property
    def tokens(self) -> dict[str, int]:
        return {"input": self.input, "output": self.output, "cache_read": self.cache_read,
                "cache_write": self.cache_write}


def duration(seconds: float) -> str:
    """Seconds as a person reads them: 45 s, 12 min, 3.4 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def local_seconds(est: Estimate, speed: tuple[float, float]) -> float:
    """The time a row takes on a server measured at `speed` (prompt, output tokens per
    second): every prompt token read but those the estimate counts as cache reads (a local
    server keeps the last prompt's prefix: llama.cpp, vLLM and Ollama reuse it), every output
    token made, one request after another."""
    read, made = est.input + est.cache_write, est.output
    return read / speed[0] + made / speed[1]


def estimate_lines(estimates: Mapping[tuple[str, str], Estimate], aliases: Mapping[str, str],
                   prices: Mapping[str, Mapping[str, float]], *, heading: str,
                   speeds: Mapping[str, tuple[float, float]] | None = None) -> list[str]:
    """The estimate as a table: a row per condition and model, then the total. The `batch`
    column is what --batch would bill (batch prices) for the rows it can take (single-turn
    items); a querying row keeps its interactive cost there ("-": not batched). A model with
    no price but a measured speed (`speeds`: a local server's prompt and output tokens per
    second, by model) costs time, not dollars: its row says how long it would take here."""
    speeds = speeds or {}
    seconds = 0.0
    lines = [f"Estimate, before any call: {heading}; about 4 characters a token, "
             f"{QUERY_ROUNDS} rounds per querying question; a prefix shorter than the model's "
             "minimum cacheable prompt is billed as plain input; list prices per million "
             "tokens (batch: --batch, at the batch prices).",
             f"{'condition':<10} {'model':<22} {'items':>6} {'input':>12} {'cached':>12} "
             f"{'output':>10} {'cost':>10} {'no cache':>10} {'batch':>10}"]
    total = {"billed": 0.0, "without_cache": 0.0, "batch": 0.0}
    for (cid, model), est in estimates.items():
        model_id = aliases.get(model, model)
        cost = dollars(est.tokens, prices.get(model_id))
        batched = (dollars(est.tokens, batch_price(prices.get(model_id)))
                   if est.batchable else None)
        if cost:
            total["billed"] += cost["billed"]
            total["without_cache"] += cost["without_cache"]
            total["batch"] += batched["billed"] if batched else cost["billed"]
        if cost is None and model in speeds:
            took = local_seconds(est, speeds[model])
            seconds += took
            cells: tuple[str, str, str] = (duration(took), "(time)", "-")
        elif cost is None:
            cells = ("no price", "", "")
        else:
            cells = (f"${cost['billed']:.2f}", f"${cost['without_cache']:.2f}",
                     f"${batched['billed']:.2f}" if batched else "-")
        lines.append(f"{cid:<10} {model_id:<22} {est.items:>6} {est.input + est.cache_write:>12,} "
                     f"{est.cache_read:>12,} {est.output:>10,} {cells[0]:>10} {cells[1]:>10} "
                     f"{cells[2]:>10}")
    billed, uncached, batch = (f"${total[k]:.2f}" for k in ("billed", "without_cache", "batch"))
    if seconds and not any(prices.get(aliases.get(m, m)) for _, m in estimates):
        billed = uncached = batch = ""  # time alone: no dollars to add up
    lines.append(f"{'total':<10} {'':<22} {sum(e.items for e in estimates.values()):>6} "
                 f"{'':>12} {'':>12} {'':>10} {billed:>10} {uncached:>10} {batch:>10}")
    if seconds:
        lines.append(f"time on this machine, for the models served here with no price: about "
                     f"{duration(seconds)}, one request after another (speeds measured now: "
                     + "; ".join(f"{aliases.get(m, m)} {p:,.0f} prompt and {o:,.1f} output "
                                 "tokens/s" for m, (p, o) in speeds.items()) + ")")
    return lines + window_warnings(estimates, aliases)


def window_warnings(estimates: Mapping[tuple[str, str], Estimate],
                    aliases: Mapping[str, str]) -> list[str]:
    """A line for each condition and model whose prompts are longer than the model's window:
    those items would be skipped (the API refuses them), so the run says so before any call."""
    return [f"WARNING: {cid} {aliases.get(model, model)}: {est.too_long} item(s) have a prompt "
            f"of about {est.largest:,} tokens, more than the model's {est.window:,}-token "
            f"window; they will be skipped, not asked"
            for (cid, model), est in estimates.items() if est.too_long]


def usage_of(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Tokens a set of banked items actually used."""
    total = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
    for rec in records:
        for name, value in ((rec.get("answer") or {}).get("tokens") or {}).items():
            if name in total:
                total[name] += int(value or 0)
    return total
