import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from proxy.routing.classify import Classification, Classifier, ClassifierConfig, ClassRule
from proxy.routing.classify.extract import extract
from tests.unit.routing.classify_data.classify_eval_holdout3 import HOLDOUT3

EVAL_SET = Path(__file__).parent / "classify_data" / "classify_eval.jsonl"
LABELS = ("rag", "code", "chat")

PASSAGE = (
    "Full-time employees accrue paid time off at a rate of 1.67 days per month of service, "
    "for a total of 20 days per calendar year. Unused days of up to five may be carried over "
    "into the first quarter of the following year; any balance above five days is forfeited "
    "on January 1. Requests for more than three consecutive days must be submitted in the HR "
    "portal at least two weeks in advance and approved by the direct manager."
)
SNIPPET = (
    "def average(values):\n"
    "    total = 0\n"
    "    for v in values:\n"
    "        total += v\n"
    "    return total / len(values)\n"
)
PERSONA = (
    "You are Ava, the assistant of an online store. Keep a warm, upbeat tone.\n"
    "- Always greet the customer by first name if it is known.\n"
    "- Keep answers under 80 words unless the customer asks for detail.\n"
    "- Never promise a refund or a delivery date; offer a human agent instead.\n"
    "- Do not ask for card numbers or passwords under any circumstances.\n"
    "- If the customer is upset, acknowledge their feelings before solving the problem.\n"
    "- End every conversation by asking if there is anything else you can help with."
)


