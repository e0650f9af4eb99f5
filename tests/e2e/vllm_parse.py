"""Parse ``vllm serve`` command lines with vLLM's own parser; start nothing, download nothing.

Run with the vLLM venv's python: ``python vllm_parse.py < argvs.json`` where the input is a
JSON list of argument lists (``["serve", "--config", "FILE", ...]``, as after ``vllm``). It
prints one JSON result per command line: the options vLLM parsed, or the error it gave.

vLLM builds its engine config (and validates the speculative config) only once the model's
Hugging Face config is loaded, so past the parser this checks what can be checked offline:
vLLM's pre-load checks (``validate_parsed_serve_args``), and the speculative config's keys
and method against vLLM's ``SpeculativeConfig``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
import typing
from typing import Any

from vllm.config import SpeculativeConfig
from vllm.config.speculative import SpeculativeMethod
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser


def _literal_values(tp: Any) -> set[str]:
    values: set[str] = set()
    for arg in typing.get_args(tp):
        values |= _literal_values(arg) if typing.get_args(arg) else {arg}
    return values


METHODS = _literal_values(SpeculativeMethod)
SPEC_FIELDS = {f.name for f in dataclasses.fields(SpeculativeConfig)}


def vllm_parser() -> FlexibleArgumentParser:
    """The ``vllm`` command's parser with its ``serve`` subcommand, as vLLM's CLI builds it."""
    top = FlexibleArgumentParser(prog="vllm")
    sub = top.add_subparsers(dest="subparser", required=True)
    make_arg_parser(sub.add_parser("serve"))
    return top


def _speculative_problems(spec: dict[str, Any] | None) -> list[str]:
    if spec is None:
        return []
    problems = [f"unknown speculative-config key {k!r}" for k in sorted(set(spec) - SPEC_FIELDS)]
    if spec.get("method") is not None and spec["method"] not in METHODS:
        problems.append(f"unknown speculative method {spec['method']!r}")
    return problems


def parse(parser: FlexibleArgumentParser, argv: list[str]) -> dict[str, Any]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
            validate_parsed_serve_args(ns)
    except (SystemExit, ValueError, TypeError, AssertionError) as exc:
        return {"ok": False, "error": (err.getvalue() or str(exc)).strip()}
    spec = ns.speculative_config
    problems = _speculative_problems(spec)
    return {
        "ok": not problems,
        "error": "; ".join(problems),
        "model": ns.model_tag or ns.model,
        "served_model_name": ns.served_model_name,
        "tensor_parallel_size": ns.tensor_parallel_size,
        "gpu_memory_utilization": ns.gpu_memory_utilization,
        "per_request_spec_decode_metrics": ns.per_request_spec_decode_metrics,
        "speculative_config": spec,
    }


def main() -> None:
    parser = vllm_parser()
    json.dump([parse(parser, argv) for argv in json.load(sys.stdin)], sys.stdout)


if __name__ == "__main__":
    main()
