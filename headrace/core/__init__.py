"""Foundations shared by every package: settings, errors, safe names and paths."""
