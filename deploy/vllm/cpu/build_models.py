"""Build the tiny Llama target and its two draft models used by the real-vLLM tier.

Run with the vLLM venv's interpreter (it needs torch, tokenizers and transformers):

    .venv-vllm/bin/python deploy/vllm/cpu/build_models.py [--cache DIR]

Everything is made locally and deterministically: a byte-level BPE tokenizer trained on the
interpreter's own standard-library sources (sorted, so the corpus order is fixed), a
randomly initialised target with a fixed seed, a byte-identical copy of it as the "good"
draft (acceptance near 1) and a differently seeded one-layer model as the "bad" draft
(acceptance near 0). A stamp holding a hash of the build parameters makes reruns no-ops.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
DEFAULT_CACHE = REPO / ".cache" / "models"
STAMP_NAME = ".build-stamp"
MODEL_NAMES = ("tiny", "draft-good", "draft-bad")

SPECIAL_TOKENS = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# Bump BUILD_VERSION whenever the recipe changes in a way the parameters do not show.
PARAMS: dict[str, Any] = {
    "build_version": 1,
    "vocab_size": 4096,
    "corpus": "stdlib top-level *.py, sorted",
    "chat_template": CHAT_TEMPLATE,
    "target": {"seed": 1234, "num_hidden_layers": 2},
    "draft_bad": {"seed": 98765, "num_hidden_layers": 1},
    "llama": {
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
}


def model_dirs(cache: Path) -> dict[str, Path]:
    """Where each built model lives inside ``cache``."""
    return {name: cache / name for name in MODEL_NAMES}


def params_digest() -> str:
    blob = json.dumps({"params": PARAMS, "python": sys.version_info[:2]}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def is_built(cache: Path) -> bool:
    stamp = cache / STAMP_NAME
    return stamp.is_file() and stamp.read_text().strip() == params_digest()


def corpus_files() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return sorted(stdlib.glob("*.py"))


def _corpus_lines(files: list[Path]) -> Iterator[str]:
    for path in files:
        yield path.read_text(encoding="utf-8", errors="replace")


def build_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    # Order fixes the ids: <unk>=0, <s>=1, </s>=2, as the Llama config expects.
    specials = list(SPECIAL_TOKENS.values())
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=PARAMS["vocab_size"],
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus_lines(corpus_files()), trainer=trainer)
    bos = SPECIAL_TOKENS["bos_token"]
    # Completions tokenize with special tokens on; the BOS comes from here, while the chat
    # template adds its own and vLLM then tokenizes without special tokens.
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, 1)]
    )
    assert tokenizer.token_to_id(bos) == 1, "BOS must be id 1 (the Llama config says so)"
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **SPECIAL_TOKENS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return len(fast)


def build_llama(out: Path, vocab_size: int, seed: int, num_hidden_layers: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, num_hidden_layers=num_hidden_layers, **PARAMS["llama"]
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)


def build(cache: Path) -> dict[str, Path]:
    """Build every model into ``cache`` unless the stamp says it is already there."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    cache.mkdir(parents=True, exist_ok=True)
    dirs = model_dirs(cache)
    # Two test sessions may start at once; the second waits and then finds the stamp.
    with open(cache / ".build-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(cache):
            return dirs
        with tempfile.TemporaryDirectory(dir=cache, prefix=".build-") as tmp:
            staging = Path(tmp)
            tok_dir = staging / "tokenizer"
            vocab_size = build_tokenizer(tok_dir)
            build_llama(staging / "tiny", vocab_size, **PARAMS["target"])
            shutil.copytree(staging / "tiny", staging / "draft-good")
            build_llama(staging / "draft-bad", vocab_size, **PARAMS["draft_bad"])
            for name in MODEL_NAMES:
                shutil.copytree(tok_dir, staging / name, dirs_exist_ok=True)
                shutil.rmtree(dirs[name], ignore_errors=True)
                (staging / name).rename(dirs[name])
        (cache / STAMP_NAME).write_text(params_digest() + "\n")
    return dirs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("SPECROUTE_MODEL_CACHE", DEFAULT_CACHE)),
        help="output directory (env SPECROUTE_MODEL_CACHE, default .cache/models/)",
    )
    args = parser.parse_args(argv)
    dirs = build(args.cache.resolve())
    print(json.dumps({name: str(path) for name, path in dirs.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
