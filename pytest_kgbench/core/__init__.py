"""The bottom layer: errors, the version, Ctrl-C handling, settings, conditions, questions,
the registry of pieces and its hooks, records, prices and fingerprints. Imports nothing of ours
above it; no pytest.
"""
