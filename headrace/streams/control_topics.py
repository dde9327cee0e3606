"""Moved: ``ControlTopics`` is in the topic catalog, ``headrace.streams.topics``. Kept for
imports written before the move."""

from headrace.streams.topics import ControlTopics

__all__ = ["ControlTopics"]
