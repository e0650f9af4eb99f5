from proxy.sim.logprobs import MIN_DRIFT_GAP, MIN_ORDINARY_GAP, NEAR_TIE_GAP, ranked_logprobs
from proxy.sim.sequence import Sequence
from proxy.sim.tokens import TokenStream, Vocabulary, stable_hash

VOCAB = Vocabulary()


def sequence(drift_from: int | None = None, near_tie: bool = False, n: int = 30) -> Sequence:
    stream = TokenStream(VOCAB, stable_hash("m", "prompt"), drift_from)
    seq = Sequence("r", 5, n, "length", stream, 0.5, "chat", None, 0.0)
    seq.drift_from = drift_from
    seq.near_tie = near_tie
    seq.output = stream.take(n)
    return seq


def gap(ranked: list[tuple[int, float]]) -> float:
    return ranked[0][1] - ranked[1][1]


def test_emitted_token_ranks_first_with_descending_alternatives() -> None:
    seq = sequence()
    for pos in range(30):
        ranked = ranked_logprobs(seq, pos, 5, len(VOCAB))
        assert ranked[0][0] == seq.output[pos]
        assert len({t for t, _ in ranked}) == 5
        values = [lp for _, lp in ranked]
        assert values == sorted(values, reverse=True)
        assert all(lp <= 0 for lp in values)
        assert gap(ranked) >= MIN_ORDINARY_GAP


def test_logprobs_are_deterministic() -> None:
    assert ranked_logprobs(sequence(), 7, 3, len(VOCAB)) == ranked_logprobs(
        sequence(), 7, 3, len(VOCAB)
    )


def test_count_zero_still_reports_the_emitted_token() -> None:
    ranked = ranked_logprobs(sequence(), 3, 0, len(VOCAB))
    assert len(ranked) == 1


def test_near_tie_drift_shows_the_reference_token_a_hair_behind() -> None:
    seq = sequence(drift_from=10, near_tie=True)
    ranked = ranked_logprobs(seq, 10, 5, len(VOCAB))
    assert ranked[1][0] == seq.stream.runner_up
    assert 0 < gap(ranked) <= NEAR_TIE_GAP * 1.0001


def test_real_drift_wins_by_a_wide_margin_without_the_reference_token() -> None:
    seq = sequence(drift_from=10, near_tie=False)
    ranked = ranked_logprobs(seq, 10, 5, len(VOCAB))
    assert gap(ranked) >= MIN_DRIFT_GAP
    assert seq.stream.runner_up not in {t for t, _ in ranked}
