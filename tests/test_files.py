"""Atomic writes: a killed writer leaves the old file; a lab swaps in a complete folder or none."""

import os
import subprocess
import sys

import pytest

from interp import InterpError
from interp.outputs.files import LAB_MARKER, atomic_dir, check_output_dir, write_text

KILLED = """
import sys, time
from interp.outputs.files import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text("new, half written")
    print("writing", flush=True)
    time.sleep(60)
"""


def test_a_writer_killed_mid_write_leaves_the_old_file(tmp_path):
    target = tmp_path / "table.csv"
    target.write_text("old and complete")
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "writing"
    proc.kill()
    proc.wait()
    assert target.read_text() == "old and complete"


def test_atomic_dir_swaps_in_a_complete_folder(tmp_path):
    out = tmp_path / "reports" / "lab"
    with atomic_dir(out, marker={"lab": "x"}) as tmp:
        (tmp / "a.csv").write_text("1")
        assert not out.exists()  # nothing visible until the folder is complete
    assert sorted(p.name for p in out.iterdir()) == ["a.csv", LAB_MARKER]
    with atomic_dir(out) as tmp:
        (tmp / "b.csv").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["b.csv", LAB_MARKER]
    assert [p.name for p in out.parent.iterdir()] == ["lab"]  # no temporary siblings left


def test_a_failed_run_keeps_the_old_output_and_leaves_no_empty_folders(tmp_path):
    out = tmp_path / "lab"
    with atomic_dir(out) as tmp:
        (tmp / "old.csv").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(out) as tmp:
            (tmp / "new.csv").write_text("new")
            raise KeyboardInterrupt
    assert sorted(p.name for p in out.iterdir()) == [LAB_MARKER, "old.csv"]
    fresh = tmp_path / "deep" / "er" / "lab"
    with pytest.raises(RuntimeError):
        with atomic_dir(fresh):
            raise RuntimeError("failed")
    assert not (tmp_path / "deep").exists()


def test_a_folder_of_the_users_files_is_never_replaced(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    with pytest.raises(InterpError, match="holds no earlier interp lab output"):
        with atomic_dir(mine):
            pass
    assert (mine / "thesis.tex").read_text() == "precious"


def test_output_checks_before_any_work(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InterpError, match="is a file"):
        check_output_dir(tmp_path / "f")
    with pytest.raises(InterpError, match="lies under the file"):
        check_output_dir(tmp_path / "f" / "sub")
    with pytest.raises(InterpError, match="not writable"):
        check_output_dir("/proc/interp-out")
    assert not (tmp_path / "new").exists()
    check_output_dir(tmp_path / "new" / "deeper")
    assert not (tmp_path / "new").exists()  # checking creates nothing
    path = write_text(tmp_path / "w.txt", "ok")
    assert path.read_text() == "ok" and oct(os.stat(path).st_mode & 0o777) != "0o600"


LAB = """
import sys, time, types
import pandas as pd
from interp.outputs.figures import lines
from interp.experiments.writer import write_lab
from interp.outputs.render import Report

def tables(f):
    return {f"t{i}": pd.DataFrame({"layer": [0], "head": [i], "value": [f]}) for i in range(3)}

lab = types.SimpleNamespace(
    NAME="tiny", tables=tables, summary=lambda f: [],
    figures=lambda f: {"p": lines([0, 1], {"a": [0.0, f]}, xlabel="x", ylabel="y", caption="c")},
    report=lambda f: Report("tiny").text(str(f)),
)
if len(sys.argv) > 2:  # interrupted after the first table
    import interp.outputs.tables as t
    real = t.export
    def slow(df, path, **kw):
        real(df, path, **kw)
        print("writing", flush=True)
        time.sleep(60)
    t.export = slow
write_lab(lab, float(len(sys.argv)), sys.argv[1])
"""


def test_an_interrupted_lab_leaves_its_previous_complete_output(tmp_path):
    """SIGINT while a lab writes its tables: the earlier report and tables are all there.

    The lab here is a tiny one (the writer is what is tested; real labs use the same writer).
    """
    out = tmp_path / "induction"
    subprocess.run([sys.executable, "-c", LAB, str(out)], check=True)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {"report.html", "t0.csv", "t2.csv"} <= set(before)
    proc = subprocess.Popen(
        [sys.executable, "-c", LAB, str(out), "interrupt"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(2)  # Ctrl-C
    proc.wait(timeout=60)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["induction"]  # no half-built sibling left
