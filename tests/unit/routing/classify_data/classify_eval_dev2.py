"""Development requests written with the rules that followed holdout2 (split ``dev2``).

holdout2 showed request shapes the earlier rows did not cover: short retrieved contexts,
lowercase ``name: message`` transcripts, a creative brief written in paragraphs, ``$ `` shell
sessions, inline ``<context>`` blocks and short follow-ups to an assistant reply that holds
the code. These rows exercise each of those shapes in other wordings and settings, together
with near misses that must keep their label (a dialogue to continue, a conversation the user
took part in, a story to summarize rather than to write, YAML and HTML that look like
transcripts or document tags, prices at the start of a line). They were written by the
author of the rules, so they are development data, not a blind test. Labels follow the
guideline in make_classify_eval.py.
"""

from __future__ import annotations

from typing import Any

from classify_eval_roles import Body
from classify_eval_roles import assistant as _a
from classify_eval_roles import system as _s
from classify_eval_roles import user as _u

# --------------------------------------------------------------------------- short contexts

_SHORT_CONTEXT_RAG: list[Body] = [
    {
        "prompt": (
            "Passage: The museum's east wing reopened in May after a two-year renovation. It now "
            "houses the textile collection, and entry to it is included in the standard ticket.\n"
            "Question: Is the textile collection included in the standard ticket?\nAnswer:"
        ),
        "max_tokens": 30,
    },
    {
        "messages": [
            _u(
                "Pull the order number, delivery date and total out of this:\n\n"
                "Thanks for your order! Order #A-55812 will arrive on Thursday 14 March. "
                "2 x oat milk 1L, 1 x coffee beans 500g. Total charged: 23.40 GBP to Visa ending 4417."
            )
        ]
    },
    {
        "messages": [
            _u(
                "| Plan     | Seats | SSO | Price/month |\n"
                "|----------|-------|-----|-------------|\n"
                "| Starter  | 5     | no  | 29          |\n"
                "| Team     | 25    | no  | 99          |\n"
                "| Business | 100   | yes | 349         |\n\n"
                "cheapest plan with SSO?"
            )
        ]
    },
    {
        "messages": [
            _s(
                "Answer in one sentence.\n\nSnippet: Guests may bring one pet under 10 kg per "
                "room. A cleaning fee of 25 euros applies per stay, and pets may not be left alone "
                "in the room."
            ),
            _u("can I bring my cat?"),
        ]
    },
    {
        "messages": [
            _u(
                "<document>Parking in the Lindenhof garage is free for visitors on Sundays and public "
                "holidays. On other days the first hour costs 2 francs.</document>\n"
                "Do I pay for parking on a Sunday?"
            )
        ]
    },
    {
        "messages": [
            _u(
                "Context: Our refund window is 30 days from delivery for unopened items. Opened "
                "electronics can be returned within 14 days with a 15% restocking fee.\n\n"
                "Customer asks: I opened my headphones 10 days ago, can I still return them?"
            )
        ]
    },
    {
        "messages": [
            _u(
                "Write a summary of this story for the school newsletter:\n\n"
                "On Saturday forty volunteers planted 300 trees along the river path. The project was "
                "led by the Year 9 eco club and funded by a grant from the town council. The mayor "
                "joined in the afternoon and promised a second planting day in autumn."
            )
        ]
    },
]

# Short texts with a marker, a colon or a paragraph break that are still conversation.
_SHORT_CONTEXT_CHAT: list[Body] = [
    {"messages": [_u("Proofread this sentence: 'Me and him goes to the store every sunday.'")]},
    {
        "messages": [
            _u(
                "Subject line ideas? The email tells everyone that the office moves to the new "
                "building on 3 June and that desks must be packed by Friday."
            )
        ]
    },
    {
        "messages": [
            _u("Quick question:\n\nIs it rude to leave a wedding reception before the cake is cut?")
        ]
    },
    {
        "messages": [
            _u(
                "I'm going to Lisbon for four days in October with my partner.\n\n"
                "What neighbourhoods should we stay in?"
            )
        ]
    },
    {"prompt": "Title: My summer on the farm\n\nEssay:", "max_tokens": 300},
    # A marker key over the user's own situation: still a request for advice.
    {
        "messages": [
            _u(
                "Context: I'm a 35 year old teacher thinking of switching careers into UX design. I "
                "have some savings but two kids, and I'm worried about taking a pay cut for a junior "
                "role.\n\nIs it realistic?"
            )
        ]
    },
    {
        "messages": [
            _u(
                "Title: Ideas for my blog\n\nI want to write about hiking in Scotland with my dog next "
                "spring. I have done the West Highland Way twice and I love wild camping. What topics "
                "should I cover in my first five posts?"
            )
        ]
    },
]

