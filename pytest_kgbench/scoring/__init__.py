"""Grading: an answer read from a model's text, the field kinds that compare a value with its
key, the keys computed from a build, the grade and the judge. Above engines (an answer is an
engine's result; a key is a reference query's), below metrics.
"""
