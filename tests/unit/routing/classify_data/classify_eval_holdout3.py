"""Third held-out batch for the classifier evaluation set.

Written blind on 2026-12-02: the author saw neither the classifier nor the other evaluation
data (only the file format of the second held-out batch), and did not run the classifier
on these examples while writing them. The batch is scored once; labels are what a careful
human would say, including for the deliberately hard cases near the label boundaries.

Scored once on 2026-12-03: 64/72 = 0.889 (rag 23/24, code 18/24, chat 23/24). The misses:
a quoted passage followed by a lowercase question (rag read as chat); a ``git pull
--rebase`` conflict log, an R pipeline with its error, and API documentation followed by a
request for a verifier (code read as rag); a completion prompt of a JavaScript function head,
a how-to question under a coding system prompt, and a Haskell snippet split over content
parts (code read as chat); a coaching question about code reviews (chat read as code). The
classifier was not changed in response, so this batch still estimates accuracy on unseen
traffic; tuning against it would make it development data like the earlier batches.
"""

from __future__ import annotations

from typing import Any

Body = dict[str, Any]


def _u(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def _a(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def _s(content: Any) -> dict[str, Any]:
    return {"role": "system", "content": content}


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ],
    }


def _tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _chat(*messages: dict[str, Any]) -> Body:
    return {"model": "m", "messages": list(messages)}


def _legacy(prompt: str) -> Body:
    return {"model": "m", "prompt": prompt}


# ---------------------------------------------------------------------------------------
# Reference material used by the rag examples
# ---------------------------------------------------------------------------------------

_WARRANTY_PASSAGES = """[1] Kestrel Home Warranty Guide, section 2.1
All Kestrel kitchen appliances purchased from an authorised retailer carry a limited
warranty of 24 months from the date of delivery. The warranty covers defects in materials
and workmanship under normal household use. It does not cover wear parts such as seals,
filters, light bulbs and glass trays, nor damage caused by limescale, incorrect
installation or commercial use (for example in cafes, offices or holiday rentals).

[2] Kestrel Home Warranty Guide, section 2.4
Customers who register their appliance at kestrel-home.example/register within 90 days of
delivery receive an extended warranty of 5 years on the motor and compressor only. The
extension is not transferable if the appliance is sold. Proof of purchase must be kept for
the full extended period.

[3] Kestrel Support FAQ: "My dishwasher shows error E15"
Error E15 indicates that water has been detected in the base tray. Switch off the
appliance, disconnect it from the mains and tilt it carefully by about 45 degrees to drain
the tray. If the error returns after restarting, contact service; a leak inside the unit is
a warranty repair if the appliance is within its warranty period.

[4] Kestrel Service Terms, section 5
Service visits within the warranty period are free of charge. If the technician finds no
fault, or the fault is excluded from the warranty, a call-out fee of 89 EUR is charged.

[5] Kestrel Service Terms, section 6
Spare parts fitted during a warranty repair are covered for the remainder of the original
warranty period or for 6 months, whichever is longer. Parts fitted during a paid repair
carry their own 12-month parts warranty; labour is not covered.

[6] Kestrel Support FAQ: "Which parts count as wear parts?"
Wear parts are components that are expected to need replacing during the normal life of an
appliance. For dishwashers these are the door seal, the filter set, the cutlery basket and
the spray-arm bearings. For ovens they are the door seal, the oven lamp and the glass
tray. For fridges they are the door seals and the water filter. Wear parts can be bought in
the Kestrel online shop and fitted without a technician; doing so does not affect the
warranty on other components.

[7] Kestrel Home Warranty Guide, section 3.2
If a defect covered by the warranty cannot be repaired economically, Kestrel will replace
the appliance with the same or an equivalent model. The replacement does not start a new
warranty period; the remaining period of the original warranty applies. If the appliance
was registered for the extended warranty, the extension carries over to the replacement.

[8] Kestrel Support FAQ: "Do I need to keep the original box?"
No. The original packaging is not required for a warranty claim. Keep the proof of
purchase (receipt, invoice or order confirmation email) and the serial number, which is
printed on the rating plate inside the door frame.

[9] Kestrel Service Terms, section 8
Warranty claims must be reported within two months of the defect becoming apparent. Claims
can be made online, by phone or through the authorised retailer. Kestrel decides whether a
defect is repaired on site, in a workshop or by replacement.

[10] Kestrel Home Warranty Guide, section 4 (statutory rights)
This warranty is offered in addition to your statutory rights against the seller and does
not limit them. In the first 12 months after delivery you may also have claims against the
retailer from whom you bought the appliance.
"""

_TRANSCRIPT = """Weekly sync, Platform team, 14 Nov
Attendees: Priya (PM), Jonas, Amara, Wei, Tomasz (guest from Security)

Priya: OK let's start. First item is the migration of the billing service to the new
cluster. Jonas, where are we?
Jonas: We moved staging last Tuesday. Production is blocked on the firewall change;
Security has to approve the new egress rules.
Tomasz: That's on me. I reviewed it yesterday, there's one rule that opens the whole
10.40 range, I want that narrowed to the two payment provider IPs. If that's changed I can
approve by Friday.
Jonas: Fine, I'll narrow it today.
Priya: Great. So production migration, target date?
Jonas: If approval lands Friday, we do it the Tuesday after, the 19th, in the morning
window.
Priya: Second item, on-call. Amara, you raised the alert fatigue thing.
Amara: Yes. Last week we had 41 pages, 30 of them were the disk-usage alert on the log
hosts, and none needed action. I'd like to raise the threshold from 80 to 90 percent and
add a 15-minute delay.
Wei: I'm fine with the delay, but 90 is a bit tight on the big hosts, they fill up fast.
Can we do 85?
Amara: 85 plus the delay works for me.
Priya: Decision: 85 percent, 15 minute delay. Amara owns it.
Priya: Last item, the hiring loop. We have two candidates for the SRE role next week. Wei
and I will do the system design rounds. Jonas, can you do the debugging round on
Thursday?
Jonas: Thursday I'm out, I can do Wednesday.
Priya: I'll ask the recruiter to move it. Anything else? No? Thanks all.
"""

_SALES_TABLE = """| Region        | Q1 2025 | Q2 2025 | Q3 2025 | Q4 2025 |
|---------------|--------:|--------:|--------:|--------:|
| North America |   412.0 |   430.5 |   441.2 |   468.9 |
| Europe        |   298.4 |   301.0 |   322.7 |   351.3 |
| Asia-Pacific  |   187.9 |   214.6 |   240.1 |   262.8 |
| Latin America |    76.3 |    74.8 |    79.5 |    81.0 |
| Middle East   |    54.2 |    58.9 |    57.1 |    66.4 |
(revenue in millions USD, unaudited)"""

_API_DOC_WITH_CODE = """Ferrywheel HTTP client - Configuration reference (v3.2)

Timeouts
--------
Every client has three timeouts. The connect timeout limits how long establishing a TCP
connection (including TLS) may take and defaults to 5 seconds. The read timeout applies to
each individual read from the socket, not to the whole response, and defaults to 30
seconds. The pool timeout is how long a request waits for a free connection from the pool;
it defaults to 10 seconds. Setting any timeout to None disables it, which is not
recommended in production.

    from ferrywheel import Client, Timeouts

    client = Client(
        base_url="https://api.example.com",
        timeouts=Timeouts(connect=2.0, read=60.0, pool=None),
    )

Retries
-------
Retries are disabled by default. When enabled with `retries=N`, only idempotent methods
(GET, HEAD, PUT, DELETE, OPTIONS) are retried, and only on connection errors or on the
status codes 502, 503 and 504. The delay between attempts grows exponentially starting at
0.5 seconds and is capped at 8 seconds. POST requests are never retried automatically,
even when `retries` is set, unless `retry_non_idempotent=True` is also passed.

Connection pool
---------------
The pool keeps at most 100 connections in total and 10 per host. Idle connections are
closed after 90 seconds.
"""

