"""Routing benchmarks: goodput of routing policies, break-even over concurrency, decision time,
prefix sharing between replicas and how fast traffic leaves a collapsing draft head."""
