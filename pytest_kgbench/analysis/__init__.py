"""What a run means: the report model and its markdown, terminal and HTML forms, paired
statistics, power, comparisons between conditions and models, and reading stored runs. Above
metrics (a report shows every metric), below asking.
"""