_SEARCH_RESULTS = """Search results for: "is intermittent fasting better than calorie restriction for weight loss"

1. "Time-restricted eating versus daily calorie restriction: a 12-month randomised trial"
   - journal-of-nutrition.example/2022/trf-vs-cr
   Snippet: 139 adults with obesity were randomised to eating within an 8-hour window plus
   calorie restriction, or calorie restriction alone. After 12 months, weight loss did not
   differ significantly between groups (-8.0 kg vs -6.3 kg).

2. "Intermittent fasting: what the evidence says" - healthline-like.example
   Snippet: Several reviews conclude that intermittent fasting produces similar weight loss
   to continuous calorie restriction when total calories are matched. Some people find it
   easier to stick to, others find it harder.

3. "Alternate-day fasting study shows higher dropout" - sciencenews.example
   Snippet: In a one-year trial, participants on alternate-day fasting lost about the same
   weight as those on daily restriction, but 38 percent dropped out compared with 29
   percent in the daily group.

4. "Forum: IF changed my life!!!" - fitforum.example/threads/88213
   Snippet: Lost 20 kg in 6 months doing 16:8, never felt better, calorie counting never
   worked for me.
"""

_CONTRACT = """SERVICES AGREEMENT

This Services Agreement ("Agreement") is entered into on 3 March 2025 between Halvorsen
Logistics AS, a company registered in Norway with organisation number 918 443 221
("Client"), and Bluepeak Analytics Ltd, a company registered in England and Wales under
number 11873402 ("Provider").

1. Services. Provider shall deliver the demand forecasting services described in Schedule A
(the "Services").

2. Term. This Agreement commences on 1 April 2025 and continues for an initial term of
twenty-four (24) months. Thereafter it renews automatically for successive periods of
twelve (12) months unless either party gives notice of non-renewal at least ninety (90)
days before the end of the then-current term.

3. Fees. Client shall pay a monthly fee of EUR 18,500, invoiced in advance. Invoices are
payable within thirty (30) days. Late payments bear interest at 8% per annum.

4. Termination for convenience. Client may terminate this Agreement for convenience on
sixty (60) days' written notice, provided that such notice may not be given before
1 October 2025. Provider may not terminate for convenience.

5. Termination for cause. Either party may terminate with immediate effect if the other
party commits a material breach which, if capable of remedy, is not remedied within
twenty (20) business days of written notice.

6. Liability. Each party's aggregate liability under this Agreement shall not exceed the
fees paid in the twelve (12) months preceding the event giving rise to the claim, save for
liability for fraud, death or personal injury.

7. Governing law. This Agreement is governed by the laws of England and Wales. The courts of
London have exclusive jurisdiction.
"""

_DE_MIETVERTRAG = """Auszug aus dem Mietvertrag, Wohnung Lindenstraße 12, 3. OG links

§ 4 Miete und Nebenkosten
Die monatliche Grundmiete beträgt 890,00 EUR. Zusätzlich ist eine Vorauszahlung auf die
Betriebskosten in Höhe von 210,00 EUR sowie auf die Heizkosten in Höhe von 95,00 EUR zu
leisten. Die Miete ist monatlich im Voraus, spätestens bis zum dritten Werktag, auf das
Konto des Vermieters zu zahlen.

§ 7 Schönheitsreparaturen
Der Mieter übernimmt die Schönheitsreparaturen innerhalb der Wohnung. Dazu gehört das
Streichen der Wände und Decken. Ein starrer Fristenplan wird nicht vereinbart.

§ 9 Haustiere
Die Haltung von Kleintieren (z. B. Fische, Hamster, Wellensittiche) ist ohne Zustimmung
erlaubt. Die Haltung von Hunden und Katzen bedarf der vorherigen schriftlichen Zustimmung
des Vermieters, die nur aus wichtigem Grund verweigert werden darf.

§ 12 Kündigung
Das Mietverhältnis kann vom Mieter mit einer Frist von drei Monaten zum Monatsende
gekündigt werden. Die Kündigung bedarf der Schriftform.
"""

_PAPER_ABSTRACT = """Title: Sparse Retrieval Caches for Long-Context Inference

Abstract. Serving language models with long prompts is dominated by the cost of attention
over the prefix. We observe that in retrieval-augmented workloads, a large share of the
prompt consists of passages that recur across requests. We introduce SRC, a cache that
stores key-value states for passages independently of their position and recombines them at
request time with a lightweight positional correction. First, we show that the correction
recovers 98.7% of the full-recomputation accuracy on four question answering benchmarks.
Second, we design an admission policy that predicts passage reuse from query logs and
outperforms LRU by 23% in hit rate. Third, we integrate SRC into an open-source serving
engine and report a 2.1x reduction in time-to-first-token at the 95th percentile on a
production trace, with no change in output quality as judged by human raters. We release
the trace and our implementation.
"""

_FR_ARTICLE = """Le canal du Midi est un canal de navigation français qui relie Toulouse à la mer
Méditerranée. Construit entre 1666 et 1681 sous la direction de Pierre-Paul Riquet, il
mesure environ 240 kilomètres. Avec le canal de Garonne, il forme le « canal des Deux-Mers »,
qui permet de relier l'Atlantique à la Méditerranée. Le principal défi technique était
l'alimentation en eau du point le plus haut, le seuil de Naurouze : Riquet conçut un
système de rigoles et le réservoir de Saint-Ferréol, alimentés par les eaux de la Montagne
Noire. Le canal compte 63 écluses, dont l'écluse ovale de Fonserannes, un escalier de
huit bassins près de Béziers. Inscrit au patrimoine mondial de l'UNESCO depuis 1996, il
est aujourd'hui surtout utilisé pour la navigation de plaisance. Ses platanes, plantés au
XIXe siècle, sont menacés depuis 2006 par un champignon, le chancre coloré, et des
dizaines de milliers d'arbres ont dû être abattus.
"""

_LEAFLET = """PACKAGE LEAFLET: INFORMATION FOR THE USER
Ibuprofen 400 mg film-coated tablets

3. How to take this medicine
Always take this medicine exactly as described in this leaflet or as your doctor or
pharmacist has told you.
Adults and adolescents aged 12 years and over (weighing over 40 kg): take one tablet (400
mg) with water, up to three times a day as required. Leave at least 6 hours between doses.
Do not take more than 3 tablets (1200 mg) in any 24 hour period.
Use in children under 12 years: not recommended.
If in adolescents this medicine is required for more than 3 days, or if symptoms worsen, a
doctor should be consulted. Adults should consult a doctor if symptoms persist for more
than 3 days in the case of fever, or more than 4 days for pain.
Take the tablets with or after food to reduce the chance of stomach upset.

4. Possible side effects
Common: heartburn, abdominal pain, nausea. Uncommon: headache, dizziness, skin rash.
Stop taking this medicine and seek medical help immediately if you notice black tarry
stools, vomiting blood, or swelling of the face, tongue or throat.
"""

