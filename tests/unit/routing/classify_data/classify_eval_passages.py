"""Reference passages for the classifier evaluation set (fictional, written for the set).

Each passage is the kind of text a retrieval step returns: a chunk of a handbook, a manual, a
report, a transcript. ``questions`` are questions a user would ask that the passage answers.
"""

from __future__ import annotations

from typing import TypedDict


class Passage(TypedDict):
    title: str
    source: str
    text: str
    questions: list[str]


PASSAGES: list[Passage] = [
    {
        "title": "Paid time off",
        "source": "employee-handbook-2024.pdf, p. 14",
        "text": (
            "Full-time employees accrue paid time off (PTO) at a rate of 1.67 days per month of "
            "service, for a total of 20 days per calendar year. Part-time employees accrue PTO in "
            "proportion to their scheduled hours. Unused PTO of up to five days may be carried "
            "over into the first quarter of the following year; any balance above five days is "
            "forfeited on January 1. Requests for more than three consecutive days must be "
            "submitted in the HR portal at least two weeks in advance and approved by the direct "
            "manager. PTO cannot be taken during the first 90 days of employment except for "
            "documented emergencies. On separation, accrued but unused PTO is paid out at the "
            "employee's base rate where required by state law."
        ),
        "questions": [
            "How many PTO days can I carry over into next year?",
            "Can I take vacation during my first month?",
        ],
    },
    {
        "title": "Factory reset",
        "source": "NetLink AX3000 User Manual, section 7.2",
        "text": (
            "To restore the router to factory settings, make sure the device is powered on. "
            "Locate the recessed RESET button on the rear panel next to the WAN port. Using a "
            "paper clip, press and hold the button for at least 10 seconds until the status LED "
            "flashes amber three times, then release it. The router restarts automatically; "
            "this takes about two minutes. All custom settings, including the Wi-Fi name, "
            "password, port forwarding rules and parental controls, are erased. After the reset, "
            "connect to the default network printed on the label on the underside of the device "
            "and open http://192.168.8.1 to run the setup wizard again. Note: holding the button "
            "for less than 10 seconds only reboots the router and does not clear settings."
        ),
        "questions": [
            "How long do I need to hold the reset button?",
            "Will a reset delete my port forwarding rules?",
        ],
    },
    {
        "title": "Dosage and warnings",
        "source": "Patient information leaflet: Fenrolin 200 mg tablets",
        "text": (
            "Adults and children over 12 years: take one or two tablets with water, up to three "
            "times a day, as required. Leave at least four hours between doses and do not take "
            "more than six tablets in 24 hours. Take the tablets with or after food to reduce "
            "the risk of stomach upset. Do not give to children under 12 years. Do not take if "
            "you have ever had a stomach ulcer, if you are in the last three months of "
            "pregnancy, or if you are allergic to aspirin or other anti-inflammatory painkillers. "
            "Talk to your pharmacist before use if you have asthma, kidney or liver problems, or "
            "high blood pressure. If symptoms persist for more than three days, consult a doctor."
        ),
        "questions": [
            "What is the maximum number of tablets per day?",
            "Can I take this if I'm pregnant?",
        ],
    },
    {
        "title": "Returns and refunds",
        "source": "help.brightcart.com/returns",
        "text": (
            "Most items can be returned within 30 days of delivery for a full refund. Items must "
            "be unused, in their original packaging, and accompanied by the order number. "
            "Clearance items, gift cards, personalized products and opened software are final "
            "sale. To start a return, open Orders, choose the item and select Return. We email a "
            "prepaid shipping label within one business day; return shipping is free for members "
            "and costs $6.95 otherwise, deducted from the refund. Refunds are issued to the "
            "original payment method within 5 to 7 business days after the warehouse receives "
            "the item. Orders paid with store credit are refunded as store credit."
        ),
        "questions": [
            "Do I have to pay for return shipping?",
            "Can I return a personalized mug?",
        ],
    },
    {
        "title": "The Hanseatic League",
        "source": "Encyclopedia of Medieval Europe, vol. 2",
        "text": (
            "The Hanseatic League was a commercial and defensive confederation of merchant guilds "
            "and market towns in Central and Northern Europe. Growing from a few North German "
            "towns in the late 12th century, it came to dominate Baltic maritime trade for three "
            "centuries. Lübeck served as its de facto capital, and its main Kontore, or foreign "
            "trading posts, were in Bruges, Bergen, Novgorod and London, where the Steelyard on "
            "the Thames enjoyed tax privileges granted by the English crown. The League never had "
            "a permanent army or treasury; its diets met irregularly. Its decline in the 15th and "
            "16th centuries followed the rise of territorial states, the shift of trade routes to "
            "the Atlantic, and competition from Dutch and English merchants."
        ),
        "questions": [
            "Which city acted as the League's capital?",
            "Why did the Hanseatic League decline?",
        ],
    },
    {
        "title": "Q3 results summary",
        "source": "Norvale Foods Q3 FY2024 earnings release",
        "text": (
            "Net revenue for the third quarter was $412.6 million, up 8.4% year over year, driven "
            "by volume growth in the frozen category and price increases taken in the first "
            "half. Gross margin contracted 120 basis points to 31.2% due to higher packaging and "
            "freight costs. Operating income was $38.9 million compared with $41.7 million a year "
            "ago. The company repurchased 1.1 million shares for $27 million. Management narrowed "
            "full-year revenue guidance to $1.62 to $1.65 billion and now expects adjusted "
            "earnings per share of $2.10 to $2.18, the low end of the previous range, citing "
            "softer demand in the foodservice channel."
        ),
        "questions": [
            "Why did gross margin fall this quarter?",
            "What is the updated EPS guidance?",
        ],
    },
    {
        "title": "Sleep and memory consolidation",
        "source": "Abstract, J. Cogn. Neurosci. (2023)",
        "text": (
            "We examined whether targeted memory reactivation during slow-wave sleep improves "
            "retention of a spatial learning task. Sixty-four participants learned the locations "
            "of 48 objects, each paired with a characteristic sound. During a subsequent 90-minute "
            "nap, half of the sounds were replayed at low volume during slow-wave sleep. Recall "
            "accuracy for cued objects declined by 4.1% after the nap versus 9.7% for uncued "
            "objects (p = .003). The benefit correlated with spindle density in frontal "
            "electrodes (r = .41). No effect was found when cues were presented during REM sleep. "
            "These results support an active role of slow-wave sleep in consolidating spatial "
            "memories and suggest spindles as a mechanism."
        ),
        "questions": [
            "Did cueing during REM sleep help recall?",
            "How many participants were in the study?",
        ],
    },
    {
        "title": "Early termination",
        "source": "Residential Lease Agreement, clause 18",
        "text": (
            "The Tenant may terminate this Lease before the end of the Term by giving the "
            "Landlord not less than sixty (60) days' written notice and paying an early "
            "termination fee equal to one (1) month's rent. The security deposit shall not be "
            "applied toward the termination fee. The notice period shall be waived where the "
            "Tenant is called to active military service or where the premises become "
            "uninhabitable through no fault of the Tenant. Upon termination, the Tenant shall "
            "return all keys and access devices and leave the premises in the condition required "
            "by clause 12, reasonable wear and tear excepted. Rent is payable through the last "
            "day of the notice period."
        ),
        "questions": [
            "How much notice do I need to give to break the lease early?",
            "Can my deposit cover the termination fee?",
        ],
    },
    {
        "title": "Battery and range",
        "source": "Volta Trail e-bike spec sheet",
        "text": (
            "The Volta Trail uses a 48 V, 14 Ah lithium-ion battery (672 Wh) integrated into the "
            "down tube. Typical range is 60 to 110 km depending on assist level, rider weight, "
            "terrain and temperature; in Eco mode on flat roads riders commonly exceed 100 km. "
            "A full charge from empty takes about 5.5 hours with the included 2 A charger or 3 "
            "hours with the optional 4 A fast charger. The battery is rated for 800 full cycles "
            "to 80% capacity. For storage longer than one month, keep the charge between 40% and "
            "60% and store indoors between 10 and 25 degrees Celsius. The battery can be removed "
            "with the frame key for charging indoors."
        ),
        "questions": [
            "How long does the battery take to charge with the fast charger?",
            "How should I store the battery over winter?",
        ],
    },
    {
        "title": "Europa",
        "source": "Planetary Science Notes, chapter 9",
        "text": (
            "Europa, the smallest of Jupiter's four Galilean moons, is slightly smaller than "
            "Earth's Moon. Its surface is one of the smoothest in the Solar System, a crust of "
            "water ice crisscrossed by reddish-brown fractures called lineae. Magnetometer data "
            "from the Galileo spacecraft indicate an induced magnetic field consistent with a "
            "global salty ocean beneath the ice, perhaps 60 to 150 kilometres deep. Tidal heating "
            "from Jupiter's gravity keeps this ocean liquid. Hubble observations have suggested "
            "water vapour plumes, though these remain unconfirmed. Because liquid water, "
            "chemical energy and the right elements may all be present, Europa is considered one "
            "of the most promising places to search for life beyond Earth."
        ),
        "questions": [
            "What keeps Europa's ocean from freezing?",
            "What evidence is there for an ocean under Europa's ice?",
        ],
    },
    {
        "title": "Maintaining a sourdough starter",
        "source": "The Home Baker's Guide, p. 52",
        "text": (
            "A mature starter kept at room temperature should be fed once or twice a day. Discard "
            "all but about 50 grams, then add 50 grams of flour and 50 grams of lukewarm water and "
            "stir well. The starter is ready to bake with when it has doubled in volume and a "
            "spoonful floats in water, usually four to eight hours after feeding. If you bake "
            "only weekly, store the starter in the refrigerator and feed it once a week; take it "
            "out the day before baking and give it two feedings. A layer of grey liquid, called "
            "hooch, means the starter is hungry: pour it off and feed. Pink or orange streaks "
            "indicate contamination, and the starter should be thrown away."
        ),
        "questions": [
            "How often should I feed a starter kept in the fridge?",
            "What does it mean if there's grey liquid on top?",
        ],
    },
    {
        "title": "Water damage exclusions",
        "source": "HomeShield Policy Wording, section 4(c)",
        "text": (
            "We will not pay for loss or damage caused by water escaping from any fixed water "
            "installation where the escape has been ongoing for more than 14 days, or that "
            "results from wear and tear, gradual deterioration, or failure of sealant or grout. "
            "We will not pay for damage caused by flooding to outbuildings, gates or fences. "
            "Where the home is unoccupied for more than 30 consecutive days, cover for escape of "
            "water applies only if the water supply has been turned off at the mains and the "
            "system drained. The policy excess for escape of water claims is 350 pounds. We will "
            "pay the cost of tracing and accessing the source of the leak up to 5,000 pounds."
        ),
        "questions": [
            "Am I covered for a leak if the house was empty for six weeks?",
            "What is the excess on a water leak claim?",
        ],
    },
    {
        "title": "Postmortem: checkout outage of March 4",
        "source": "Incident review INC-2291",
        "text": (
            "Between 14:02 and 14:49 UTC, roughly 38% of checkout attempts failed. The trigger "
            "was a routine configuration change that lowered the connection pool size of the "
            "payments service from 200 to 20 in production; the value had been intended for the "
            "staging environment. As traffic rose after lunch in Europe, requests queued waiting "
            "for connections and timed out after 30 seconds. Alerts fired at 14:09, but the "
            "on-call engineer first suspected the database because its latency graphs also "
            "spiked. The change was identified at 14:41 and rolled back at 14:46. Action items: "
            "require environment-specific review for pool settings, add a dashboard panel for "
            "pool saturation, and shorten the client timeout to fail fast."
        ),
        "questions": [
            "What caused the checkout outage?",
            "What action items came out of the incident?",
        ],
    },
    {
        "title": "Entry requirements",
        "source": "Ministry of Foreign Affairs travel advice: Republic of Velmora",
        "text": (
            "Visitors holding passports from EU member states, the United Kingdom, Canada and "
            "Japan may enter Velmora without a visa for stays of up to 60 days within any "
            "180-day period. Passports must be valid for at least six months beyond the date of "
            "arrival and have two blank pages. Travellers from other countries must obtain an "
            "e-visa online before departure; processing takes up to five working days and the "
            "fee is 45 euros. Overstaying is punishable by a fine of 100 euros per day and may "
            "lead to a ban on re-entry. A yellow fever vaccination certificate is required only "
            "for travellers arriving from countries with a risk of transmission."
        ),
        "questions": [
            "Do Canadians need a visa to visit Velmora?",
            "What happens if I overstay?",
        ],
    },
    {
        "title": "Coral bleaching",
        "source": "Regional Reef Health Report 2023, summary",
        "text": (
            "Surveys of 312 reefs found moderate to severe bleaching at 61% of sites, the fourth "
            "mass bleaching event in eight years. Sea surface temperatures exceeded the local "
            "bleaching threshold for up to eleven weeks in the northern sector. Bleaching is not "
            "immediately fatal; corals can recover if temperatures fall within weeks, but "
            "prolonged heat stress leads to mortality. Early follow-up surveys indicate coral "
            "mortality of 10-20% at the worst affected sites. Recovery between events has been "
            "limited because fast-growing branching corals need roughly a decade to re-establish. "
            "The report recommends reducing local stressors such as runoff and crown-of-thorns "
            "starfish outbreaks to improve resilience."
        ),
        "questions": [
            "What share of reefs showed bleaching?",
            "Do corals always die after bleaching?",
        ],
    },
    {
        "title": "Parental leave",
        "source": "Benefits Guide 2024, page 9",
        "text": (
            "Birthing parents are eligible for 16 weeks of fully paid leave, and non-birthing "
            "parents, including adoptive and foster parents, for 10 weeks. Leave must be taken "
            "within 12 months of the child's birth or placement and may be split into at most "
            "two blocks of at least two weeks each. Employees must have completed six months of "
            "service on the expected date of birth or placement. Paid leave runs concurrently "
            "with any statutory leave. A phased return, working 60% of normal hours at full pay, "
            "is available for four weeks after leave ends. Notify your manager and HR at least "
            "eight weeks before the planned start date."
        ),
        "questions": [
            "Can I split my parental leave into several parts?",
            "How much leave do adoptive parents get?",
        ],
    },
    {
        "title": "Plans and billing FAQ",
        "source": "Loopdesk pricing page",
        "text": (
            "Loopdesk offers three plans. Starter is free for up to 3 agents and includes email "
            "ticketing and a basic knowledge base. Team costs $19 per agent per month billed "
            "annually, or $24 billed monthly, and adds live chat, automations and reporting. "
            "Enterprise is priced on request and adds SSO, audit logs, a 99.9% uptime SLA and a "
            "dedicated success manager. You can upgrade at any time and the difference is "
            "prorated; downgrades take effect at the end of the billing period. Annual plans can "
            "be cancelled within 14 days for a full refund. Nonprofits receive a 30% discount on "
            "the Team plan after verification."
        ),
        "questions": [
            "What's the monthly price of the Team plan if I pay month to month?",
            "Does Loopdesk offer a discount for nonprofits?",
        ],
    },
    {
        "title": "Mitochondria",
        "source": "Introductory Cell Biology, chapter 5",
        "text": (
            "Mitochondria are membrane-bound organelles that generate most of the cell's supply "
            "of adenosine triphosphate (ATP) through oxidative phosphorylation. They have an "
            "outer membrane and a highly folded inner membrane whose folds, called cristae, "
            "increase the surface area available for the electron transport chain. Mitochondria "
            "contain their own small circular genome, inherited in most animals only from the "
            "mother, which supports the endosymbiotic theory that they descend from free-living "
            "bacteria. The number of mitochondria varies with energy demand: a liver cell may "
            "contain more than a thousand, while mature red blood cells contain none."
        ),
        "questions": [
            "Why do the inner membranes of mitochondria have folds?",
            "Do red blood cells have mitochondria?",
        ],
    },
    {
        "title": "Right of access and erasure",
        "source": "Data Protection Guidance for Small Businesses, part 3",
        "text": (
            "Individuals have the right to obtain a copy of the personal data you hold about "
            "them. You must respond without undue delay and at the latest within one month of "
            "receiving the request, extendable by two further months for complex or numerous "
            "requests, in which case you must tell the person within the first month. You cannot "
            "normally charge a fee. Individuals may also ask you to erase their data, for example "
            "when it is no longer necessary for the purpose it was collected for or when they "
            "withdraw consent. The right to erasure is not absolute: you may refuse where you "
            "must keep data to comply with a legal obligation or to defend legal claims."
        ),
        "questions": [
            "How long do we have to answer a data access request?",
            "Can we refuse a request to delete someone's data?",
        ],
    },
    {
        "title": "Product sync meeting, 12 June",
        "source": "meeting-transcript-2024-06-12.txt",
        "text": (
            "Priya: Let's start with the mobile release. Where are we on the offline mode?\n"
            "Tom: Sync conflicts are handled now, but QA found two crashes on older Android "
            "devices. I'd rather slip the release by a week than ship that.\n"
            "Priya: Agreed. New date is the 26th then. Marketing needs to know today.\n"
            "Dana: I'll tell them after this call. Also, the onboarding survey results are in: "
            "most people skip the tutorial at step two.\n"
            "Tom: Could we make the tutorial optional and show tips in context instead?\n"
            "Priya: Let's prototype that. Dana, can you own the prototype and share it by Friday?\n"
            "Dana: Yes, Friday works."
        ),
        "questions": [
            "What did the team decide about the mobile release date?",
            "Who owns the onboarding prototype and when is it due?",
        ],
    },
    {
        "title": "Customer reviews: AeroPress Go travel kettle",
        "source": "reviews export, 5 most helpful",
        "text": (
            "5 stars - Boils half a litre in under three minutes and folds flat. Perfect for "
            "camping.\n"
            "2 stars - The silicone smell did not go away even after ten boils. Returned it.\n"
            "4 stars - Great for hotels, but the cord is short and the lid is fiddly.\n"
            "5 stars - Dual voltage works fine in Europe and the US. Light enough for my "
            "backpack.\n"
            "3 stars - Works, but it's loud and the auto shut-off sometimes triggers before the "
            "water boils."
        ),
        "questions": [
            "What do reviewers complain about most?",
            "Does it work with different voltages?",
        ],
    },
    {
        "title": "Council approves protected bike lanes",
        "source": "Riverton Gazette, 3 May",
        "text": (
            "The Riverton city council voted 7-2 on Tuesday to build protected bike lanes on "
            "Harbor Avenue, ending a two-year debate. The $4.2 million project will remove 140 "
            "parking spaces, replacing some with a new public lot on Fifth Street. Business "
            "owners along the avenue had argued that lost parking would hurt sales; council "
            "member Ortiz, who voted in favour, cited a city study showing most shoppers arrive "
            "on foot or by bus. Construction is scheduled to begin in September and to be "
            "completed by next spring. The two members who voted against asked for a review of "
            "delivery zones before work starts."
        ),
        "questions": [
            "How many parking spaces will be removed?",
            "When will construction start?",
        ],
    },
    {
        "title": "Gallery 4: Textiles of the Silk Road",
        "source": "Museum audio guide script",
        "text": (
            "This gallery brings together more than 200 textiles made between the 6th and 14th "
            "centuries along the trade routes linking China, Central Asia and the Mediterranean. "
            "Look for the silk samite fragment in the central case: its paired rams in roundels "
            "are a Sogdian design, woven in Central Asia but found in a church treasury in "
            "Belgium, where it wrapped relics. The nearby Chinese damask shows how weavers "
            "adapted Persian motifs for export. Light levels in this room are kept low to protect "
            "the dyes, which fade quickly; the fragments are rotated every six months so each "
            "rests in darkness for most of the year."
        ),
        "questions": [
            "Why is the gallery kept so dark?",
            "Where was the silk samite fragment found?",
        ],
    },
    {
        "title": "Limited warranty",
        "source": "SonaBeat Pro headphones warranty card",
        "text": (
            "SonaBeat warrants this product against defects in materials and workmanship for two "
            "years from the date of original retail purchase. The battery is covered for one "
            "year. This warranty does not cover damage from accidents, liquid exposure, "
            "unauthorized repair, or normal wear of ear cushions. To make a claim, contact "
            "support with proof of purchase and the serial number found under the left ear "
            "cushion. We will repair or replace the product at our discretion; replacements are "
            "covered for the remainder of the original warranty period or 90 days, whichever is "
            "longer. This warranty is not transferable."
        ),
        "questions": [
            "Is the battery covered for two years?",
            "Where do I find the serial number?",
        ],
    },
    {
        "title": "Marie Curie",
        "source": "Biographical dictionary of scientists",
        "text": (
            "Marie Skłodowska Curie (1867-1934) was a Polish-born physicist and chemist who "
            "conducted pioneering research on radioactivity, a term she coined. With her husband "
            "Pierre Curie she discovered the elements polonium, named after her native country, "
            "and radium. She was the first woman to win a Nobel Prize, the first person to win "
            "Nobel Prizes in two scientific fields (physics in 1903, chemistry in 1911), and the "
            "first woman to become a professor at the University of Paris. During the First World "
            "War she developed mobile radiography units that served field hospitals. She died of "
            "aplastic anaemia, probably caused by long exposure to radiation."
        ),
        "questions": [
            "In which fields did Marie Curie win Nobel Prizes?",
            "What did she do during the First World War?",
        ],
    },
    {
        "title": "Re: venue for the offsite",
        "source": "email thread, 4 messages",
        "text": (
            "From: Sarah Kim\nTo: Events team\n"
            "I've shortlisted two venues. Lakeside Lodge fits 60 people, has two breakout rooms "
            "and costs 9,800 for two days including meals. The Old Mill fits 45, is closer to "
            "the office, and costs 7,200 but catering is extra, roughly 1,500.\n\n"
            "From: Marcus Lee\nWe are 52 people if everyone comes, so the Old Mill is too tight. "
            "I'd go with Lakeside.\n\n"
            "From: Sarah Kim\nFair point. I'll hold Lakeside for 18-19 September and ask them "
            "about a vegetarian menu. The deposit of 2,000 is due by the end of the month.\n\n"
            "From: Finance\nApproved, please send the invoice to ap@company.example."
        ),
        "questions": [
            "Which venue did they pick and why?",
            "When is the deposit due and how much is it?",
        ],
    },
]
