"""``interp atlas``: the page (opened in the real headless Chromium), the table, bad input."""

import pandas as pd
import pytest

from interp.cli import main


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("atlas")
    page, table = out / "atlas.html", out / "atlas.csv"
    assert main(["atlas", "--out", str(page), "--table", str(table), "--batch", "4"]) == 0
    return page, table


def test_the_table_and_the_page(written, capsys):
    page, table = written
    df = pd.read_csv(table)
    assert list(df.columns[:5]) == ["layer", "head", "label", "role", "roles"]
    roles = df.set_index("label")["role"]
    assert roles["L0H1"] == "previous-token" and roles["L1H1"] == "induction"
    assert (table.parent / "atlas.meta.json").is_file()
    text = page.read_text()
    assert text.count('class="atlas-cell"') == 4 and text.count("<script>") >= 2
    # the header counts the heads per role, before the grid
    counts = text.split('<table class="atlas-counts">')[1].split("</table>")[0]
    assert text.index("atlas-counts") < text.index('class="atlas-grid"')
    for role in ("previous-token", "induction", "none"):
        n = int((df["role"] == role).sum())
        assert f'<tr data-role="{role}"><td>{role}</td><td>{n}</td>' in counts, counts
    assert "effect-size floor" in text
    assert "cdn" not in text.split("<body>")[1].lower()  # self-contained: nothing fetched


@pytest.mark.browser
def test_the_page_renders_its_grid_and_a_heads_detail(written, chromium_paths):
    from browser import browser, wait_for_widgets

    page, _ = written
    with browser(page, chromium_paths) as driver:
        widgets, rendered, figures = wait_for_widgets(driver)
        assert widgets == rendered == 4  # one attention view per head of the 2 x 2 model
        cells = driver.execute_script(
            "return Array.from(document.querySelectorAll('td.atlas-cell')).map(td => "
            "[td.dataset.label, td.dataset.role, getComputedStyle(td).backgroundColor, "
            "td.getBoundingClientRect().width])"
        )
        assert len(cells) == 4 and all(w > 10 for *_, w in cells)
        colour = {label: bg for label, _, bg, _ in cells}
        assert colour["L0H1"] != colour["L1H1"]  # previous-token and induction differ
        driver.find_element("css selector", 'td[data-label="L1H1"] a').click()
        shown = driver.execute_script(
            "const s = document.querySelector('section.atlas-head:target');"
            "const r = s.getBoundingClientRect();"
            "return [s.id, r.top, r.height, s.querySelector('.cv-widget').children.length,"
            " s.querySelector('figure svg').getBoundingClientRect().width];"
        )
        label, top, height, widget_children, figure_width = shown
        assert label == "L1H1" and abs(top) < 5 and height > 200  # scrolled to it
        assert widget_children > 0 and figure_width > 100
        logs = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert logs == []
    assert {n for n, w, h, cap in figures if w > 100 and h > 50 and cap > 20} == {
        f"L{l}H{h}-kernel" for l in range(2) for h in range(2)
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--out", "{d}/a.svg"], "must end in .html"),
        (["--out", "{d}/a.html", "--table", "{d}/t.txt"], "unknown output extension"),
        (["--out", "{d}/a.html", "--table", "{d}/a.html"], "would write the same file"),
        (["--out", "{d}/a.html", "--heads", "L1X"], "is not of the form"),
        (["--out", "{d}/a.html", "--heads", "L9H0"], "layer 9 out of range"),
        (["--out", "{d}/a.html", "--model", "{d}/nothing"], "not found"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    argv = [a.format(d=tmp_path) for a in argv]
    assert main(["atlas", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not any(tmp_path.iterdir())


def test_usage_errors_are_one_line(capsys):
    for argv, message in (
        (["atlas", "--out", "a.html", "--seed", "-1"], "seed must be in"),
        (["atlas", "--out", "a.html", "--batch", "0"], "must be >= 1"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