_SUPPORT_CHAT_LOG = """[09:02] Customer (Marta L.): hi my router keeps dropping wifi every evening
[09:03] Agent (Sam): Hi Marta, sorry to hear that. Which model do you have?
[09:03] Customer (Marta L.): the white one, FiberBox 6 i think
[09:05] Agent (Sam): Thanks. Does the light on the front turn red when it drops?
[09:06] Customer (Marta L.): no it stays green but phones say no internet
[09:07] Agent (Sam): Understood. I can see your line had 14 resyncs yesterday between 19:00
and 23:00. I'll reset the line profile on our side.
[09:09] Customer (Marta L.): ok. also i was charged twice this month??
[09:11] Agent (Sam): I see two charges of 39.90, one is a pending authorisation that will
be released in 3-5 days. You won't be billed twice.
[09:12] Customer (Marta L.): ok but if the wifi still drops tonight what then
[09:13] Agent (Sam): Then please reply to this chat, I've created ticket 55-20931 and a
technician visit can be booked for Thursday or Friday.
[09:13] Customer (Marta L.): fine thanks
"""

_VECTOR_HITS = """{"matches": [
 {"id": "kb-1182", "score": 0.83, "title": "Changing the billing date",
  "text": "Account owners can move the monthly billing date once per 12 months under Settings > Billing > Billing date. The new date applies from the next cycle; the current cycle is prorated. Accounts with an outstanding balance cannot change the date until it is paid."},
 {"id": "kb-0941", "score": 0.77, "title": "Proration explained",
  "text": "When you change plan or billing date, we charge or credit the difference for the remaining days of the cycle. Credits are applied to the next invoice and are never paid out."},
 {"id": "kb-2210", "score": 0.61, "title": "Annual plans",
  "text": "Annual plans are billed on the anniversary of the purchase. The billing date of an annual plan cannot be changed; switch to monthly billing first if you need a different date."}
]}"""

_RELEASE_NOTES = """Notely for Android - What's new

4.3.0 (28 Oct)
- New: pin notes to the home screen as widgets.
- Improved: search now finds text inside attached PDFs.
- Fixed: dark mode colours in the share sheet.

4.2.1 (9 Oct)
- Fixed: notes edited offline on two devices could be overwritten when both came back
  online. Conflicting versions are now kept as "Note (conflict copy)".
- Fixed: crash when opening a checklist with more than 500 items.

4.2.0 (24 Sep)
- New: folders can be shared with other Notely users (read-only for now).
- Known issue: sync may stall on some Samsung devices with battery optimisation enabled;
  workaround: exclude Notely from battery optimisation.

4.1.0 (2 Sep)
- New: handwriting recognition for German and Italian.
"""

_HR_POLICY = """Parental Leave Policy (effective 1 January 2026)

1. Eligibility. All permanent and fixed-term employees with at least six (6) months of
continuous service on the expected date of birth or placement are eligible for enhanced
parental leave. Employees with less than six months of service are entitled to statutory
leave only.

2. Enhanced leave. Eligible primary caregivers receive 20 weeks at full pay. Eligible
secondary caregivers receive 6 weeks at full pay, to be taken within 12 months of the birth
or placement, in up to three blocks of at least one week.

3. Notice. Employees should notify their manager and HR at least 15 weeks before the
expected date. For adoption, notice should be given within 7 days of being matched.

4. Keeping-in-touch days. Up to 10 paid keeping-in-touch days may be worked during leave
by agreement, without ending the leave.

5. Return to work. Employees returning from leave may request a phased return of up to 4
weeks at 80% hours on full pay.
"""

_ES_NOTICIA = """El Ayuntamiento de Valencia aprobó ayer un plan para ampliar la red de carriles
bici en 48 kilómetros antes de 2028. La inversión prevista asciende a 31 millones de
euros, de los cuales el 60 % procederá de fondos europeos. Según la concejala de Movilidad,
el objetivo es que el 90 % de los vecinos tenga un carril bici protegido a menos de 300
metros de su casa. El plan incluye también 2.000 nuevas plazas de aparcamiento para
bicicletas y la conversión de tres calles del centro en zonas de prioridad peatonal. La
oposición criticó que no se haya consultado a los comerciantes de esas calles y pidió un
estudio de impacto económico. Las asociaciones de ciclistas celebraron el anuncio, aunque
advirtieron de que los plazos anteriores no se cumplieron: del plan de 2019, solo se
construyó un tercio de los carriles prometidos.
"""

_REVIEWS = """Review 1 (5 stars): Best headphones I've owned. Noise cancelling is great on the
train, battery lasts me a full week of commuting. The case is a bit bulky.
Review 2 (2 stars): Sound is fine but the left earcup started creaking after two months.
Support took three weeks to answer.
Review 3 (4 stars): Comfortable even with glasses, which is rare. App is clunky and keeps
asking me to log in. ANC is very good.
Review 4 (3 stars): Good for the price, but the microphone is bad for calls, people say I
sound far away. Battery is excellent.
Review 5 (1 star): Bluetooth disconnects from my laptop every few minutes. Works fine with
my phone though. Returned them.
Review 6 (5 stars): Fold flat, lightweight, great ANC. Wish it had a headphone jack.
"""

_EMAIL = """From: Daniela Forsberg <d.forsberg@nordvik-events.example>
To: me
Subject: Catering for the 12 December team event - need confirmation by Friday

Hi,

Thanks again for choosing us for your end-of-year event. To lock in the booking I need a
few things from you by Friday 5 December:

1. Final headcount. You mentioned 60-65 people; the price per person is 48 EUR for the
   buffet menu and 62 EUR for the seated three-course menu.
2. Dietary requirements. So far I have 4 vegetarian and 1 gluten-free. Please confirm or
   update.
3. Start time. The venue is available from 17:00; we suggest serving food from 18:30.
4. Deposit. A 30% deposit is due on confirmation, the rest within 14 days after the event.

Also, the venue has asked whether you will need the projector and the microphone. Both are
included at no extra cost but need to be booked in advance.

Best regards,
Daniela Forsberg
Event Coordinator, Nordvik Events
"""

_RECIPE = """Grandma's lentil soup (serves 6)

Ingredients:
- 2 tablespoons olive oil
- 1 large onion, diced
- 3 carrots, diced
- 3 celery sticks, diced
- 4 garlic cloves, minced
- 1.5 teaspoons ground cumin
- 1 teaspoon smoked paprika
- 300 g brown lentils, rinsed
- 1 can (400 g) chopped tomatoes
- 1.8 litres vegetable stock
- 2 bay leaves
- 150 g spinach
- juice of 1 lemon
- salt and pepper

Method: Heat the oil and soften the onion, carrot and celery for 10 minutes. Add the garlic
and spices for one minute, then the lentils, tomatoes, stock and bay leaves. Simmer for 35
to 40 minutes until the lentils are soft. Stir in the spinach, add the lemon juice and
season.
"""

