"""A small live view of one job (status, phase, loss, tokens/s, ETA), refreshed from the kernel's event loop."""

from __future__ import annotations

import asyncio
import html
import logging
from typing import Any

import ipywidgets as w

from ..text import progress_line
from .base import on_kernel_loop

log = logging.getLogger(__name__)


class JobProgress(w.VBox):
    """Polls the job off the event loop's thread (asyncio.to_thread) so the kernel never blocks."""

    def __init__(self, job: Any, *, interval: float = 1.0) -> None:
        self.job = job
        self.interval = interval
        self.line = w.HTML(value=f"<code>[{html.escape(job.name)}] submitted</code>")
        self.line.add_class("jp-CleverThis-progress")
        super().__init__([self.line])
        self.task: asyncio.Task[None] | None = on_kernel_loop(self._poll, self.refresh)

    def refresh(self) -> Any:
        d = self.job.detail()
        self.line.value = f"<code>{html.escape(progress_line(d))}</code>"
        return d

    async def _poll(self) -> None:
        while True:
            try:
                d = await asyncio.to_thread(self.refresh)
            except Exception as e:  # a passing cluster error must not kill the view
                log.debug("refresh of %s failed: %s", self.job.name, e)
                await asyncio.sleep(self.interval * 3)
                continue
            if d.status.is_terminal():
                return
            await asyncio.sleep(self.interval)
