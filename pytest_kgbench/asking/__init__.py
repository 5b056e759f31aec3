"""What is put to a model: the items (cases), their prompts, the tools a condition offers, the
together sessions, pacing and the in-flight limits. Above analysis, below agents.
"""
