"""Fault benchmarks: SDK streams through two replicas while backends, Redis and replicas are
broken on a schedule (chaos), and the same faults over a long run (soak)."""
