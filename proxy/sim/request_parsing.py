"""Turn OpenAI request bodies into what the engine needs, rejecting what vLLM rejects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from proxy.sim.config import SimConfig
from proxy.sim.errors import SimHTTPError, bad_request
from proxy.sim.overlap import repeated_ngram_share
from proxy.sim.prompt_class import CLASS_FIELD, classify_prompt
from proxy.sim.tokens import Vocabulary
from proxy.stepcost import PROMPT_CLASSES, PromptClass

BOS = "<|begin_of_text|>"
MAX_LOGPROBS = 20


@dataclass(slots=True)
class ParsedRequest:
    kind: Literal["chat", "completion"]
    prompt_text: str
    prompt_class: PromptClass
    # The prompt's repeated-trigram share when its class was guessed (None: stated).
    overlap: float | None
    prompt_ids: list[int]
    max_tokens: int
    greedy: bool
    seed: int | None
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    logprobs: int | None
    return_token_ids: bool


def load_json(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"Invalid JSON body: {exc}") from exc
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.")
    return data


def check_model(data: dict[str, Any], config: SimConfig) -> None:
    model = data.get("model")
    if model is not None and model != config.model:
        raise SimHTTPError(
            404,
            f"The model `{model}` does not exist. Valid aliases: {config.model}.",
            param="model",
        )


def render_chat(messages: Any, continue_final: bool = False) -> tuple[str, str]:
    """The templated prompt (Llama-3 layout) and the plain text the classifier reads.

    ``continue_final`` is vLLM's ``continue_final_message``: the last (assistant) message
    is left open, without its end of turn and without a new generation prompt."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("`messages` must be a non-empty list.", param="messages")
    parts = [BOS]
    plain = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request("Each message needs a string `role`.", param="messages")
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(
                part.get("text", "")
                for part in content
                if isinstance(part, dict) and part.get("type") == "text"
            )
        if not isinstance(content, str):
            raise bad_request("Message `content` must be a string or a list of parts.")
        parts.append(f"<|start_header_id|>{message['role']}<|end_header_id|>\n\n{content}")
        parts.append("<|eot_id|>")
        plain.append(content)
    if continue_final:
        parts.pop()
    else:
        parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts), "\n".join(plain)


def _completion_prompt(prompt: Any, vocab: Vocabulary) -> tuple[str, list[int]]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        text = BOS + prompt
        return text, vocab.encode_prompt(text)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return " ".join(map(str, prompt)), list(prompt)
    raise bad_request("`prompt` must be one string or one list of token ids.", param="prompt")


def _int(data: dict[str, Any], name: str, default: int | None) -> int | None:
    value = data.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"`{name}` must be an integer.", param=name)
    return value


def parse_generation(
    data: dict[str, Any], kind: Literal["chat", "completion"], config: SimConfig, vocab: Vocabulary
) -> ParsedRequest:
    check_model(data, config)
    if data.get("n", 1) not in (1, None):
        raise bad_request("This server supports only n=1.", param="n")
    if kind == "chat":
        prompt_text, plain = render_chat(
            data.get("messages"), bool(data.get("continue_final_message"))
        )
        prompt_ids = vocab.encode_prompt(prompt_text)
        max_tokens = _int(data, "max_completion_tokens", None)
        if max_tokens is None:
            max_tokens = _int(data, "max_tokens", None)
        logprobs = _chat_logprobs(data)
    else:
        prompt_text, prompt_ids = _completion_prompt(data.get("prompt"), vocab)
        plain = prompt_text.removeprefix(BOS)
        max_tokens = _int(data, "max_tokens", 16)
        logprobs = _int(data, "logprobs", None)
        if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
            raise bad_request(f"`logprobs` must be in [0, {MAX_LOGPROBS}].", param="logprobs")
    max_model_len = config.profile.max_model_len
    if len(prompt_ids) >= max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {len(prompt_ids)} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            param="input_tokens",
        )
    if max_tokens is not None and max_tokens < 1:
        raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    limit = max_model_len - len(prompt_ids)
    stream = bool(data.get("stream"))
    options = data.get("stream_options")
    if options is not None and not stream:
        raise bad_request("Stream options can only be defined when `stream=True`.")
    # As in vLLM: usage is reported only when stream_options is given (include_usage
    # defaults to true inside it); continuous stats additionally need include_usage.
    include_usage = (
        stream and isinstance(options, dict) and bool(options.get("include_usage", True))
    )
    options = options if isinstance(options, dict) else {}
    temperature = data.get("temperature")
    if temperature is not None and (not isinstance(temperature, (int, float)) or temperature < 0):
        raise bad_request("temperature must be non-negative.", param="temperature")
    prompt_class, overlap = _prompt_class(data, plain, config)
    return ParsedRequest(
        kind=kind,
        prompt_text=prompt_text,
        prompt_class=prompt_class,
        overlap=overlap,
        prompt_ids=prompt_ids,
        max_tokens=min(max_tokens, limit) if max_tokens is not None else limit,
        greedy=temperature == 0 or _int(data, "top_k", None) == 1,
        seed=_int(data, "seed", None),
        ignore_eos=bool(data.get("ignore_eos", False)),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=include_usage and bool(options.get("continuous_usage_stats", False)),
        logprobs=logprobs,
        return_token_ids=bool(data.get("return_token_ids", False)),
    )


def _prompt_class(
    data: dict[str, Any], plain: str, config: SimConfig
) -> tuple[PromptClass, float | None]:
    """The class the request states, else the simulator's guess with the prompt's overlap
    (read only by an n-gram engine, so only it pays for counting trigrams)."""
    stated = data.get(CLASS_FIELD)
    if stated is not None:
        for name in PROMPT_CLASSES:
            if stated == name:
                return name, None
        raise bad_request(
            f"`{CLASS_FIELD}` must be one of {', '.join(PROMPT_CLASSES)}.", param=CLASS_FIELD
        )
    overlap = repeated_ngram_share(plain) if config.speculation == "ngram" else None
    return classify_prompt(plain), overlap


def _chat_logprobs(data: dict[str, Any]) -> int | None:
    top = _int(data, "top_logprobs", 0) or 0
    if not data.get("logprobs"):
        if top > 0:
            raise bad_request(
                "when using `top_logprobs`, `logprobs` must be set to true.", param="top_logprobs"
            )
        return None
    if not 0 <= top <= MAX_LOGPROBS:
        raise bad_request(f"`top_logprobs` must be in [0, {MAX_LOGPROBS}].", param="top_logprobs")
    return top
