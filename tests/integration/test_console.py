"""The console in a real browser (Debian's chromium, driven by Playwright) against a gateway
over a simulated fleet under load: every view shows the fleet's own names and figures, and
the buttons change what the admin API reports. Screenshots go to tests/artifacts/console/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from proxy.settings import Settings
from proxy.sim.server import SimServer
from tests.console_rig import Load, fleet_policy, sim_fleet
from tests.gateway_rig import GatewayHandle, run_gateway, write_policy

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "console"
BACKENDS = ("plain-0", "ngram-0", "eagle3-0", "eagle3-v2")
PERCENT = re.compile(r"\d+\.\d%")


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimServer]]:
    with sim_fleet() as fleet:
        # Real drift on the baseline head, so the verification view has mismatches to align.
        httpx.post(
            fleet["eagle3-0"].url + "/admin/faults", json={"drift_from_token": 4}
        ).raise_for_status()
        yield fleet


@pytest.fixture(scope="module")
def gw(
    sims: dict[str, SimServer], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayHandle]:
    path = write_policy(tmp_path_factory.mktemp("console") / "policy.yaml", fleet_policy(sims))
    with run_gateway(Settings(policy_path=path, port=0, watch_policy=False)) as handle:
        with Load(handle.url) as load:
            handle.wait_for(lambda: load.sent >= 60, 30, "some traffic")
            yield handle
        assert load.failed == 0


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test.sh installs Debian's chromium")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()
    assert not errors, errors


def shoot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_fleet_view_shows_every_backend_acceptance_and_break_even(
    gw: GatewayHandle, page: Page
) -> None:
    page.goto(gw.url + "/ui")
    expect(page).to_have_url(re.compile("/ui/fleet$"))
    backends = page.locator("#backends table")
    for name in BACKENDS:
        expect(backends).to_contain_text(name)
    expect(backends).to_contain_text("healthy")
    expect(backends).to_contain_text("eagle3 k=3 (v2)")
    acceptance = page.locator("#acceptance table")
    expect(acceptance).to_contain_text("eagle3-0")
    expect(acceptance).to_contain_text(PERCENT)
    for pool in ("eagle3", "ngram"):
        card = page.locator(f"#card-{pool}")
        expect(card).to_contain_text("break-even")
        expect(card).to_contain_text("current concurrency")
        expect(card.locator("canvas")).to_have_count(1)
    expect(page.locator("#card-ngram")).to_contain_text("48.0 (static)")
    expect(page.locator("#card-eagle3 .u-legend")).to_contain_text("eagle3 TPOT (ms)")
    # The admission queue's line and table (empty: nothing queued on this light load).
    expect(page.locator("#queue-summary")).to_contain_text("waiting")
    expect(page.locator("#queue")).to_contain_text("nothing has queued")
    expect(page.locator("#status")).to_contain_text("updated")
    shoot(page, "fleet")


def test_traffic_view_and_explain(gw: GatewayHandle, page: Page) -> None:
    page.goto(gw.url + "/ui/traffic")
    traffic = page.locator("#traffic table")
    for label in ("chat", "code", "rag"):
        expect(traffic).to_contain_text(label)
    expect(traffic).to_contain_text(re.compile(r"\d+(\.\d+)? ms"))
    recent = page.locator("#recent table")
    expect(recent).to_contain_text("break-even")
    expect(recent.locator("tbody tr")).to_have_count(50)
    expect(page.locator("#rate-chart canvas")).to_have_count(1)
    page.select_option("#explain-class", "rag")
    page.click("#explain-form button[type=submit]")
    result = page.locator("#explain-result")
    expect(result).to_contain_text("rag (overridden)")
    for name in BACKENDS:
        expect(result).to_contain_text(name)
    shoot(page, "traffic")


def test_verification_view_reviews_and_labels_mismatches(gw: GatewayHandle, page: Page) -> None:
    page.goto(gw.url + "/ui/verification")
    groups = page.locator("#shadow-groups table")
    expect(groups).to_contain_text("eagle3-0")
    expect(groups).to_contain_text("100.0%")  # eagle3-0 drifts on every sample
    expect(groups).to_contain_text(re.compile(r"(numerics_differ|within_floor|insufficient)"))
    expect(groups).to_contain_text(re.compile(r"floor \d+\.\d% \((prior|control)\)"))
    expect(page.locator("#shadow-meta")).to_contain_text("plain")
    first = page.locator("#mismatches .mismatch").first
    expect(first).to_contain_text("diverged")
    expect(first).to_contain_text("eagle3-0")
    expect(first).to_contain_text("common prefix 4 tokens")
    expect(first).to_contain_text("unlabeled")
    record_id = first.get_attribute("data-id")
    assert record_id
    card = page.locator(f'#mismatches .mismatch[data-id="{record_id}"]')
    expect(card.locator("code.id")).to_contain_text(record_id)
    # Both continuations shown from the same column, as the review API aligned them.
    case = httpx.get(gw.url + f"/admin/shadow/review/{record_id}").json()
    primary, reference = case["aligned"]["primary"], case["aligned"]["reference"]
    assert primary != reference
    expect(card.locator(".diff-a")).to_have_text(primary or "(ends)")
    expect(card.locator(".diff-b")).to_have_text(reference or "(ends)")
    if case["top_logprobs"]:
        expect(card.locator(".topk .tok")).to_have_count(len(case["top_logprobs"]))
    shoot(page, "verification")

    # The note holds the list still; drift labels the case through the review API.
    card.locator("input.note").fill("real change after token 4")
    card.locator("button[data-label=drift]").click()
    expect(card.locator(".review-label")).to_contain_text("drift")
    stored = httpx.get(gw.url + f"/admin/shadow/review/{record_id}").json()
    assert stored["label"]["label"] == "drift"
    assert stored["label"]["by"] == "console"
    assert stored["label"]["note"] == "real change after token 4"
    # The drift filter lists exactly the labelled case, label and note shown.
    page.select_option("#review-filter", "drift")
    labelled = page.locator("#mismatches .mismatch")
    expect(labelled).to_have_count(1)
    expect(labelled).to_have_attribute("data-id", record_id)
    expect(labelled.locator(".review-label")).to_contain_text("drift by console")
    expect(labelled.locator(".review-label")).to_contain_text("real change after token 4")
    expect(groups).to_contain_text("drift 1")
    shoot(page, "verification-labelled")


def test_an_older_refresh_answering_last_does_not_redraw_the_review_list(
    gw: GatewayHandle, page: Page
) -> None:
    """The poll, a label sent and a filter changed each refresh the list; when the answer of
    an older refresh (another filter) arrives last it is dropped, not drawn over the newer."""
    unlabeled = httpx.get(gw.url + "/admin/shadow/review?label=unlabeled&limit=1").json()
    record_id = unlabeled["mismatches"][0]["id"]
    httpx.post(
        gw.url + f"/admin/shadow/review/{record_id}/label",
        json={"label": "noise", "by": "race", "note": ""},
    ).raise_for_status()
    held: list[Route] = []
    hold_every_list = False

    def hold(route: Route) -> None:
        if hold_every_list or "label=any" in route.request.url:
            held.append(route)
        else:
            route.continue_()

    page.route("**/admin/shadow/review?*", hold)
    page.goto(gw.url + "/ui/verification")
    for _ in range(50):  # the first refresh asks for every mismatch
        if held:
            break
        page.wait_for_timeout(100)
    assert held, "the view never asked for the unfiltered list"
    page.select_option("#review-filter", "noise")
    noise = httpx.get(gw.url + "/admin/shadow/review?label=noise&limit=20").json()["mismatches"]
    cards = page.locator("#mismatches .mismatch")
    expect(cards).to_have_count(len(noise))
    # No later poll may redraw the list from here on: the older, unfiltered answers arrive
    # last, and are given time to draw.
    hold_every_list = True
    for route in [r for r in held if "label=any" in r.request.url]:
        with page.expect_response(lambda r: "label=any" in r.url):
            route.continue_()
    page.wait_for_timeout(1000)
    expect(cards).to_have_count(len(noise))
    for card in cards.all():
        expect(card.locator(".review-label")).to_contain_text("noise")


def test_canary_buttons_promote_then_roll_back(gw: GatewayHandle, page: Page) -> None:
    page.goto(gw.url + "/ui/canary")
    summary = page.locator("#canary-summary")
    expect(summary).to_contain_text("eagle3-v2")
    expect(summary).to_contain_text("running")
    expect(page.locator("#canary-ramp .step.current")).to_contain_text("25.0%")
    expect(page.locator("#canary-evidence")).to_contain_text("candidate requests")
    expect(page.locator("#canary-evidence")).to_contain_text("drift interval")
    expect(page.locator("#canary-evidence")).to_contain_text(
        re.compile("drift: (pass|fail|not enough data)")
    )
    expect(page.locator("#canary-evidence")).not_to_contain_text("object")
    shoot(page, "canary")

    page.click("#canary-buttons button[data-action=promote]")
    expect(page.locator("#canary-message")).to_contain_text("canary now promoted")
    assert httpx.get(gw.url + "/admin/canary").json()["state"] == "promoted"
    expect(page.locator("#canary-buttons button[data-action=promote]")).to_be_disabled()

    page.click("#canary-buttons button[data-action=rollback]")
    expect(page.locator("#canary-message")).to_contain_text("canary now rolled_back")
    report = httpx.get(gw.url + "/admin/canary").json()
    assert report["state"] == "rolled_back"
    assert [h["action"] for h in report["history"][:2]] == ["rollback", "promote"]
    history = page.locator("#canary-history table")
    expect(history).to_contain_text("operator")
    expect(history.locator("tbody tr")).to_have_count(2)
    shoot(page, "canary-rolled-back")


def test_policy_editor_validates_diffs_applies_and_rolls_back(
    gw: GatewayHandle, page: Page
) -> None:
    before = httpx.get(gw.url + "/admin/policy").json()["digest"]
    page.goto(gw.url + "/ui/policy")
    editor = page.locator("#policy-editor")
    expect(editor).to_have_value(re.compile("console-test"))
    text = editor.input_value()

    editor.fill("backends: 3\n")
    page.click("#policy-validate")
    expect(page.locator("#policy-message")).to_contain_text(
        "backends: Input should be a valid list"
    )
    expect(page.locator("#policy-message li")).to_have_count(1)
    expect(page.locator("#policy-apply")).to_be_disabled()

    editor.fill(text.replace("concurrency: 48", "concurrency: 40"))
    page.click("#policy-validate")
    expect(page.locator("#policy-diff .del")).to_contain_text(["concurrency: 48"])
    expect(page.locator("#policy-diff .add")).to_contain_text(["concurrency: 40"])
    expect(page.locator("#policy-message")).to_have_text(re.compile(r"^valid: [0-9a-f]{12}$"))
    shoot(page, "policy-diff")
    assert httpx.get(gw.url + "/admin/policy").json()["digest"] == before  # a dry run
    page.click("#policy-apply")
    expect(page.locator("#policy-message")).to_contain_text("applied")
    pools = httpx.get(gw.url + "/admin/break-even").json()["pools"]
    assert {p["pool"]: p["threshold"] for p in pools}["ngram"] == 40

    page.click("#policy-rollback")
    expect(page.locator("#policy-message")).to_contain_text("rolled back")
    assert httpx.get(gw.url + "/admin/policy").json()["digest"] == before
    expect(editor).to_have_value(re.compile("concurrency: 48"))
    shoot(page, "policy")


def test_console_is_guarded_like_the_admin_api(
    sims: dict[str, SimServer], tmp_path: Path, browser: Browser
) -> None:
    """With a token set, /ui refuses anonymous requests; the sign-in form's cookie opens it."""
    path = write_policy(tmp_path / "p.yaml", fleet_policy(sims, canary=False))
    settings = Settings(policy_path=path, port=0, admin_token="s3cret", watch_policy=False)
    with run_gateway(settings) as handle:
        assert httpx.get(handle.url + "/ui/fleet").status_code == 401
        assert httpx.get(handle.url + "/ui/static/console.js").status_code == 401
        bearer = {"authorization": "Bearer s3cret"}
        assert httpx.get(handle.url + "/ui/fleet", headers=bearer).status_code == 200
        context = browser.new_context()
        page = context.new_page()
        page.goto(handle.url + "/ui/login")
        page.fill("input[name=token]", "wrong")
        page.click("button[type=submit]")
        expect(page.locator("body")).to_contain_text("not the admin token")
        page.fill("input[name=token]", "s3cret")
        page.click("button[type=submit]")
        expect(page.locator("#backends table")).to_contain_text("plain-0")
        cookie = next(c for c in context.cookies() if c["name"] == "specroute_admin")
        assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
        context.close()
