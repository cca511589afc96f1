"""`SweepView`: a sweep's trials compared, live: every trial's loss curve on one plot with the best trial marked, a
table of each trial's parameters and results, and "Create from best" (the form, filled with the best trial's
spec). What it shows is `JobService.sweep` (service/sweeps.py), the same answer as `GET .../sweep`."""

from __future__ import annotations

import asyncio
import html
import logging
from typing import Any

import ipywidgets as w

from ..job import Job, default_service
from .base import on_kernel_loop
from .curve import LossCurve

log = logging.getLogger(__name__)


class SweepView(w.VBox):
    """`SweepView(sweep)`: the trials' curves overlaid, the comparison table, and a Create from best button."""

    def __init__(self, sweep: Job | str, *, cluster: str | None = None, interval: float = 2.0,
                 service: Any = None) -> None:
        self.name = sweep.name if isinstance(sweep, Job) else str(sweep)
        self.cluster = cluster or (sweep.cluster if isinstance(sweep, Job) else "local")
        self.service = service or default_service()
        self.interval = interval
        self.detail = self.service.sweep(self.cluster, self.name)
        self.curve = LossCurve([t.name for t in self.detail.trials], cluster=self.cluster, service=self.service,
                               interval=interval)
        self.header = w.HTML()
        self.table = w.HTML()
        self.table.add_class("jp-CleverThis-sweepTable")
        self.best_button = w.Button(description="Create from best", icon="trophy", disabled=True,
                                    tooltip="Open the Create Job form with the best trial's settings")
        self.best_button.on_click(lambda _b: self.create_from_best())
        self.form_area = w.VBox()
        self.form: Any = None
        super().__init__([self.header, self.curve, self.table, self.best_button, self.form_area])
        self.add_class("jp-CleverThis-sweep")
        self.render()
        self._task: asyncio.Task[None] | None = on_kernel_loop(self._loop, lambda: None)

    def refresh(self) -> bool:
        """Read the comparison again and redraw; True once the sweep has ended."""
        self.detail = self.service.sweep(self.cluster, self.name)
        self.render()
        return self.detail.status.is_terminal()

    def render(self) -> None:
        d = self.detail
        best = d.best
        metric = d.metric_label or "the metric"
        self.header.value = (f"<b>{html.escape(d.name)}</b> {d.status.value} · {len(d.trials)} trials, "
                             f"{d.concurrent} at once · best by {html.escape(metric)}: "
                             f"<b>{html.escape(best) if best else 'none yet'}</b>")
        self.table.value = sweep_table(d)
        self.best_button.disabled = best is None
        with self.curve.figure.batch_update():  # the best trial's curves stand out
            for k, trial in enumerate(d.trials):
                for j, kind in ((2 * k, "train"), (2 * k + 1, "validation")):
                    trace = self.curve.figure.data[j]
                    trace.name = f"{'★ ' if trial.name == best else ''}{trial.name} {kind}"
                    trace.line.width = 4 if trial.name == best else 1.5

    def create_from_best(self) -> Any:
        """The Create Job form, filled with the best trial's spec (named `<sweep>-best`); also returned."""
        from .jobs import CreateJobForm

        spec = self.service.best_spec(self.cluster, self.name)
        self.form = CreateJobForm(self.cluster, values=spec, service=self.service)
        self.form_area.children = [self.form]
        return self.form

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                if await asyncio.to_thread(self.refresh):
                    return
            except Exception as e:  # a passing cluster error must not end the view
                log.debug("sweep refresh failed: %s", e)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.curve.close()
        super().close()


def sweep_table(d: Any) -> str:
    """The comparison table: a row per trial (the best one marked), its parameters and results."""
    params = d.parameters
    head = "".join(f"<th>{html.escape(p)}</th>" for p in params)
    rows = []
    for t in d.trials:
        cells = [f"{'★ ' if t.name == d.best else ''}{html.escape(t.name)}"]
        cells += [f"{t.values.get(p):g}" if t.values.get(p) is not None else "—" for p in params]
        cells += [t.status.value, _num(t.final_eval_loss), _num(t.best_eval_loss), _num(t.final_loss),
                  f"{t.tokens_per_s:,.0f}" if t.tokens_per_s else "—"]
        best = " class='jp-CleverThis-best'" if t.name == d.best else ""
        rows.append(f"<tr{best} data-trial='{html.escape(t.name)}'>" + "".join(f"<td>{c}</td>" for c in cells)
                    + "</tr>")
    return (f"<table><tr><th>trial</th>{head}<th>status</th><th>final val loss</th><th>best val loss</th>"
            f"<th>last train loss</th><th>tokens/s</th></tr>{''.join(rows)}</table>")


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"
