"""How fast the local model is on this machine: llama-server's start (spawn to /health 200) and
its own timings of prompt evaluation and generation, for a few fixed requests.

    python benchmarks/local_model/speed.py [--requests 3] [--prompt-words 600] [--max-tokens 128]
                                            [--threads N]

Builds llama-server and assembles the model first when they are not cached
(tools/llama_server.py). Prints one JSON object; `uptime` before and after says how loaded the
machine was.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import llama_server  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def complete(url: str, text: str, max_tokens: int) -> dict[str, Any]:
    body = {"model": llama_server.MODEL_ALIAS, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": text}], "cache_prompt": False}
    request = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=900) as reply:  # noqa: S310 - loopback
        return dict(json.loads(reply.read()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--prompt-words", type=int, default=600)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="llama-server -t and -tb")
    args = parser.parse_args()
    out: dict[str, Any] = {"load_before": load(), "threads": args.threads,
                           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")}
    threads = [] if args.threads is None else ["-t", str(args.threads), "-tb", str(args.threads)]
    server = llama_server.start(ctx=8192, extra=threads)
    out["start_s"] = server.started_in
    words = " ".join(f"item{i} costs {i % 97} coins;" for i in range(args.prompt_words // 4))
    text = f"{words}\n\nWrite a long story about the items above."
    runs = []
    try:
        for _ in range(args.requests):
            began = time.monotonic()
            reply = complete(server.url, text, args.max_tokens)
            runs.append({**reply["timings"], "wall_s": time.monotonic() - began})
    finally:
        server.stop()
    out.update({
        "prompt_tokens": runs[0]["prompt_n"], "predicted_tokens": runs[0]["predicted_n"],
        "prompt_tok_s": round(statistics.median(r["prompt_per_second"] for r in runs), 1),
        "predicted_tok_s": round(statistics.median(r["predicted_per_second"] for r in runs), 1),
        "request_wall_s": [round(r["wall_s"], 2) for r in runs], "load_after": load()})
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
