"""Open an HTML file in headless Chromium (network cut off); count widgets and figures."""

from __future__ import annotations

import time
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


def render_page(path: Path, chromium_paths: tuple[str, str], wait_s: float = 20.0) -> dict:
    """Load ``path``; report widgets (and how many rendered), figures, and console errors."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = chromium_paths
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
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
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    try:
        driver.get(path.resolve().as_uri())
        deadline = time.time() + wait_s
        widgets, rendered, figures = driver.execute_script(SCRIPT)
        while rendered < widgets and time.time() < deadline:
            time.sleep(0.25)
            widgets, rendered, figures = driver.execute_script(SCRIPT)
        logs = driver.get_log("browser")
    finally:
        driver.quit()
    severe = [entry["message"] for entry in logs if entry["level"] == "SEVERE"]
    return {
        "widgets": widgets,
        "rendered": rendered,
        "figures": {name: (w, h, cap) for name, w, h, cap in figures},
        "severe_logs": severe,
    }
