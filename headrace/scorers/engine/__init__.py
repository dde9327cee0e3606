"""The scoring engine: the batch loop, model holding and swapping, probes and metrics.

It knows no rollout and no plug-in by name: taps and roles are its seams
(``taps.py``, ``roles.py``), filled from the registries at the package root.
"""
