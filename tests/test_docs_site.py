"""The documentation site: it builds with ``--strict`` (no broken link, anchor or reference),
fetches nothing from the web, follows the code it is generated from, and its pages render
in a real headless Chromium with the network cut off."""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IN_CI, ROOT

# Tags whose src / href a browser fetches (an <a href> is a plain link, not fetched).
FETCHED = re.compile(
    r"<(?:script|link|img|iframe|source|audio|video|embed|object|track)\b[^>]*?"
    r"\b(?:src|href|data|srcset)\s*=\s*[\"']?\s*(?:https?:)?//",
    re.I,
)
CSS_FETCHED = re.compile(r"(?:url\(\s*[\"']?|@import\s+[\"'])\s*(?:https?:)?//", re.I)
REMOTE = ("http:", "https:", "ws:", "wss:", "ftp:")  # the rest stays on the machine


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``mkdocs build --strict`` of this checkout into a temporary folder, once."""
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        msg = "the docs extra is not installed (pip install -e '.[docs]')"
        if IN_CI:
            pytest.fail(msg + "; make test's setup installs it with dev")
        pytest.skip(msg)
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert "WARNING" not in run.stderr, run.stderr[-4000:]
    return out


def test_the_site_references_nothing_a_browser_would_fetch_from_the_web(site):
    fetched = []
    for path in site.rglob("*"):
        if path.suffix in {".html", ".css"}:
            text = path.read_text(encoding="utf-8")
            pattern = FETCHED if path.suffix == ".html" else CSS_FETCHED
            name = path.relative_to(site)
            fetched += [f"{name}: {m.group(0)[:120]}" for m in pattern.finditer(text)]
    assert not fetched, fetched
    assert (site / "index.html").is_file() and (site / "search" / "search_index.js").is_file()


def test_the_generated_pages_follow_the_code(site):
    """The reference has every public analysis, the vocabulary every word of the glossary,
    the command line every command's help, the labs every notebook."""
    import interp.analysis
    from interp.cli import build_parser
    from interp.core.glossary import words

    ids = set()
    for page in (site / "reference").glob("*.html"):
        ids |= set(re.findall(r'id="(interp\.[\w.]+)"', page.read_text(encoding="utf-8")))
    missing = [n for n in interp.analysis.__all__ if not any(i.endswith(f".{n}") for i in ids)]
    assert not missing, f"public analyses without a reference entry: {missing}"

    vocabulary = (site / "vocabulary.html").read_text(encoding="utf-8")
    assert all(f"<code>{w}</code>" in vocabulary for w in words())

    cli = (site / "cli.html").read_text(encoding="utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert all(f"usage: interp {name}" in cli for name in commands)

    for notebook in (ROOT / "labs").glob("*.ipynb"):
        page = (site / "labs" / f"{notebook.stem}.html").read_text(encoding="utf-8")
        cells = json.loads(notebook.read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code" and "".join(c["source"]).strip()]
        title = "".join(cells[0]["source"]).splitlines()[0].removeprefix("# ")
        assert f">{html.escape(title, quote=False)}" in page, notebook.name
        assert page.count('<div class="highlight">') == len(code), notebook.name


FRONT = """
return [document.querySelector('h1').textContent.trim(),
        Array.from(document.querySelectorAll('h2')).map(h => h.textContent.trim()),
        document.querySelectorAll('table tbody tr a[href]').length,
        Array.from(document.images).map(i => [i.getAttribute('src'), i.naturalWidth])];
"""
FUNCTION = """
const h = Array.from(document.querySelectorAll('h3.doc-heading'))
  .find(e => e.id.endsWith('.qk_attribution'));
if (!h) return null;
let sig = h.nextElementSibling;
while (sig && !sig.matches('.doc-signature')) sig = sig.nextElementSibling;
const body = h.parentElement.querySelector('.doc-contents');
return [h.id, sig ? sig.textContent : '', body ? body.textContent : '',
        body ? body.querySelectorAll('table').length : 0,
        sig ? sig.getBoundingClientRect().height : 0];
"""


@pytest.mark.browser
def test_the_front_page_and_an_api_page_render_offline_in_chromium(site, chromium_paths):
    from browser import browser, requested_urls

    with browser(site / "index.html", chromium_paths) as driver:
        title, sections, linked_rows, images = driver.execute_script(FRONT)
        front_requests = requested_urls(driver)
        front_logs = driver.get_log("browser")
        driver.get((site / "reference" / "heads.html").as_uri())
        function = driver.execute_script(FUNCTION)
        api_requests = requested_urls(driver)
        api_logs = driver.get_log("browser")

    assert title.startswith("interp")
    assert {"Quickstart", "Where to go next"} <= {s.rstrip("¶") for s in sections}, sections
    assert linked_rows >= 10  # every question links to its page
    assert images and all(width > 0 for _, width in images), images  # the figure loaded

    assert function is not None, "no qk_attribution entry on the heads reference page"
    anchor, signature, body, tables, height = function
    assert anchor.startswith("interp.analysis.heads.")
    assert "qk_attribution(" in signature and "model" in signature and "layer" in signature
    assert height > 20  # the signature is rendered, not an empty box
    assert "InterpError" in body and tables >= 1  # the Raises section, as a table

    for requests in (front_requests, api_requests):
        assert any(u.startswith("file:") and u.endswith(".css") for u in requests), requests
        assert not [u for u in requests if u.startswith(REMOTE)], requests
    severe = [e["message"] for e in front_logs + api_logs if e["level"] == "SEVERE"]
    assert not severe, severe
