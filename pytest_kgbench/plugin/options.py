"""The plugin's options, wired to pytest: the `kgbench` group of `pytest --help`, every option's
ini twin, and the session's `Settings` read from them (built and checked in core/settings.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.registry import Registry
from pytest_kgbench.core.settings import OPTIONS, PATHS, Settings
from pytest_kgbench.run.config import build_settings
from pytest_kgbench.run.shards import Shard, parse_shard


def add_options(parser: pytest.Parser) -> None:
    """Register the `kgbench` option group and every ini twin."""
    group = parser.getgroup("kgbench", "pytest-kgbench: semantic-layer benchmark")
    for opt in OPTIONS:
        if opt.flag_only:
            group.addoption(opt.flag, action="store_true", default=None, dest=opt.ini,
                            help=opt.help)
            parser.addini(opt.ini, opt.help, type="bool", default=False)
        else:
            group.addoption(opt.flag, action="append" if opt.repeatable else "store",
                            default=None, dest=opt.ini, help=f"{opt.help} (ini: {opt.ini})")
            parser.addini(opt.ini, opt.help, default=opt.default)
    for ini, help_text, default in PATHS:
        parser.addini(ini, help_text, default=default)
    # the shard a run is (run/shards.py): the command line only, never an ini value (the same
    # pyproject.toml serves every shard)
    group.addoption("--kgbench-shard", default=None, dest="kgbench_shard", metavar="I/N",
                    help="run shard I of N (I from 0 to N - 1) of the selected items: every "
                    "item of a question on one shard, shards balanced by estimated cost; "
                    "--max-cost, --rpm and --tpm are then the whole run's, each shard keeping "
                    "to its share; kgbench merge joins the shards' run folders "
                    "(docs/scale-out.md)")
    group.addoption("--kgbench-shard-budget", default=None, dest="kgbench_shard_budget",
                    metavar="W0,W1,...", help="with --kgbench-shard: each shard's weight in "
                    "the run's --max-cost, --rpm and --tpm, one per shard (default: equal)")


def project_root(config: pytest.Config) -> Path:
    """The folder whose ini file configures the run (the rootdir without one)."""
    return Path(config.inipath).parent if config.inipath else Path(config.rootpath)


def shard_from_config(config: pytest.Config) -> Shard | None:
    """The shard --kgbench-shard names (InputError when it or its budget is malformed)."""
    text = config.getoption("kgbench_shard", default=None)
    budget = config.getoption("kgbench_shard_budget", default=None)
    if text in (None, ""):
        if budget not in (None, ""):
            raise InputError("--kgbench-shard-budget", "shares a sharded run's budgets: it "
                             "needs --kgbench-shard I/N")
        return None
    return parse_shard(text, budget)


def settings_from_config(config: pytest.Config, registry: Registry) -> Settings:
    """The session's settings from the command line over the ini values (InputError when an
    option's value is bad), its agents and conditions named from `registry`."""
    cli: dict[str, Any] = {o.ini: config.getoption(o.ini, default=None) for o in OPTIONS}
    ini: dict[str, Any] = {o.ini: config.getini(o.ini) for o in OPTIONS}
    paths = {name: str(config.getini(name)) for name, _, _ in PATHS}
    return build_settings(cli, ini, root=project_root(config), paths=paths,
                          registry=registry)
