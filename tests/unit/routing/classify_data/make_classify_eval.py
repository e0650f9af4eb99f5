"""Build ``classify_eval.jsonl``, the labeled evaluation set of the prompt classifier.

Run ``python tests/unit/routing/classify_data/make_classify_eval.py``; the output is deterministic.

Labeling guideline (decided per request, before and independently of the classifier):

- ``rag``: the request supplies reference material that is not code (retrieved passages,
  documents, search results, transcripts, articles, e-mail threads; a paragraph or more) and
  the answer is to be drawn from it (answer, summarize, extract, proofread or rewrite it).
- ``code``: the request supplies code or a code artifact (source, diff, traceback, config
  file, a completion prefix) to explain, fix, review, extend or complete, or it explicitly
  asks for code to be written (a function, script, query, regex, component, test).
- ``chat``: everything else: conversation, advice, creative writing, support dialogues,
  general-knowledge questions, including questions *about* programming that neither carry
  code nor ask for a program, and tool calls whose results are small structured values.

Rows carry a ``split``: ``dev`` rows were available while the classifier was designed.
``holdout`` rows (classify_eval_holdout.py) were written afterwards and scored once; their
misses led to general fixes, so they are development data now. ``holdout2`` rows
(classify_eval_holdout2.py) were written after those fixes and scored once (40/48); their
misses led to further general rules, so they are development data now too. ``dev2`` rows
(classify_eval_dev2.py) were written together with those rules: other wordings of the shapes
holdout2 exposed, and near misses that must keep their label.

The bodies combine hand-written conversations with passages and snippets placed in the many
shapes real clients send (system or user or tool messages, content-part lists, completion
prompts, multi-turn follow-ups). Apart from the ``dev2`` rows, which probe the edges of the
rules they were written with, nothing here is shaped after the classifier's rules.

Every split counts as development data now: a score on unseen traffic needs a new batch,
written without looking at the classifier, and scored once.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
from classify_eval_chat import all_chat_bodies
from classify_eval_dev2 import dev2_rows
from classify_eval_holdout import holdout_rows
from classify_eval_holdout2 import holdout2_rows
from classify_eval_passages import PASSAGES, Passage
from classify_eval_roles import Body
from classify_eval_roles import assistant as _a
from classify_eval_roles import system as _s
from classify_eval_roles import user as _u
from classify_eval_snippets import SNIPPETS, Snippet

OUT = Path(__file__).with_name("classify_eval.jsonl")


# --------------------------------------------------------------------------- rag

_RAG_SYSTEM_INTROS = [
    "Answer the question using only the context below. If the answer is not in the context, "
    "say that you don't know.",
    "You are a helpful assistant for internal documentation. Ground every answer in the "
    "retrieved passages and cite them by number.",
    "You are HelpBot. Use the knowledge base articles provided to answer customer questions "
    "accurately and briefly.",
    "Respond to the user based on the following information. Do not make anything up.",
    "You answer questions about company documents. Quote the relevant sentence when possible.",
]


def _numbered(passages: list[Passage]) -> str:
    return "\n\n".join(f"[{i}] {p['text']}" for i, p in enumerate(passages, 1))


def _with_titles(passages: list[Passage]) -> str:
    return "\n\n".join(
        f"Document {i} ({p['source']}):\n{p['text']}" for i, p in enumerate(passages, 1)
    )


def _xml(passages: list[Passage]) -> str:
    docs = "\n".join(
        f'<document index="{i}">\n<source>{p["source"]}</source>\n'
        f"<document_content>\n{p['text']}\n</document_content>\n</document>"
        for i, p in enumerate(passages, 1)
    )
    return f"<documents>\n{docs}\n</documents>"


def _markdown(passages: list[Passage]) -> str:
    return "\n\n".join(f"### {p['title']}\n_{p['source']}_\n\n{p['text']}" for p in passages)


def _plain(passages: list[Passage]) -> str:
    return "\n\n".join(p["text"] for p in passages)


def _rag_bodies(rng: random.Random) -> list[Body]:
    bodies: list[Body] = []
    shapes = list(range(12))
    for index, passage in enumerate(PASSAGES):
        for qi, question in enumerate(passage["questions"]):
            others = [p for p in PASSAGES if p is not passage]
            extra = rng.sample(others, rng.choice([0, 1, 2, 3]))
            docs = [passage, *extra]
            rng.shuffle(docs)
            shape = shapes[(index * 2 + qi + rng.randrange(3)) % len(shapes)]
            bodies.append(_rag_shape(rng, shape, docs, passage, question))
    return bodies


def _rag_shape(
    rng: random.Random, shape: int, docs: list[Passage], main: Passage, question: str
) -> Body:
    intro = rng.choice(_RAG_SYSTEM_INTROS)
    if shape == 0:
        return {"messages": [_s(f"{intro}\n\nContext:\n{_numbered(docs)}"), _u(question)]}
    if shape == 1:
        return {
            "messages": [
                _u(
                    "Use the following documents to answer my question.\n\n"
                    f"{_with_titles(docs)}\n\nQuestion: {question}"
                )
            ]
        }
    if shape == 2:
        results = [
            {"title": d["title"], "url": f"https://kb.example.com/{i}", "snippet": d["text"]}
            for i, d in enumerate(docs, 1)
        ]
        return {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "search_knowledge_base",
                        "description": "Full-text search over the help center.",
                        "parameters": {
                            "type": "object",
                            "properties": {"query": {"type": "string"}},
                        },
                    },
                }
            ],
            "messages": [
                _s("You are a support assistant. Search the knowledge base before answering."),
                _u(question),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_kb",
                            "type": "function",
                            "function": {
                                "name": "search_knowledge_base",
                                "arguments": orjson.dumps({"query": question}).decode(),
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "call_kb",
                    "content": orjson.dumps({"results": results}).decode(),
                },
            ],
        }
    if shape == 3:
        return {"messages": [_u(f"{_xml(docs)}\n\n{question}")]}
    if shape == 4:
        return {"messages": [_u(f"{_plain(docs)}\n\n{question}")]}
    if shape == 5:
        return {
            "messages": [_u(f"Summarize the following in three bullet points:\n\n{main['text']}")]
        }
    if shape == 6:
        return {
            "prompt": f"Context: {_plain(docs)}\n\nQuestion: {question}\nAnswer:",
            "max_tokens": 128,
            "temperature": 0,
        }
    if shape == 7:
        first = main["questions"][0] if main["questions"][0] != question else "Thanks."
        return {
            "messages": [
                _s(f"{intro}\n\n{_numbered(docs)}"),
                _u(first),
                _a("According to the context, " + main["text"].split(". ")[0].lower() + "."),
                _u(question),
            ]
        }
    if shape == 8:
        return {
            "messages": [
                _s(f"{intro}\n\n## Sources\n\n{_markdown(docs)}"),
                _u(question),
            ]
        }
    if shape == 9:
        parts = [{"type": "text", "text": "Here are some search results:"}]
        parts += [{"type": "text", "text": f"{d['title']}: {d['text']}"} for d in docs]
        parts.append({"type": "text", "text": question})
        return {"messages": [_u(parts)]}
    if shape == 10:
        return {
            "messages": [
                {"role": "developer", "content": f"{intro}\n\nRetrieved context:\n{_plain(docs)}"},
                _u(question),
            ]
        }
    return {
        "messages": [_u(f'I copied this from {main["source"]}:\n\n"{main["text"]}"\n\n{question}')]
    }


_API_DOC = (
    "Authentication\n\n"
    "All API requests must include an API key in the Authorization header as a bearer token. "
    "Keys are created in the dashboard under Settings > API keys and can be scoped to "
    "read-only or read-write access. Keys for the sandbox environment start with sk_test_ and "
    "only work against https://sandbox.paylane.example; live keys start with sk_live_. "
    "Requests without a valid key return 401. Requests with a read-only key to a write "
    "endpoint return 403.\n\n"
    "Example:\n\n"
    "    curl https://api.paylane.example/v2/charges \\\n"
    '      -H "Authorization: Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc"\n\n'
    "Rate limits\n\n"
    "Each key may make 100 requests per second. When you exceed the limit the API returns "
    "429 with a Retry-After header giving the number of seconds to wait. Webhook deliveries "
    "do not count towards the limit."
)

_ARTICLE = (
    "For decades, cities measured traffic success by how quickly cars moved through "
    "intersections. That metric, level of service, rewarded wider roads and penalized "
    "crosswalks, bus lanes and anything else that slowed drivers. A growing number of "
    "planners argue this gets the purpose of streets backwards. Streets, they say, exist to "
    "move people and to host public life, and the right measure is how many people can "
    "reach jobs, schools and shops in a given time, by any mode. When California replaced "
    "level of service with vehicle miles travelled in environmental reviews, projects that "
    "added housing near transit became easier to approve, while road widenings had to show "
    "they would not simply induce more driving. Critics reply that congestion still costs "
    "businesses real money and that buses are stuck in the same traffic as everyone else. "
    "The author concludes that both sides agree on one thing: what a city chooses to "
    "measure quietly decides what it builds."
)

_NDA = (
    '3. Confidential Information. "Confidential Information" means all non-public '
    "information disclosed by the Disclosing Party, whether orally or in writing, that is "
    "designated as confidential or that reasonably should be understood to be confidential "
    "given the nature of the information and the circumstances of disclosure. Confidential "
    "Information does not include information that (a) is or becomes generally available to "
    "the public without breach of this Agreement, (b) was known to the Receiving Party before "
    "disclosure, (c) is independently developed by the Receiving Party without use of the "
    "Confidential Information, or (d) is received from a third party without restriction.\n"
    "4. Obligations. The Receiving Party shall not disclose Confidential Information to any "
    "third party except to its employees and advisers who need to know it for the Purpose "
    "and who are bound by obligations of confidentiality no less protective than these. "
    "These obligations survive for three (3) years after termination of this Agreement."
)


def _rag_handwritten() -> list[Body]:
    return [
        {
            "messages": [
                _s(
                    "You are the PayLane developer docs assistant. Answer from the documentation "
                    "excerpts provided."
                ),
                _u(f"Documentation:\n\n{_API_DOC}\n\nWhat happens if I go over the rate limit?"),
            ]
        },
        {
            "messages": [
                _u(
                    f"{_API_DOC}\n\nDo webhook deliveries count against my rate limit, "
                    "and which key prefix is used for the sandbox?"
                )
            ]
        },
        {
            "messages": [
                _u(
                    f"Here's an opinion piece I'm reading:\n\n{_ARTICLE}\n\n"
                    "What's the author's main argument, in two sentences?"
                )
            ]
        },
        {
            "messages": [
                _s(
                    "You are a contracts assistant. Answer only from the clauses the user pastes "
                    "and point to the clause number. You are not a lawyer."
                ),
                _u(f"{_NDA}\n\nCan I share the information with my accountant?"),
            ]
        },
        {"messages": [_u(f"{_NDA}\n\nHow long do the confidentiality obligations last?")]},
        {"prompt": f"Article:\n{_ARTICLE}\n\nTL;DR:", "max_tokens": 60},
        {
            "messages": [
                _u("tl;dr this please"),
                _u(_ARTICLE),
            ]
        },
        {
            "messages": [
                _s("Use the search results to answer. Cite sources like [1]."),
                _u(
                    "search results:\n[1] Norvale Foods cut its outlook... "
                    + PASSAGES[5]["text"]
                    + "\n[2] "
                    + PASSAGES[12]["text"]
                    + "\n\nuser question: did norvale change its revenue guidance?"
                ),
            ]
        },
    ]


# --------------------------------------------------------------------------- code

_CODE_SYSTEMS = [
    "You are an expert software engineer. Give concise, correct answers with code.",
    "You are a senior code reviewer. Point out bugs first, then style issues.",
    "You are a coding assistant inside an IDE. Answer with code changes when possible.",
    "You are a helpful programming assistant.",
]


def _fence(snippet: Snippet, tag: bool = True) -> str:
    lang = snippet["lang"] if tag and snippet["lang"] not in ("traceback", "diff") else ""
    return f"```{lang}\n{snippet['code']}```"


def _code_bodies(rng: random.Random) -> list[Body]:
    bodies: list[Body] = []
    for index, snippet in enumerate(SNIPPETS):
        for ai, ask in enumerate(snippet["asks"]):
            shape = (index * 2 + ai + rng.randrange(4)) % 10
            bodies.append(_code_shape(rng, shape, snippet, ask))
    return bodies


def _code_shape(rng: random.Random, shape: int, snippet: Snippet, ask: str) -> Body:
    code = snippet["code"]
    if shape == 0:
        return {"messages": [_u(f"{_fence(snippet)}\n\n{ask}")]}
    if shape == 1:
        return {"messages": [_u(f"{ask}\n\n{_fence(snippet, tag=False)}")]}
    if shape == 2:
        return {"messages": [_u(f"{ask}\n{code}")]}
    if shape == 3:
        return {"messages": [_s(rng.choice(_CODE_SYSTEMS)), _u(f"{ask}\n\n{_fence(snippet)}")]}
    if shape == 4:
        return {
            "messages": [
                _u(
                    [
                        {"type": "text", "text": ask},
                        {"type": "text", "text": code},
                    ]
                )
            ]
        }
    if shape == 5:
        return {
            "messages": [
                _u(f"What does this do?\n\n{_fence(snippet)}"),
                _a(
                    "It's a fairly standard piece of code; I'll walk through it. The first part sets "
                    "up the state it needs, and the rest does the main work. There's one issue "
                    "worth pointing out, which I'll cover if you want."
                ),
                _u(ask),
            ]
        }
    if shape == 6:
        return {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "description": "Read a file from the workspace.",
                        "parameters": {
                            "type": "object",
                            "properties": {"path": {"type": "string"}},
                        },
                    },
                }
            ],
            "messages": [
                _s("You are a coding agent working in the user's repository."),
                _u(ask),
                {
                    "role": "assistant",
                    "content": "Let me look at the file first.",
                    "tool_calls": [
                        {
                            "id": "call_rf",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "src/main"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_rf", "content": code},
            ],
        }
    if shape == 7 and snippet["lang"] not in ("traceback", "diff"):
        lines = code.splitlines(keepends=True)
        return {
            "prompt": "".join(lines[: max(2, len(lines) * 2 // 3)]),
            "max_tokens": 64,
            "temperature": 0,
        }
    if shape == 8 and snippet["lang"] not in ("traceback", "diff"):
        lines = code.splitlines(keepends=True)
        cut = max(1, len(lines) // 2)
        return {
            "prompt": "<|fim_prefix|>"
            + "".join(lines[:cut])
            + "<|fim_suffix|>"
            + "".join(lines[cut + 1 :])
            + "<|fim_middle|>",
            "max_tokens": 48,
        }
    return {"messages": [_u(f"{ask} Here's the code:\n\n{_fence(snippet)}\n\nThanks!")]}


CODE_REQUESTS: list[Body] = [
    {
        "messages": [
            _u(
                "Write a Python function that checks whether a string is a palindrome, "
                "ignoring punctuation and case."
            )
        ]
    },
    {"messages": [_u("Implement a thread-safe LRU cache in Java.")]},
    {"messages": [_u("give me a bash one-liner that finds all files over 100MB in my home dir")]},
    {
        "messages": [
            _u(
                "Write a SQL query that returns the second highest salary from an "
                "employees(id, name, salary) table."
            )
        ]
    },
    {"messages": [_u("Create a React component for a star rating input with hover preview.")]},
    {"messages": [_u("regex to match US phone numbers like (555) 123-4567 or 555-123-4567")]},
    {"messages": [_u("Write a Dockerfile for a Node 20 Express app that listens on port 3000.")]},
    {
        "messages": [
            _u("Generate a GitHub Actions workflow that runs pytest on Python 3.10, 3.11 and 3.12.")
        ]
    },
    {"messages": [_u("Implement binary search in Rust, returning Option<usize>.")]},
    {
        "messages": [
            _u("Write a Go HTTP server with a /health endpoint and graceful shutdown on SIGTERM.")
        ]
    },
    {
        "messages": [
            _s("You are an expert TypeScript developer."),
            _u(
                "I need a type-safe event emitter where listeners get the right payload "
                "type per event name."
            ),
        ]
    },
    {"messages": [_u("can you code a simple snake game in pygame")]},
    {
        "messages": [
            _u(
                "Write unit tests for a function `slugify(title: str) -> str` that "
                "lowercases the title and replaces spaces with hyphens."
            )
        ]
    },
    {
        "messages": [
            _u(
                "Convert this to a list comprehension:\nresult = []\nfor x in nums:\n"
                "    if x > 0:\n        result.append(x * x)"
            )
        ]
    },
    {"messages": [_u("Write a Python script that renames all .jpeg files in a folder to .jpg.")]},
    {
        "messages": [
            _u(
                "Make a CLI with argparse that takes --input and --output paths and "
                "converts a CSV file to JSON."
            )
        ]
    },
    {
        "messages": [
            _u(
                "Write a function in JavaScript to deep clone an object without using "
                "JSON.stringify."
            )
        ]
    },
    {"messages": [_u("PowerShell script to list all stopped services and start them, please")]},
    {"messages": [_u("Show me how to implement a trie in C++ with insert and prefix search.")]},
    {
        "messages": [
            _u("Write a Python function that returns the digits of an integer as a list."),
            _a(
                "```python\ndef digits(n: int) -> list[int]:\n    return [int(c) for c in str(n)]\n```"
            ),
            _u("now make it handle negative numbers too"),
        ]
    },
    {
        "messages": [
            _s("You are a coding assistant."),
            _u("Write a function to merge two sorted arrays."),
            _a(
                "Here is a version in Python:\n\n```python\ndef merge(a, b):\n    i = j = 0\n"
                "    out = []\n    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n"
                "            out.append(a[i]); i += 1\n        else:\n"
                "            out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]\n```"
            ),
            _u("Can you port it to Kotlin?"),
        ]
    },
    {
        "prompt": "# Python 3\n# Return the n-th Fibonacci number iteratively.\n"
        "def fib(n: int) -> int:\n",
        "max_tokens": 80,
        "temperature": 0,
    },
    {
        "messages": [
            _u(
                "Write a SQLAlchemy model for a blog Post with title, body, created_at and "
                "a many-to-one relationship to Author."
            )
        ]
    },
    {
        "messages": [
            _u(
                "I keep getting `ModuleNotFoundError: No module named 'cv2'` even after "
                "pip install opencv-python. I'm using a venv in VS Code."
            )
        ]
    },
]


def build() -> list[dict[str, Any]]:
    rng = random.Random(20240611)
    rows: list[dict[str, Any]] = []
    rows += [{"label": "rag", "body": b} for b in _rag_bodies(rng) + _rag_handwritten()]
    rows += [{"label": "code", "body": b} for b in _code_bodies(rng) + CODE_REQUESTS]
    rows += [{"label": "chat", "body": b} for b in all_chat_bodies()]
    for row in rows:
        row["split"] = "dev"
    for split, extra in (
        ("holdout", holdout_rows()),
        ("holdout2", holdout2_rows()),
        ("dev2", dev2_rows()),
    ):
        for row in extra:
            row["split"] = split
        rows += extra
    for row in rows:
        row["body"].setdefault("model", "default")
    rng.shuffle(rows)
    return rows


def main() -> None:
    rows = build()
    OUT.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows))
    counts: dict[str, int] = {}
    for row in rows:
        key = f"{row['split']}/{row['label']}"
        counts[key] = counts.get(key, 0) + 1
    print(f"wrote {len(rows)} rows to {OUT}: {counts}")


if __name__ == "__main__":
    main()
