"""The package's version, in a module of its own so that code below the package's front door
(the build cache's tag) reads it without importing pytest_kgbench/__init__.py."""

from __future__ import annotations

__version__ = "0.1.0"
