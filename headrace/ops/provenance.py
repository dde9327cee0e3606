"""Headers that say where a replayed, re-scored or redriven record came from.

Two only on a replay: each header costs throughput (measured: 6 headers ran at ~0.65x
pass-through, 2 at ~0.8x). The origin topic is in the replay's checkpoint
(ops/replays/<replay-id>.json) and the origin partition is the same number, so replay-id +
origin offset identify the source record. A replay of a replay replaces them.
"""

from __future__ import annotations

REPLAY_ID = "replay-id"
REPLAY_ORIGIN_OFFSET = "replay-origin-offset"
REPLAY_PREFIX = "replay-"
REDRIVE_ID = "redrive-id"
REDRIVE_DLQ_OFFSET = "redrive-dlq-offset"  # "<dlq partition>:<dlq offset>"