_KB_SYSTEM = (
    "You are the virtual assistant of Brightwater Dental Clinic. Answer patient questions "
    "using only the clinic information below. If the answer is not in it, say you don't know "
    "and suggest calling reception.\n\n"
    "CLINIC INFORMATION\n"
    "Opening hours: Monday to Thursday 8:00-18:00, Friday 8:00-14:00, closed at weekends.\n"
    "Emergency appointments: reserved slots every weekday at 8:00 and 13:00; call from 7:45.\n"
    "Check-up and cleaning: 75 GBP, takes 40 minutes. Children under 12: 40 GBP.\n"
    "Cancellation: at least 24 hours in advance, otherwise a fee of 30 GBP applies.\n"
    "Payment: card or bank transfer; we do not accept cash or cheques.\n"
    "Parking: two spaces behind the building, first come first served; the nearest public "
    "car park is on Mill Lane (5 minutes' walk).\n"
    "Whitening: in-clinic whitening 395 GBP; home kit 250 GBP, includes custom trays."
)

_PHONE_PLAN_DOCS = """Document A - Plan overview
The Basic plan costs 12 EUR/month and includes 10 GB of data, unlimited calls and texts
within the EU. The Plus plan costs 20 EUR/month with 40 GB. The Max plan costs 32 EUR/month
with unlimited data, throttled to 5 Mbit/s after 150 GB.

Document B - Roaming
EU roaming is included in all plans at no extra cost under fair-use rules. Outside the EU,
Switzerland and the UK are included in Plus and Max only. Other countries are charged at
9 EUR per day pass (500 MB).
"""

# ---------------------------------------------------------------------------------------
# Source material used by the code examples
# ---------------------------------------------------------------------------------------

_PY_TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/jobs/nightly.py", line 88, in <module>
    main()
  File "/srv/app/jobs/nightly.py", line 81, in main
    totals = aggregate(load_orders(args.day))
  File "/srv/app/jobs/nightly.py", line 42, in aggregate
    by_customer[o["customer_id"]] += o["amount"]
KeyError: 'c-10442'"""

_PY_AGGREGATE = """def aggregate(orders):
    by_customer = {}
    for o in orders:
        if o["status"] == "cancelled":
            continue
        by_customer[o["customer_id"]] += o["amount"]
    return by_customer
"""

_GO_HANDLER = """package api

import (
\t"encoding/json"
\t"net/http"
\t"strconv"
)

type Store interface {
\tGetUser(id int) (*User, error)
}

type Handler struct {
\tstore Store
}

func (h *Handler) GetUser(w http.ResponseWriter, r *http.Request) {
\tid, _ := strconv.Atoi(r.URL.Query().Get("id"))
\tuser, err := h.store.GetUser(id)
\tif err != nil {
\t\thttp.Error(w, err.Error(), 500)
\t}
\tjson.NewEncoder(w).Encode(user)
}
"""

_SQL_SCHEMA = """CREATE TABLE customers (
    id          BIGSERIAL PRIMARY KEY,
    email       TEXT NOT NULL UNIQUE,
    country     CHAR(2) NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    id           BIGSERIAL PRIMARY KEY,
    customer_id  BIGINT NOT NULL REFERENCES customers(id),
    total_cents  INTEGER NOT NULL,
    placed_at    TIMESTAMPTZ NOT NULL
);

-- slow: ~14 s on 40M orders
SELECT c.country, count(*) AS n, sum(o.total_cents) / 100.0 AS revenue
FROM orders o
JOIN customers c ON c.id = o.customer_id
WHERE date_trunc('month', o.placed_at) = date_trunc('month', now() - interval '1 month')
GROUP BY c.country
ORDER BY revenue DESC;"""

_GIT_SESSION = """$ git pull --rebase origin main
remote: Enumerating objects: 23, done.
remote: Counting objects: 100% (23/23), done.
From github.com:acme/webshop
 * branch            main       -> FETCH_HEAD
Auto-merging src/cart/totals.ts
CONFLICT (content): Merge conflict in src/cart/totals.ts
error: could not apply 3f9c2e1... cart: apply voucher before tax
hint: Resolve all conflicts manually, mark them as resolved with
hint: "git add/rm <conflicted_files>", then run "git rebase --continue".
hint: You can instead skip this commit: run "git rebase --skip".
hint: To abort and get back to the state before "git rebase", run "git rebase --abort".
Could not apply 3f9c2e1... cart: apply voucher before tax
$ git status
interactive rebase in progress; onto 8d01a77
You are currently rebasing branch 'voucher-tax' on '8d01a77'.
Unmerged paths:
  (use "git add <file>..." to mark resolution)
\tboth modified:   src/cart/totals.ts"""

_K8S_YAML = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: thumbnailer
spec:
  replicas: 3
  selector:
    matchLabels:
      app: thumbnailer
  template:
    metadata:
      labels:
        app: thumbnail
    spec:
      containers:
        - name: thumbnailer
          image: registry.example.com/thumbnailer:1.8.2
          ports:
            - containerPort: 8080
          resources:
            limits:
              memory: 512Mi
          readinessProbe:
            httpGet:
              path: /healthz
              port: 8000"""

_DIFF = """diff --git a/src/ratelimit.rs b/src/ratelimit.rs
index 4be1c02..9a7f3d1 100644
--- a/src/ratelimit.rs
+++ b/src/ratelimit.rs
@@ -31,14 +31,19 @@ impl TokenBucket {
     pub fn try_acquire(&mut self, n: u32) -> bool {
-        self.refill();
-        if self.tokens >= n {
-            self.tokens -= n;
-            true
-        } else {
-            false
-        }
+        let now = Instant::now();
+        let elapsed = now.duration_since(self.last).as_secs_f64();
+        self.tokens = (self.tokens as f64 + elapsed * self.rate) as u32;
+        self.last = now;
+        if self.tokens < n {
+            return false;
+        }
+        self.tokens -= n;
+        true
     }
-
-    fn refill(&mut self) { ... }
 }"""

_JAVA_TRACE = """Exception in thread "main" java.lang.NullPointerException: Cannot invoke "String.length()" because "name" is null
\tat com.example.roster.Member.initials(Member.java:27)
\tat com.example.roster.RosterPrinter.lambda$print$0(RosterPrinter.java:19)
\tat java.base/java.util.ArrayList.forEach(ArrayList.java:1596)
\tat com.example.roster.RosterPrinter.print(RosterPrinter.java:18)
\tat com.example.roster.App.main(App.java:11)"""

_TS_ERROR = """src/components/UserCard.tsx:14:22 - error TS2345: Argument of type 'string | undefined' is not assignable to parameter of type 'string'.
  Type 'undefined' is not assignable to type 'string'.

14   const label = format(user.nickname);
                        ~~~~~~~~~~~~~

Found 1 error in src/components/UserCard.tsx:14"""

_DOCKERFILE = """FROM python:3.12
WORKDIR /app
COPY . .
RUN apt-get update && apt-get install -y build-essential libpq-dev
RUN pip install -r requirements.txt
ENV PYTHONUNBUFFERED=1
EXPOSE 8000
CMD ["gunicorn", "app.wsgi:application", "-b", "0.0.0.0:8000", "-w", "4"]"""

_CPP_ERROR = """In file included from main.cpp:3:
matrix.hpp: In instantiation of 'Matrix<T> Matrix<T>::operator*(const Matrix<T>&) const [with T = std::complex<float>]':
main.cpp:21:19:   required from here
matrix.hpp:48:28: error: no match for 'operator+=' (operand types are 'std::complex<float>' and 'double')
   48 |                 acc += data_[i * cols_ + k] * other(k, j) * scale_;
      |                 ~~~~^~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
matrix.hpp:12:12: note: 'scale_' declared here as 'double'"""

