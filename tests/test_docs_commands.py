"""Every command the README and docs/ show runs as written.

The commands are read from every fenced ```bash block of README.md and docs/**/*.md: a line
ending in a backslash is joined to the next, a comment (from ` #` on, or a whole `#` line) is
dropped, and a line chained with `&&` is split into its parts. A *command* is a part that starts
with `pytest`, `.venv/bin/pytest`, `kgbench` or `.venv/bin/kgbench`.

(a) Every command is checked to parse, placeholders and all (an option's name can be checked
    whatever its value):
    - kgbench: its subcommand exists (`kgbench SUB --help` exits 0, run once per distinct
      subcommand) and every `--option` it names is one that help lists; `kgbench build` also
      takes `--PARAM N` for a parameter a shipped pack's pack.yaml names under `scale:`.
    - pytest: every option it names (`--name`, `--name=value`, `-k`) is one `pytest --help`
      lists, run once from the repository root, so the plugin's and its dependencies' options
      are in it.

(b) The commands of QUICK, an explicit list of quick ones, are run as written, in that order, in
    a copy of the repository's packs, questions and settings under tmp_path (so the run folders
    and the build cache land there, never in the repository), and must exit 0. A command is
    never run when it holds a placeholder or needs the network or a credential — a line
    containing `<`, `$` or `...`, or naming `DSN`, `PASSWORD`, `http`, `--model`, `--provider`,
    `--base-url`, `--batch`, `--tx`, or `--agent anthropic|openai|gemini|claude-cli|replay` —
    and the test checks every QUICK command against that rule and finds it, verbatim, in a doc.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

# 18-22 s on 2 cores at load 9.5 (the quick commands 15-19 s of it)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
COMMAND = re.compile(r"^(\.venv/bin/)?(pytest|kgbench)(\s|$)")

# (doc, command as written there, a check of its output beyond exit 0 or None), run in order:
# init makes the pack validate reads and the gold run asks; runs lists that run.
QUICK: list[tuple[str, str, Callable[[str], bool] | None]] = [
    ("docs/quickstart.md", "kgbench list", lambda out: "credit" in out),
    ("docs/packs.md", "kgbench init mypack", None),
    ("docs/packs.md", "kgbench validate mypack", lambda out: "valid" in out),
    ("docs/packs.md", "pytest --pack=mypack --agent gold", lambda out: "passed" in out),
    ("docs/runs.md", "kgbench runs", lambda out: "complete" in out),
    ("docs/packs.md", "kgbench build --pack credit", None),
    ("docs/packs.md", "kgbench prompt --pack credit --question credit-Q10 --condition R5", None),
    ("docs/safety.md", 'kgbench query --pack credit "DELETE FROM issuers"',
     lambda out: '"refused": "DELETE' in out),
    ("docs/safety.md", 'kgbench query --pack credit --persona analyst "SELECT c FROM contacts c"',
     lambda out: "'contact_id'" in out and "email" not in out),
    ("docs/safety.md", "kgbench query --pack credit \"SELECT query_table('contacts')\"",
     lambda out: '"refused": null' not in out),
    ("docs/quickstart.md", "pytest --collect-only -q --condition D1",
     lambda out: "tests collected" in out),
]

NEVER_RUN = re.compile(r"<|\$|\.\.\.|DSN|PASSWORD|http|--model|--provider|--base-url|--batch"
                       r"|--tx|--agent[ =](anthropic|openai|gemini|claude-cli|replay)")


def bash_commands(text: str) -> Iterator[str]:
    """The commands of a Markdown text's ```bash blocks, each as one line without its comment."""
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").split("\n"):
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line.startswith("#"):
                continue
            for part in line.split("&&"):
                part = " ".join(part.split())
                if COMMAND.match(part):
                    yield part


def doc_commands() -> list[tuple[str, str]]:
    return [(str(doc.relative_to(REPO)), cmd) for doc in DOCS
            for cmd in bash_commands(doc.read_text(encoding="utf-8"))]


def kgbench_exe() -> list[str]:
    """The kgbench console script beside this Python (the module where there is none)."""
    here = Path(sys.executable).parent / "kgbench"
    return [str(here)] if here.exists() else [sys.executable, "-m", "pytest_kgbench.cli"]


