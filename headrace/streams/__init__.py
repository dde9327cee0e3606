"""Kafka: topic catalog, contracts, codecs, clients, dead letters, and the embedded broker.

This is the only package that imports ``confluent_kafka`` or ``faust``.
"""
