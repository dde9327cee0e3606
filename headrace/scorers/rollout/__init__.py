"""Rollout, the scorer's side: the shadow tap (``shadow_tap``: a candidate scores every record
beside production), the canary routing role (``canary``: a salted-hash share of the keys goes
to the candidate), the candidate they load (``candidates``, ``candidate``), the live comparison
(``live_counts``), late truth joined to predictions (``label_join``) and the stream's rollout
state (``state``). They plug into the scoring engine through its seams (``scorers.engine.taps``,
``scorers.engine.roles``), listed in ``tap_registry`` and ``role_registry``; the engine imports none
of them (an import-linter contract). The framework-free core is ``headrace.rollout``; the
operator's side ``headrace.ops.rollout``."""