def clean_env() -> dict[str, str]:
    """This process's environment without the outer pytest's variables or external data, so a
    command runs as it would from a shell (packs whose data is outside are left out)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("PYTEST_") and k != "KGBENCH_EXTERNAL"}


def run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=clean_env(), capture_output=True, text=True,
                          timeout=timeout)


def option_names(argv: list[str]) -> set[str]:
    """The options a command line names: `--name` (a value after `=` dropped) and short `-x`."""
    names = set()
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            names.add(token.split("=", 1)[0])
        elif re.fullmatch(r"-[A-Za-z].*", token):
            names.add(token[:2])
    return names


def help_options(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[A-Za-z0-9][\w-]*|-[A-Za-z])(?![\w-])", text))


def scale_params() -> set[str]:
    """The `--PARAM` a shipped pack's `scale:` lets `kgbench build` take."""
    params = set()
    for manifest in (REPO / "datasets").glob("*/pack.yaml"):
        data = yaml.safe_load(manifest.read_text(encoding="utf-8")) or {}
        params |= {f"--{name}" for name in (data.get("scale") or {})}
    return params


def test_the_docs_show_commands() -> None:
    """The extraction finds the README's two commands and the docs' pages of commands: a change
    to the fence or the prompt that made it find nothing would make the other tests vacuous."""
    found = doc_commands()
    docs = {doc for doc, _ in found}
    assert ("README.md", ".venv/bin/pytest --agent gold") in found
    assert ("README.md", '.venv/bin/pytest tests -n 2 -m "not slow"') in found
    assert {"docs/quickstart.md", "docs/models.md", "docs/packs.md", "docs/runs.md",
            "docs/safety.md", "docs/engines.md"} <= docs
    assert len(found) > 40


def test_every_kgbench_command_names_a_subcommand_and_options_it_has() -> None:
    problems, helps = [], {}
    scale = scale_params()
    for doc, cmd in doc_commands():
        argv = shlex.split(cmd)
        if not argv[0].endswith("kgbench"):
            continue
        sub = argv[1] if len(argv) > 1 else ""
        if sub not in helps:
            done = run([*kgbench_exe(), sub, "--help"], REPO, timeout=120)
            helps[sub] = help_options(done.stdout) if done.returncode == 0 else None
        known = helps[sub]
        if known is None:
            problems.append(f"{doc}: {cmd!r}: `kgbench {sub} --help` fails: no such subcommand")
            continue
        allowed = known | (scale if sub == "build" else set())
        unknown = sorted(option_names(argv[2:]) - allowed)
        if unknown:
            problems.append(f"{doc}: {cmd!r}: kgbench {sub} has no {', '.join(unknown)}")
    assert not problems, "\n".join(problems)


def test_every_pytest_command_names_options_pytest_has() -> None:
    done = run([sys.executable, "-m", "pytest", "--help"], REPO, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    known = help_options(done.stdout)
    assert {"--agent", "--condition", "-k", "-n"} <= known, "pytest --help lost the plugin"
    problems = []
    for doc, cmd in doc_commands():
        argv = shlex.split(cmd)
        if not argv[0].endswith("pytest"):
            continue
        unknown = sorted(option_names(argv[1:]) - known)
        if unknown:
            problems.append(f"{doc}: {cmd!r}: pytest has no {', '.join(unknown)}")
    assert not problems, "\n".join(problems)


def test_the_quick_commands_run_as_written(tmp_path: Path) -> None:
    """QUICK's commands, each found verbatim in its doc, run in a copy of the repository's
    packs and settings and exit 0, in order."""
    found = set(doc_commands())
    for doc, cmd, _ in QUICK:
        assert (doc, cmd) in found, f"{doc} no longer shows {cmd!r}: update QUICK"
        assert not NEVER_RUN.search(cmd), f"{cmd!r} needs a placeholder, network or credential"
    project = tmp_path / "project"
    project.mkdir()
    for name in ("datasets", "ontology", "questions"):
        shutil.copytree(REPO / name, project / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "conftest.py"):
        shutil.copy2(REPO / name, project / name)
    for doc, cmd, check in QUICK:
        argv = shlex.split(cmd)
        if argv[0].endswith("pytest"):
            argv = [sys.executable, "-m", "pytest", *argv[1:]]
        else:
            argv = [*kgbench_exe(), *argv[1:]]
        done = run(argv, project)
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"{doc}: {cmd!r} exited {done.returncode}:\n{out[-3000:]}"
        assert check is None or check(out), f"{doc}: {cmd!r} printed:\n{out[-3000:]}"
    assert not (REPO / "mypack").exists()
