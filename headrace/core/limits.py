"""Sizes every component agrees on."""

MAX_RECORD_BYTES = 8 * 1024 * 1024  # one record's payload; bigger ones are dead-lettered
