"""What the check reads of a local model directory: vocabulary sizes and the tokenizer.

A draft proposes token ids; the target verifies them as ids of *its* vocabulary (vLLM gives
the draft the target's tokenizer). A draft trained on another vocabulary does not fail to
start: it proposes ids that mean other tokens, and acceptance silently collapses. Hence the
comparison of ``vocab_size`` (config.json) and of the tokenizer's vocabulary itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class ModelFacts:
    path: Path
    vocab_size: int | None
    """The embedding / output vocabulary of the model (for an EAGLE head: the target's)."""
    draft_vocab_size: int | None
    """An EAGLE-3 head's reduced output vocabulary, mapped onto the target's."""
    tokenizer_digest: str | None
    """Digest of the tokenizer's token -> id table and added tokens; None without files."""


class ModelResolver:
    """Finds a model named in a launch config on local disk.

    A name is a directory (absolute, or relative to the launch config), or a Hugging Face id
    looked up under each root as ``ROOT/<org>/<name>`` (``hf download --local-dir`` layout)
    or in a Hugging Face cache (``ROOT/models--<org>--<name>/snapshots/<rev>``, also under
    ``ROOT/hub``).
    """

    def __init__(self, roots: Sequence[Path] = ()) -> None:
        self._roots = tuple(roots)

    def resolve(self, name: str, relative_to: Path) -> Path | None:
        direct = Path(name).expanduser()
        for candidate in (direct, relative_to / direct):
            if (candidate / "config.json").is_file():
                return candidate
        cache_dir = "models--" + name.replace("/", "--")
        for root in self._roots:
            if (root / name / "config.json").is_file():
                return root / name
            for base in (root, root / "hub"):
                snapshots = sorted(
                    (base / cache_dir / "snapshots").glob("*/config.json"),
                    key=lambda p: p.stat().st_mtime,
                )
                if snapshots:
                    return snapshots[-1].parent
        return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _vocab_sizes(config: dict[str, Any]) -> tuple[int | None, int | None]:
    vocab = _int(config.get("vocab_size"))
    # Multimodal wrappers keep the language model's settings in text_config; heads in the
    # speculators format in transformer_layer_config.
    for nested in ("text_config", "transformer_layer_config"):
        inner = config.get(nested)
        if vocab is None and isinstance(inner, dict):
            vocab = _int(inner.get("vocab_size"))
    return vocab, _int(config.get("draft_vocab_size"))


def _digest(parts: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _tokenizer_digest(path: Path) -> str | None:
    tokenizer_json = path / "tokenizer.json"
    if tokenizer_json.is_file():
        data = orjson.loads(tokenizer_json.read_bytes())
        model = data.get("model") or {}
        added = sorted((t.get("id"), t.get("content")) for t in data.get("added_tokens") or [])
        return _digest({"type": model.get("type"), "vocab": model.get("vocab"), "added": added})
    vocab_json = path / "vocab.json"
    if vocab_json.is_file():
        return _digest({"vocab": orjson.loads(vocab_json.read_bytes())})
    sentencepiece = path / "tokenizer.model"
    if sentencepiece.is_file():
        return hashlib.sha256(sentencepiece.read_bytes()).hexdigest()[:16]
    return None


def read_model(path: Path) -> ModelFacts:
    """Facts from ``config.json`` and the tokenizer files; raises ValueError when unreadable."""
    try:
        config = orjson.loads((path / "config.json").read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"{path}/config.json: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{path}/config.json: not a JSON object")
    vocab, draft_vocab = _vocab_sizes(config)
    try:
        digest = _tokenizer_digest(path)
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable tokenizer files: {exc}") from exc
    return ModelFacts(path, vocab, draft_vocab, digest)
