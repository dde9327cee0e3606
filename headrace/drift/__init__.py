"""Drift: a reference profile fitted on a model's training split (``profile``), statistics with
documented formulas (``statistics``), thresholds calibrated to a false-alarm rate
(``calibration``) and live windows counted in records (``windows``). Framework-free, so the
trainer that writes the profile and the scorer that tracks a stream share it."""