# --------------------------------------------------------------------------- transcripts

_STANDUP = (
    "mike: finished the csv export, it's behind a feature flag for now\n"
    "sara: still blocked on the payment provider sandbox, they haven't answered my ticket\n"
    "jon: I can ping my contact there after lunch\n"
    "sara: that would help a lot, thanks\n"
    "mike: I'll pair with priya on the flaky checkout test this afternoon\n"
    "priya: sounds good, I'm free after two"
)

_FAMILY = (
    "Mum: Are we still doing Sunday lunch at Gran's this week?\n"
    "Tom: I can't make it before 2, my train gets in late\n"
    "Mum: Then let's say 2:30 and I'll tell Gran\n"
    "Ella: I'll bring dessert, is anyone allergic to nuts now?\n"
    "Tom: Jess is, so maybe skip the nuts\n"
    "Mum: Lovely, see you all Sunday"
)

_SUPPORT_LOG = (
    "customer: my invoice shows two charges for the same month\n"
    "agent: sorry about that, can you share the invoice number?\n"
    "customer: it's 88213, both charges are 49 dollars on the 3rd\n"
    "agent: I see it, the second charge was a retry that should have been voided\n"
    "agent: I've refunded it, it will show in 5 to 10 business days\n"
    "customer: ok thanks, will I get an email confirmation?"
)

_TRANSCRIPT_RAG: list[Body] = [
    {"messages": [_u(f"pull out the action items from this standup log:\n\n{_STANDUP}")]},
    {"messages": [_u(f"{_FAMILY}\n\nwhat time is lunch on Sunday and who brings dessert?")]},
    {
        "messages": [
            _s(
                "You review support conversations for the quality team. Report what the customer "
                "asked for and whether the agent resolved it."
            ),
            _u(_SUPPORT_LOG),
        ]
    },
    {
        "messages": [
            _u(
                [
                    {
                        "type": "text",
                        "text": "Summarize the outcome of this chat for the ticket notes.",
                    },
                    {"type": "text", "text": _SUPPORT_LOG},
                ]
            )
        ]
    },
    {
        "messages": [
            _u(
                "Here is the call transcript:\n\n"
                "Agent: Thank you for calling Northwind, how can I help you today?\n"
                "Caller: My internet has been dropping every evening since Monday.\n"
                "Agent: I'm sorry to hear that. Can you tell me the lights on your router?\n"
                "Caller: The DSL light blinks orange and then goes green again.\n"
                "Agent: Thanks, I'll open a line check and book a technician for Thursday.\n\n"
                "What did the agent promise?"
            )
        ]
    },
]

_TRANSCRIPT_CHAT: list[Body] = [
    # The user is one of the speakers and wants advice on what to say next.
    {
        "messages": [
            _u(
                "my flatmate and i just had this exchange, how do i reply without starting a fight?\n\n"
                "me: hey, could you maybe do your dishes tonight? the sink is full again\n"
                "her: i literally cooked for both of us on sunday\n"
                "me: i know and that was really nice, it's just been piling up all week\n"
                "her: fine, whatever, i'll do them when i get home"
            )
        ]
    },
    # A dialogue to continue: the prompt ends with the next speaker's open turn.
    {
        "prompt": (
            "The following is a friendly chat between a user and a cooking assistant.\n\n"
            "user: what can i make with leftover rice and two eggs?\n"
            "bot: fried rice is perfect for that, do you have any vegetables or soy sauce?\n"
            "user: i have frozen peas, half an onion and soy sauce\n"
            "bot: great, that is all you need for a simple egg fried rice tonight\n"
            "user: how long does it take to make?\n"
            "bot:"
        ),
        "max_tokens": 120,
        "stop": ["user:"],
    },
    {
        "messages": [
            _u(
                "Continue this scene for another page, same tone:\n\n"
                "DETECTIVE: You said you were home all evening, Mrs. Hale.\n"
                "MRS. HALE: I was. I always am on Tuesdays.\n"
                "DETECTIVE: Then why was your car seen at the harbour at nine?\n"
                "MRS. HALE: Cars get borrowed, Inspector. So do alibis."
            )
        ]
    },
    # Two labels taking turns: a list of the user's own pros and cons, not a chat log.
    {
        "messages": [
            _u(
                "Pros: cheaper rent and a much bigger garden for the kids\n"
                "Cons: longer commute to the office every day\n"
                "Pros: quieter street and better schools nearby\n"
                "Cons: far from my friends and family\n\nshould we move?"
            )
        ]
    },
]

