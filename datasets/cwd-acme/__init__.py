"""The cwd-acme pack: data.world's Chat-with-your-Data benchmark (ACME Insurance), read from
the external-data folder at run time (README.md beside this file)."""