def chat(*messages: tuple[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": r, "content": c} for r, c in messages], **extra}


def classify(body: dict[str, Any], override: str | None = None) -> Classification:
    return Classifier().classify(body, override)


# --------------------------------------------------------------------- evaluation set


def _confusion(rows: list[dict[str, Any]], classifier: Classifier) -> Counter[tuple[str, str]]:
    return Counter((row["label"], classifier.classify(row["body"]).label) for row in rows)


def _report(name: str, confusion: Counter[tuple[str, str]]) -> str:
    total = sum(confusion.values())
    correct = sum(confusion[(label, label)] for label in LABELS)
    lines = [f"{name}: accuracy {correct}/{total} = {correct / total:.3f}"]
    lines.append("    gold \\ predicted " + "".join(f"{label:>7}" for label in LABELS) + "  recall")
    for gold in LABELS:
        row = [confusion[(gold, predicted)] for predicted in LABELS]
        recall = confusion[(gold, gold)] / max(sum(row), 1)
        lines.append(f"    {gold:>17} " + "".join(f"{n:>7}" for n in row) + f"  {recall:.3f}")
    return "\n".join(lines)


def test_evaluation_set(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [orjson.loads(line) for line in EVAL_SET.read_bytes().splitlines()]
    assert len(rows) >= 200
    assert {row["label"] for row in rows} == set(LABELS)
    classifier = Classifier()
    started = time.perf_counter()
    overall = _confusion(rows, classifier)
    per_request_us = (time.perf_counter() - started) / len(rows) * 1e6
    reports = [_report("all rows", overall)]
    for split in sorted({row["split"] for row in rows}):
        reports.append(
            _report(split, _confusion([r for r in rows if r["split"] == split], classifier))
        )
    with capsys.disabled():
        print("\n" + "\n".join(reports))
        print(f"mean classification time over the set: {per_request_us:.1f} us/request")

    total = sum(overall.values())
    assert sum(overall[(label, label)] for label in LABELS) / total >= 0.9
    for gold in LABELS:
        support = sum(overall[(gold, predicted)] for predicted in LABELS)
        assert overall[(gold, gold)] / support >= 0.85, gold


def test_blind_batch(capsys: pytest.CaptureFixture[str]) -> None:
    """The third held-out batch: written without seeing the classifier or the other rows,
    scored once (64/72) and not tuned against, so it is the set that estimates accuracy on
    unseen traffic. The floors sit just under that first score: they catch a regression on
    unseen shapes, which the development set cannot."""
    classifier = Classifier()
    confusion = Counter((gold, classifier.classify(body).label) for gold, body in HOLDOUT3)
    with capsys.disabled():
        print("\n" + _report("blind batch (holdout3)", confusion))
    total = sum(confusion.values())
    assert total == 72
    assert sum(confusion[(label, label)] for label in LABELS) / total >= 0.85
    for gold in LABELS:
        support = sum(confusion[(gold, predicted)] for predicted in LABELS)
        assert confusion[(gold, gold)] / support >= 0.7, gold


def test_timing_figures(capsys: pytest.CaptureFixture[str]) -> None:
    classifier = Classifier()
    typical = chat(
        ("system", "You are a helpful assistant."),
        ("user", "What are three fun facts about octopuses? Keep it short."),
    )
    huge = chat(("user", "Please review:\n\n```python\n" + SNIPPET * 1000 + "```"))
    figures = []
    for name, body, rounds in (("typical chat", typical, 2000), ("100 KB prompt", huge, 50)):
        started = time.perf_counter()
        for _ in range(rounds):
            classifier.classify(body)
        figures.append(f"{name}: {(time.perf_counter() - started) / rounds * 1e6:.1f} us")
    with capsys.disabled():
        print("\nclassifier timing (shared machine, indicative only): " + "; ".join(figures))


# --------------------------------------------------------------------- code features


def test_fenced_code_is_code() -> None:
    result = classify(chat(("user", f"Why does this crash?\n\n```python\n{SNIPPET}```")))
    assert result.label == "code"
    assert result.features["fences"] == 2
    assert "fenced code" in result.reason


def test_unfenced_code_lines_are_code() -> None:
    result = classify(chat(("user", f"can you make this faster\n{SNIPPET}")))
    assert result.label == "code"
    assert result.features["code_lines"] == 5
    assert float(result.features["code_share"]) > 0.5


def test_prose_lines_are_not_code_lines() -> None:
    text = "Dear team,\nthe offsite is on Friday.\nlet me know if you can come\nThanks, Ana"
    result = classify(chat(("user", text)))
    assert result.features["code_lines"] == 0
    assert result.label == "chat"


@pytest.mark.parametrize(
    ("text", "feature"),
    [
        (
            'Traceback (most recent call last):\n  File "a.py", line 3, in <module>\n'
            "KeyError: 'x'",
            "stack_trace",
        ),
        ("error[E0382]: borrow of moved value\n --> src/main.rs:7:20", "stack_trace"),
        (
            "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-a = 1\n+a = 2",
            "diff",
        ),
    ],
)
def test_code_artifacts(text: str, feature: str) -> None:
    result = classify(chat(("user", f"what is wrong here?\n{text}")))
    assert result.features[feature] is True
    assert result.label == "code"


def test_fill_in_the_middle_prompt_is_code() -> None:
    body = {"prompt": "<|fim_prefix|>def f(x):\n<|fim_suffix|>\n    return y<|fim_middle|>"}
    result = classify(body)
    assert result.features["fim"] is True
    assert result.label == "code"


@pytest.mark.parametrize(
    ("text", "request_kind", "label"),
    [
        ("Write a Python function that checks whether a string is a palindrome.", "strong", "code"),
        ("regex to match US phone numbers like (555) 123-4567", "strong", "code"),
        ("Explain this one-liner: awk -F, '{s+=$3} END {print s}' data.csv", "strong", "code"),
        ("Implement binary search in Rust.", "language", "code"),
        ("What is Python used for?", "none", "chat"),
        ("Write a limerick about a programmer who hates meetings.", "none", "chat"),
        ("Write a short story about a lighthouse keeper.", "none", "chat"),
    ],
)
def test_code_request_phrasing(text: str, request_kind: str, label: str) -> None:
    result = classify(chat(("user", text)))
    assert result.features["code_request"] == request_kind
    assert result.label == label


def test_language_names_that_are_words_only_count_capitalized() -> None:
    assert classify(chat(("user", "the ruby ring was a gift"))).features["language"] is False
    assert classify(chat(("user", "I started learning Rust"))).features["language"] is True


def test_coding_system_prompt_and_inline_code() -> None:
    body = chat(
        ("system", "You are a senior software engineer doing code review."),
        ("user", "Is `items.sort(key=len)` stable?"),
    )
    result = classify(body)
    assert result.features["code_system_cue"] is True
    assert result.features["inline_code"] == 0.3
    assert result.label == "chat"  # 0.5 + 0.3 stays below the code threshold
    body["messages"][1]["content"] = "Is `items.sort(key=len)` stable in Python?"
    assert classify(body).label == "code"


def test_code_in_assistant_history_counts_for_follow_ups() -> None:
    body = chat(
        ("user", "Write a function that returns the digits of an integer."),
        ("assistant", "```python\ndef digits(n):\n    return [int(c) for c in str(n)]\n```"),
        ("user", "now make it handle negative numbers too"),
    )
    assert classify(body).label == "code"


# --------------------------------------------------------------------- rag features


def test_context_in_system_prompt_is_rag() -> None:
    body = chat(
        ("system", f"Answer using only the context below.\n\nContext:\n[1] {PASSAGE}"),
        ("user", "How many days can I carry over?"),
    )
    result = classify(body)
    assert result.label == "rag"
    assert int(result.features["doc_markers"]) >= 2
    assert result.features["rag_cue"] is True
    assert int(result.features["context_chars"]) > 300


def test_document_then_question_in_one_user_turn_is_rag() -> None:
    result = classify(chat(("user", f"{PASSAGE}\n\n{PASSAGE}\n\nCan I carry over ten days?")))
    assert result.label == "rag"
    assert result.features["question_chars"] == len("Can I carry over ten days?")
    assert result.features["doc_markers"] == 0


def test_instruction_then_pasted_text_in_next_turn_is_rag() -> None:
    result = classify(chat(("user", "tl;dr this please"), ("user", PASSAGE + " " + PASSAGE)))
    assert result.label == "rag"
    assert result.features["question_chars"] == len("tl;dr this please")


def test_retrieved_text_in_tool_message_is_rag_but_small_json_is_not() -> None:
    def body(tool_content: str) -> dict[str, Any]:
        return {
            "messages": [
                {"role": "user", "content": "how much PTO do I get?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "1",
                            "type": "function",
                            "function": {"name": "search", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "1", "content": tool_content},
            ]
        }

    rag = classify(body(PASSAGE))
    assert rag.label == "rag"
    assert rag.features["tool_msgs"] == 1
    assert rag.features["tool_calls"] == 1
    small = classify(body('{"status": "in_transit", "eta": "2024-06-14"}'))
    assert small.label == "chat"
    assert small.features["code_lines"] == 0


def test_completions_prompt_with_context_is_rag() -> None:
    result = classify({"prompt": f"Context: {PASSAGE}\n\nQuestion: How many days?\nAnswer:"})
    assert result.label == "rag"


def test_behaviour_system_prompt_is_chat_but_knowledge_system_prompt_is_rag() -> None:
    persona = classify(chat(("system", PERSONA), ("user", "hi, my parcel is late")))
    assert persona.label == "chat"
    assert float(persona.features["system_instruction_share"]) >= 0.5
    knowledge = classify(
        chat(("system", f"Be friendly.\n\n{PASSAGE}"), ("user", "How many days can I carry over?"))
    )
    assert knowledge.label == "rag"
    assert float(knowledge.features["system_instruction_share"]) < 0.5


def test_personal_story_is_chat() -> None:
    story = (
        "I have been at my company for four years and my manager told me twice that I'm ready "
        "for a promotion, but it keeps getting pushed. I like my team and my commute is short, "
        "which matters to me because I have two kids. A recruiter offered me a role paying 20% "
        "more but I would have to commute an hour.\n\nShould I bring the offer to my manager?"
    )
    result = classify(chat(("user", story)))
    assert result.label == "chat"
    assert float(result.features["first_person_ratio"]) >= 0.05


def test_long_conversation_is_chat() -> None:
    turns: list[tuple[str, Any]] = []
    for i in range(6):
        turns += [("user", f"What about option {i}? I'm not sure."), ("assistant", PASSAGE)]
    turns.append(("user", "ok, which one would you pick?"))
    result = classify(chat(*turns))
    assert result.label == "chat"
    assert int(result.features["prompt_chars"]) > 2000


LONG_TURN = (
    "The trail starts behind the old mill and climbs through beech woods for about an hour. "
    "After the second bridge the path splits; the left fork is steeper but shorter, and it "
    "comes out above the lake where the view is best in the late afternoon. The right fork "
    "follows the stream and is easier with children, though it can be muddy after rain."
)


def test_long_turns_of_a_conversation_stay_chat() -> None:
    """Long user turns answered by the assistant are conversation, not supplied context:
    length alone never makes rag."""
    turns: list[tuple[str, Any]] = [("system", "You are a friendly and concise assistant.")]
    for _ in range(4):
        turns += [("user", LONG_TURN), ("assistant", PASSAGE)]
    turns.append(("user", "And the parking?"))
    result = classify(chat(*turns))
    assert result.label == "chat", result.reason
    assert int(result.features["context_chars"]) < 300
    assert int(result.features["prompt_chars"]) > 3000


@pytest.mark.parametrize(
    "earlier",
    [
        f"Here is our leave policy:\n\n{PASSAGE}",
        f"[1] Leave policy\n{PASSAGE}\n[2] Travel policy\n{LONG_TURN}",
        f"<document>{PASSAGE}</document>",
    ],
    ids=["introduced", "numbered-passages", "document-tags"],
)
def test_earlier_turn_framed_as_material_is_context(earlier: str) -> None:
    """A document the user supplied earlier in the conversation is context for the
    follow-up question when its content shows it is material (an introduction ending in a
    colon, numbered passages, document tags), however long the turns around it are."""
    body = chat(
        ("user", earlier),
        ("assistant", "Got it. What would you like to know?"),
        ("user", "How many days can I carry over?"),
    )
    result = classify(body)
    assert result.label == "rag", result.reason
    assert int(result.features["context_chars"]) >= 300


def test_unanswered_earlier_turn_is_pasted_material() -> None:
    """A long turn with no reply before the next user turn was pasted beside the ask."""
    result = classify(chat(("user", PASSAGE), ("user", "How many days can I carry over?")))
    assert result.label == "rag", result.reason


# --------------------------------------------------------------------- shapes holdout2 exposed


SHORT_PASSAGE = (
    "The museum's east wing reopened in May after a two-year renovation. It now houses the "
    "textile collection, and entry is included in the standard ticket."
)


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": f"Passage: {SHORT_PASSAGE}\nQuestion: Is entry included?\nAnswer:"},
        chat(("user", f"<document>{SHORT_PASSAGE}</document>\nIs entry included?")),
        chat(
            ("user", f"Pull the opening month and the collection out of this:\n\n{SHORT_PASSAGE}")
        ),
    ],
)
def test_short_framed_context_is_rag(body: dict[str, Any]) -> None:
    result = classify(body)
    assert int(result.features["context_chars"]) < 300
    assert result.features["short_context"] is True
    assert result.label == "rag"
    assert "short framed context" in result.reason


def test_short_unframed_or_personal_text_stays_chat() -> None:
    plain = classify(chat(("user", f"{SHORT_PASSAGE}\n\nIs entry included?")))
    assert plain.features["short_context"] is False
    assert plain.label == "chat"
    own = classify(
        chat(
            (
                "user",
                "Context: I'm a teacher and I want to switch careers into UX "
                "design, but I have two kids and I worry about my savings and "
                "a pay cut.\n\nIs it realistic?",
            )
        )
    )
    assert float(own.features["first_person_ratio"]) >= 0.05
    assert own.label == "chat"


def test_table_frames_short_context() -> None:
    table = (
        "| Plan | Seats | SSO |\n|---|---|---|\n| Starter | 5 | no |\n| Team | 25 | no |\n"
        "| Business | 100 | yes |\n| Enterprise | unlimited | yes, with SCIM and audit logs |"
    )
    result = classify(chat(("user", f"{table}\n\nwhich plans include SSO?")))
    assert result.features["table_rows"] == 6
    assert result.features["code_lines"] == 0
    assert result.label == "rag"


SLACK = (
    "alice: should we move the launch to next week? the translations aren't back yet\n"
    "bob: I'd rather ship english-only on thursday and add the rest after\n"
    "carol: sales promised the german version to two customers though\n"
    "alice: ok then thursday in english and german, the others the week after\n"
    "bob: works for me, I'll update the release checklist"
)


def test_lowercase_chat_log_is_not_code() -> None:
    result = classify(chat(("user", f"summarize the decision in this thread:\n\n{SLACK}")))
    assert result.features["transcript_lines"] == 5
    assert result.features["code_lines"] == 0
    assert result.features["own_dialogue"] is False
    assert result.label == "rag"


def test_chat_log_the_user_is_in_or_continues_is_chat() -> None:
    mine = SLACK.replace("alice:", "me:")
    advice = classify(chat(("user", f"{mine}\n\nhow do I tell them I disagree?")))
    assert advice.features["own_dialogue"] is True
    assert advice.label == "chat"
    cont = classify({"prompt": f"{SLACK}\ncarol:"})
    assert cont.features["own_dialogue"] is True
    assert cont.label == "chat"


def test_yaml_keys_are_not_a_chat_log() -> None:
    yaml = (
        "name: deploy the documentation site\non:\n  push:\n    branches: [main]\njobs:\n"
        "  build:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n"
        "      - run: make docs"
    )
    result = classify(chat(("user", f"why does this never run on pull requests?\n\n{yaml}")))
    assert result.features["transcript_lines"] == 0
    assert result.label == "code"


def test_creative_brief_is_chat_but_story_to_summarize_is_rag() -> None:
    idea = (
        f"{PASSAGE}\n\nThe twist: the HR portal has been sentient all along and "
        "approves only the requests it likes."
    )
    brief = classify(chat(("user", f"Write a short story based on this idea:\n\n{idea}")))
    assert brief.features["creative_ask"] is True
    assert brief.label == "chat"
    summary = classify(chat(("user", f"Write a summary of this story:\n\n{idea}")))
    assert summary.features["creative_ask"] is False
    assert summary.label == "rag"


def test_shell_session_is_code_but_amounts_are_not_prompts() -> None:
    session = (
        "what am I doing wrong?\n\n$ python -m venv .venv\n$ pip install -e .\n"
        "ERROR: File setup.py not found. Directory cannot be installed in editable mode"
    )
    result = classify(chat(("user", session)))
    assert result.features["shell_lines"] == 2
    assert result.label == "code"
    assert "shell prompt lines" in result.reason
    prices = classify(chat(("user", "pending:\n$ 120.00 groceries\n$ 45.50 fuel\nis that a lot?")))
    assert prices.features["shell_lines"] == 0
    assert prices.label == "chat"


def test_document_tags_mark_supplied_text_in_one_block() -> None:
    text = f"<context>\n{PASSAGE}\n</context>\n<question>How many days carry over?</question>"
    result = classify(chat(("user", text)))
    assert int(result.features["question_chars"]) < 100
    assert result.label == "rag"
    html = (
        'why is the body escaped?\n<article class="post">\n  <h1>{{ post.title }}</h1>\n'
        '  <div class="body">{{ post.body }}</div>\n</article>'
    )
    assert classify(chat(("user", html))).label == "code"


def test_short_follow_up_to_a_code_request_is_code() -> None:
    body = chat(
        ("user", "I need a regex for email addresses"),
        ("assistant", "A pragmatic one is `^[^@\\s]+@[^@\\s]+$`."),
        ("user", "it also accepts abc@def without a TLD, fix it"),
    )
    result = classify(body)
    assert result.features["follow_up_to"] == "strong"
    assert float(result.features["reply_inline_code"]) > 0
    assert result.label == "code"
    question = chat(
        ("user", "What's the difference between a list and a tuple in Python?"),
        ("assistant", "A list is mutable, so `xs.append(4)` works."),
        ("user", "when would I pick one over the other?"),
    )
    result = classify(question)
    assert result.features["follow_up_to"] == "none"
    assert result.label == "chat"


def test_completion_prompt_ending_in_an_open_block_is_code() -> None:
    result = classify({"prompt": "# Return the n-th Fibonacci number.\ndef fib(n: int) -> int:\n"})
    assert result.features["open_code_block"] is True
    assert result.label == "code"
    qa = classify({"prompt": "Q: Who painted the Sistine Chapel ceiling?\nA:"})
    assert qa.features["open_code_block"] is False
    assert qa.label == "chat"


# --------------------------------------------------------------------- request shapes


def test_content_part_lists() -> None:
    body = chat(
        (
            "user",
            [
                {"type": "text", "text": "Here are some search results:"},
                {"type": "text", "text": f"[1] {PASSAGE}"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "How many days can I carry over?"},
            ],
        )
    )
    result = classify(body)
    assert result.label == "rag"
    assert result.features["images"] == 1


def test_completions_prompt_shapes() -> None:
    assert classify({"prompt": "def fib(n):\n    if n < 2:\n        return n\n"}).label == "code"
    assert classify({"prompt": ["Once upon a time", "The best thing about"]}).label == "chat"
    tokens = classify({"prompt": [[1, 2, 3], [4, 5]]})
    assert tokens.label == "chat"
    assert tokens.features["prompt_tokens"] == 5


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": None},
        {"messages": "hello"},
        {"messages": []},
        {"messages": [None, 3, "x", {"role": 5, "content": 7}, {"content": None}]},
        {
            "messages": [
                {
                    "role": "user",
                    "content": [None, 1, {"type": "text", "text": None}, {"text": 5}, "plain"],
                }
            ]
        },
        {"messages": [{"role": "assistant", "content": None, "tool_calls": "bad"}]},
        {"messages": [{"role": "user", "content": ""}], "tools": None},
        {"prompt": None},
        {"prompt": 42},
        {"prompt": [None, {"a": 1}, [1, 2]]},
        {"messages": [{"role": "user", "content": "```"}]},
        {"messages": [{"role": "user", "content": "\n\n\n"}]},
        {"messages": [{"role": "user", "content": "[" * 5000 + "x" * 200}]},
        {"messages": [{"role": "user", "content": "a: b c d e\na: b c d e\nb: c d e f\n:"}]},
        {"messages": [{"role": "user", "content": "</context><context>x"}]},
        {"messages": [{"role": "user", "content": "$ \n>>> \n|\n| |\nPS C:\\>"}]},
        {"prompt": "user: one two three four\nbot:"},
    ],
)
def test_odd_inputs_never_raise(body: dict[str, Any]) -> None:
    result = classify(body)
    assert result.label in LABELS
    assert not result.overridden
    for name, value in result.features.items():
        assert isinstance(value, float | int | bool | str), name


