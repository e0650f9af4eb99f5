"""The simulator's prompt tokenizer is reversible: ``/detokenize`` of ``/tokenize`` gives the
text back, as a real tokenizer's does, while a prompt still counts about one token per word
(the benchmarks size their prompts by that count)."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.sim import pooling
from proxy.sim.tokens import SPECIAL_TOKENS, Vocabulary

VOCAB = Vocabulary()
# Text that looks like prompts (words, code, whitespace runs, the chat template's markers)
# beside any text at all.
PROMPTISH = st.lists(
    st.sampled_from(
        [
            " the",
            " model",
            "Hello",
            "world",
            "<|eot_id|>",
            "<|foo|>",
            "\n",
            "\n\n",
            "    ",
            "\t",
            "\r\n",
            "_",
            "x1",
            "internationalization",
            " =",
            "()",
            "é",
            "日本語",
            "🎉",
            "\x00",
        ]
    )
    | st.text(max_size=12),
    max_size=40,
).map("".join)


@given(st.text())
def test_detokenize_inverts_tokenize_for_any_text(text: str) -> None:
    ids = VOCAB.encode_prompt(text)
    assert VOCAB.decode_prompt(ids) == text
    assert all(0 <= i < 2**63 for i in ids)  # JSON integers every client reads


@given(PROMPTISH)
def test_detokenize_inverts_tokenize_for_prompt_like_text(text: str) -> None:
    ids = VOCAB.encode_prompt(text)
    assert VOCAB.decode_prompt(ids) == text
    assert orjson.loads(pooling.detokenize({"tokens": ids}, VOCAB)) == {"prompt": text}


@given(st.text())
def test_each_token_reads_as_its_own_text(text: str) -> None:
    # token_strs of /tokenize: every id is whole text on its own (cut at characters).
    ids = VOCAB.encode_prompt(text)
    assert "".join(VOCAB.prompt_piece(i) for i in ids) == text


def test_special_tokens_have_llama3_ids_and_come_back() -> None:
    text = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
    ids = VOCAB.encode_prompt(text)
    assert ids[0] == SPECIAL_TOKENS["<|begin_of_text|>"] == 128000
    assert SPECIAL_TOKENS["<|eot_id|>"] in ids
    assert VOCAB.decode_prompt(ids) == text


def test_a_prompt_counts_about_one_token_per_word() -> None:
    assert len(VOCAB.encode_prompt("Hello, world. The model")) == 6
    assert len(VOCAB.encode_prompt("hello world")) == 2
    # Code indentation is one token; a word of up to ten characters is one.
    assert len(VOCAB.encode_prompt("\n            return total_sum")) == 3
    assert len(VOCAB.encode_prompt(" internationalization")) == 2


def test_vocabulary_pieces_keep_their_output_ids() -> None:
    ids = VOCAB.encode_prompt(" the model")
    assert ids == [VOCAB.pieces.index(" the"), VOCAB.pieces.index(" model")]
    assert VOCAB.decode(ids) == VOCAB.decode_prompt(ids) == " the model"


def test_ids_no_piece_has_read_as_their_number() -> None:
    # Between the output vocabulary and Llama 3's special tokens no id is assigned.
    assert VOCAB.decode_prompt([5000, 128002]) == "<5000><128002>"
