"""LossCurve: training loss per step and validation loss at its step (epoch ends, eval_steps) for one or several
jobs, live (plotly)."""

from __future__ import annotations

import asyncio
import html
import logging
import time

import ipywidgets as w
import plotly.graph_objects as go

from ..job import Job, default_service
from ..service.jobs import JobService
from ..text import fmt_duration
from .base import on_kernel_loop

log = logging.getLogger(__name__)
MIN_UPDATE_INTERVAL_S = 0.1  # at most ~10 figure updates per second
# The kernel cannot know JupyterLab's theme: a transparent figure with mid-grey text and grid reads on the light
# and the dark themes alike (plotly's own templates paint a white or light-grey background).
_GREY, _GRID = "#8a8a8a", "rgba(138, 138, 138, 0.25)"
THEME_NEUTRAL = {
    "template": "none", "paper_bgcolor": "rgba(0, 0, 0, 0)", "plot_bgcolor": "rgba(0, 0, 0, 0)",
    "font": {"color": _GREY},
    "xaxis": {"gridcolor": _GRID, "zerolinecolor": _GRID, "linecolor": _GREY},
    "yaxis": {"gridcolor": _GRID, "zerolinecolor": _GRID, "linecolor": _GREY},
}


class LossCurve(w.VBox):
    """`LossCurve(job)` or `LossCurve([job_a, job_b])` to compare; updates from the kernel's event loop."""

    def __init__(self, jobs: Job | str | list[Job | str], *, cluster: str = "local", max_points: int = 2000,
                 interval: float = 1.0, service: JobService | None = None) -> None:
        items = jobs if isinstance(jobs, list) else [jobs]
        self.jobs = [j if isinstance(j, Job) else Job(str(j), cluster) for j in items]
        self.service = service or default_service()
        self.max_points = max_points
        self.interval = max(interval, MIN_UPDATE_INTERVAL_S)
        self.figure = go.FigureWidget(layout=go.Layout(
            height=320, margin={"l": 50, "r": 20, "t": 30, "b": 40},
            xaxis_title="step", yaxis_title="loss", legend={"orientation": "h"}, **THEME_NEUTRAL,
        ))
        for job in self.jobs:
            self.figure.add_scatter(name=f"{job.name} train", mode="lines", x=[], y=[])
            self.figure.add_scatter(name=f"{job.name} validation", mode="lines+markers", x=[], y=[])
        self.status = w.HTML()
        self.status.add_class("jp-CleverThis-curveStatus")
        self.diff = w.HTML()  # comparing jobs: where their specs differ (service/compare.py)
        self.diff.add_class("jp-CleverThis-configDiff")
        super().__init__([self.figure, self.status, self.diff])
        self.hints: dict[str, tuple[str, str] | None] = {}
        self._last_update = 0.0
        self._task: asyncio.Task[None] | None = on_kernel_loop(self._loop, self.refresh)

    def refresh(self) -> bool:
        """Fetch every job's downsampled curve and redraw in one batch; True when all jobs have ended."""
        data, done, lines = [], True, []
        for job in self.jobs:
            d = self.service.get(job.cluster, job.name)
            m = self.service.metrics(job.cluster, job.name, max_points=self.max_points)
            data.append(m)
            done = done and d.status.is_terminal()
            latest = m["latest"] or {}
            # the service's diagnosis of every step loss (not of the downsampled curve), as the other views show it
            hint = (d.curve.pattern, d.curve.advice) if d.curve is not None else None
            self.hints[job.name] = hint
            parts = [f"<b>{html.escape(job.name)}</b> {d.status.value}"]
            if latest.get("loss") is not None:
                parts.append(f"loss {latest['loss']:.4f} (step {latest.get('step')}/{latest.get('total_steps')})")
            if latest.get("tokens_per_s"):
                parts.append(f"{latest['tokens_per_s']:,.0f} tokens/s")
            if latest.get("eta_s") is not None and not d.status.is_terminal():
                parts.append(f"ETA {fmt_duration(latest['eta_s'])}")
            if hint:
                parts.append(f"<i class='jp-CleverThis-hint' data-pattern='{hint[0]}'>{html.escape(hint[1])}</i>")
            parts.extend(f"<i class='jp-CleverThis-hint' data-kind='{h.kind}'>{html.escape(h.message)}</i>"
                         for h in d.hints)
            lines.append(" · ".join(parts))
        wait = MIN_UPDATE_INTERVAL_S - (time.time() - self._last_update)
        if wait > 0:
            time.sleep(wait)
        with self.figure.batch_update():
            for k, m in enumerate(data):
                train, val = self.figure.data[2 * k], self.figure.data[2 * k + 1]
                train.x, train.y = m["step"], m["loss"]
                steps_by_epoch = {e["epoch"]: e["step"] for e in m["epochs"]}
                val.x = [v.get("step") if v.get("step") is not None else steps_by_epoch.get(v["epoch"], v["epoch"])
                         for v in m["validation"]]
                val.y = [v["eval_loss"] for v in m["validation"]]
        self._last_update = time.time()
        self.status.value = "<br>".join(lines)
        if len(self.jobs) > 1 and not self.diff.value:  # specs do not change: the diff is read once
            self.diff.value = diff_table(self.service.compare(self.jobs[0].cluster, [j.name for j in self.jobs]))
        return done

    async def _loop(self) -> None:
        while True:
            try:
                if await asyncio.to_thread(self.refresh):
                    return
            except Exception as e:  # a passing cluster error must not kill the curve
                log.debug("curve refresh failed: %s", e)
            await asyncio.sleep(self.interval)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        super().close()


def diff_table(rows: list[dict]) -> str:
    """The config diff as an HTML table: one row per differing key, one column per job."""
    if not rows:
        return "<i>The jobs' specs are the same.</i>"
    names = list(rows[0]["values"])
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    body = "".join(
        f"<tr><td><code>{html.escape(r['key'])}</code></td>"
        + "".join(f"<td>{html.escape('—' if r['values'][n] is None else str(r['values'][n]))}</td>" for n in names)
        + "</tr>" for r in rows)
    return f"<table class='jp-CleverThis-configDiffTable'><tr><th>setting</th>{head}</tr>{body}</table>"

