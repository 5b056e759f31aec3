"""docs/scale-out.md's recipes run: the Kubernetes Indexed Job, the Slurm array and the GitHub
Actions matrix are each rendered for every shard index as their scheduler would (the index in
its variable, each pod or job on a file system of its own, artifacts and object storage
carried between them) with `pytest`, `kgbench`, `aws` and `sbatch` replaced by stubs that
record their arguments. Each shard must get `--kgbench-shard I/N` for its own I, every I once,
N the recipe's size, options pytest has, a run folder of its own; and the merge step must name
exactly the shards' folders, as `kgbench merge` parses them."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO
from pytest_kgbench.cli import build_parser
from pytest_kgbench.run.shards import parse_shard

DOC = REPO / "docs" / "scale-out.md"

STUB = f'''#!{sys.executable}
"""A stand-in for a command of the recipes: records its arguments (STUB_LOG), and does what
the next step needs of it."""
import json, os, shutil, subprocess, sys
from pathlib import Path

name, argv = Path(sys.argv[0]).name, sys.argv[1:]
with open(os.environ["STUB_LOG"], "a") as fh:
    fh.write(json.dumps({{"cmd": name, "argv": argv, "cwd": os.getcwd()}}) + "\\n")
if name == "pytest" and "--run-id" in argv:  # a run makes its folder
    folder = Path("reports", argv[argv.index("--run-id") + 1])
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text("{{}}")
elif name == "aws":  # aws s3 cp --recursive SRC DST, the bucket a folder
    src, dst = argv[-2:]
    bucket = lambda p: Path(os.environ["BUCKET"], p.removeprefix("s3://"))
    src = bucket(src) if src.startswith("s3://") else Path(src)
    dst = bucket(dst) if dst.startswith("s3://") else Path(dst)
    shutil.copytree(src, dst, dirs_exist_ok=True)
elif name == "sbatch" and "--parsable" in argv:
    print("4242")
elif name == "sbatch" and "--wrap" in argv:
    sys.exit(subprocess.run(["bash", "-c", argv[argv.index("--wrap") + 1]]).returncode)
'''


def sections() -> dict[str, list[tuple[str, str]]]:
    """docs/scale-out.md's fenced blocks (language, text) under each ### heading."""
    out: dict[str, list[tuple[str, str]]] = {}
    heading = ""
    text = DOC.read_text(encoding="utf-8")
    for match in re.finditer(r"^### ([^\n]+)$|^```(\w*)\n(.*?)^```", text, re.M | re.S):
        if match.group(1):
            heading = match.group(1).strip()
        elif heading:
            out.setdefault(heading, []).append((match.group(2), match.group(3)))
    return out


def recipe(prefix: str) -> list[tuple[str, str]]:
    found = [blocks for heading, blocks in sections().items() if heading.startswith(prefix)]
    assert len(found) == 1, f"docs/scale-out.md has no section '### {prefix}…'"
    return found[0]


