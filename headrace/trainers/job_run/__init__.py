"""One training job's steps, run by :mod:`headrace.trainers.job_process` (which locks, runs and
fails the job): its context (:mod:`.context`), the model built and trained epoch by epoch
(:mod:`.training`), and the gate, the publishing and the promotion (:mod:`.publishing`). The
runner imports no tuning code: the stop rules beyond early stopping come from its entry point.
"""
