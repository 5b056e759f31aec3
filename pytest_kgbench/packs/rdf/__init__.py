"""A pack's RDF: mapping tables to triples, R2RML through morph-kgc, and the ontology.
"""