class Machine:
    """A file system of its own (a pod, a CI job, a cluster's shared disk) with the stubs in
    it; every stub call of every machine goes to one log."""

    def __init__(self, root: Path, log: Path, bucket: Path) -> None:
        self.dir = root
        (root / ".venv" / "bin").mkdir(parents=True)
        (root / "bin").mkdir()
        for path in (root / ".venv" / "bin" / "pytest", root / ".venv" / "bin" / "kgbench",
                     root / "bin" / "aws", root / "bin" / "sbatch"):
            path.write_text(STUB)
            path.chmod(0o755)
        self.env = {"PATH": f"{root / 'bin'}:{os.environ['PATH']}", "STUB_LOG": str(log),
                    "BUCKET": str(bucket), "HOME": str(root)}

    def bash(self, script: str, **env: str) -> None:
        done = subprocess.run(["bash", "-c", script], cwd=self.dir, env={**self.env, **env},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def pytest_options() -> set[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    known = set(re.findall(r"(?<![\w-])(--[A-Za-z0-9][\w-]*|-[A-Za-z])(?![\w-])", done.stdout))
    assert "--kgbench-shard" in known
    return known


@pytest.fixture
def world(tmp_path: Path) -> Any:
    log, bucket = tmp_path / "calls.jsonl", tmp_path / "bucket"
    bucket.mkdir()
    log.touch()

    def machine(name: str) -> Machine:
        return Machine(tmp_path / name, log, bucket)

    def calls(cmd: str) -> list[dict[str, Any]]:
        return [c for c in map(json.loads, log.read_text().splitlines()) if c["cmd"] == cmd]

    return machine, calls


def check_shards(runs: list[dict[str, Any]], count: int, known: set[str]) -> list[str]:
    """Each of `runs` (the pytest calls, one per index in order) is shard i of `count`, with
    options pytest has and a run id of its own; returns the run ids."""
    assert len(runs) == count
    ids = []
    for i, call in enumerate(runs):
        argv = call["argv"]
        assert argv.count("--kgbench-shard") == 1, argv
        shard = parse_shard(argv[argv.index("--kgbench-shard") + 1])
        assert (shard.index, shard.count) == (i, count), argv
        names = {a.split("=", 1)[0] for a in argv if re.match(r"--?[A-Za-z]", a)}
        assert names <= known, f"pytest has no {sorted(names - known)}"
        ids.append(argv[argv.index("--run-id") + 1])
    assert len(set(ids)) == count
    return ids


def check_merge(call: dict[str, Any], ids: list[str]) -> None:
    args = build_parser().parse_args(call["argv"])
    assert args.func.__name__ == "cmd_merge"
    assert sorted(args.runs) == sorted(f"reports/{i}" for i in ids)
    assert all((Path(call["cwd"]) / r / "meta.json").is_file() for r in args.runs)
    assert args.run_id not in ids


def test_the_kubernetes_indexed_job_gives_each_pod_its_shard(world, pytest_options) -> None:
    machine, calls = world
    blocks = recipe("Kubernetes")
    job = yaml.safe_load(next(text for lang, text in blocks if lang == "yaml"))
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    count = spec["completions"]
    assert spec["parallelism"] == count
    container = spec["template"]["spec"]["containers"][0]
    assert container["command"] == ["bash", "-c"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    for i in range(count):  # each pod on a file system of its own
        machine(f"pod-{i}").bash(container["args"][0], JOB_COMPLETION_INDEX=str(i), **env)
    ids = check_shards(calls("pytest"), count, pytest_options)
    merger = machine("merger")
    merger.bash(next(text for lang, text in blocks if lang == "bash"))
    [merge] = calls("kgbench")
    check_merge(merge, ids)


def test_the_slurm_array_gives_each_task_its_shard_and_a_requeue_resumes(
        world, pytest_options) -> None:
    machine, calls = world
    blocks = [text for lang, text in recipe("Slurm") if lang == "bash"]
    script = next(b for b in blocks if b.startswith("#!/bin/bash"))
    first, last = map(int, re.search(r"^#SBATCH --array=(\d+)-(\d+)$", script, re.M).groups())
    assert first == 0
    count = last + 1
    cluster = machine("cluster")  # the tasks share the cluster's disk
    for i in range(count):
        cluster.bash(script, SLURM_ARRAY_TASK_ID=str(i), SLURM_ARRAY_TASK_COUNT=str(count))
    runs = calls("pytest")
    ids = check_shards(runs, count, pytest_options)
    caches = [a for r in runs for a in r["argv"] if a.startswith("kgbench_cache=")]
    assert len(set(caches)) == count  # a cache of its own each
    cluster.bash(script, SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_TASK_COUNT=str(count))
    again = calls("pytest")[-1]["argv"]  # requeued: its folder is there
    assert again[:2] == ["--resume", ids[1]] and "--kgbench-shard" not in again
    submit = next(b for b in blocks if "sbatch" in b and not b.startswith("#!"))
    (cluster.dir / "shards.sbatch").write_text(script)
    cluster.bash(submit)
    submitted = calls("sbatch")
    assert submitted[0]["argv"] == ["--parsable", "shards.sbatch"]
    assert "--dependency=afterok:4242" in submitted[1]["argv"]
    [merge] = calls("kgbench")
    check_merge(merge, ids)


def _expand(text: str, values: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if name.startswith("secrets."):
            return "not-a-secret"
        assert name in values, f"the workflow names ${{{{ {name} }}}}"
        return values[name]

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def test_the_github_actions_matrix_gives_each_job_its_shard(world, pytest_options,
                                                           tmp_path: Path) -> None:
    machine, calls = world
    workflow = yaml.safe_load(next(text for lang, text in recipe("GitHub Actions")
                                   if lang == "yaml"))
    shard_job, merge_job = workflow["jobs"]["shard"], workflow["jobs"]["merge"]
    values = shard_job["strategy"]["matrix"]["shard"]
    assert values == list(range(len(values)))
    artifacts = tmp_path / "artifacts"
    for value in values:  # each job on a runner of its own
        runner = machine(f"runner-{value}")
        known = {"matrix.shard": str(value), "strategy.job-total": str(len(values))}
        for step in shard_job["steps"]:
            if "pytest" in step.get("run", ""):
                runner.bash(_expand(step["run"], known))
            elif step.get("uses", "").startswith("actions/upload-artifact"):
                name = _expand(step["with"]["name"], known)
                shutil.copytree(runner.dir / _expand(step["with"]["path"], known),
                                artifacts / name)
    ids = check_shards(calls("pytest"), len(values), pytest_options)
    assert merge_job["needs"] == "shard"
    merger = machine("merger")
    for step in merge_job["steps"]:
        if step.get("uses", "").startswith("actions/download-artifact"):
            for found in sorted(artifacts.iterdir()):
                if fnmatch.fnmatch(found.name, step["with"]["pattern"]):
                    shutil.copytree(found, merger.dir / step["with"]["path"] / found.name)
        elif "kgbench" in step.get("run", ""):
            merger.bash(_expand(step["run"], {}))
    [merge] = calls("kgbench")
    check_merge(merge, ids)
