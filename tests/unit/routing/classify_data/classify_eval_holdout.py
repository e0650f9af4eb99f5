"""Held-out requests for the classifier evaluation set.

Written after the classifier's features and thresholds were first settled, and scored once.
Their misses then led to general rules (see classify_eval_holdout2.py), so these rows are
development data now and their score says nothing about unseen traffic. Labels follow the
guideline in make_classify_eval.py. They cover shapes the development rows do not: prompt
templates of common retrieval frameworks, other languages, agent loops with shell output,
merge conflicts, CI logs, knowledge held in a system prompt without markers, and personal
stories told in several paragraphs.
"""

from __future__ import annotations

from typing import Any

from classify_eval_roles import Body
from classify_eval_roles import assistant as _a
from classify_eval_roles import system as _s
from classify_eval_roles import user as _u

_FR_DOC = (
    "Le télétravail est autorisé jusqu'à trois jours par semaine pour les salariés ayant "
    "terminé leur période d'essai. Les jours de télétravail doivent être déclarés dans l'outil "
    "RH avant le vendredi précédent. Le salarié doit disposer d'une connexion internet stable "
    "et d'un espace de travail adapté. L'entreprise verse une indemnité forfaitaire de 30 euros "
    "par mois pour couvrir les frais. Les réunions d'équipe du mardi se tiennent sur site et ne "
    "peuvent pas être suivies à distance, sauf accord du manager."
)

_LEAVE_FAQ = (
    "Q: How do I request sick leave?\nA: Notify your manager before 10am on the first day and "
    "log the absence in Workday. A doctor's note is needed from the fourth consecutive day.\n\n"
    "Q: Is sick leave paid?\nA: Yes, at full salary for up to 10 days per year, then at 70% "
    "until day 60.\n\n"
    "Q: Can I use sick leave to care for a family member?\nA: Up to 5 of the 10 days may be "
    "used to care for a dependent child or partner."
)

_RECIPE = (
    "Classic banana bread\n\n"
    "Preheat the oven to 175 C and butter a 23 x 13 cm loaf tin. Mash three very ripe bananas "
    "in a bowl, then stir in 75 g melted butter. Mix in 1 teaspoon baking soda and a pinch of "
    "salt, then 150 g sugar, one beaten egg and 1 teaspoon vanilla extract. Fold in 190 g "
    "flour until just combined; do not overmix. Pour into the tin and bake for 55 to 65 "
    "minutes, until a skewer inserted in the centre comes out clean. Cool in the tin for 10 "
    "minutes, then turn out onto a rack. The bread keeps for three days wrapped at room "
    "temperature and freezes well for up to three months."
)

_RELEASE_NOTES = (
    "Release 2.3.0 (2024-05-28)\n\n"
    "Highlights\n"
    "- New offline mode for the mobile apps; changes sync when the device reconnects.\n"
    "- Dashboards can now be shared with people outside your workspace through a read-only "
    "link.\n\n"
    "Fixes\n"
    "- Fixed a memory leak in the desktop client when many image attachments were open.\n"
    "- Fixed notifications arriving twice on Android 14.\n"
    "- CSV exports now respect the workspace time zone.\n\n"
    "Known issues\n"
    "- Search results may take up to a minute to include newly created pages."
)

_ES_ARTICLE = (
    "La ciudad de Valencia ha aprobado un plan para plantar 20.000 árboles antes de 2030 con "
    "el objetivo de reducir la temperatura en los barrios más densos. Según el ayuntamiento, "
    "las zonas con más sombra pueden llegar a estar hasta cuatro grados más frescas en verano.\n\n"
    "El plan prioriza los barrios con menos zonas verdes por habitante y prevé sustituir "
    "plazas de aparcamiento por alcorques en algunas calles. Los comerciantes han pedido que "
    "se mantengan las zonas de carga y descarga, y la oposición critica que el presupuesto, "
    "de 12 millones de euros, no incluye el mantenimiento a largo plazo."
)

_POLICY_SYSTEM = (
    "You are the assistant for Harbor Dental Clinic. Be friendly and concise.\n\n"
    "## Opening hours\nMonday to Friday 8:00-18:00, Saturday 9:00-13:00, closed Sunday.\n\n"
    "## Cancellations\nAppointments cancelled less than 24 hours in advance are charged a "
    "35 EUR fee, unless the patient is ill and calls before the appointment time.\n\n"
    "## Payment\nWe accept cards and bank transfer. Treatment plans over 500 EUR can be paid "
    "in three monthly instalments without interest.\n\n"
    "## Emergencies\nFor severe pain or swelling outside opening hours, call the on-call "
    "dentist at 0800 555 010."
)