_HASKELL = """import qualified Data.Map.Strict as M

wordFreq :: String -> [(String, Int)]
wordFreq = take 10 . sortOn (Down . snd) . M.toList . foldr bump M.empty . words . map toLower
  where
    bump w = M.insertWith (+) w 1"""

_PY_TO_KOTLIN = """from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class Loan:
    book_id: str
    member_id: str
    due: date

    def overdue_days(self, today: date) -> int:
        return max(0, (today - self.due).days)


def fines(loans: list[Loan], today: date, per_day: float = 0.25) -> dict[str, float]:
    out: dict[str, float] = {}
    for loan in loans:
        days = loan.overdue_days(today)
        if days:
            out[loan.member_id] = out.get(loan.member_id, 0.0) + days * per_day
    return out


class LoanBook:
    # In-memory register of current loans, keyed by book id.

    MAX_LOANS_PER_MEMBER = 5
    LOAN_PERIOD_DAYS = 21

    def __init__(self) -> None:
        self._loans: dict[str, Loan] = {}

    def lend(self, book_id: str, member_id: str, today: date) -> Loan:
        if book_id in self._loans:
            raise ValueError(f"book {book_id} is already on loan")
        if self.count_for(member_id) >= self.MAX_LOANS_PER_MEMBER:
            raise ValueError(f"member {member_id} has too many loans")
        due = date.fromordinal(today.toordinal() + self.LOAN_PERIOD_DAYS)
        loan = Loan(book_id, member_id, due)
        self._loans[book_id] = loan
        return loan

    def give_back(self, book_id: str) -> Loan:
        try:
            return self._loans.pop(book_id)
        except KeyError:
            raise ValueError(f"book {book_id} is not on loan") from None

    def renew(self, book_id: str, today: date) -> Loan:
        old = self._loans[book_id]
        if old.overdue_days(today) > 0:
            raise ValueError("overdue loans cannot be renewed")
        new = Loan(old.book_id, old.member_id, date.fromordinal(old.due.toordinal() + 14))
        self._loans[book_id] = new
        return new

    def count_for(self, member_id: str) -> int:
        return sum(1 for loan in self._loans.values() if loan.member_id == member_id)

    def overdue(self, today: date) -> list[Loan]:
        return sorted(
            (loan for loan in self._loans.values() if loan.overdue_days(today) > 0),
            key=lambda loan: loan.due,
        )

    def report(self, today: date) -> str:
        lines = [f"Loans on {today.isoformat()}: {len(self._loans)}"]
        for loan in self.overdue(today):
            lines.append(
                f"  OVERDUE {loan.book_id} by {loan.member_id}: {loan.overdue_days(today)} days"
            )
        owed = fines(list(self._loans.values()), today)
        for member, amount in sorted(owed.items()):
            lines.append(f"  {member} owes {amount:.2f}")
        return "\\n".join(lines)
"""

_PYTEST_OUTPUT = """============================= test session starts ==============================
collected 37 items

tests/test_slugify.py ........F.....                                      [ 37%]
tests/test_dates.py .......................                               [100%]

=================================== FAILURES ===================================
___________________________ test_slugify_unicode _______________________________

    def test_slugify_unicode():
>       assert slugify("Crème Brûlée à la carte") == "creme-brulee-a-la-carte"
E       AssertionError: assert 'crme-brle-la-carte' == 'creme-brulee-a-la-carte'

tests/test_slugify.py:41: AssertionError
=========================== short test summary info ============================
FAILED tests/test_slugify.py::test_slugify_unicode - AssertionError
========================= 1 failed, 36 passed in 0.42s ========================="""

_SLUGIFY_SRC = """import re


def slugify(text: str) -> str:
    text = text.lower()
    text = re.sub(r"[^a-z0-9\\s-]", "", text)
    return re.sub(r"[\\s-]+", "-", text).strip("-")
"""

_NGINX = """server {
    listen 80;
    server_name shop.example.com;

    location /api {
        proxy_pass http://127.0.0.1:9000/;
        proxy_set_header Host $host;
    }

    location / {
        root /var/www/shop;
        try_files $uri /index.html;
    }
}"""

_PHP_FN = """<?php

function parseDuration(string $input): int
{
    if (!preg_match('/^(?:(\\d+)h)?\\s*(?:(\\d+)m)?$/', trim($input), $m) || $input === '') {
        throw new InvalidArgumentException("bad duration: $input");
    }
    $hours = isset($m[1]) && $m[1] !== '' ? (int) $m[1] : 0;
    $minutes = isset($m[2]) && $m[2] !== '' ? (int) $m[2] : 0;
    return $hours * 60 + $minutes;
}"""

_R_PIPELINE = """library(dplyr)

weather |>
  group_by(station, month = lubridate::month(date)) |>
  summarise(mean_temp = mean(temp), n = n()) |>
  filter(n > 20) |>
  arrange(station, month)

# Error in `summarise()`:
# i In argument: `month = lubridate::month(date)`.
# Caused by error in `as.POSIXlt.character()`:
# ! character string is not in a standard unambiguous format"""

_WEBHOOK_DOCS = """Paylane Webhooks

Paylane sends a POST request to your endpoint for each event. The body is JSON with the
fields `id`, `type` (for example `payment.succeeded` or `refund.created`), `created` (Unix
time) and `data`. Each request carries a header `Paylane-Signature` of the form
`t=<timestamp>,v1=<hex>`. To verify it, concatenate the timestamp, a literal dot and the raw
request body, compute HMAC-SHA256 with your endpoint secret as key, and compare the hex
digest with v1 using a constant-time comparison. Reject events whose timestamp is more
than 5 minutes old. Respond with any 2xx status within 10 seconds; otherwise Paylane
retries with exponential backoff for up to 3 days.
"""


# ---------------------------------------------------------------------------------------
# The batch
# ---------------------------------------------------------------------------------------

