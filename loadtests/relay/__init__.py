"""Relay overhead benchmarks: what the gateway, the endpoint picker behind Envoy, the floor
relays and the shared store add to a stream from a fast stub backend."""
