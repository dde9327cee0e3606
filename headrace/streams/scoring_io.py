"""Moved: ``RawBatch`` is in ``headrace.streams.consuming``; the scorer's ``StreamIO`` and
``ModelEventsListener`` are in ``headrace.scorers.stream_io``. Kept for imports written before."""

from headrace.streams.consuming import RawBatch

__all__ = ["RawBatch"]