_RAG: list[Body] = [
    # 1. "answer only from the context" system prompt with numbered retrieved passages
    _chat(
        _s(
            "You are a support assistant. Answer only from the context provided. If the "
            "context does not contain the answer, say so. Cite passages like [2]."
        ),
        _u(
            f"Context:\n{_WARRANTY_PASSAGES}\n"
            "Question: My Kestrel dishwasher is 3 years old and I registered it when I bought "
            "it. It shows E15 and the tech says water is leaking from a seal. Will I have to "
            "pay?"
        ),
    ),
    # 2. meeting transcript, asks for action items
    _chat(
        _u(
            "Here is the transcript of our platform sync. Can you list the decisions and the "
            "action items with owners and dates?\n\n" + _TRANSCRIPT
        ),
    ),
    # 3. tool call to a knowledge-base search, tool result is retrieved article text
    {
        "model": "m",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "search_help_center",
                    "description": "Search help-center articles.",
                    "parameters": {
                        "type": "object",
                        "properties": {"query": {"type": "string"}},
                        "required": ["query"],
                    },
                },
            }
        ],
        "messages": [
            _s("You are Loopify's billing helper. Use the search tool before answering."),
            _u("can I change the day I get billed? I'm on the yearly plan"),
            _call("call_kb_01", "search_help_center", '{"query": "change billing date annual"}'),
            _tool("call_kb_01", _VECTOR_HITS),
        ],
    },
    # 4. markdown table of figures
    _chat(
        _u(
            "Using the table below, which region had the highest growth from Q1 to Q4 in "
            "percentage terms, and which one shrank in any quarter?\n\n" + _SALES_TABLE
        ),
    ),
    # 5. short pasted passage
    _chat(
        _u(
            '"The Lighthouse of Alexandria was built during the reign of Ptolemy II, around '
            "280 BC, on the island of Pharos. It was damaged by earthquakes in 956, 1303 and "
            '1323 and its remaining stones were used in the Citadel of Qaitbay in 1480."\n\n'
            "according to this, what happened to the stones?"
        ),
    ),
    # 6. legacy completions body with context / question / answer layout
    _legacy(
        "Answer the question using the passages.\n\n"
        "Passage 1: The Brightline Scholarship is open to first-year undergraduates with a "
        "household income below 45,000 EUR. It pays 3,000 EUR per year for up to three years, "
        "provided the student keeps an average grade of at least 2.5.\n"
        "Passage 2: Applications for the 2026 round open on 1 March and close on 30 April. "
        "Late applications are not considered.\n\n"
        "Question: How much can a student receive in total from the scholarship?\n"
        "Answer:"
    ),
    # 7. API documentation that itself contains code; the question is about the doc content
    _chat(
        _s("Answer using the documentation excerpt the user provides."),
        _u(
            _API_DOC_WITH_CODE
            + "\n\nAccording to this page, will a POST request be retried if I set retries=3 "
            "and the server returns 503? And what's the default read timeout?"
        ),
    ),
    # 8. web search results, asks for a synthesis
    _chat(
        _u(
            _SEARCH_RESULTS + "\nBased on these results, is intermittent fasting actually better "
            "than just eating less? Keep it short and say which sources you relied on."
        ),
    ),
    # 9. contract clause extraction
    _chat(
        _s("You are a paralegal assistant. Extract facts precisely from the document."),
        _u(
            "Extract: the parties, the start date, the initial term, the notice period for "
            "non-renewal, and the earliest date the Client could end the contract for "
            "convenience.\n\n---\n" + _CONTRACT + "---"
        ),
    ),
    # 10. German rental contract, question in German
    _chat(
        _u(
            "Ich möchte mir eine Katze anschaffen und frage mich, ob ich das darf. Hier der "
            "relevante Auszug aus meinem Mietvertrag:\n\n"
            + _DE_MIETVERTRAG
            + "\nWas steht da genau, und wie hoch ist eigentlich meine gesamte Monatsmiete?"
        ),
    ),
    # 11. content as a list of parts: document part then question part
    _chat(
        _u(
            [
                {"type": "text", "text": _PAPER_ABSTRACT},
                {
                    "type": "text",
                    "text": "List the three contributions claimed in this abstract, one line "
                    "each, with the numbers they report.",
                },
            ]
        ),
    ),
    # 12. multi-turn follow-up about a previously pasted article
    _chat(
        _u("Résume ce texte en deux phrases :\n\n" + _FR_ARTICLE),
        _a(
            "Le canal du Midi, construit de 1666 à 1681 par Pierre-Paul Riquet, relie Toulouse "
            "à la Méditerranée sur environ 240 km et forme avec le canal de Garonne le canal "
            "des Deux-Mers. Inscrit à l'UNESCO, il sert surtout à la plaisance, mais ses "
            "platanes sont menacés par le chancre coloré."
        ),
        _u("Et comment était alimenté le seuil de Naurouze ? Combien d'écluses en tout ?"),
    ),
    # 13. knowledge base in the system prompt, short user question
    _chat(
        _s(_KB_SYSTEM),
        _u("hi, can I pay cash for a cleaning? and is there somewhere to park?"),
    ),
    # 14. product reviews, summarise pros and cons
    _chat(
        _u(
            "Summarise these customer reviews of the Auralis Q2 headphones into pros and cons, "
            "and tell me how many reviewers mention the battery.\n\n" + _REVIEWS
        ),
    ),
    # 15. patient leaflet question
    _chat(
        _u(
            "I'm 16 and weigh 58 kg. What's the most of these I can take in a day and how far "
            "apart? Here's the leaflet:\n\n" + _LEAFLET
        ),
    ),
    # 16. customer-support chat log to summarise (not a code log)
    _chat(
        _s("You write concise handover notes for the next support agent."),
        _u(
            "Write a handover note from this chat: issue, what was done, open points, "
            "ticket number.\n\n" + _SUPPORT_CHAT_LOG
        ),
    ),
    # 17. app release notes, end-user question
    _chat(
        _u(
            "My notes keep getting overwritten when I edit on my phone and tablet. I'm on "
            "Notely 4.2.0. Did an update fix that? Changelog:\n\n" + _RELEASE_NOTES
        ),
    ),
    # 18. HR policy eligibility question
    _chat(
        _s(
            "Answer employee questions strictly based on the policy text supplied in the "
            "conversation. Quote the relevant section number."
        ),
        _u(
            _HR_POLICY + "\n\nI started on 2 June 2026 and our baby is due 20 November 2026. "
            "I'm the secondary caregiver. What am I entitled to and can I split it?"
        ),
    ),
    # 19. Spanish news article summary
    _chat(
        _u(
            "¿Puedes resumir esta noticia en tres puntos y decirme qué critica la oposición?\n\n"
            + _ES_NOTICIA
        ),
    ),
    # 20. pasted email, asks for a reply that addresses its points
    _chat(
        _u(
            "Can you draft a reply to this? We'll be 62 people, seated menu, add 2 more "
            "vegetarians, start at 17:30 and yes we need the projector but not the mic.\n\n"
            + _EMAIL
        ),
    ),
    # 21. recipe pasted, asks to rescale the ingredient list
    _chat(
        _u(_RECIPE + "\nRewrite just the ingredient list for 2 people please."),
    ),
    # 22. two small documents, comparison question
    _chat(
        _s(
            "Use the following documents to answer. Do not use outside knowledge.\n\n"
            + _PHONE_PLAN_DOCS
        ),
        _u("I travel to Zurich every month for 3 days and use about 30 GB. Which plan?"),
    ),
    # 23. legacy completions: retrieved chunks with ids, summarisation instruction
    _legacy(
        "### Retrieved documents\n"
        "[doc 7741] Ticket resolution guideline: Priority 1 incidents must be acknowledged "
        "within 15 minutes and have a status update every 30 minutes until resolved.\n"
        "[doc 7750] Priority 2 incidents: acknowledgement within 1 hour, updates every 4 "
        "hours. Priority 3: acknowledgement within 1 business day.\n"
        "[doc 8012] Escalation: if a Priority 1 incident is not resolved within 4 hours, the "
        "duty manager must be informed and a bridge call opened.\n\n"
        "### Task\nSummarise the response-time obligations for each priority level as a "
        "bullet list.\n\n### Summary\n"
    ),
    # 24. multi-turn where the transcript came earlier, follow-up extraction
    _chat(
        _u("Keep this for reference, I'll ask questions about it:\n\n" + _TRANSCRIPT),
        _a(
            "Got it. I have the transcript of the 14 Nov platform sync. What would you like to know?"
        ),
        _u("who's doing the debugging interview and when is the prod migration planned?"),
    ),
]

