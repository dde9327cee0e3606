"""Operations: replay and re-score ranges, DLQ redrive, the local stack, the demo,
the dashboard."""
