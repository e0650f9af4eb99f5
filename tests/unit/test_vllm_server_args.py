"""The CPU test fleet's vLLM command line (deploy/vllm/cpu/server_args.py)."""

import argparse
from pathlib import Path

import pytest

from deploy.vllm.cpu.server_args import server_command


@pytest.mark.parametrize("key", ["-Ab3_x9", "--looks-like-a-flag", "plainkey"])
def test_the_api_key_reaches_the_server_whatever_its_first_character(key: str) -> None:
    # vLLM reads its options with argparse: a key given as its own argument and starting
    # with "-" was read as an option and the server exited with 2 before it was ready.
    cmd = server_command(Path("/venv/bin/python"), Path("/models/tiny"), 8123, None, key)
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--api-key", nargs="+")
    parser.add_argument("--port", type=int)
    options, _ = parser.parse_known_args(cmd[cmd.index("--model") :])
    assert options.api_key == [key]
    assert options.port == 8123
