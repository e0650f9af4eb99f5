"""Second held-out batch for the classifier evaluation set.

The first held-out batch exposed systematic misses (short retrieved contexts, marker keys
with leading words, deictic references such as "this one-liner", knowledge kept in a system
prompt, compiler locations). After those were addressed as general rules, this batch was
written and scored once, blind: 40/48 (rag 11/16, code 14/16, chat 15/16).

It is no longer held out. Its misses (short retrieved contexts, a lowercase chat log read as
YAML, a creative brief in paragraphs, a ``$`` shell session, an inline ``<context>`` block,
a follow-up to an assistant reply holding the code) were then studied and led to further
general rules, developed against these rows and the ``dev2`` rows written with them
(classify_eval_dev2.py). These rows are unchanged, but since then they are development data
and their score says nothing about unseen traffic.
"""

from __future__ import annotations

from typing import Any

from classify_eval_roles import Body
from classify_eval_roles import assistant as _a
from classify_eval_roles import system as _s
from classify_eval_roles import user as _u

_STORE_POLICY = (
    "You help customers of Nordlicht Outdoor with questions about orders.\n\n"
    "Orders placed before 2pm on working days ship the same day from our warehouse in "
    "Hamburg. Standard delivery within Germany takes one to two working days and is free "
    "above 50 euros; below that it costs 4.95 euros. Deliveries to Austria and Switzerland "
    "take three to five working days. Unworn items can be returned within 60 days, and the "
    "return label is included in the parcel. Refunds are processed within five days of the "
    "return arriving. Gift cards are valid for three years and cannot be exchanged for cash."
)

_DE_DOCS = (
    "Dokument 1: Die Stadtbibliothek ist montags geschlossen. Von Dienstag bis Freitag ist sie "
    "von 10 bis 19 Uhr geöffnet, samstags von 10 bis 14 Uhr. Der Jahresausweis kostet 20 Euro, "
    "für Schüler und Studierende ist er kostenlos.\n\n"
    "Dokument 2: Medien können für vier Wochen ausgeliehen und bis zu zweimal online verlängert "
    "werden, sofern keine Vormerkung vorliegt. Für verspätete Rückgaben fallen pro Medium und "
    "Öffnungstag 0,50 Euro an."
)

_PODCAST = (
    "HOST: Welcome back. Today I'm talking to Dr. Lena Ortiz, who studies sleep in teenagers.\n"
    "ORTIZ: Thanks for having me.\n"
    "HOST: So, are teenagers just lazy when they sleep in?\n"
    "ORTIZ: Not at all. During puberty the body releases melatonin about two hours later than "
    "in childhood, so a sixteen-year-old who falls asleep at midnight is following biology.\n"
    "HOST: What does that mean for schools?\n"
    "ORTIZ: Districts that moved start times to 8:30 or later saw better attendance and fewer "
    "car accidents among teen drivers. The effect on grades was smaller but still positive."
)

_SLACK = (
    "alice: should we move the launch to next week? the translations aren't back yet\n"
    "bob: I'd rather ship english-only on thursday and add the other languages after\n"
    "carol: sales promised the german version to two customers though\n"
    "alice: ok then let's ship thursday in english and german, french and spanish the week after\n"
    "bob: works for me, I'll update the release checklist\n"
    "carol: I'll tell the two customers"
)