# YAML keys look like "name: message" lines but do not repeat at one level: still code.
_TRANSCRIPT_NEAR_CODE: list[Body] = [
    {
        "messages": [
            _u(
                "why does this workflow never run on pull requests?\n\n"
                "name: deploy docs\non:\n  push:\n    branches: [main]\njobs:\n  build:\n"
                "    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n"
                "      - run: make docs"
            )
        ]
    },
    {
        "messages": [
            _u(
                "Is this OpenAPI header valid?\n\n"
                "openapi: 3.0.3\ninfo:\n  title: Billing API\n  version: 1.4.0\n"
                "description: Internal API for invoices and payment methods of business accounts\n"
                "servers:\n  - url: https://billing.internal.example/v1"
            )
        ]
    },
]

# --------------------------------------------------------------------------- creative briefs

_CREATIVE_CHAT: list[Body] = [
    {
        "messages": [
            _u(
                "Write a poem inspired by this memory:\n\n"
                "Every August my grandfather took us to the lake before sunrise. He rowed without a "
                "word while the fog lifted off the water, and the only sound was the oars and a loon "
                "somewhere far off.\n\n"
                "When we reached the middle he would stop, pour coffee from a dented thermos and "
                "say that this was the best hour of the whole year. Keep it under twenty lines."
            )
        ]
    },
    {
        "messages": [
            _s("You are a songwriting partner. Match the user's genre and keep rhymes natural."),
            _u(
                "Can you write song lyrics based on this story? A truck driver who has crossed the "
                "country for thirty years makes her last delivery to the town where she grew up. "
                "Nobody there recognises her, until the owner of the diner remembers her order from "
                "1989.\n\nCountry ballad, two verses and a chorus."
            ),
        ]
    },
    {
        "messages": [
            _u(
                "Premise: two rival food-truck owners are stuck in the same car park during a "
                "snowstorm, and the only working generator belongs to one of them. They have to "
                "share it until morning.\n\n"
                "Tone: light romantic comedy, lots of bickering, no big speeches.\n\n"
                "Write the opening scene of the screenplay, mostly dialogue."
            )
        ]
    },
]

# Material given with a story or a poem in it, but the ask is to draw from it: rag.
_CREATIVE_NEAR_RAG: list[Body] = [
    {
        "messages": [
            _u(
                "Summarize this story in three sentences:\n\n"
                "The miller's daughter was told to spin straw into gold by morning or lose her head. "
                "A little man appeared and did it in exchange for her necklace, and the next night "
                "for her ring. On the third night she had nothing left, so she promised him her "
                "first child.\n\n"
                "She became queen, and when the child was born the little man returned. He agreed to "
                "let her keep the child if she could guess his name within three days, and on the "
                "last day a messenger overheard him singing it by a fire in the woods."
            )
        ]
    },
    {
        "messages": [
            _u(
                "Fix the grammar and punctuation in my story opening, don't change the style:\n\n"
                "the rain had not stopped for three days and the river were rising faster then "
                "anyone in the village expected. Old Marta who had lived by the water all her life "
                "said she seen it like this only once before, the year the bridge went.\n\n"
                "nobody listened to her, they never did, until the church bell started ringing on "
                "its own in the middle of the night."
            )
        ]
    },
    {
        "messages": [
            _u(
                "The Fox and the Grapes: A hungry fox saw some fine bunches of grapes hanging from a "
                "vine that was trained along a high trellis, and did his best to reach them by jumping "
                "as high as he could into the air. But it was all in vain, for they were just out of "
                "reach: so he gave up trying, and walked away with an air of dignity and unconcern, "
                "remarking, 'I thought those grapes were ripe, but I see now they are quite sour.'\n\n"
                "What is the moral, and which everyday phrase comes from it?"
            )
        ]
    },
]

