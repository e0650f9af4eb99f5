"""An SGLang launch config: the YAML file ``sglang serve --config FILE`` reads.

SGLang cannot be installed beside the gateway (torch and CUDA libraries), so its parser is
not run here; the file is checked the way that parser would read it, with the table of its
options generated from SGLang itself (``sglang_options``, sglang 0.5.23). Facts from the
SGLang source at that version (``python/sglang/srt/``):

- ``utils/server_args_config_parser.py`` (``ConfigArgumentMerger``): each key becomes
  ``--key`` exactly as written, so ``speculative_algorithm`` is an unknown flag (the parser
  registers dashed names only); ``true`` sets a store-true flag and ``false`` leaves it out;
  a list becomes several values, a mapping JSON; some actions may not come from a file.
- ``server_args.py``: ``--port`` defaults to 30000 (not vLLM's 8000); ``--model-path``
  (alias ``--model``), ``--tp-size`` (alias ``--tensor-parallel-size``),
  ``--speculative-draft-model-path`` (alias ``--speculative-draft-model``); ``/metrics`` is
  served only with ``--enable-metrics``.
- ``speculative/spec_info.py``: ``SpeculativeAlgorithm.from_string`` upper-cases the name and
  knows DFLASH, UNO, DSPARK, EAGLE, EAGLE3, FROZEN_KV_MTP, STANDALONE, NGRAM, and NEXTN (an
  alias of EAGLE); plugins may register more.
- ``arg_groups/speculative_hook.py``: EAGLE-family drafts ``--speculative-num-steps`` tokens
  per step (steps, top-k and draft tokens are chosen per model when steps is unset); with
  top-k 1 it resets ``--speculative-num-draft-tokens`` to steps + 1. NGRAM verifies a tree of
  ``--speculative-num-draft-tokens`` nodes, the last accepted token and the drafts (its
  external-corpus budget is bounded by that number - 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from proxy.check.launch import (
    Issue,
    LaunchConfig,
    SpeculativeLaunch,
    optional_int,
    optional_str,
    read_mapping,
)
from proxy.check.sglang_options import SGLANG_OPTIONS, SGLANG_VERSION, SglangOption

# SpeculativeAlgorithm members and aliases, in the policy's words (None: no policy method).
_POLICY_METHOD: Mapping[str, str | None] = MappingProxyType(
    {
        "EAGLE": "eagle",
        "EAGLE3": "eagle3",
        "NEXTN": "mtp",
        "FROZEN_KV_MTP": "mtp",
        "STANDALONE": "draft_model",
        "NGRAM": "ngram",
        "DFLASH": None,
        "UNO": None,
        "DSPARK": None,
    }
)
_DRAFTS_BY_STEPS = frozenset({"EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP", "STANDALONE"})


def _value_issue(key: str, value: Any, option: SglangOption) -> str | None:
    if option.kind == "unsupported":
        return f"{key}: SGLang refuses it in a --config file; give it on the command line"
    if option.kind == "flag":
        if not isinstance(value, bool):
            return f"{key} is a flag: write true or false, not {value!r}"
        return None
    if isinstance(value, bool) and option.value_type != "str":
        return f"{key}: {value!r} is not a number"
    if isinstance(value, list | dict):
        return None  # several values, or JSON: the parser's type decides, not checked here
    text = str(value)
    try:
        if option.value_type == "int":
            int(text)
        elif option.value_type == "float":
            float(text)
    except ValueError:
        return f"{key}: {value!r} is not a{'n int' if option.value_type == 'int' else ' float'}"
    if option.choices is not None and text not in option.choices:
        return f"{key}: {value!r} is not one of {', '.join(option.choices)}"
    return None


def _unknown_key(key: str) -> Issue:
    # argparse takes a unique prefix of an option (allow_abbrev), and so does SGLang's parser.
    prefixed = [name for name in SGLANG_OPTIONS if name.startswith(key)]
    if len(prefixed) == 1:
        return Issue("warning", f"{key} abbreviates {prefixed[0]}: write it in full")
    if prefixed:
        return Issue("error", f"{key} is ambiguous to SGLang's parser: {', '.join(prefixed)}")
    dashed = key.replace("_", "-")
    hint = f" (write {dashed}: --config passes keys as written)" if dashed in SGLANG_OPTIONS else ""
    return Issue("error", f"{key} is not an option of SGLang {SGLANG_VERSION}{hint}")


def _option_issues(opts: Mapping[str, Any]) -> list[Issue]:
    issues = []
    for key, value in opts.items():
        option = SGLANG_OPTIONS.get(key)
        if option is None:
            issues.append(_unknown_key(key))
            continue
        problem = _value_issue(key, value, option)
        if problem is not None:
            issues.append(Issue("error", problem))
    if opts.get("enable-metrics") is not True:
        message = (
            "enable-metrics is not set: SGLang serves no /metrics, and the gateway reads "
            "load and acceptance there"
        )
        issues.append(Issue("error", message))
    return issues


def _speculative(
    opts: Mapping[str, Any], path: Path
) -> tuple[SpeculativeLaunch | None, list[Issue]]:
    algorithm = optional_str(opts, "speculative-algorithm")
    if algorithm is None:
        return None, []
    name = algorithm.upper()
    issues = []
    if name not in _POLICY_METHOD:
        message = (
            f"speculative-algorithm {algorithm} is not built into SGLang {SGLANG_VERSION} "
            f"({', '.join(sorted(_POLICY_METHOD))}; a plugin's is not checked)"
        )
        issues.append(Issue("error", message))
    steps = optional_int(opts, "speculative-num-steps", path)
    topk = optional_int(opts, "speculative-eagle-topk", path)
    draft_tokens = optional_int(opts, "speculative-num-draft-tokens", path)
    if name in _DRAFTS_BY_STEPS:
        k, source = steps, f"speculative-num-steps={steps}"
        if topk == 1 and steps is not None and draft_tokens not in (None, steps + 1):
            message = (
                f"speculative-num-draft-tokens={draft_tokens} with top-k 1: SGLang resets it "
                f"to speculative-num-steps + 1 = {steps + 1}"
            )
            issues.append(Issue("warning", message))
    else:
        k = None if draft_tokens is None else draft_tokens - 1
        source = f"speculative-num-draft-tokens={draft_tokens}, less the accepted token"
    spec = SpeculativeLaunch(
        method=_POLICY_METHOD.get(name),
        engine_method=algorithm,
        model=optional_str(opts, "speculative-draft-model-path", "speculative-draft-model"),
        k=k,
        k_source=source,
    )
    return spec, issues


def read_sglang_launch(path: Path) -> LaunchConfig:
    opts = read_mapping(path, "sglang serve options (dashed flag names)")
    speculative, spec_issues = _speculative(opts, path)
    served = opts.get("served-model-name")
    return LaunchConfig(
        path=path,
        engine="sglang",
        model=optional_str(opts, "model-path", "model"),
        served_model_names=() if served is None else (str(served),),
        tensor_parallel_size=optional_int(opts, "tp-size", path)
        or optional_int(opts, "tensor-parallel-size", path)
        or 1,
        port=optional_int(opts, "port", path),
        speculative=speculative,
        issues=tuple(_option_issues(opts) + spec_issues),
    )
