"""Where the session's packs are: the repository's (`datasets/<name>/pack.yaml` with
`questions/<name>.yaml`), and folder packs named by `--pack DIR`, by `[tool.kgbench.packs]` in
pyproject.toml, or by an installed distribution's `kgbench.packs` entry point (docs/packs.md).
Pure module: no pytest.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.settings import Settings, words
from pytest_kgbench.packs.schema import (
    Pack,
    find_pack,
    load_pack,
    own_question_files,
    read_manifest,
)


@dataclass(frozen=True)
class PackSource:
    """A pack the session can run: its folder, its definitions' folder and question files."""

    name: str
    dir: Path
    ontology_dir: Path | None
    question_files: tuple[Path, ...]
    registered: bool  # a folder pack (not the repository's datasets/ layout)


def folder_source(name: str, folder: Path) -> PackSource:
    manifest = read_manifest(folder)
    return PackSource(name, folder, None, own_question_files(folder, manifest), True)


def repository_sources(settings: Settings) -> dict[str, PackSource]:
    """The repository's packs: a question file questions/<name>.yaml beside datasets/<name>/."""
    out: dict[str, PackSource] = {}
    datasets = Path(settings.paths.datasets_dir)
    for qdir in settings.paths.question_dirs:
        folder = Path(settings.paths.rootdir) / qdir
        for path in sorted(folder.glob("*.y*ml")) if folder.is_dir() else ():
            name = path.stem
            if (datasets / name / "pack.yaml").is_file() and name not in out:
                own = Path(settings.paths.ontology_dir) / name
                out[name] = PackSource(name, datasets / name, own if own.is_dir() else None,
                                       (path.resolve(),), False)
    return out


def sources(settings: Settings) -> dict[str, PackSource]:
    """Every pack the session knows, by name (a registered folder pack over a repository one).
    Found once per process and layout: collection asks for every file it meets."""
    paths = settings.paths
    return dict(_sources(paths.rootdir, tuple(paths.question_dirs), paths.datasets_dir,
                         paths.ontology_dir, tuple(sorted(paths.packs.items()))))


@lru_cache(maxsize=32)
def _sources(rootdir: str, question_dirs: tuple[str, ...], datasets_dir: str, ontology_dir: str,
             packs: tuple[tuple[str, str], ...]) -> dict[str, PackSource]:
    out = repository_sources(Settings.at(rootdir, question_dirs=question_dirs,
                                         datasets_dir=datasets_dir, ontology_dir=ontology_dir))
    for name, folder in packs:
        out[name] = folder_source(name, Path(folder))
    return out


def selected(settings: Settings) -> dict[str, PackSource]:
    """The packs the session runs: those --pack names, else every one it knows."""
    known = sources(settings)
    if not settings.plan.pack_names:
        return known
    missing = [n for n in settings.plan.pack_names if n not in known]
    if missing:
        raise InputError("--pack", f"no pack named {', '.join(missing)} (known: "
                         f"{', '.join(sorted(known)) or 'none'}; a folder holding a pack.yaml "
                         "may be given as a path)")
    return {n: known[n] for n in settings.plan.pack_names}


def source_of_file(settings: Settings, path: Path) -> PackSource | None:
    """The pack whose question file `path` is (None: not a question file of any pack)."""
    resolved = path.resolve()
    for source in sources(settings).values():
        if resolved in source.question_files:
            return source
    return None


def open_pack(settings: Settings, name: str) -> Pack:
    """The pack `name`, loaded as the session's settings find it: every command opens packs
    here, so each says alike why a pack cannot run on this machine (`Pack.unavailable`: its
    external data absent, or an optional dependency it needs not installed), and leaves it
    out with that one line (cases.not_run)."""
    external = Path(settings.paths.external_dir) if settings.paths.external_dir else None
    source = sources(settings).get(name)
    if source is None:
        pack = find_pack(name, Path(settings.paths.datasets_dir), Path(settings.paths.ontology_dir),
                         external=external)
    else:
        pack = load_pack(source.dir, name=name, ontology_dir=source.ontology_dir,
                         question_files=source.question_files, external=external)
    if pack.unavailable is None:
        missing = missing_dependency(pack)
        if missing:
            pack = replace(pack, unavailable=missing)
    return pack