_JSON_PRODUCTS = (
    '{"products": [{"name": "TrailLite 2", "weight_kg": 1.4, "capacity": 2, "season": "3", '
    '"price": 289, "notes": "Freestanding, two doors, packs small; fly needs careful pitching '
    'in strong wind."}, {"name": "Nordkap 3 XT", "weight_kg": 3.9, "capacity": 3, "season": "4", '
    '"price": 649, "notes": "Tunnel design rated for snow load, very stable in storms, heavy."}, '
    '{"name": "Summit Bivy", "weight_kg": 0.9, "capacity": 1, "season": "3", "price": 199, '
    '"notes": "Ultralight single-wall shelter, condensation on cold nights, needs trekking '
    'poles."}]}'
)


def _rag() -> list[Body]:
    return [
        {
            "messages": [
                _s(f"Réponds uniquement à partir du contexte ci-dessous.\n\nContexte :\n{_FR_DOC}"),
                _u("Est-ce que je peux suivre la réunion du mardi depuis chez moi ?"),
            ]
        },
        {
            "messages": [
                _s("You are a helpful HR assistant. Relevant help articles:\n\n" + _LEAVE_FAQ),
                _u("can i use sick days when my kid is sick?"),
            ]
        },
        {
            "prompt": (
                "Use the following pieces of context to answer the question at the end. If you "
                "don't know the answer, just say that you don't know, don't try to make up an "
                f"answer.\n\n{_RECIPE}\n\n{_RELEASE_NOTES}\n\nQuestion: How long should the banana "
                "bread bake?\nHelpful Answer:"
            ),
            "max_tokens": 200,
        },
        {
            "prompt": (
                "Context information is below.\n---------------------\n"
                f"{_LEAVE_FAQ}\n---------------------\nGiven the context information and not prior "
                "knowledge, answer the query.\nQuery: Is sick leave paid after two weeks?\nAnswer: "
            )
        },
        {
            "messages": [
                _u(
                    "Search results:\n"
                    "[1] Europa Clipper - NASA Science (science.nasa.gov/mission/europa-clipper) - "
                    "Europa Clipper launched in October 2024 and will arrive at Jupiter in 2030, "
                    "making 49 close flybys of Europa to study its ice shell and ocean.\n"
                    "[2] Why Europa? - Planetary Society (planetary.org/worlds/europa) - Europa's "
                    "ocean may contain twice as much water as all of Earth's oceans combined.\n"
                    "[3] JUICE mission overview - ESA (esa.int/juice) - ESA's JUICE spacecraft will "
                    "study Ganymede, Callisto and Europa, entering orbit around Ganymede in 2034.\n\n"
                    "When does Europa Clipper get to Jupiter? Answer with citations."
                )
            ]
        },
        {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "web_search",
                        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                    },
                }
            ],
            "messages": [
                _u("what's the entry fee for the Alhambra and do I need to book?"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {
                                "name": "web_search",
                                "arguments": '{"q": "Alhambra tickets"}',
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "c1",
                    "content": (
                        "Alhambra General ticket: 19.09 EUR, includes the Nasrid Palaces at a fixed "
                        "time slot printed on the ticket.\nTickets regularly sell out weeks in advance "
                        "in spring and summer; buy online from the official site only.\nGardens-only "
                        "tickets cost 10.61 EUR and do not include the Nasrid Palaces.\nChildren under "
                        "12 enter free but still need a ticket with a time slot."
                    ),
                },
            ],
        },
        {
            "messages": [
                _u(
                    "Here are my notes from today's planning meeting, turn them into a list of action "
                    "items with owners:\n\n"
                    "Marketing launch moved to 3 June because translations are late. Jonas will chase "
                    "the agency and report back Wednesday. Budget for the booth at the trade fair was "
                    "approved, Ana books it this week. We still don't know who presents the roadmap "
                    "at the all-hands; Priya asked for a volunteer by Friday. Customer interviews: "
                    "eight done, four to go, Ben schedules the rest and shares recordings in the team "
                    "folder. The pricing page experiment ends on the 20th, Lea prepares the analysis."
                )
            ]
        },
        {
            "messages": [
                _u(
                    "From their terms of service:\n\n"
                    "8.2 We may suspend or terminate your account at any time if we reasonably believe "
                    "you have breached these Terms, with notice where practicable. 8.3 Upon "
                    "termination, your right to use the Service ends immediately. We will retain your "
                    "content for 30 days, during which you may request an export; after that period "
                    "we may delete it without further notice. 8.4 Fees paid in advance are not "
                    "refundable except where required by law.\n\n"
                    "They closed my account yesterday. Can they delete my files right away?"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Can you explain this abstract in plain language for a high-school student?\n\n"
                    "We examined whether targeted memory reactivation during slow-wave sleep improves "
                    "retention of a spatial learning task. Participants learned object locations "
                    "paired with sounds; half of the sounds were replayed during a subsequent nap. "
                    "Recall declined less for cued objects than for uncued ones, and the benefit "
                    "correlated with spindle density. No effect was found when cues were presented "
                    "during REM sleep."
                )
            ]
        },
        {
            "tools": [{"type": "function", "function": {"name": "search_catalog"}}],
            "messages": [
                _u("I'm going winter camping in the Alps, which tent should I take?"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "t9",
                            "type": "function",
                            "function": {"name": "search_catalog", "arguments": '{"q": "tent"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "t9", "content": _JSON_PRODUCTS},
            ],
        },
        {
            "messages": [
                _s("Answer from the handbook excerpts below.\n\n" + _LEAVE_FAQ),
                _u("How many sick days do I get per year?"),
                _a(
                    "You get 10 fully paid sick days per year, and after that 70% of your salary "
                    "until day 60."
                ),
                _u("and when do I need a doctor's note?"),
            ]
        },
        {
            "messages": [
                _u(
                    [
                        {
                            "type": "text",
                            "text": (
                                "RENTAL AGREEMENT - SECTION 5: NOTICE. Either party may terminate this agreement "
                                "with three months' written notice to the end of a calendar month. Notice "
                                "given by the landlord requires a legitimate reason as defined in section 9. "
                                "During the first twelve months the tenant may only terminate for serious "
                                "reasons such as job relocation, with two months' notice. SECTION 6: DEPOSIT. "
                                "The deposit of three months' rent is held in a separate account and returned "
                                "within six weeks of the end of the tenancy, less documented deductions."
                            ),
                        },
                        {
                            "type": "text",
                            "text": "What's the notice period if I move for a new job?",
                        },
                    ]
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Draft a short reply to this thread confirming we'll take Lakeside for the 18th "
                    "and 19th:\n\n"
                    "From: Sarah Kim\nI've shortlisted two venues. Lakeside Lodge fits 60 people and "
                    "costs 9,800 for two days including meals. The Old Mill fits 45 and costs 7,200 "
                    "but catering is extra.\n\nFrom: Marcus Lee\nWe are 52 people if everyone comes, "
                    "so the Old Mill is too tight. I'd go with Lakeside.\n\nFrom: Finance\nApproved, "
                    "please send the invoice to ap@company.example."
                )
            ]
        },
        {"prompt": f"### Context\n{_RECIPE}\n\n### Question\nCan I freeze it?\n\n### Answer\n"},
        {
            "messages": [
                _s(
                    "You are a support agent. Resolve the customer's issue using the knowledge base "
                    "article below.\n\nArticle: Two-factor authentication lockout\nIf a user loses "
                    "access to their authenticator app, they can sign in with one of the ten backup "
                    "codes issued at setup. Each code works once. If no backup codes are available, "
                    "an admin can reset 2FA from Admin > Users > Security, after which the user "
                    "must enrol again at next sign-in. Support cannot reset 2FA on behalf of an "
                    "admin for security reasons."
                ),
                _u("I got a new phone and now I can't log in, the code app is gone"),
            ]
        },
        {
            "messages": [
                _u(
                    "Summarize these for my morning briefing, 3 bullets max:\n\n"
                    "The Riverton city council voted 7-2 on Tuesday to build protected bike lanes on "
                    "Harbor Avenue. The 4.2 million project will remove 140 parking spaces.\n---\n"
                    "Norvale Foods narrowed its full-year revenue guidance and now expects earnings at "
                    "the low end of its range, citing softer demand in foodservice.\n---\n"
                    "Surveys of 312 reefs found moderate to severe bleaching at 61% of sites, the "
                    "fourth mass bleaching event in eight years."
                )
            ]
        },
        {"messages": [_u(f"{_RECIPE}\n\nhow long does it keep?")]},
        {"messages": [_u(f"{_RELEASE_NOTES}\n\ndoes 2.3 fix the memory leak on desktop?")]},
        {
            "messages": [
                _u(
                    "Source: Wikipedia, 'Hanseatic League'\n\n"
                    "The Hanseatic League was a medieval commercial and defensive network of merchant "
                    "guilds and market towns in Central and Northern Europe. Growing from a few North "
                    "German towns in the late 12th century, it came to dominate Baltic maritime trade "
                    "for three centuries. Lübeck served as its de facto capital.\n\n"
                    "Was London part of the League?"
                )
            ]
        },
        {
            "messages": [
                _s(_POLICY_SYSTEM),
                _u("If I cancel tomorrow morning because I'm sick, do I have to pay the fee?"),
            ]
        },
        {
            "messages": [
                {"role": "developer", "content": "Retrieved passages:\n\n" + _FR_DOC},
                _u("Résume la politique de télétravail en deux phrases."),
            ]
        },
        {"messages": [_u(f"{_ES_ARTICLE}\n\n¿Cuál es la crítica principal de la oposición?")]},
    ]


def _code() -> list[Body]:
    return [
        {
            "messages": [
                _u(
                    "why does this print 3 3 3 instead of 0 1 2?\n"
                    "for (var i = 0; i < 3; i++) {\n  setTimeout(() => console.log(i), 100);\n}"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Please review this class. We're going to use it in production for rate limiting "
                    "across several workers, so I care about correctness under concurrency more than "
                    "style.\n\n```python\nclass TokenBucket:\n    def __init__(self, rate, capacity):\n"
                    "        self.rate = rate\n        self.capacity = capacity\n"
                    "        self.tokens = capacity\n        self.updated = time.monotonic()\n\n"
                    "    def take(self, n=1):\n        now = time.monotonic()\n"
                    "        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * "
                    "self.rate)\n        self.updated = now\n        if self.tokens >= n:\n"
                    "            self.tokens -= n\n            return True\n        return False\n```"
                )
            ]
        },
        {
            "tools": [{"type": "function", "function": {"name": "run_shell"}}],
            "messages": [
                _s(
                    "You are an autonomous software agent. Use run_shell to inspect and fix the "
                    "repository until the tests pass."
                ),
                _u("The CI is red on main, please fix it."),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "s1",
                            "type": "function",
                            "function": {
                                "name": "run_shell",
                                "arguments": '{"cmd": "pytest -x -q"}',
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "s1",
                    "content": (
                        "F\n=================================== FAILURES ===================================\n"
                        "_____________________________ test_parse_duration _____________________________\n"
                        '\n    def test_parse_duration():\n>       assert parse_duration("1h30m") == 5400\n'
                        "E       AssertionError: assert 5430 == 5400\n"
                        "E        +  where 5430 = parse_duration('1h30m')\n\n"
                        "tests/test_time.py:12: AssertionError\n"
                        "1 failed, 41 passed in 0.84s"
                    ),
                },
            ],
        },
        {
            "messages": [
                _u(
                    "Convert this curl command to Python requests:\n"
                    'curl -X POST https://api.example.com/v1/orders -H "Authorization: Bearer $TOKEN" '
                    '-H "Content-Type: application/json" -d \'{"sku": "A-12", "qty": 2}\''
                )
            ]
        },
        {
            "messages": [
                _u(
                    "This takes 9 seconds, can it be faster?\n\n"
                    "SELECT * FROM events WHERE user_id = 42 AND created_at > now() - interval '7 days' "
                    "ORDER BY created_at DESC;\n\n"
                    "Sort  (cost=183012.11..183012.36 rows=98 width=212) (actual time=9012.4..9012.5)\n"
                    "  ->  Seq Scan on events  (cost=0.00..183008.86 rows=98 width=212)\n"
                    "        Filter: ((user_id = 42) AND (created_at > (now() - '7 days'::interval)))\n"
                    "        Rows Removed by Filter: 8412203"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "My regex ^\\d{3}-\\d{4}$ doesn't match '555-1234 ' when there's a trailing space. "
                    "How should I change it?"
                )
            ]
        },
        {
            "prompt": (
                "// Returns the n most frequent words in text, ties broken alphabetically.\n"
                "export function topWords(text: string, n: number): string[] {\n"
                "  const counts = new Map<string, number>();\n"
            ),
            "max_tokens": 120,
        },
        {
            "prompt": (
                "<PRE> def read_config(path):\n    with open(path) as f:\n <SUF>\n"
                "    return config\n <MID>"
            )
        },
        {
            "messages": [
                _u("Explain what this one-liner does: awk -F, '{s+=$3} END {print s}' data.csv")
            ]
        },
        {
            "messages": [
                _s("You are Copilot, a pair programmer. Prefer small, idiomatic changes."),
                _u(
                    "Add context cancellation to this:\n\n```go\nfunc poll(url string) error {\n"
                    "\tfor {\n\t\tresp, err := http.Get(url)\n\t\tif err != nil {\n"
                    "\t\t\treturn err\n\t\t}\n\t\tresp.Body.Close()\n"
                    "\t\ttime.Sleep(5 * time.Second)\n\t}\n}\n```"
                ),
            ]
        },
        {
            "messages": [
                _u(
                    "how do I resolve this?\n\n<<<<<<< HEAD\nconst TIMEOUT_MS = 5000;\n=======\n"
                    "const TIMEOUT_MS = Number(process.env.TIMEOUT_MS ?? 3000);\n>>>>>>> feature/config\n"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "CI build fails, what's wrong?\n\n"
                    "npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency tree\n"
                    "npm ERR! Found: react@18.2.0\nnpm ERR! Could not resolve dependency:\n"
                    'npm ERR! peer react@"^16.8.0 || ^17.0.0" from react-beautiful-dnd@13.1.1'
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Write a bash script that backs up /var/www to S3 every night and "
                    "keeps the last 14 copies."
                )
            ]
        },
        {"messages": [_u("Implement quicksort in Haskell.")]},
        {
            "messages": [
                _u(
                    "Add type hints to this function:\n\ndef merge(a, b, key=None):\n"
                    "    out = dict(a)\n    for k, v in b.items():\n"
                    "        out[key(k) if key else k] = v\n    return out"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "my dedupe function returns the wrong order:\n\n```python\ndef dedupe(xs):\n"
                    "    return list(set(xs))\n```"
                ),
                _a(
                    "Sets don't preserve insertion order. Use a dict instead, which keeps the order "
                    "of first occurrence:\n\n```python\ndef dedupe(xs):\n"
                    "    return list(dict.fromkeys(xs))\n```"
                ),
                _u("Thanks! Works now. Is that fast enough for a list of 10 million items?"),
            ]
        },
        {
            "messages": [
                _u(
                    "Getting SettingWithCopyWarning on the second line, why?\n\n"
                    "subset = df[df['country'] == 'DE']\nsubset['price_eur'] = subset['price'] * 0.92"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Why isn't this centering the box?\n\n.wrapper {\n  display: flex;\n"
                    "  align-items: center;\n}\n.box {\n  width: 200px;\n  height: 200px;\n}"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "error[E0382]: borrow of moved value: `names`\n --> src/main.rs:7:20\n  |\n"
                    '4 |     let names = vec![String::from("a"), String::from("b")];\n'
                    "5 |     let upper = to_upper(names);\n  |                          ----- value "
                    'moved here\n7 |     println!("{:?}", names);\n  |                    ^^^^^ value '
                    "borrowed here after move"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Translate this Python to JavaScript:\n\nimport json\n\n"
                    "def load(path):\n    with open(path) as f:\n        return json.load(f)\n\n"
                    "print(load('settings.json')['theme'])"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "Write tests for this:\n\n```java\npublic final class Slug {\n"
                    "    public static String of(String title) {\n"
                    '        return title.trim().toLowerCase().replaceAll("[^a-z0-9]+", "-");\n'
                    "    }\n}\n```"
                )
            ]
        },
        {
            "messages": [
                _u(
                    "the submit button doesn't do anything when I click it\n"
                    '<form id="signup">\n  <input name="email" type="email">\n'
                    '  <button type="button">Sign up</button>\n</form>\n'
                    "<script>\n  document.getElementById('signup').addEventListener('submit', send);\n"
                    "</script>"
                )
            ]
        },
    ]


_LONG_PERSONA = (
    "You are Juniper, a warm and witty companion for the Evergreen journaling app. Your job is "
    "to help users reflect on their day and feel heard.\n\n"
    "Style:\n"
    "- Write in short paragraphs, no more than three per reply.\n"
    "- Mirror the user's tone: playful if they are playful, gentle if they are sad.\n"
    "- Use the user's name occasionally, never in every message.\n"
    "- Ask at most one question per reply, and make it open-ended.\n\n"
    "Boundaries:\n"
    "- You are not a therapist. If the user mentions self-harm, respond with care and share "
    "the crisis line for their country.\n"
    "- Do not give medical, legal or financial advice; suggest a professional instead.\n"
    "- Never claim to remember things from previous sessions unless they appear in this "
    "conversation.\n\n"
    "Formatting:\n"
    "- No headings or bullet lists in replies; write like a person texting a friend.\n"
    "- Emojis are fine, at most one per message."
)


def _chat() -> list[Body]:
    return [
        {"messages": [_u("What's the difference between baking soda and baking powder?")]},
        {
            "messages": [
                _u(
                    "I had a really rough day. My manager criticized my presentation in front of "
                    "everyone."
                ),
                _a(
                    "I'm sorry, that sounds painful, especially in front of the whole team. How are "
                    "you feeling about it now?"
                ),
                _u("embarrassed mostly. and kind of angry"),
            ]
        },
        {"messages": [_u("Can you explain how HTTPS works, step by step?")]},
        {"messages": [_u("What's your favorite programming language and why?")]},
        {"messages": [_u("I'm learning Python on my own. Any tips for staying motivated?")]},
        {
            "messages": [
                _u(
                    "Write an email to my team announcing that Friday is a half day "
                    "because of the summer party."
                )
            ]
        },
        {"messages": [_u("Write a sonnet about debugging at 3am.")]},
        {"messages": [_u("tell me a javascript joke")]},
        {
            "messages": [
                _u("We're going to Japan for two weeks in April, first time. Tokyo for sure."),
                _a(
                    "April is cherry blossom season, so it's a beautiful time to go, though busy. "
                    "A classic two-week route is Tokyo (5 days), Hakone (1-2), Kyoto (4), Nara (day "
                    "trip), Osaka (2) and back. Would you like help with the rail pass question?"
                ),
                _u("yes, is the JR pass still worth it after the price increase?"),
                _a(
                    "For a simple Tokyo-Kyoto-Osaka round trip it usually is not worth it anymore: "
                    "individual shinkansen tickets come out cheaper. It pays off if you add longer "
                    "trips, for example to Hiroshima or Kanazawa."
                ),
                _u("ok no pass then. what's a good area to stay in Kyoto?"),
            ]
        },
        {
            "tools": [{"type": "function", "function": {"name": "get_refund_status"}}],
            "messages": [
                _s("You are a polite support assistant for Brightcart."),
                _u("did my refund go through? order 7781"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "r1",
                            "type": "function",
                            "function": {
                                "name": "get_refund_status",
                                "arguments": '{"order": "7781"}',
                            },
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "r1",
                    "content": '{"refund": "issued", "amount": 42.5, "date": "2024-06-03"}',
                },
            ],
        },
        {"messages": [_u("Let's play 20 questions. I'm thinking of an animal.")]},
        {"messages": [_u("Who wrote 'One Hundred Years of Solitude'?")]},
        {"messages": [_s(_LONG_PERSONA), _u("hey")]},
        {"prompt": "Dear Sir or Madam,\n\nI am writing to", "max_tokens": 150},
        {"messages": [_u("おすすめの本を教えてください。ミステリーが好きです。")]},
        {"messages": [_u("What's the derivative of x^2 * sin(x)?")]},
        {"messages": [_u("Explain the CAP theorem in simple terms.")]},
        {
            "messages": [
                _u(
                    "I need some perspective. My brother asked me to co-sign a loan for his new "
                    "restaurant. He's been dreaming about this for years and I believe in him, but "
                    "he's had money trouble before and I just bought a house myself.\n\n"
                    "My wife thinks I should say no, my parents think family should help family. I "
                    "don't want to damage our relationship but I also don't want to risk our savings. "
                    "How would you think about this?"
                )
            ]
        },
        {"messages": [_u("Is it true that Python is much slower than C? Why?")]},
        {"messages": [_u("Brainstorm 15 names for a fantasy kingdom ruled by sea witches.")]},
        {
            "messages": [
                _u("write a short poem about coffee"),
                _a(
                    "Dark and warm, the morning cup,\nquietly it wakes me up;\nbitter, sweet, a "
                    "steady friend,\nfrom first sip to the very end."
                ),
                _u("make it rhyme better and add a line about rain"),
            ]
        },
        {
            "messages": [
                _u(
                    [
                        {"type": "text", "text": "Is this mole something I should worry about?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQSk"},
                        },
                    ]
                )
            ]
        },
    ]


def holdout_rows() -> list[dict[str, Any]]:
    rows = [{"label": "rag", "body": body} for body in _rag()]
    rows += [{"label": "code", "body": body} for body in _code()]
    rows += [{"label": "chat", "body": body} for body in _chat()]
    return rows
