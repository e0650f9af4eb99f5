"""Replay and planning: recorded and synthetic traces, replayed per policy or simulated in
virtual time to choose a fleet (``specroute plan``), and profiles of your own hardware."""
