"""The offline report: bundle inlined once, widgets render in a real headless Chromium."""

import numpy as np
import pandas as pd
import pytest

from interp import InterpError
from interp.outputs.render import Report


def _report(n_widgets=3):
    r = Report("t")
    r.table(pd.DataFrame({"layer": [0], "head": [1], "label": ["L0H1"], "score": [0.5]}))
    for _ in range(n_widgets):
        r.attention(["a", "b", "c"], np.tril(np.ones((2, 3, 3))) / 3, head_names=["x", "y"])
    return r


def test_bundle_once_and_size_grows_slowly():
    one, five = _report(1).to_html(), _report(5).to_html()
    assert five.count("var CircuitsVis") == 1
    assert len(five) - len(one) < 10_000  # widgets cost bytes, not another 1.3 MB bundle


def test_bad_pattern_shape():
    with pytest.raises(InterpError, match=r"expected \[head, 2, 2\]"):
        Report("t").attention(["a", "b"], np.ones((1, 3, 3)))


def test_write_checks_its_folder(tmp_path):
    path = _report(1).write(tmp_path / "r.html")
    assert path.read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(InterpError, match="does not exist"):
        _report(1).write(tmp_path / "missing" / "r.html")


@pytest.mark.browser
def test_widgets_and_figures_render_offline_in_chromium(tmp_path, chromium_paths):
    from browser import render_page

    from interp.outputs.figures import lines

    report = _report(3)
    report.figure(lines([0, 1], {"a": [1.0, 2.0]}, xlabel="x", ylabel="y", caption="A line."), "f1")
    path = report.write(tmp_path / "r.html")
    result = render_page(path, chromium_paths)
    assert result["widgets"] == 3
    assert result["rendered"] == 3, result
    w, h, caption = result["figures"]["f1"]
    assert w > 100 and h > 100 and caption == len("A line.")
    assert result["severe_logs"] == [], result["severe_logs"]


def test_report_displays_in_notebooks_as_an_iframe():
    import html as html_lib

    from interp.outputs.render import Report

    report = Report("x").attention(["a", "b"], [[1.0, 0.0], [0.5, 0.5]])
    frame = report._repr_html_()
    assert frame.startswith("<iframe srcdoc=")
    assert html_lib.unescape(frame[len('<iframe srcdoc="') :].split('" style=')[0]) == (
        report.to_html()
    )
