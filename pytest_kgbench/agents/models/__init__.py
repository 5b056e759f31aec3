"""Agents a language model answers through: the Anthropic Messages API, any OpenAI-compatible
Chat Completions endpoint, and the Claude Code CLI. A module exposing `AGENTS` adds agents.
"""