def _rag() -> list[Body]:
    return [
        {
            "messages": [
                _s(_STORE_POLICY),
                _u("I want to send back a jacket I bought 7 weeks ago, is that still possible?"),
            ]
        },
        {
            "messages": [
                _u(
                    "From the manual of my espresso machine:\n\n"
                    "Descaling\n1. Fill the water tank with 500 ml of water and one sachet of "
                    "descaler.\n2. Place a container of at least 1 litre under the steam wand and the "
                    "group head.\n3. Press and hold the two-cup button for five seconds until the "
                    "descale light flashes.\n4. The machine pumps the solution in intervals for about "
                    "20 minutes.\n5. Rinse the tank and repeat the cycle with clean water.\n\n"
                    "step 3 doesn't do anything, the light never flashes. what now?"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Can you proofread this paragraph for our website? Keep the tone.\n\n"
                    "Founded in 2009 in a small garage in Leeds, Hartwell Bikes has grown into a team "
                    "of twelve mechanics and designers who builds every frame by hand. We beleive a "
                    "bike should last decades, not seasons, which is why every frame come with a "
                    "lifetime warranty and free adjustments for the first year. Visit our workshop "
                    "any Saturday to see how a frame is brazed, or book a test ride online."
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Extract the invoice number, dates and total from this:\n\n"
                    "BLUEWAVE HOSTING LTD\nInvoice number INV-2024-0318\nInvoice date 2 March 2024, "
                    "due 1 April 2024\nBill to Kestrel Analytics GmbH, Torstraße 1, Berlin\n"
                    "Dedicated server (March) 189.00 EUR\nAdditional IPv4 block 24.00 EUR\n"
                    "Backup storage 500 GB 15.00 EUR\nVAT 19% 43.32 EUR\nTotal due 271.32 EUR"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "<context>\nAll employees must complete security awareness training within 30 days "
                    "of joining and every twelve months after that. The training takes about 45 "
                    "minutes and is available in the learning portal. Managers receive a weekly report "
                    "of overdue trainings. Access to production systems is suspended when training is "
                    "more than 14 days overdue.\n</context>\n<question>What happens if my training is "
                    "three weeks late?</question>"
                )
            ]
        },
        {
            "messages": [
                _s(f"Beantworte die Frage nur anhand der folgenden Dokumente.\n\n{_DE_DOCS}"),
                _u("Was kostet es, wenn ich ein Buch drei Tage zu spät zurückgebe?"),
            ]
        },
        {
            "tools": [{"type": "function", "function": {"name": "retrieve"}}],
            "messages": [
                _u("how do I rotate the API keys for the staging project?"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "k",
                            "type": "function",
                            "function": {
                                "name": "retrieve",
                                "arguments": '{"q": "rotate api keys"}',
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "k",
                    "content": (
                        "Keys can be rotated from Project settings > Access. Creating a new key does not "
                        "revoke the old one; both stay valid until you delete the old key, so you can "
                        "deploy the new key first.\n\n---\n\n"
                        "Staging and production are separate projects with separate keys. Rotating the "
                        "staging key has no effect on production clients."
                    ),
                },
            ],
        },
        {"messages": [_u(f"{_PODCAST}\n\nWhat did the guest say about school start times?")]},
        {
            "prompt": (
                "Article: The ruling party lost its majority in Sunday's regional election, winning "
                "31 of 80 seats. The opposition alliance took 36 seats and its leader, Mara Velik, "
                "said she would begin coalition talks with the Greens, who won 9. Turnout was 64%, "
                "up from 58% four years ago.\n\nQ: How many seats did the Greens win?\nA:"
            )
        },
        {"messages": [_u(f"summarize the decision in this thread:\n\n{_SLACK}")]},
        {
            "messages": [
                _u(
                    "| Region | Q1 revenue | Q2 revenue | Q3 revenue |\n"
                    "|--------|-----------|-----------|-----------|\n"
                    "| North  | 1.20M     | 1.31M     | 1.45M     |\n"
                    "| South  | 0.94M     | 0.97M     | 0.99M     |\n"
                    "| East   | 1.02M     | 1.19M     | 1.38M     |\n"
                    "| West   | 1.41M     | 1.40M     | 1.36M     |\n\n"
                    "which region grew fastest from Q1 to Q3, and which one is shrinking?"
                )
            ]
        },
        {
            "messages": [
                _s(
                    "You are Milo, the assistant of Parkside Vets. Be warm and brief.\n\n"
                    "Knowledge base:\nVaccinations for puppies start at 8 weeks, with boosters at "
                    "12 and 16 weeks. Rabies vaccination is required before travelling abroad and "
                    "must be given at least 21 days before departure. Consultations cost 45 pounds; "
                    "vaccinations are 38 pounds each or 95 pounds for the full puppy course. The "
                    "clinic is open weekdays 8-19 and Saturdays 9-12."
                ),
                _u(
                    "my puppy is 9 weeks old, when is her next jab and how much is the full course?"
                ),
            ]
        },
        {
            "messages": [
                _u(
                    "Compare the methods of these two papers in a few sentences.\n\n"
                    "Paper A: We trained a gradient-boosted model on 12 years of hospital admission "
                    "records to predict 30-day readmission, using 84 structured features such as age, "
                    "diagnosis codes and length of stay. Evaluation on a held-out hospital gave an AUC "
                    "of 0.74.\n\n"
                    "Paper B: We fine-tuned a clinical language model on discharge summaries to predict "
                    "30-day readmission from free text alone. On data from three hospitals the model "
                    "reached an AUC of 0.78, and combining it with structured features raised it to 0.81."
                )
            ]
        },
        {
            "messages": [
                _u(
                    [
                        {"type": "text", "text": "What does clause 11 mean for me as the buyer?"},
                        {
                            "type": "text",
                            "text": (
                                "11. Risk and title. Risk in the goods passes to the Buyer on delivery. Title to "
                                "the goods does not pass to the Buyer until the Seller has received payment in "
                                "full for the goods and any other goods supplied under separate contracts. Until "
                                "title passes, the Buyer shall store the goods separately and keep them insured "
                                "for their full price."
                            ),
                        },
                    ]
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Excerpt from the Q2 earnings call:\n\n"
                    "CFO: Gross margin came in at 41.3%, down 80 basis points from last year, mostly "
                    "because of promotional activity in June. We expect margins to recover in the "
                    "second half as input costs ease and the promotions roll off. Operating expenses "
                    "grew 4%, below revenue growth of 7%, so operating margin actually improved.\n\n"
                    "What did the CFO say about margins for the rest of the year?"
                )
            ]
        },
        {
            "messages": [
                {
                    "role": "developer",
                    "content": (
                        "Use this information when answering: Ljubljana is the capital of Slovenia, "
                        "with about 290,000 inhabitants. Its old town sits along the Ljubljanica river "
                        "and is largely car-free. The castle on the hill above the centre can be "
                        "reached by funicular in about a minute. The city was European Green Capital "
                        "in 2016."
                    ),
                },
                _u("Can I drive into the old town?"),
            ]
        },
    ]


def _code() -> list[Body]:
    return [
        {
            "messages": [
                _u(
                    "why is this so slow with 50k items?\n"
                    "result = []\nfor a in items:\n    for b in items:\n"
                    "        if a.id == b.parent_id:\n            result.append((a, b))"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Steps to reproduce: run `node index.js` with an empty config file.\n\n"
                    "TypeError: Cannot read properties of undefined (reading 'port')\n"
                    "    at Object.<anonymous> (/app/index.js:10:22)\n"
                    "    at Module._compile (node:internal/modules/cjs/loader:1364:14)\n"
                    "    at node:internal/main/run_main_module:28:49"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Can you write a docstring-style comment for this?\n\n```ts\n"
                    "export function clamp(value: number, min: number, max: number): number {\n"
                    "  return Math.min(Math.max(value, min), max);\n}\n```"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "What's the time complexity here?\n\n```python\ndef pairs(xs):\n"
                    "    seen = set()\n    out = []\n    for x in xs:\n        if -x in seen:\n"
                    "            out.append((x, -x))\n        seen.add(x)\n    return out\n```"
                )
            ]
        },
        {"messages": [_u("Write a function that validates IBAN numbers in TypeScript.")]},
        {
            "messages": [
                _u(
                    "Create a GitHub Actions job that builds a Docker image and pushes it "
                    "to GHCR on every tag."
                )
            ]
        },
        {"prompt": "-- number of orders per day in May 2024\nSELECT", "max_tokens": 60},
        {
            "messages": [
                _u(
                    "why does this task always report changed?\n\n"
                    "- name: Ensure app directory\n  ansible.builtin.shell: mkdir -p /opt/app && "
                    "chown app:app /opt/app\n  become: true"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "make it parcelable:\n\ndata class Contact(\n    val id: Long,\n"
                    "    val name: String,\n    val phones: List<String>\n)"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "what am I doing wrong?\n\n$ python -m venv .venv\n$ source .venv/bin/activate\n"
                    '$ pip install -e .\nERROR: File "setup.py" or "setup.cfg" not found. Directory '
                    "cannot be installed in editable mode: /home/me/proj"
                )
            ]
        },
        {
            "messages": [
                _u("I need a regex for email addresses"),
                _a(
                    "A pragmatic one is `^[^@\\s]+@[^@\\s]+$`. It checks for exactly one @ with "
                    "something on both sides, which catches most typos without rejecting valid "
                    "addresses."
                ),
                _u("it also accepts abc@def without a TLD, fix it"),
            ]
        },
        {
            "messages": [
                _u(
                    "Refactor this to use early returns:\n\npublic decimal Discount(Customer c)\n{\n"
                    "    decimal d = 0;\n    if (c != null)\n    {\n        if (c.IsMember)\n"
                    "        {\n            if (c.Years > 5) d = 0.15m;\n            else d = 0.1m;\n"
                    "        }\n    }\n    return d;\n}"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "why does make rebuild everything every time?\n\n"
                    "build:\n\tmkdir -p out\n\tgcc -O2 -o out/app src/*.c\n\n"
                    ".PHONY: build"
                )
            ]
        },
        {
            "tools": [{"type": "function", "function": {"name": "read_file"}}],
            "messages": [
                _u("rename foo to parse_header everywhere in http_utils.py"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "f",
                            "type": "function",
                            "function": {
                                "name": "read_file",
                                "arguments": '{"path": "http_utils.py"}',
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "f",
                    "content": (
                        'import re\n\n_HEADER = re.compile(r"^([\\w-]+):\\s*(.*)$")\n\n\n'
                        "def foo(line: str) -> tuple[str, str] | None:\n"
                        "    m = _HEADER.match(line)\n    if not m:\n        return None\n"
                        "    return m.group(1).lower(), m.group(2)\n\n\n"
                        "def headers(lines):\n    return dict(filter(None, map(foo, lines)))\n"
                    ),
                },
            ],
        },
        {"messages": [_u("Explain this regex: ^(?=.*[A-Z])(?=.*\\d).{8,}$")]},
        {
            "messages": [
                _u(
                    "ValueError: could not convert string to float: 'N/A'\n\n"
                    "on this line: df['price'] = df['price'].astype(float)"
                )
            ]
        },
    ]


def _chat() -> list[Body]:
    return [
        {"messages": [_u("Proofread: 'Their going to the park tomorow with there dog.'")]},
        {
            "messages": [
                _u("What's a good way to explain to my kids that we're moving to another city?")
            ]
        },
        {
            "messages": [
                _s(
                    "You are an interviewer for a backend engineering role. Ask one question at a "
                    "time and give short feedback on each answer."
                ),
                _u("I'm ready."),
                _a(
                    "Great. Let's start: tell me about a time you had to debug a production issue "
                    "under pressure. What was the situation, and what did you do first?"
                ),
                _u(
                    "Our payments service started timing out on Black Friday. I checked the "
                    "dashboards first and saw the connection pool was saturated."
                ),
            ]
        },
        {
            "messages": [
                _u(
                    "Write a product description for noise-cancelling earbuds, about "
                    "100 words, upbeat tone."
                )
            ]
        },
        {"messages": [_u("How does garbage collection work in Java, roughly?")]},
        {
            "messages": [
                _u("my laptop fan is super loud all the time even when idle, what can I do?")
            ]
        },
        {
            "messages": [
                _s(
                    "You are Profesora Luz, a Spanish tutor for beginners.\n"
                    "- Always answer in simple Spanish first, then give the English translation in "
                    "brackets.\n- Correct at most one mistake per message, kindly.\n"
                    "- Use vocabulary from everyday life: food, family, travel, weather.\n"
                    "- If the student writes in English, encourage them to try in Spanish.\n"
                    "- Keep every reply under 60 words.\n"
                    "Note: the student is preparing for a trip to Mexico in the summer, so prefer "
                    "Mexican expressions when there is a choice.\n"
                    "- Never use grammar terminology without explaining it.\n"
                    "- End with a simple question to keep the conversation going."
                ),
                _u("Hola!"),
            ]
        },
        {
            "messages": [
                _u(
                    "I could use some advice. I share a flat with a friend from university and it's "
                    "been getting tense. She often has people over late on weeknights and I have to "
                    "get up at six for work.\n\n"
                    "I've mentioned it twice, casually, and she apologised but nothing changed. I "
                    "don't want to lose the friendship and I can't really afford to move out right "
                    "now.\n\n"
                    "How do I bring it up in a way that actually works this time?"
                )
            ]
        },
        {"messages": [_u("Tell me about the history of the Python programming language.")]},
        {
            "messages": [
                _u(
                    "Write a short story based on this idea:\n\n"
                    "In 2150 a botanist on a Mars research station notices that one of the potato "
                    "plants in the greenhouse grows towards the station's old radio antenna instead of "
                    "the lamps. The other scientists laugh at her, but every night the plant turns a "
                    "little further, and the antenna starts picking up a faint, regular signal.\n\n"
                    "Make it about 500 words with a twist ending."
                )
            ]
        },
        {
            "tools": [{"type": "function", "function": {"name": "convert_currency"}}],
            "messages": [
                _u("how much is 250 dollars in euros right now?"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "x",
                            "type": "function",
                            "function": {
                                "name": "convert_currency",
                                "arguments": '{"amount": 250, "from": "USD", "to": "EUR"}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "x", "content": '{"rate": 0.92, "result": 230.0}'},
            ],
        },
        {"messages": [_u("What are the rules for castling in chess?")]},
        {
            "messages": [
                _u("I want to start running but I hate it every time I try."),
                _a(
                    "That's really common. Many people start too fast. Try run-walk intervals: one "
                    "minute running, two minutes walking, for 20 minutes, three times a week."
                ),
                _u("ok and what about shoes? do I need expensive ones?"),
                _a(
                    "No. A comfortable, neutral shoe from a running store is enough; expensive "
                    "models don't prevent injuries on their own."
                ),
                _u("can you summarize what we discussed so far?"),
            ]
        },
        {"messages": [_u("I need a catchy slogan for my bakery, it's called Flour Power.")]},
        {
            "prompt": (
                "The following is a conversation with a friendly AI assistant.\n\n"
                "Human: Hello, who are you?\nAI:"
            )
        },
        {"messages": [_u("Translate to German: 'The meeting is postponed to next Tuesday.'")]},
    ]


def holdout2_rows() -> list[dict[str, Any]]:
    rows = [{"label": "rag", "body": body} for body in _rag()]
    rows += [{"label": "code", "body": body} for body in _code()]
    rows += [{"label": "chat", "body": body} for body in _chat()]
    return rows