# what a manifest's key needs installed beyond the plugin's own dependencies, and how to get it
OPTIONAL_DEPENDENCIES: dict[str, tuple[tuple[str, ...], str]] = {
    "rdf.r2rml": (("morph_kgc", "sqlalchemy", "duckdb_engine"),
                  "pip install 'pytest-kgbench[r2rml]' && pip install --no-deps "
                  "morph-kgc==2.10.0; docs/packs.md, 'RDF'"),
}


def missing_dependency(pack: Pack) -> str | None:
    """Why the pack cannot run here for want of an optional dependency its manifest needs
    (an R2RML mapping is run by morph-kgc, installed apart), naming the file and field; None
    when nothing is missing."""
    for key, (modules, install) in OPTIONAL_DEPENDENCIES.items():
        section, _, field = key.partition(".")
        value = (pack.manifest.get(section) or {}).get(field)
        if not value:
            continue
        absent = [m for m in modules if _absent(m)]
        if absent:
            return (f"{pack.dir / 'pack.yaml'}: field '{key}': {value} needs what is not "
                    f"installed here (the modules {', '.join(absent)}: {install})")
    return None


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def question_file(settings: Settings, pack: str, file_name: str) -> Path | None:
    """A pack's question file by its name (as a banked record keeps it)."""
    source = sources(settings).get(pack)
    for path in source.question_files if source else ():
        if path.name == file_name:
            return path
    for qdir in settings.paths.question_dirs:
        path = Path(settings.paths.rootdir) / qdir / file_name
        if path.is_file():
            return path
    return None


def entry_point_packs() -> dict[str, str]:
    """Packs installed distributions offer (entry point group `kgbench.packs`): each names a
    module (or package) whose folder holds a pack.yaml."""
    from importlib.metadata import entry_points

    out: dict[str, str] = {}
    for ep in entry_points(group="kgbench.packs"):
        try:
            module = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin is named, not a traceback
            raise InputError(f"entry point kgbench.packs:{ep.name}",
                             f"cannot be loaded: {exc}") from exc
        file = getattr(module, "__file__", None)
        folder = Path(file).parent if file else Path(str(module))
        out[ep.name] = str(folder.resolve())
    return out


def pack_settings(selection: Any, table: Mapping[str, Any], root: Path,
                  external: Any) -> dict[str, Any]:
    """The folder packs (entry points, then [tool.kgbench.packs], then --pack folders), the
    selected pack names and the external-data folder."""
    import os

    from pytest_kgbench.packs.schema import read_manifest

    packs = entry_point_packs()
    for name, folder in table.items():
        path = (root / str(folder)).resolve()
        if not (path / "pack.yaml").is_file():
            raise InputError(str(root / "pyproject.toml"), f"{path} holds no pack.yaml",
                             field=f"tool.kgbench.packs.{name}")
        packs[str(name)] = str(path)
    names: list[str] = []
    for value in words(selection):
        path = Path(value).expanduser()
        if (path / "pack.yaml").is_file():
            manifest = read_manifest(path)
            name = str(manifest.get("name") or path.resolve().name)
            packs[name] = str(path.resolve())
        elif "/" in value or value.startswith("."):
            raise InputError("--pack", f"{value} holds no pack.yaml (kgbench init {value} "
                             "writes a starter pack)")
        else:
            name = value
        if name not in names:
            names.append(name)
    external = external or os.environ.get("KGBENCH_EXTERNAL") or None
    return {"packs": packs, "pack_names": tuple(names),
            "external_dir": str(Path(str(external)).expanduser().resolve()) if external else None}


# --- a resumed run is the run it says -----------------------------------------------------------
