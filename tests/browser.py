"""Open an HTML file in headless Chromium (network disabled) and inspect the widgets."""

from __future__ import annotations

import time
from pathlib import Path


def render_page(path: Path, chromium_paths: tuple[str, str], wait_s: float = 20.0) -> dict:
    """Load ``path`` and report how many circuitsvis widgets produced DOM, and console errors."""
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
        script = (
            "return [document.querySelectorAll('.cv-widget').length, "
            "Array.from(document.querySelectorAll('.cv-widget'))"
            ".filter(d => d.children.length > 0).length];"
        )
        deadline = time.time() + wait_s
        widgets, rendered = driver.execute_script(script)
        while rendered < widgets and time.time() < deadline:
            time.sleep(0.25)
            widgets, rendered = driver.execute_script(script)
        logs = driver.get_log("browser")
    finally:
        driver.quit()
    severe = [entry["message"] for entry in logs if entry["level"] == "SEVERE"]
    return {"widgets": widgets, "rendered": rendered, "severe_logs": severe}