# --------------------------------------------------------------------------- shell sessions

_SHELL_CODE: list[Body] = [
    {
        "messages": [
            _u(
                "$ docker compose up -d\n"
                "Error response from daemon: driver failed programming external connectivity on "
                "endpoint web-1: Bind for 0.0.0.0:8080 failed: port is already allocated\n"
                "$ lsof -i :8080\n"
                "how do I see what's holding the port if lsof prints nothing?"
            )
        ]
    },
    {
        "messages": [
            _u(
                "dana@build-box:~/site$ npm run build\n\n> site@1.0.0 build\n> vite build\n\n"
                'error during build:\nCould not resolve entry module "index.html".\n\n'
                "the file is definitely there, what's going on"
            )
        ]
    },
    {
        "messages": [
            _u(
                ">>> import pandas as pd\n>>> df = pd.read_csv('sales.csv', sep=';')\n"
                ">>> df.shape\n(0, 1)\n\n"
                "the file has 300 rows, why is it empty?"
            )
        ]
    },
    {
        "messages": [
            _u(
                "PS C:\\Users\\ana\\proj> .\\venv\\Scripts\\activate\n"
                ".\\venv\\Scripts\\activate : File C:\\Users\\ana\\proj\\venv\\Scripts\\Activate.ps1 "
                "cannot be loaded because running scripts is disabled on this system.\n"
                "PS C:\\Users\\ana\\proj> python --version\nPython 3.12.2\n\nhow do I fix the first "
                "one without admin rights"
            )
        ]
    },
    {
        "messages": [
            _u(
                "$ git push origin main\nTo github.com:ana/site.git\n"
                " ! [rejected]        main -> main (fetch first)\nerror: failed to push some refs\n"
                "what do I do"
            )
        ]
    },
]

_SHELL_NEAR_CHAT: list[Body] = [
    {
        "messages": [
            _u(
                "my bank app lists these under pending:\n$ 120.00 groceries\n$ 45.50 fuel\n"
                "are pending charges already taken from my balance?"
            )
        ]
    },
    {"messages": [_u("What does the $ at the end of my terminal prompt mean, compared to #?")]},
]

# --------------------------------------------------------------------------- tagged blocks

_TAGGED_RAG: list[Body] = [
    {
        "messages": [
            _u(
                "<document>\nContractors with a valid badge may use the on-site gym between 6:00 and "
                "22:00. Lockers are available on a first-come basis and must be emptied daily. Towels "
                "are provided for employees only; contractors need to bring their own. Guests of "
                "employees are not admitted to the gym at any time.\n</document>\n"
                "Can contractors use the gym, and do they get towels?"
            )
        ]
    },
    {
        "messages": [
            _s("Answer with the source id in brackets."),
            _u(
                '<source id="1">The 2023 harvest was 12% smaller than 2022 because of a dry '
                'spring.</source>\n<source id="2">Prices for the 2023 vintage rose by about 8% '
                "at the cellar door, and exports to Asia doubled compared with the year "
                "before.</source>\nWhy was the 2023 harvest smaller, and what happened to prices?"
            ),
        ]
    },
    {
        "messages": [
            _u(
                [
                    {
                        "type": "text",
                        "text": (
                            "<context>The quarterly all-hands takes place on the first Thursday of January, "
                            "April, July and October at 16:00 in the atrium. It is streamed for remote staff "
                            "and the recording stays on the intranet for 30 days.</context>"
                        ),
                    },
                    {"type": "text", "text": "how long can I watch the recording afterwards?"},
                ]
            )
        ]
    },
]

_TAGGED_NEAR_CODE: list[Body] = [
    {
        "messages": [
            _u(
                "why does the body show up with the html tags escaped?\n"
                '<article class="post">\n  <h1>{{ post.title }}</h1>\n'
                '  <div class="body">{{ post.body }}</div>\n  <footer>{{ post.date }}</footer>\n'
                "</article>"
            )
        ]
    },
    {
        "messages": [
            _u(
                "The poster image doesn't show on iOS Safari:\n"
                '<video controls playsinline poster="/img/poster.jpg">\n'
                '  <source src="/media/intro.webm" type="video/webm">\n'
                '  <source src="/media/intro.mp4" type="video/mp4">\n'
                "</video>"
            )
        ]
    },
]

# --------------------------------------------------------------------------- follow-ups

