"""`python -m pytest_kgbench.cli`: the `kgbench` command."""

from pytest_kgbench.cli import main

raise SystemExit(main())
