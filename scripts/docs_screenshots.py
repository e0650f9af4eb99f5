"""The console's screenshots in the manual (docs/operating/img/), taken by a real browser.

The same rig as the browser tests (tests/integration/test_console.py): four simulated vLLM
backends (plain, n-gram, EAGLE-3 and an EAGLE-3 canary candidate), a gateway with shadow
verification at rate 1 and a canary, steady load of every prompt class, and Debian's
chromium driven by Playwright (no browser download). Run from the repository root:

    .venv/bin/python scripts/docs_screenshots.py

It rewrites the PNGs in place; review them and commit.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from proxy.settings import Settings  # noqa: E402
from tests.console_rig import Load, fleet_policy, sim_fleet  # noqa: E402
from tests.gateway_rig import run_gateway, write_policy  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
OUT = ROOT / "docs" / "operating" / "img"
VIEWPORT = {"width": 1280, "height": 900}


def shoot(page: Page, name: str) -> None:
    # The visible window, not the full page: the top of each view is what the manual shows.
    page.screenshot(path=str(OUT / f"{name}.png"))
    print(f"wrote {(OUT / f'{name}.png').relative_to(ROOT)}")


def tour(url: str) -> None:
    """Each view once the fleet's figures are in it, as the browser tests wait for them."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
        page.goto(url + "/ui/fleet")
        expect(page.locator("#card-eagle3 canvas")).to_have_count(1)
        expect(page.locator("#status")).to_contain_text("updated")
        shoot(page, "fleet")

        page.goto(url + "/ui/traffic")
        expect(page.locator("#rate-chart canvas")).to_have_count(1)
        shoot(page, "traffic")
        page.select_option("#explain-class", "code")
        page.click("#explain-form button[type=submit]")
        expect(page.locator("#explain-result")).to_contain_text("eagle3-0")
        page.locator("#explain-result").scroll_into_view_if_needed()
        shoot(page, "explain")

        page.goto(url + "/ui/verification")
        expect(page.locator("#mismatches .mismatch").first).to_contain_text("diverged")
        shoot(page, "verification")

        page.goto(url + "/ui/canary")
        expect(page.locator("#canary-summary")).to_contain_text("running")
        shoot(page, "canary")

        page.goto(url + "/ui/policy")
        editor = page.locator("#policy-editor")
        expect(editor).to_have_value(re.compile("console-test"))
        text = editor.input_value()
        editor.fill(text.replace("concurrency: 48", "concurrency: 40"))
        page.click("#policy-validate")
        expect(page.locator("#policy-diff .add")).to_contain_text(["concurrency: 40"])
        shoot(page, "policy")
        browser.close()


def main() -> int:
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} is missing: apt-get install chromium", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    with sim_fleet() as sims, tempfile.TemporaryDirectory() as tmp:
        # Real drift on the baseline head, so the verification view has mismatches to show.
        httpx.post(
            sims["eagle3-0"].url + "/admin/faults", json={"drift_from_token": 4}
        ).raise_for_status()
        path = write_policy(Path(tmp) / "policy.yaml", fleet_policy(sims))
        settings = Settings(policy_path=path, port=0, watch_policy=False)
        with run_gateway(settings) as gw, Load(gw.url) as load:
            gw.wait_for(lambda: load.sent >= 120, 60, "some traffic")
            tour(gw.url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
