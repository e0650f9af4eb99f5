from proxy.verify.compare import (
    RefToken,
    compare,
    tokens_from_chat_logprobs,
    tokens_from_completion_logprobs,
)


def toks(*pieces: tuple[str, float]) -> list[RefToken]:
    # each piece: (text, top-2 gap)
    return [RefToken(t, -0.1, ((t, -0.1), ("other", -0.1 - gap))) for t, gap in pieces]


REF = toks(("The", 3.0), (" cat", 2.0), (" sat", 0.01), (" down", 4.0))


def test_match() -> None:
    assert compare("The cat sat down", "The cat sat down", REF, epsilon=0.1).verdict == "match"


def test_real_drift_position_and_context() -> None:
    result = compare("The cat ran off", "The cat sat down", REF, epsilon=0.005)
    assert result.verdict == "diverged"
    assert result.position == 2
    assert result.char_offset == 8
    assert result.primary_context.endswith("ran off")
    assert result.reference_context.endswith("sat down")


def test_near_tie() -> None:
    result = compare("The cat ran off", "The cat sat down", REF, epsilon=0.05)
    assert result.verdict == "diverged_near_tie"
    assert result.top2_gap is not None and abs(result.top2_gap - 0.01) < 1e-9
    assert compare("The dog", "The cat sat down", REF, epsilon=0.05).verdict == "diverged"


def test_truncated_primary_diverges_at_the_end() -> None:
    result = compare("The cat", "The cat sat down", REF, epsilon=0.001)
    assert result.verdict == "diverged"
    assert result.position == 2


def test_without_logprobs_every_divergence_is_real() -> None:
    assert compare("a", "b", None, epsilon=1.0).verdict == "diverged"


def test_parsers() -> None:
    chat = {
        "content": [
            {
                "token": "Hi",
                "logprob": -0.5,
                "top_logprobs": [
                    {"token": "Hi", "logprob": -0.5},
                    {"token": "Yo", "logprob": -0.6},
                ],
            }
        ]
    }
    (tok,) = tokens_from_chat_logprobs(chat) or []
    assert tok.text == "Hi" and tok.alternatives[1] == ("Yo", -0.6)
    legacy = {
        "tokens": ["a", "b"],
        "token_logprobs": [-1.0, -2.0],
        "top_logprobs": [{"x": -3.0, "a": -1.0}, None],
    }
    parsed = tokens_from_completion_logprobs(legacy) or []
    assert parsed[0].alternatives == (("a", -1.0), ("x", -3.0))
    assert parsed[1].alternatives == ()
    assert tokens_from_chat_logprobs(None) is None


def test_severity_is_the_gap_to_the_primarys_token() -> None:
    # The reference's top-3 at " sat": the primary chose " ran", third, 1.5 below the top.
    ref = [
        RefToken("The", -0.1, (("The", -0.1), ("A", -3.0))),
        RefToken(" cat", -0.1, ((" cat", -0.1), (" dog", -2.0))),
        RefToken(" sat", -0.5, ((" sat", -0.5), (" lay", -0.52), (" ran", -2.0))),
    ]
    result = compare("The cat ran off", "The cat sat down", ref, epsilon=0.1)
    assert result.chosen_rank == 2
    assert result.chosen_gap is not None and abs(result.chosen_gap - 1.5) < 1e-9
    # Judged on the primary's token: a near tie between the reference's top two is not
    # enough when the primary chose a token far below both.
    assert result.verdict == "diverged"
    assert result.position == 2 and result.char_offset == 8
    assert result.prefix == "The cat "
    assert (result.primary_continuation, result.reference_continuation) == ("ran off", "sat down")
    assert result.top_logprobs[2] == (" ran", -2.0)


def test_near_tie_against_the_primarys_token() -> None:
    ref = [RefToken("a", -0.7, (("a", -0.69), ("b", -0.70)))]
    result = compare("b", "a", ref, epsilon=0.1)
    assert result.verdict == "diverged_near_tie"
    assert result.chosen_rank == 1
    assert result.chosen_gap is not None and abs(result.chosen_gap - 0.01) < 1e-9
