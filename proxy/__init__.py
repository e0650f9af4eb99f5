"""specroute: a speculative-decoding-aware gateway for vLLM fleets."""

__version__ = "0.1.0"
