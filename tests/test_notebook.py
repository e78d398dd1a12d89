"""The researcher's walkthrough executes from top to bottom without a cell error, and is
stored with its outputs."""

import pytest

from conftest import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


@pytest.mark.slow
def test_walkthrough_notebook_runs():
    path = ROOT / "notebooks" / "walkthrough.ipynb"
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()  # raises CellExecutionError on any cell error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("ttft_p99_s" in str(o.get("data", {})) for o in outputs)


def test_walkthrough_is_stored_with_its_outputs_and_conclusions():
    """Readers on GitHub see the numbers without running it, and each section ends with
    what they say."""
    import json

    nb = json.loads((ROOT / "notebooks" / "walkthrough.ipynb").read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] for c in code)
    notes = [c for c in nb["cells"] if "".join(c["source"]).startswith("**What the numbers say")]
    text = "".join("".join(c["source"]) + "\n" for c in nb["cells"] if c["cell_type"] == "markdown")
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(notes) >= len(sections) >= 5
