"""Importing this registers every routing role (``roles``): one import line per role."""

from headrace.scorers import canary  # noqa: F401
