"""The scorer tests' stream fixtures, for the toy kind's run through the scorer."""

from tests.scorers.conftest import data, stream

__all__ = ["data", "stream"]