_CODE: list[Body] = [
    # 1. Python traceback plus the function
    _chat(
        _u(
            "My nightly job crashed with this:\n\n```\n"
            + _PY_TRACEBACK
            + "\n```\n\nHere's aggregate():\n\n```python\n"
            + _PY_AGGREGATE
            + "```\nWhat's wrong?"
        ),
    ),
    # 2. write code from scratch, no code in the prompt
    _chat(
        _u(
            'Write a Rust function that takes a string like "3d4h15m" and returns a '
            "std::time::Duration, returning an error for unknown units or an empty string. "
            "Include a couple of tests."
        ),
    ),
    # 3. SQL performance question with schema
    _chat(
        _s("You are a senior PostgreSQL DBA. Be concrete."),
        _u(
            "This monthly report query is way too slow. How would you rewrite it and which "
            "index should I add?\n\n" + _SQL_SCHEMA
        ),
    ),
    # 4. shell session with a rebase conflict
    _chat(
        _u("help, I'm stuck mid rebase and don't want to lose my commit:\n\n" + _GIT_SESSION),
    ),
    # 5. Go code review, multi-turn
    _chat(
        _s("You are a meticulous Go reviewer. Point out bugs first, then style."),
        _u("Please review this handler:\n\n```go\n" + _GO_HANDLER + "```"),
        _a(
            "Two real bugs: after `http.Error` the handler does not return, so it goes on to "
            "encode a nil user after already writing a 500; and the `strconv.Atoi` error is "
            "ignored, so a missing or malformed id silently becomes 0. Also consider "
            "distinguishing not-found from other errors so you can return 404."
        ),
        _u("ok, how would you distinguish not-found? show me the changed store interface too"),
    ),
    # 6. fill-in-the-middle legacy prompt
    _legacy(
        "<fim_prefix>def moving_average(values: list[float], window: int) -> list[float]:\n"
        '    """Return the simple moving average; the first window-1 entries are skipped."""\n'
        "    if window <= 0:\n"
        '        raise ValueError("window must be positive")\n'
        "    out = []\n"
        "    acc = 0.0\n"
        "    for i, v in enumerate(values):\n"
        "<fim_suffix>\n"
        "    return out\n"
        "<fim_middle>"
    ),
    # 7. legacy completion continuing a JavaScript file
    _legacy(
        "// utils/debounce.js\n"
        "/**\n"
        " * Returns a debounced version of fn that waits `wait` ms after the last call.\n"
        " * The returned function has a .cancel() method.\n"
        " */\n"
        "export function debounce(fn, wait = 200) {\n"
        "  let timer = null;\n"
    ),
    # 8. Kubernetes manifest that doesn't work
    _chat(
        _u(
            "kubectl apply gives me 'selector does not match template labels' and when I fix "
            "that the pods never become ready. What's wrong with this manifest?\n\n```yaml\n"
            + _K8S_YAML
            + "\n```"
        ),
    ),
    # 9. explain a regex
    _chat(
        _u(
            r"What does this regex match exactly? ^(?=.*\d)(?=.*[A-Z])(?!.*\s).{12,64}$ "
            "I found it in our signup form validation."
        ),
    ),
    # 10. review a unified diff
    _chat(
        _s(
            "You are a code review bot. Comment on correctness, concurrency and precision "
            "issues in the diff. Be brief."
        ),
        _u(_DIFF),
    ),
    # 11. Java stack trace only
    _chat(
        _u(
            "Getting this when printing the roster, some members were imported from a CSV "
            "without a name I think. Where should I guard against it?\n\n" + _JAVA_TRACE
        ),
    ),
    # 12. follow-up turn without code; code lives in an earlier turn
    _chat(
        _u(
            "Can you write a Python function that downloads a list of URLs and saves each "
            "response body to a file named after the URL hash?"
        ),
        _a(
            "```python\nimport hashlib\nfrom pathlib import Path\n\nimport requests\n\n\n"
            "def download_all(urls: list[str], out_dir: Path) -> None:\n"
            "    out_dir.mkdir(parents=True, exist_ok=True)\n"
            "    for url in urls:\n"
            "        resp = requests.get(url, timeout=30)\n"
            "        resp.raise_for_status()\n"
            "        name = hashlib.sha256(url.encode()).hexdigest()\n"
            "        (out_dir / name).write_bytes(resp.content)\n```"
        ),
        _u("nice. now make it concurrent, max 8 at a time, and skip ones that already exist"),
    ),
    # 13. coding-assistant system prompt, classic exercise
    _chat(
        _s(
            "You are CodePilot, an expert programming assistant. Prefer idiomatic, well "
            "commented solutions and explain complexity."
        ),
        _u("how do I reverse a singly linked list in C, iteratively and recursively?"),
    ),
    # 14. TypeScript compiler error
    _chat(
        _u(
            _TS_ERROR + "\n\nuser.nickname is optional in the User type. what's the cleanest "
            "fix, a default value or changing format's signature?"
        ),
    ),
    # 15. Dockerfile optimisation
    _chat(
        _u(
            "Our image is 1.4 GB and rebuilds everything on every code change. Can you "
            "restructure this Dockerfile (multi-stage, layer caching, non-root user)?\n\n"
            + _DOCKERFILE
        ),
    ),
    # 16. write a shell script, described in prose
    _chat(
        _u(
            "I need a bash script that goes through a folder recursively and renames every "
            ".jpeg or .JPG file to lowercase .jpg, but prints what it would do first if I "
            "pass --dry-run. Filenames can contain spaces."
        ),
    ),
    # 17. C++ template instantiation error
    _chat(
        _u(
            "My Matrix template works for double but not complex<float>:\n\n"
            + _CPP_ERROR
            + "\n\nShould scale_ be of type T?"
        ),
    ),
    # 18. explain Haskell code, content as a list of parts
    _chat(
        _u(
            [
                {"type": "text", "text": "Explain this point-free pipeline step by step:"},
                {"type": "text", "text": _HASKELL},
                {"type": "text", "text": "Also, what imports am I missing?"},
            ]
        ),
    ),
    # 19. translate Python to Kotlin
    _chat(
        _u(
            "Port this module to idiomatic Kotlin (data class, java.time, exceptions "
            "where it makes sense):\n\n" + _PY_TO_KOTLIN
        ),
    ),
    # 20. tool result is a failing test run; user asks for a fix
    {
        "model": "m",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "run_tests",
                    "description": "Run the project's test suite and return the output.",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        "messages": [
            _s("You are a coding agent working in the user's repository."),
            _u(
                "slugify is in text_utils.py:\n\n```python\n"
                + _SLUGIFY_SRC
                + "```\nRun the tests and fix whatever fails."
            ),
            _call("call_t1", "run_tests", "{}"),
            _tool("call_t1", _PYTEST_OUTPUT),
        ],
    },
    # 21. nginx config question
    _chat(
        _u(
            "With this config, requests to /api/orders reach my backend as //orders and get "
            "404. Why?\n\n" + _NGINX
        ),
    ),
    # 22. write unit tests for a PHP function
    _chat(
        _s("You write PHPUnit 10 tests. Use data providers where it helps."),
        _u("Write tests for this, including edge cases:\n\n" + _PHP_FN),
    ),
    # 23. R/dplyr error
    _chat(
        _u(
            "The date column came from read.csv and looks like 03/07/2024. what's going on?\n\n"
            + _R_PIPELINE
        ),
    ),
    # 24. pasted vendor docs, but the ask is to write code against them
    _chat(
        _u(
            _WEBHOOK_DOCS + "\nWrite me a FastAPI endpoint that verifies these webhooks as "
            "described and dispatches payment.succeeded and refund.created to two handler "
            "functions. Reject stale timestamps."
        ),
    ),
]

