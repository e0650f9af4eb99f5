"""Real vLLM on CPU: install, tiny local models, server processes (see launch.py)."""