_FOLLOW_UP_CODE: list[Body] = [
    {
        "messages": [
            _u("give me a bash one-liner to count the lines in all .py files under src"),
            _a(
                "`find src -name '*.py' | xargs wc -l` prints a count per file and a total at the "
                "end."
            ),
            _u("exclude anything in a venv folder"),
        ]
    },
    {
        "messages": [
            _u("Write a SQL query for the top 5 customers by total order value."),
            _a(
                "You can join orders to customers, sum the amounts and sort: `SELECT c.name, "
                "SUM(o.amount) AS total FROM customers c JOIN orders o ON o.customer_id = c.id "
                "GROUP BY c.name ORDER BY total DESC LIMIT 5`."
            ),
            _u("what if two customers tie for 5th place?"),
        ]
    },
    {
        "messages": [
            _s("You are a helpful assistant."),
            _u("I need a JavaScript function that formats a number of bytes as KB, MB or GB."),
            _a(
                "Sure. The idea is to divide by 1024 until the value is below 1024 and keep count "
                'of the steps; `formatBytes(1536)` would then return `"1.5 KB"`. Want the full '
                "version with rounding options?"
            ),
            _u("yes, and make it support TB too"),
        ]
    },
    {
        "messages": [
            _u("write a python script that backs up my photos folder to an external drive"),
            _a("Sure! Which operating system are you on, and should it copy only new files?"),
            _u("windows 11, only new files"),
        ]
    },
]

_FOLLOW_UP_CHAT: list[Body] = [
    {
        "messages": [
            _u("What's the difference between a list and a tuple in Python?"),
            _a(
                "A list is mutable, so `xs.append(4)` works, while a tuple cannot change after it "
                "is created. Tuples are also hashable when their items are, so they can be keys "
                "in a dict."
            ),
            _u("when would I pick one over the other?"),
        ]
    },
    {
        "messages": [
            _u("Write a haiku about debugging at 3am."),
            _a("Cursor blinks, I stare /\nthe bug was a missing semicolon /\ncoffee has gone cold"),
            _u("another one, funnier"),
        ]
    },
    {
        "messages": [
            _u("what's a good name for a python-themed cafe?"),
            _a("How about 'Byte & Brew' or 'The Snake Pit'?"),
            _u("more like the first one"),
        ]
    },
]

# --------------------------------------------------------------------------- completion prompts

_PROMPT_CODE: list[Body] = [
    {
        "prompt": "// debounce: call fn at most once per `ms` milliseconds\n"
        "export function debounce(fn, ms) {\n",
        "max_tokens": 120,
    },
    {
        "prompt": "#!/usr/bin/env bash\n# back up the postgres database every night\n"
        "set -euo pipefail\n\nbackup_db() {\n",
        "max_tokens": 120,
    },
    {
        "prompt": 'class Stack:\n    """LIFO stack backed by a list."""\n\n'
        "    def push(self, item):\n",
        "max_tokens": 80,
    },
]

_PROMPT_CHAT: list[Body] = [
    {"prompt": "Q: Who painted the ceiling of the Sistine Chapel?\nA:", "max_tokens": 20},
    {"prompt": "user: tell me a joke about penguins\nbot:", "max_tokens": 60},
    {
        "prompt": "Dear Mr. Alvarez,\n\nThank you for your letter of 4 March. Regarding",
        "max_tokens": 200,
    },
]


def dev2_rows() -> list[dict[str, Any]]:
    groups: list[tuple[str, list[Body]]] = [
        ("rag", _SHORT_CONTEXT_RAG),
        ("chat", _SHORT_CONTEXT_CHAT),
        ("rag", _TRANSCRIPT_RAG),
        ("chat", _TRANSCRIPT_CHAT),
        ("code", _TRANSCRIPT_NEAR_CODE),
        ("chat", _CREATIVE_CHAT),
        ("rag", _CREATIVE_NEAR_RAG),
        ("code", _SHELL_CODE),
        ("chat", _SHELL_NEAR_CHAT),
        ("rag", _TAGGED_RAG),
        ("code", _TAGGED_NEAR_CODE),
        ("code", _FOLLOW_UP_CODE),
        ("chat", _FOLLOW_UP_CHAT),
        ("code", _PROMPT_CODE),
        ("chat", _PROMPT_CHAT),
    ]
    return [{"label": label, "body": body} for label, bodies in groups for body in bodies]
