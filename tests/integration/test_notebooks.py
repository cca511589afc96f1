"""Every example notebook runs top to bottom with a real kernel against the test run's local cluster."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("nb_path", sorted(EXAMPLES.glob("*.ipynb")), ids=lambda p: p.stem)
def test_example_notebook_runs(nb_path, ray_cluster, tiny_model):
    nb = nbformat.read(nb_path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    text = "\n".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "error:" not in text and "Traceback" not in text
    widgets = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    if nb_path.stem == "quickstart":
        assert "succeeded ['epoch-1', 'epoch-2']" in text
        assert "cancelled ['epoch-1'" in text  # cancelled after its first checkpoint
        assert "-long-resume-1 succeeded" in text
        assert len(widgets) >= 6  # progress, curves, detail, list, form
    if nb_path.stem == "datasets":
        assert text.count("succeeded") == 2 and "arrow/checkpoints" in text
