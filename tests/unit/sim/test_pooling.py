"""The simulator's non-generating endpoints in vLLM 0.32's shapes (field names of its
protocol models: EmbeddingResponse, ScoreResponse, RerankResponse, PoolingResponse,
DetokenizeResponse, TranscriptionResponse), and its Responses API body conversion."""

from __future__ import annotations

import orjson
import pytest

from proxy.sim import pooling
from proxy.sim.render_responses import responses_as_chat
from proxy.sim.tokens import Vocabulary


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary()


def test_embeddings_shape_and_determinism(vocab: Vocabulary) -> None:
    body = orjson.loads(pooling.embeddings({"input": ["a b", "c"]}, "m", vocab))
    assert set(body) == {"id", "object", "created", "model", "data", "usage"}
    assert body["id"].startswith("embd-") and body["object"] == "list"
    assert [set(row) for row in body["data"]] == [{"index", "object", "embedding"}] * 2
    assert body["data"][0]["embedding"] == pooling.embed("a b")
    assert sum(x * x for x in pooling.embed("a b")) == pytest.approx(1.0)
    assert set(body["usage"]) == {
        "prompt_tokens",
        "total_tokens",
        "completion_tokens",
        "prompt_tokens_details",
    }


def test_score_and_rerank(vocab: Vocabulary) -> None:
    score = orjson.loads(pooling.score({"text_1": "q", "text_2": ["a", "b"]}, "m", vocab))
    assert [row["object"] for row in score["data"]] == ["score", "score"]
    assert all(0 <= row["score"] <= 1 for row in score["data"])
    ranked = orjson.loads(
        pooling.rerank({"query": "q", "documents": ["a", "b", "c"], "top_n": 2}, "m", vocab)
    )
    assert set(ranked) == {"id", "model", "usage", "results"}
    scores = [r["relevance_score"] for r in ranked["results"]]
    assert len(scores) == 2 and scores == sorted(scores, reverse=True)
    assert set(ranked["results"][0]["document"]) == {"text", "multi_modal"}
    with pytest.raises(Exception, match="text_1"):
        pooling.score({"query": "q"}, "m", vocab)


def test_pooling_detokenize_transcription_version(vocab: Vocabulary) -> None:
    pooled = orjson.loads(pooling.pooling({"input": "x"}, "m", vocab))
    assert pooled["id"].startswith("pool-") and pooled["data"][0]["object"] == "pooling"
    ids = vocab.encode_prompt(" the model")
    assert orjson.loads(pooling.detokenize({"tokens": ids}, vocab)) == {"prompt": " the model"}
    heard = orjson.loads(pooling.transcription(b"\x00" * 64000, vocab, translate=False))
    assert heard["usage"] == {"type": "duration", "seconds": 2} and heard["text"]
    assert set(orjson.loads(pooling.transcription(b"\x00", vocab, translate=True))) == {"text"}
    assert orjson.loads(pooling.version()) == {"version": pooling.SIM_VLLM_VERSION}


def test_responses_body_runs_as_chat() -> None:
    chat = responses_as_chat(
        {
            "model": "m",
            "instructions": "Be brief.",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
            "max_output_tokens": 7,
            "stream": True,
        }
    )
    assert chat == {
        "model": "m",
        "stream": True,
        "max_tokens": 7,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    }
    assert responses_as_chat({"input": "x"})["messages"] == [{"role": "user", "content": "x"}]
