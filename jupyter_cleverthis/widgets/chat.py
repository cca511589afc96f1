"""`ChatWithCheckpoint`: ask a job's checkpoints (or model folders) a prompt and watch the answers arrive, side by
side. Generation runs on the cluster (service/chat.py), never in the kernel or the Jupyter server."""

from __future__ import annotations

import html
import logging
import threading
from typing import Any

import ipywidgets as w

from ..errors import CleverThisError

log = logging.getLogger(__name__)


class ChatWithCheckpoint(w.VBox):
    """`ChatWithCheckpoint(job)` talks to the job's final checkpoint; `checkpoints=["epoch-1", "epoch-final"]`
    puts several side by side; `ChatWithCheckpoint("/path/to/model")` talks to a model folder on the cluster.

    `serve="adapter"` serves a LoRA checkpoint as its base plus the adapter instead of the merged weights; each
    answer says how it was served. `ask(prompt)` does what the Ask button does and returns the answers."""

    def __init__(self, job_or_path: Any, checkpoints: list[str] | None = None, *, cluster: str | None = None,
                 serve: str = "merged", max_new_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
                 service: Any = None) -> None:
        from ..job import Job, default_service

        if isinstance(job_or_path, Job):
            self.job: str | None = job_or_path.name
            self.cluster = cluster or job_or_path.cluster
            self.service = service or job_or_path._svc
            self.sources = list(checkpoints or [])
        else:
            self.job, self.cluster = None, cluster or "local"
            self.service = service or default_service()
            self.sources = [str(job_or_path), *(checkpoints or [])]
        self.serve = serve
        self.prompt = w.Textarea(placeholder="Ask something", layout=w.Layout(width="100%"))
        self.max_new_tokens = w.BoundedIntText(value=max_new_tokens, min=1, max=4096, description="max new tokens")
        self.temperature = w.BoundedFloatText(value=temperature, min=0.0, max=5.0, step=0.1, description="temperature")
        self.top_p = w.BoundedFloatText(value=top_p, min=0.01, max=1.0, step=0.05, description="top-p")
        self.button = w.Button(description="Ask", button_style="primary", icon="paper-plane")
        self.status = w.HTML()
        self.button.on_click(lambda _b: self._ask_in_background())
        n = max(1, len(self.sources))
        self.titles = [w.HTML() for _ in range(n)]
        self.outputs = [w.Textarea(disabled=True, layout=w.Layout(width="100%", height="10em")) for _ in range(n)]
        panes = [w.VBox([t, o], layout=w.Layout(flex="1 1 0", min_width="0"))
                 for t, o in zip(self.titles, self.outputs, strict=True)]
        self._label_panes(self.sources or ["final checkpoint"])
        super().__init__([self.prompt, w.HBox([self.max_new_tokens, self.temperature, self.top_p]),
                          w.HBox([self.button, self.status]), w.HBox(panes)])
        self.add_class("jp-CleverThis-chat")
        self.answers: list[dict[str, Any]] = []
        self.pieces = 0  # how many streamed pieces arrived during the last ask

    def _label_panes(self, labels: list[str], how: list[str] | None = None) -> None:
        for i, t in enumerate(self.titles):
            label = labels[i] if i < len(labels) else ""
            extra = f" <small>({html.escape(how[i])})</small>" if how and i < len(how) else ""
            t.value = f"<b>{html.escape(label)}</b>{extra}"

    def ask(self, prompt: str | None = None) -> list[dict[str, Any]]:
        """Ask every source the prompt (the box's text when none is given); the panes fill as tokens arrive."""
        if prompt is not None:
            self.prompt.value = prompt
        for o in self.outputs:
            o.value = ""
        self.pieces = 0
        self.button.disabled = True
        self.status.value = "<i>generating on the cluster…</i>"

        def on_text(index: int, text: str) -> None:
            if index < len(self.outputs):
                self.outputs[index].value += text
                self.pieces += 1

        try:
            self.answers = self.service.chat(
                self.cluster, job=self.job, sources=self.sources, prompt=self.prompt.value,
                max_new_tokens=int(self.max_new_tokens.value), temperature=float(self.temperature.value),
                top_p=float(self.top_p.value), serve=self.serve, on_text=on_text)
        except CleverThisError as e:
            self.status.value = f"<span class='jp-CleverThis-error'>{html.escape(e.message)}</span>"
            raise
        finally:
            self.button.disabled = False
        for a in self.answers:  # the whole answer, in case a piece was held back at the end
            if a["index"] < len(self.outputs):
                self.outputs[a["index"]].value = a["text"]
        self._label_panes([a["label"] for a in self.answers], [a["served_as"] for a in self.answers])
        self.status.value = " · ".join(f"{html.escape(a['label'])}: {a['new_tokens']} tokens in {a['seconds']:.1f} s"
                                       for a in self.answers)
        return self.answers

    def _ask_in_background(self) -> None:
        def run() -> None:
            try:
                self.ask()
            except CleverThisError:
                pass  # shown in the status line
            except Exception as e:  # noqa: BLE001 - a widget thread must not die silently
                log.exception("chat failed")
                self.status.value = f"<span class='jp-CleverThis-error'>{html.escape(str(e)[:300])}</span>"

        threading.Thread(target=run, name="cleverthis-chat", daemon=True).start()
