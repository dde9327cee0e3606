"""The scoring worker: batch consume, decode, score, publish predictions; hot model swap.

Embed it with ``headrace.scorers.serving.run(settings, scorer_settings, stop_event)``.
"""