def test_scan_is_capped_but_lengths_are_exact() -> None:
    body = chat(("system", "x" * 200_000), ("user", "short question?"))
    request = extract(body, 4000)
    assert sum(len(segment.text) for segment in request.segments) <= 4002
    assert request.last_user is not None
    assert request.last_user.text == "short question?"
    result = Classifier(ClassifierConfig(max_scan_chars=4000)).classify(body)
    assert result.features["prompt_chars"] == 200_000 + len("short question?")


def test_code_at_the_end_of_a_huge_message_is_still_seen() -> None:
    body = chat(("user", "Some notes. " * 20_000 + f"\n\nFix this:\n```python\n{SNIPPET}```"))
    result = classify(body)
    assert result.features["fences"] == 2
    assert result.features["code_lines"] == 5


# --------------------------------------------------------------------- override


def test_override_with_known_label() -> None:
    body = chat(("user", "hello there"))
    result = classify(body, override=" RAG ")
    assert result.label == "rag"
    assert result.overridden is True
    assert result.features["detected"] == "chat"
    assert "x-specroute-class" in result.reason


def test_override_with_unknown_label_names_allowed_labels() -> None:
    with pytest.raises(ValueError, match=r"x-specroute-class.*allowed: rag, code, chat"):
        classify(chat(("user", "hello")), override="poetry")


