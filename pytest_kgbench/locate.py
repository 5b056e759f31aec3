"""Where the session's packs are: the repository's (`datasets/<name>/pack.yaml` with
`questions/<name>.yaml`), and folder packs named by `--pack DIR`, by `[tool.kgbench.packs]` in
pyproject.toml, or by an installed distribution's `kgbench.packs` entry point (docs/packs.md).
Pure module: no pytest.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pytest_kgbench.errors import InputError
from pytest_kgbench.packs import Pack, find_pack, load_pack, own_question_files, read_manifest
from pytest_kgbench.settings import Settings


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
    datasets = Path(settings.datasets_dir)
    for qdir in settings.question_dirs:
        folder = Path(settings.rootdir) / qdir
        for path in sorted(folder.glob("*.y*ml")) if folder.is_dir() else ():
            name = path.stem
            if (datasets / name / "pack.yaml").is_file() and name not in out:
                own = Path(settings.ontology_dir) / name
                out[name] = PackSource(name, datasets / name, own if own.is_dir() else None,
                                       (path.resolve(),), False)
    return out


def sources(settings: Settings) -> dict[str, PackSource]:
    """Every pack the session knows, by name (a registered folder pack over a repository one).
    Found once per process and layout: collection asks for every file it meets."""
    return dict(_sources(settings.rootdir, tuple(settings.question_dirs), settings.datasets_dir,
                         settings.ontology_dir, tuple(sorted(settings.packs.items()))))


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
    if not settings.pack_names:
        return known
    missing = [n for n in settings.pack_names if n not in known]
    if missing:
        raise InputError("--pack", f"no pack named {', '.join(missing)} (known: "
                         f"{', '.join(sorted(known)) or 'none'}; a folder holding a pack.yaml "
                         "may be given as a path)")
    return {n: known[n] for n in settings.pack_names}


def source_of_file(settings: Settings, path: Path) -> PackSource | None:
    """The pack whose question file `path` is (None: not a question file of any pack)."""
    resolved = path.resolve()
    for source in sources(settings).values():
        if resolved in source.question_files:
            return source
    return None


def open_pack(settings: Settings, name: str) -> Pack:
    """The pack `name`, loaded as the session's settings find it."""
    external = Path(settings.external_dir) if settings.external_dir else None
    source = sources(settings).get(name)
    if source is None:
        return find_pack(name, Path(settings.datasets_dir), Path(settings.ontology_dir),
                         external=external)
    return load_pack(source.dir, name=name, ontology_dir=source.ontology_dir,
                     question_files=source.question_files, external=external)


def question_file(settings: Settings, pack: str, file_name: str) -> Path | None:
    """A pack's question file by its name (as a banked record keeps it)."""
    source = sources(settings).get(pack)
    for path in source.question_files if source else ():
        if path.name == file_name:
            return path
    for qdir in settings.question_dirs:
        path = Path(settings.rootdir) / qdir / file_name
        if path.is_file():
            return path
    return None
