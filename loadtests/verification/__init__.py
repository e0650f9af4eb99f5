"""Verification benchmarks: what shadow verification costs the users it samples."""
