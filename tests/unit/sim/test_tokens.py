import hashlib

from proxy.sim.tokens import TokenStream, Vocabulary, stable_hash


def draw(stream: TokenStream, sizes: list[int]) -> list[int]:
    out: list[int] = []
    for n in sizes:
        out += stream.take(n)
    return out


def test_greedy_tokens_do_not_depend_on_how_they_are_taken() -> None:
    vocab = Vocabulary()
    key = stable_hash("m", "prompt")
    one_by_one = draw(TokenStream(vocab, key), [1] * 100)
    in_steps = draw(TokenStream(vocab, key), [1, 4, 2, 3, 40, 50])
    in_one = TokenStream(vocab, key).take(100)
    assert one_by_one == in_steps == in_one
    assert TokenStream(vocab, key).take(10) == in_one[:10]


def test_different_prompts_and_models_give_different_text() -> None:
    vocab = Vocabulary()
    a = TokenStream(vocab, stable_hash("m", "prompt a")).take(20)
    b = TokenStream(vocab, stable_hash("m", "prompt b")).take(20)
    c = TokenStream(vocab, stable_hash("other", "prompt a")).take(20)
    assert a != b
    assert a != c


def test_stable_hash_is_process_independent() -> None:
    # A fixed value: Python's own hash() would change with PYTHONHASHSEED.
    expected = hashlib.blake2b(b"m\x00p", digest_size=8).digest()
    assert stable_hash("m", "p") == int.from_bytes(expected, "big")
    assert stable_hash("m", "p") != stable_hash("m", "q")


def test_drift_keeps_the_prefix_and_changes_the_rest() -> None:
    vocab = Vocabulary()
    key = stable_hash("m", "prompt")
    reference = TokenStream(vocab, key).take(40)
    drifted_stream = TokenStream(vocab, key, drift_from=12)
    drifted = draw(drifted_stream, [5, 5, 5, 25])
    assert drifted[:12] == reference[:12]
    assert drifted[12] != reference[12]
    assert drifted_stream.runner_up == reference[12]
    assert drifted[12:] != reference[12:]


def test_a_drift_not_taken_keeps_the_output_and_names_the_runner_up() -> None:
    vocab = Vocabulary()
    key = stable_hash("m", "prompt")
    reference = TokenStream(vocab, key).take(40)
    stream = TokenStream(vocab, key, drift_from=12, flip=False)
    assert draw(stream, [5, 5, 5, 25]) == reference
    assert not stream.flipped
    drifted = TokenStream(vocab, key, drift_from=12).take(40)
    assert stream.runner_up == drifted[12] != reference[12]


def test_drift_past_the_output_changes_nothing() -> None:
    vocab = Vocabulary()
    key = stable_hash("m", "prompt")
    stream = TokenStream(vocab, key, drift_from=50)
    assert stream.take(30) == TokenStream(vocab, key).take(30)
    assert stream.runner_up is None


def test_vocabulary_is_fixed_and_decodes_to_words() -> None:
    a, b = Vocabulary(), Vocabulary()
    assert a.pieces == b.pieces
    assert len(set(a.pieces)) == len(a.pieces) == 4096
    text = a.decode(TokenStream(a, 1).take(30))
    assert len(text.split()) >= 20


def test_prompt_encoding_counts_words_and_punctuation() -> None:
    vocab = Vocabulary()
    ids = vocab.encode_prompt("Hello, world. The model")
    assert len(ids) == 6
    assert ids == vocab.encode_prompt("Hello, world. The model")
    assert ids[5] == vocab.pieces.index(" model")
    assert ids[4] >= len(vocab)  # " The" is not an output piece: a hashed prompt id


def test_natural_length_is_within_range_and_fixed_per_key() -> None:
    stream = TokenStream(Vocabulary(), stable_hash("m", "p"))
    n = stream.natural_length(64, 512)
    assert 64 <= n <= 512
    assert n == TokenStream(Vocabulary(), stable_hash("m", "p")).natural_length(64, 512)
