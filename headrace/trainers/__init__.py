"""The training runtime: backends, datasets, checkpoints, evaluation, promotion, executors.

Public entry points are plain keyword-only functions; the CLI is a thin shell over them.
"""
