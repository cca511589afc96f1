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
    if nb_path.stem == "quickstart":
        assert "succeeded ['epoch-1', 'epoch-2']" in text
        assert "quickstart-" in text  # %train list shows the job
