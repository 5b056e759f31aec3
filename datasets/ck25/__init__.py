"""The ck25 pack: the CK25 corporate knowledge graph of the TEXT2SPARQL'25 challenge, read from
the external-data folder at run time (README.md beside this file)."""
