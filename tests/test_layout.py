"""The package's floor plan: every module in a sub-package named for its layer, the layer
table of docs/extending.md rendered from the import contract in pyproject.toml (so the two
cannot disagree), no import up the layers even among type-only imports beyond the ones listed
here with their reason, and the 0.x module paths still importable for one release.

`python tests/test_layout.py` rewrites the table in docs/extending.md from the contract."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pytest_kgbench"
DOC = REPO / "docs" / "extending.md"
START, END = "<!-- layers: rendered from pyproject.toml -->", "<!-- layers: end -->"


def layers() -> list[list[str]]:
    """The layers contract, top first: each a list of sub-packages independent of each other."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers"]
    return [[part.strip() for part in layer.split("|")] for layer in contract["layers"]]


def summary(sub: str) -> str:
    """The first sentence of a sub-package's docstring."""
    doc = ast.get_docstring(ast.parse((PACKAGE / sub / "__init__.py").read_text("utf-8"))) or ""
    text = " ".join(doc.split())
    return re.split(r"(?<=\.)\s", text, maxsplit=1)[0].rstrip(".")


def render() -> str:
    rows = ["| layer | sub-package | holds |", "|---|---|---|"]
    for rank, layer in enumerate(layers(), 1):
        for sub in layer:
            rows.append(f"| {rank} | `{sub}/` | {summary(sub)} |")
    return "\n".join([START, *rows, END])


def test_the_layer_table_in_the_docs_is_the_contracts() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert START in text and END in text, f"{DOC} has no rendered layer table"
    shown = text[text.index(START):text.index(END) + len(END)]
    assert shown == render(), "run `python tests/test_layout.py` to render it again"


def test_every_module_is_in_a_sub_package_of_the_contract() -> None:
    named = {sub for layer in layers() for sub in layer}
    subs = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert subs == named, "a sub-package outside the layers contract, or one it names missing"
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "_moved.py"]


# Type-only imports that still go up the layers, each with why. The registry's Protocols name
# the types of the pieces above it (issue: each Protocol beside its domain). The list is exact:
# a new upward import fails, and so does one fixed without being struck from here.
UPWARD_TYPE_ONLY = {
    ("core.registry", "agents"), ("core.registry", "engines"),
    ("core.registry", "engines.guard"), ("core.registry", "metrics"),
    ("core.registry", "packs.build"), ("core.registry", "scoring.answers"),
}


def test_no_import_goes_up_the_layers_even_a_type_only_one() -> None:
    import grimp

    rank = {sub: i for i, layer in enumerate(layers()) for sub in layer}
    graph = grimp.build_graph("pytest_kgbench", exclude_type_checking_imports=False)
    runtime = grimp.build_graph("pytest_kgbench", exclude_type_checking_imports=True)
    up, up_at_runtime = set(), set()
    for module in graph.modules:
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in rank:
            continue
        for target in graph.find_modules_directly_imported_by(module):
            t = target.split(".")
            if len(t) > 1 and t[1] in rank and rank[t[1]] < rank[parts[1]]:
                pair = (module.partition(".")[2], target.partition(".")[2])
                up.add(pair)
                if target in runtime.find_modules_directly_imported_by(module):
                    up_at_runtime.add(pair)
    assert up_at_runtime == set()
    assert up == UPWARD_TYPE_ONLY


def test_the_old_module_paths_still_import_and_say_where_they_went() -> None:
    from pytest_kgbench._moved import MOVED

    for old, new in sorted(MOVED.items()):
        sys.modules.pop(f"pytest_kgbench.{old}", None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(f"pytest_kgbench.{old}")
        assert module is importlib.import_module(f"pytest_kgbench.{new}"), old
        assert module.__spec__.name == f"pytest_kgbench.{new}", "the alias took the spec"
        assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message)
                   for w in caught), old


def test_a_pack_generator_written_for_0x_still_runs() -> None:
    """`from pytest_kgbench.packs import Draws` is the authoring API; the other names of the
    old packs module are still there, and `from pytest_kgbench.settings import Settings` in a
    fresh process works and warns."""
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "from pytest_kgbench.packs import Draws, load_pack, read_manifest\n"
            "assert Draws(1).random() == Draws(1).random()\n"
            "try:\n    from pytest_kgbench.settings import Settings\n"
            "except DeprecationWarning as w:\n    print('warned:', w)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert "pytest_kgbench.settings moved to pytest_kgbench.core.settings" in done.stdout
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        import pytest_kgbench.packs as packs

        packs.nothing_here  # noqa: B018


if __name__ == "__main__":
    text = DOC.read_text(encoding="utf-8")
    block = render()
    if START in text:
        text = text[:text.index(START)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text, encoding="utf-8")
    print(f"rendered {DOC}")
