"""docs/walkthrough.ipynb runs top to bottom on this checkout's hf_vanilla, and what it shows holds: the copy
model copies, greedy decoding by hand is generate's first choice, and the saved model translates through the
pipeline."""

import json
import os
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="needs the notebook extra: pip install -e '.[notebook]'")
nbformat = pytest.importorskip("nbformat", reason="needs the notebook extra: pip install -e '.[notebook]'")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "docs" / "walkthrough.ipynb"
# Appended to the notebook: what its cells left behind, as one line of JSON.
REPORT = """
import json
print(json.dumps({
    "package": os.path.dirname(hf_vanilla.__file__),
    "copy_accuracy": copy_accuracy,
    "greedy_tokens": greedy_tokens,
    "beam_tokens": beam_tokens,
    "translations": [t["translation_text"] for t in translations],
}))
"""


def test_the_walkthrough_runs_and_what_it_shows_holds(tmp_path, monkeypatch):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells), "commit the notebook without outputs"
    notebook.cells.append(nbformat.v4.new_code_cell(REPORT))
    # The kernel is another process: it imports this checkout, wherever pip installed hf_vanilla from.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if any cell fails
    report = json.loads(notebook.cells[-1].outputs[-1]["text"].strip().splitlines()[-1])
    assert Path(report["package"]) == REPO / "hf_vanilla"
    assert report["copy_accuracy"] >= 0.95
    assert report["greedy_tokens"] == report["beam_tokens"]
    assert report["translations"] == ["27182818", "14142135"]