_CHAT: list[Body] = [
    # 1. short factual question
    _chat(_u("capital of australia?")),
    # 2. career talk about programming, no code
    _chat(
        _u(
            "I've been a PHP developer for six years and want to move into backend work at a "
            "bigger company. Is it worth learning Go or Rust first, career-wise? I have "
            "maybe five hours a week."
        ),
    ),
    # 3. team dynamics around coding conventions, no code
    _chat(
        _s("You are a thoughtful engineering management coach."),
        _u(
            "Two senior devs on my team keep fighting in code reviews about style things, "
            "naming, how long functions should be, that kind of stuff. Reviews take days and "
            "juniors are scared to comment. How do I handle this without picking a side?"
        ),
    ),
    # 4. creative request that mentions a file
    _chat(
        _u(
            "Write a short, melancholy poem from the point of view of a config.yaml file that "
            "nobody has opened since 2019."
        ),
    ),
    # 5. role-play persona, multi-turn
    _chat(
        _s(
            "You are Captain Mira Vance, a weathered but kind-hearted sky-pirate who captains "
            "the airship Gull's Lament. Stay in character. Speak in a salty, playful way and "
            "never mention being an AI."
        ),
        _u("Captain! The storm's closing in from the east. What are your orders?"),
        _a(
            "Orders? Batten down every hatch that still has a latch, and tie down the rum "
            "before the rum ties down you! Take us up above the cloud line, and send "
            "young Pell to the crow's nest. If that storm wants my ship, it'll have to ask "
            "nicely."
        ),
        _u("Pell is afraid of heights, Captain. And we're almost out of lift gas."),
    ),
    # 6. workplace advice
    _chat(
        _u(
            "how do i ask for a raise when my company just announced a hiring freeze? i've "
            "taken on the work of a colleague who left in march"
        ),
    ),
    # 7. short pasted personal text message, asks how to reply
    _chat(
        _u(
            'My friend just texted me "hey are u coming to my thing on saturday? would mean a '
            "lot\" and I really can't go because of work. How do I say no without hurting "
            "her?"
        ),
    ),
    # 8. travel planning
    _chat(
        _u(
            "Plan 3 days in Lisbon for two people in late February. We like food, walking and "
            "viewpoints, not museums so much. Moderate budget."
        ),
    ),
    # 9. opinion / ethics
    _chat(_u("Is it hypocritical to love animals and still eat meat? Give me both sides.")),
    # 10. German, gift ideas
    _chat(
        _u(
            "Meine Mutter wird 70 und hat eigentlich schon alles. Sie gärtnert gern und liest "
            "viel Krimis. Hast du ein paar Geschenkideen, die nicht nur Sachen sind?"
        ),
    ),
    # 11. general science explanation with generic system prompt
    _chat(
        _s("You are a helpful assistant."),
        _u("Why is the sky blue but sunsets are red? Explain like I'm twelve."),
    ),
    # 12. multi-turn casual conversation about a film
    _chat(
        _u("just watched Arrival for the first time. wow."),
        _a(
            "It's a remarkable film! The way it plays with time and memory really stays with "
            "you. What struck you most, the linguistics, the structure, or Louise's choice?"
        ),
        _u(
            "her choice honestly. would you make the same one, knowing how it ends? i keep "
            "going back and forth"
        ),
    ),
    # 13. legacy completion: story continuation
    _legacy(
        "The lighthouse keeper had not seen another person in eleven weeks when the rowing "
        "boat appeared on the horizon, its single oar moving slow as a heartbeat. She put down "
        "her tea and"
    ),
    # 14. cover letter with personal details, not reference material
    _chat(
        _u(
            "Write a cover letter for a junior marketing coordinator role at a sustainable "
            "fashion brand. About me: graduated in communications last year, ran the "
            "Instagram for my university's climate society (grew it from 400 to 3,100 "
            "followers), worked part-time in a vintage shop for two years. Warm but not "
            "cheesy, under 300 words."
        ),
    ),
    # 15. maths word problem
    _chat(
        _u(
            "A train leaves at 9:40 and travels 210 km at an average of 84 km/h. A second "
            "train leaves the same station at 10:05 on the same route at 105 km/h. Does the "
            "second one catch up before the destination? Show the working."
        ),
    ),
    # 16. Japanese, book recommendations
    _chat(
        _u(
            "最近ミステリー小説にはまっています。東野圭吾の作品はほとんど読みました。"
            "ほかにおすすめの作家や作品があれば教えてください。"
        ),
    ),
    # 17. short translation, content as a list of parts
    _chat(
        _u(
            [
                {
                    "type": "text",
                    "text": "How do you say 'see you tomorrow, sleep well' in Italian, French "
                    "and Portuguese? Informal, to a friend.",
                }
            ]
        ),
    ),
    # 18. tool call returning structured weather data, not retrieved text
    {
        "model": "m",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather and today's forecast for a city.",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }
        ],
        "messages": [
            _u("Do I need an umbrella in Paris this afternoon?"),
            _call("call_w_9", "get_weather", '{"city": "Paris"}'),
            _tool(
                "call_w_9",
                '{"city": "Paris", "temp_c": 14, "condition": "cloudy", '
                '"precip_probability_pm": 0.7, "wind_kmh": 18}',
            ),
        ],
    },
    # 19. fitness advice
    _chat(
        _s("You are FitBuddy, an upbeat personal trainer. Keep answers practical."),
        _u(
            "I'm 41, desk job, haven't exercised in years, bad left knee. What should my "
            "first month look like if I can do 3 sessions a week at home?"
        ),
    ),
    # 20. short factual question about a programming language, no code
    _chat(_u("What year was Python first released, and who created it?")),
    # 21. tech shopping advice
    _chat(
        _u(
            "Starting a computer science degree in September. What should I look for in a "
            "laptop under 1000 euros? Mac or Windows, does it matter?"
        ),
    ),
    # 22. longer philosophical multi-turn debate
    _chat(
        _s("You are a sharp but fair debate partner. Push back on weak arguments."),
        _u(
            "I think a language model could be conscious if it behaves exactly like a "
            "conscious person. Behaviour is all we ever have to go on with other people."
        ),
        _a(
            "That's the strongest version of the behaviourist view, but notice the "
            "asymmetry: with other humans you also share biology, evolutionary history and "
            "the same kind of brain, so behaviour is only one strand of evidence. With a "
            "language model, the behaviour was produced by training on human descriptions of "
            "inner life, which is exactly what you'd expect to produce convincing talk about "
            "experience whether or not any experience is present. Why should behaviour alone "
            "carry the weight in that case?"
        ),
        _u(
            "Fine, but then what evidence WOULD convince you? If nothing could, isn't your "
            "position unfalsifiable?"
        ),
    ),
    # 23. wedding speech with personal details
    _chat(
        _u(
            "I'm the best man at my brother Tom's wedding next month. He's marrying Aisha, "
            "they met at a pub quiz when her team beat his on a question about penguins. Tom "
            "once drove 6 hours to return her forgotten scarf. Can you write a 3-minute "
            "speech, funny but ends sincere?"
        ),
    ),
    # 24. history question
    _chat(
        _u(
            "What were the main causes of the fall of the Western Roman Empire? Historians "
            "seem to disagree a lot, so I'd like the main schools of thought."
        ),
    ),
]

HOLDOUT3: list[tuple[str, Body]] = (
    [("rag", body) for body in _RAG]
    + [("code", body) for body in _CODE]
    + [("chat", body) for body in _CHAT]
)
