"""docs/walkthrough.md, the walkthrough rendered with its outputs for reading on the web, shows the notebook's
cells as they are: a cell edited in the notebook and not rendered again fails here. Outputs are not compared
(they differ from machine to machine); the copy stays small."""

import json

import render_walkthrough

MEGABYTE = 1 << 20


def test_the_rendered_copy_shows_the_notebooks_cells():
    assert not render_walkthrough.stale_cells(), "regenerate: python scripts/tools/render_walkthrough.py"


def test_an_edited_cell_is_caught(tmp_path):
    notebook = json.loads(render_walkthrough.NOTEBOOK.read_text(encoding="utf-8"))
    notebook["cells"][1]["source"] = ["print('edited')\n"]
    edited = tmp_path / "walkthrough.ipynb"
    edited.write_text(json.dumps(notebook), encoding="utf-8")
    assert render_walkthrough.stale_cells(edited, render_walkthrough.RENDERED)


def test_outputs_are_left_out_of_the_comparison():
    cells = [{"cell_type": "code", "source": ["1 + 1"]}, {"cell_type": "markdown", "source": ["Two."]}]
    rendered = render_walkthrough.cell_sources(cells).replace(
        "```\n\nTwo.", "```\n\n<!-- output -->\n```text\n2\n```\n<!-- /output -->\n\nTwo."
    )
    assert rendered != render_walkthrough.cell_sources(cells)
    assert render_walkthrough.sources_of_rendered(rendered) == render_walkthrough.cell_sources(cells)


def test_the_rendered_copy_is_small():
    figures = render_walkthrough.RENDERED.parent / render_walkthrough.FIGURES
    files = [render_walkthrough.RENDERED, *figures.glob("*.png")]
    assert sum(path.stat().st_size for path in files) < MEGABYTE
