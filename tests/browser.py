"""Open an HTML file in headless Chromium (network cut off); count widgets and figures."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

SCRIPT = """
const widgets = Array.from(document.querySelectorAll('.cv-widget'));
const figs = Array.from(document.querySelectorAll('figure.interp-figure'));
return [widgets.length, widgets.filter(d => d.children.length > 0).length,
        figs.map(f => {
            const svg = f.querySelector('svg');
            const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
            const cap = f.querySelector('figcaption');
            return [f.dataset.name, r.width, r.height, cap ? cap.textContent.length : 0];
        })];
"""


@contextmanager
def browser(path: Path, chromium_paths: tuple[str, str]):
    """A headless Chromium (network cut off) with ``path`` loaded; quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chrome, driver_path = chromium_paths
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={path.parent / '.chrome'}",
        # No network: any request that is not a file:// load fails.
        "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    try:
        driver.get(path.resolve().as_uri())
        yield driver
    finally:
        driver.quit()


def requested_urls(driver) -> list[str]:
    """Every URL the browser asked for since the last call (pages, scripts, styles, images,
    fonts, workers), from Chromium's network log."""
    import json

    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def wait_for_widgets(driver, wait_s: float = 20.0) -> tuple[int, int, list]:
    """Poll until every circuitsvis widget has rendered (or ``wait_s`` passes)."""
    deadline = time.time() + wait_s
    widgets, rendered, figures = driver.execute_script(SCRIPT)
    while rendered < widgets and time.time() < deadline:
        time.sleep(0.25)
        widgets, rendered, figures = driver.execute_script(SCRIPT)
    return widgets, rendered, figures


def render_page(path: Path, chromium_paths: tuple[str, str], wait_s: float = 20.0) -> dict:
    """Load ``path``; report widgets (and how many rendered), figures, and console errors."""
    with browser(path, chromium_paths) as driver:
        widgets, rendered, figures = wait_for_widgets(driver, wait_s)
        logs = driver.get_log("browser")
    severe = [entry["message"] for entry in logs if entry["level"] == "SEVERE"]
    return {
        "widgets": widgets,
        "rendered": rendered,
        "figures": {name: (w, h, cap) for name, w, h, cap in figures},
        "severe_logs": severe,
    }
