"""pytest-kgbench: does giving an LLM the meaning of data make it answer more accurately?

Every question of a pack is a pytest item (question x condition x model x repeat); agents answer,
code grades, and the controller writes a run folder with a report. See README.md.
"""

from __future__ import annotations

__version__ = "0.1.0"
