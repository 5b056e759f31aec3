"""What code produced a run's numbers: the SHA-256 of every module that decides a grade or a
metric (a plugin's field kinds and metrics included) and of the modules that write prompts.
meta.json records them; a resume refuses to mix them; a rescore says which grader it is.
Pure module: no pytest.
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path

from pytest_kgbench.registry import current

GRADER_MODULES = ("grading.py", "answers.py", "questions.py", "fieldkinds.py", "answer_key.py",
                  "runtime.py", "together.py", "judge.py", "evidence.py", "metrics")
"""Every module (or package) of the plugin that decides a grade or a metric."""
PROMPT_MODULES = ("prompts.py", "reading.py", "tools.py", "conditions.py")
"""The modules that write what a model is shown."""


def _files(names: tuple[str, ...]) -> set[Path]:
    here = Path(__file__).parent
    out: set[Path] = set()
    for name in names:
        path = here / name
        out.update(sorted(path.glob("*.py")) if path.is_dir() else [path])
    return out


def grader_files() -> list[str]:
    """The files whose code decides a grade or a metric: the plugin's own (GRADER_MODULES) and
    the modules of every registered field kind and metric, plugins' included, sorted."""
    files = _files(GRADER_MODULES)
    reg = current()
    for piece in [*reg.field_kinds.values(), *reg.metrics.values()]:
        source = inspect.getsourcefile(type(piece))
        if source:
            files.add(Path(source))
    return sorted(str(f.resolve()) for f in files)


def _sha256(paths: list[str] | set[Path]) -> str:
    digest = hashlib.sha256()
    for name in sorted(str(p) for p in paths):
        path = Path(name)
        digest.update(f"{path.parent.name}/{path.name}".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def grader_sha256() -> str:
    """SHA-256 of the grader's code (`grader_files`, by name and content), so a report says
    which grader produced it and a rescore whether the grader changed."""
    return _sha256(grader_files())


def code_fingerprints() -> dict[str, str]:
    """What meta.json records of the code that grades and the code that writes prompts."""
    return {"grader_sha256": grader_sha256(), "prompts_sha256": _sha256(_files(PROMPT_MODULES))}
