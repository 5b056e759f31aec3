"""Repository settings only: where this repository keeps things pytest should not collect.

The packs' locations (datasets/, ontology/, questions/, reports/) are the plugin's defaults and
can be moved with the kgbench_* ini options in pyproject.toml.
"""

collect_ignore = ["datasets", "ontology", "benchmarks", "reports"]
