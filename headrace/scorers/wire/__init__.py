"""Bytes to arrays and back: input decoding and limits, prediction encoding, refusals.

The bottom layer of the scorer: it imports neither the engine nor the adapters.
"""
