"""The playground in a real headless browser (Debian's chromium + chromedriver, driven by
Selenium) against a real decoder (tiny SID model, its catalog file), the gateway with an API key
and an items file: load `/`, see the key refused, type the key, search items by id and by title,
add them to the history, recommend, and read the results' titles, SIDs, scores, catalog version
and latency off the page. A screenshot goes into the test's tmp_path (its path is printed).

Skipped only where no browser is installed: `make test` installs chromium and chromium-driver
with apt-get when it runs as root (or with sudo). Every wait is bounded by a count of generous
seconds, never by how fast the machine is."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services.gateway.items_support import (
    ITEMS_KEY,
    titles_and_gateway,  # noqa: F401 (fixture)
)
from tests.services.gateway.support import GatewayServer

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is a dev extra")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

Gateway = tuple[dict[str, str], GatewayServer]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WAIT_S = 120  # a hang guard: start-up and first requests on a busy 2-core machine
SID = re.compile(r"^\d+,\d+,\d+$")


def _browser() -> tuple[str, str]:
    browser = next((found for b in BROWSERS if (found := shutil.which(b))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip(
            "no headless browser here (chromium and chromedriver are not on PATH): `make test` "
            "installs Debian's chromium and chromium-driver when it runs as root or with sudo"
        )
    return browser, driver


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    binary, driver_path = _browser()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'profile'}"):  # fmt: skip
        options.add_argument(flag)
    # An explicit driver path: Selenium's own driver download (selenium-manager) is never used.
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: WebDriver, what: str, condition: object) -> object:
    def check(d: WebDriver) -> object:
        try:
            return condition(d)  # type: ignore[operator]
        except StaleElementReferenceException:  # the list was redrawn meanwhile
            return False

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.2).until(check, f"waiting for {what}")


def rows(driver: WebDriver, css: str) -> list[tuple[str, list[str]]]:
    """(data-item-id, cell texts) of the rows matched by `css`."""
    found = []
    for row in driver.find_elements(By.CSS_SELECTOR, css):
        cells = row.find_elements(By.CSS_SELECTOR, "td, span")
        found.append((row.get_attribute("data-item-id") or "", [c.text for c in cells]))
    return found


def search(driver: WebDriver, text: str) -> None:
    box = driver.find_element(By.ID, "search")
    box.clear()
    box.send_keys(text)


def add_from_search(driver: WebDriver, item_id: str) -> None:
    selector = f'#search-results li[data-item-id="{item_id}"] button'
    wait_for(driver, f"{item_id} in the search results",
             lambda d: d.find_elements(By.CSS_SELECTOR, selector))  # fmt: skip
    driver.find_element(By.CSS_SELECTOR, selector).click()
    in_history = f'#history li[data-item-id="{item_id}"]'
    wait_for(driver, f"{item_id} in the history",
             lambda d: d.find_elements(By.CSS_SELECTOR, in_history))  # fmt: skip


def test_search_pick_and_recommend(
    browser: WebDriver,
    titles_and_gateway: Gateway,  # noqa: F811
    tmp_path: Path,
) -> None:
    titles, gateway = titles_and_gateway
    driver = browser
    driver.get(gateway.url + "/")
    status = driver.find_element(By.ID, "status")
    wait_for(driver, "the gateway status", lambda d: status.text.startswith("ready"))
    assert "catalogs: default (version " in status.text

    # Without the key the page's first search is refused, and the page says so.
    wait_for(driver, "the refused search",
             lambda d: "401" in d.find_element(By.ID, "search-results").text)  # fmt: skip
    driver.find_element(By.ID, "api-key").send_keys(ITEMS_KEY)

    # By id prefix: the matches in id order, each with its title.
    search(driver, "item-4")
    first_page = sorted(i for i in titles if i.startswith("item-4"))[:10]
    wait_for(driver, "the id matches",
             lambda d: [i for i, _ in rows(d, "#search-results li")] == first_page)  # fmt: skip
    assert all(cells[1] == titles[i] for i, cells in rows(driver, "#search-results li"))
    add_from_search(driver, "item-4")

    # By title, case-insensitively.
    search(driver, "violet mead")
    wanted = [i for i, t in titles.items() if "violet mead" in t.lower()][:2]
    add_from_search(driver, wanted[0])
    add_from_search(driver, wanted[1])
    history = [item_id for item_id, _ in rows(driver, "#history li")]
    assert history == ["item-4", *wanted]

    # Controls, then recommend.
    for field, value in (("n", "5"), ("beam-width", "16")):
        box = driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    driver.find_element(By.ID, "recommend").click()
    wait_for(driver, "the recommendations", lambda d: len(rows(d, "#results tbody tr")) == 5)
    results = rows(driver, "#results tbody tr")
    for rank, (item_id, cells) in enumerate(results, 1):
        number, shown_id, title, sid, score = cells[:5]
        assert (number, shown_id, title) == (str(rank), item_id, titles[item_id])
        assert SID.match(sid), sid
        assert float(score) <= 0.0
    assert not set(history) & {item_id for item_id, _ in results}  # the history is excluded
    scores = [float(cells[4]) for _, cells in results]
    assert scores == sorted(scores, reverse=True)
    meta = driver.find_element(By.ID, "result-meta").text
    assert re.search(r"catalog default version \S+", meta), meta
    assert "beam width 16" in meta and re.search(r"latency [\d.]+ ms", meta), meta
    assert not driver.find_element(By.ID, "error").is_displayed()

    shot = tmp_path / "playground.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    print(f"playground screenshot: {shot}")

    # The key and the history are kept in this browser: a reload shows them again.
    driver.refresh()
    wait_for(driver, "the kept history", lambda d: len(rows(d, "#history li")) == 3)
    assert driver.find_element(By.ID, "api-key").get_attribute("value") == ITEMS_KEY
    stored = driver.execute_script("return localStorage.getItem('widebeam.playground.apiKey')")
    assert stored == ITEMS_KEY
