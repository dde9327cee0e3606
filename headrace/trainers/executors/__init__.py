"""Executors run a job (``python -m headrace.trainers run JOB_ID``) somewhere: a local
subprocess or a Kubernetes Job. The interface is in :mod:`headrace.trainers.executors.base`."""
