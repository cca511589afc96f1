"""Every example notebook runs top to bottom with a real kernel against the test run's local cluster.

The notebooks of features that tests/integration covers one by one (sweeps: test_sweeps, tracking: test_tracking,
QLoRA and DeepSpeed: test_methods, test_strategies) are marked `bench`: `make bench` runs them, `make test` runs
the quickstart and the datasets notebook."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.integration
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


SLOW = {"sweep", "tracking", "qlora_deepspeed"}


@pytest.mark.parametrize("nb_path", [pytest.param(p, marks=[pytest.mark.bench] if p.stem in SLOW else [])
                                     for p in sorted(EXAMPLES.glob("*.ipynb"))], ids=lambda p: p.stem)
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
    if nb_path.stem == "qlora_deepspeed":
        assert "succeeded qlora ['epoch-1']" in text and "adapter loaded: PeftModel" in text
        assert "succeeded deepspeed-zero2 ['epoch-1']" in text
    if nb_path.stem == "tracking":
        assert "succeeded stopped early:" in text and "training losses; validation at steps" in text
        assert "eval_loss by step [(" in text and "FINISHED" in text
    if nb_path.stem == "sweep":
        assert "succeeded 2 trials; best sweep-" in text and "by validation loss" in text
        assert text.count(" succeeded {'learning_rate'") == 2 and "the form opens with learning_rate" in text
        # ASHA, one trial at a time: the 1e-4 trial trails the first after epoch 1 and is stopped (Ray Tune's stop
        # reaches it within seconds: with these 10-second epochs, it may finish the one under way)
        assert "-t2 succeeded {'learning_rate': 0.0001}" in text
        assert "stopped early by the ASHA scheduler: it trailed after epoch 1 of 2" in text
        assert "answered from ['epoch-2'] in" in text and " 0 streamed pieces" not in text
        assert len(widgets) >= 2  # the sweep view, the chat
    if nb_path.stem == "datasets":
        assert text.count("succeeded") == 2 and "arrow/checkpoints" in text


def test_magic_cell_spec_and_a_second_kernel_attaching_to_its_job(ray_cluster, tiny_model, dataset, job_name):
    """%train --help, one-line errors for bad arguments and specs, %%train with a YAML spec in the cell; and while that
    job runs, a second kernel's Job.attach brings back its status, metrics and checkpoints (a kernel restart loses
    nothing)."""
    import threading

    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell
    nb.cells = [
        code("%load_ext jupyter_cleverthis"),
        code("%train --help"),
        code("%train --name x --epochs zz"),
        code("%%train\nname: bad/name\nepochs: 0\n"),
        code("%%train\nname: [unclosed\n"),
        code(f"%%train --wait\nname: {job_name}\nbase_model: {tiny_model}\ndataset_path: {dataset}\n"
             "epochs: 1\nbatch_size: 16\nworkers: 1\ntraining_config:\n  learning_rate: 0.005\n"),
    ]
    other = nbformat.v4.new_notebook()
    other.cells = [code(
        "import time\n"
        "from jupyter_cleverthis import Job\n"
        "from jupyter_cleverthis.errors import JobNotFound\n"
        "for _ in range(1200):  # until the first kernel's %%train has created it\n"
        "    try:\n"
        f"        job = Job.attach({job_name!r}, cluster='local')\n"
        "        break\n"
        "    except JobNotFound:\n"
        "        time.sleep(0.5)\n"
        "print('STATUS AT ATTACH', job.detail().status.value)\n"
        "d = job.wait(timeout=600)\n"
        "print('ATTACHED', d.status.value, len(job.metrics()), [c.name for c in job.checkpoints])"
    )]
    failures: list[BaseException] = []

    def attach() -> None:
        try:
            NotebookClient(other, timeout=900, kernel_name="python3").execute()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)

    second = threading.Thread(target=attach)
    second.start()
    NotebookClient(nb, timeout=900, kernel_name="python3").execute()
    second.join(timeout=900)
    assert not second.is_alive() and not failures, failures
    outs = ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]
    assert "usage: %train" in outs[1] and "resume" in outs[1]
    assert outs[2].strip() == "error: %train create: argument --epochs: expected a whole number, got 'zz'"
    assert outs[3].startswith("error: invalid job spec: name:") and "epochs" in outs[3]
    assert outs[4].startswith("error: %%train: the cell is not valid YAML/JSON (line 2)")
    assert f"[{job_name}] succeeded" in outs[5]
    assert not any("Traceback" in o for o in outs)

    attached = "".join(o.get("text", "") for o in other.cells[0].outputs)
    assert "Traceback" not in attached, attached
    at_attach = attached.split("STATUS AT ATTACH ")[1].split()[0]
    assert at_attach in ("queued", "initializing", "running"), attached  # it followed a job still running
    status, n_steps, ckpts = attached.split("ATTACHED ")[1].split(" ", 2)
    from jupyter_cleverthis.service.jobs import JobService

    steps_seen = len([e for e in JobService().events("local", job_name) if e["type"] == "step"])
    assert status == "succeeded" and int(n_steps) == steps_seen >= 1 and "epoch-1" in ckpts
