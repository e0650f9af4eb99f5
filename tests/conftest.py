"""Shared fixtures: the redis-server fixture lives in tests/fixtures/redis.py."""

pytest_plugins = ["tests.fixtures.redis"]