def test_empty_override_is_ignored() -> None:
    assert classify(chat(("user", "hello")), override="  ").overridden is False


# --------------------------------------------------------------------- rules and config


SQL_RULE = ClassRule(
    label="sql", any_keywords=["select", "join", "group by"], min_hits=2, roles=["user"]
)


def test_rule_is_tested_before_built_in_labels() -> None:
    classifier = Classifier(ClassifierConfig(rules=[SQL_RULE]))
    result = classifier.classify(chat(("user", "SELECT a FROM t JOIN u ON t.id = u.id;")))
    assert result.label == "sql"
    assert result.features["rule_hits"] == 2
    assert "sql" in classifier.labels
    assert classifier.classify(chat(("user", "hi")), override="sql").label == "sql"


def test_rule_respects_roles_and_min_hits() -> None:
    classifier = Classifier(ClassifierConfig(rules=[SQL_RULE]))
    only_system = chat(("system", "select join group by"), ("user", "hi"))
    assert classifier.classify(only_system).label == "chat"
    one_hit = chat(("user", "select a restaurant for tonight"))
    assert classifier.classify(one_hit).label == "chat"


def test_rule_patterns_and_whole_word_keywords() -> None:
    rule = ClassRule(label="math", patterns=[r"\\(?:frac|int|sum)\b"], any_keywords=["c++"])
    classifier = Classifier(ClassifierConfig(rules=[rule]))
    assert classifier.classify(chat(("user", r"simplify \frac{a}{b}"))).label == "math"
    assert classifier.classify(chat(("user", "I like c++ a lot"))).label == "math"
    assert classifier.classify(chat(("user", "abc++ b"))).label == "chat"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"rules": [{"label": "x", "patterns": ["("]}]}, "invalid regular expression"),
        ({"rules": [{"label": "x", "any_keywords": ["a"], "roles": ["robot"]}]}, "unknown roles"),
        ({"rules": [{"label": "x"}]}, "needs any_keywords or patterns"),
        ({"rules": [{"label": "Bad Label", "any_keywords": ["a"]}]}, "pattern"),
        ({"labels": ["rag", "rag", "chat"]}, "unique"),
        ({"labels": ["rag", "code"]}, "default_label"),
        ({"labels": []}, "must not be empty"),
        ({"max_scan_chars": 10}, "greater than or equal"),
        ({"unknown_field": 1}, "Extra inputs"),
    ],
)
def test_invalid_config_is_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ClassifierConfig.model_validate(config)


def test_disabled_built_in_label_falls_back_to_default() -> None:
    classifier = Classifier(ClassifierConfig(labels=["code", "chat"]))
    body = chat(("system", f"Context:\n[1] {PASSAGE}"), ("user", "How many days?"))
    result = classifier.classify(body)
    assert result.label == "chat"
    assert "disabled" in result.reason
    with pytest.raises(ValueError, match="allowed: code, chat"):
        classifier.classify(body, override="rag")
