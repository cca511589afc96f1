"""Text renderings of jobs, shared by the console script, the `%train` magic, the job handle and the widgets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .spec import JobStatus


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def jobs_table(jobs: Sequence[Any]) -> str:
    rows = [("NAME", "STATUS", "TYPE", "ELAPSED", "OWNER", "MODEL")]
    for j in jobs:
        rows.append((j.name, j.status.value, j.job_type or "-", fmt_duration(j.elapsed_s), j.owner or "-",
                     (j.base_model or "-")[-40:]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def progress_line(d: Any) -> str:
    m = d.metrics
    parts = [f"[{d.name}] {d.status.value}"]
    if d.phase and d.status == JobStatus.INITIALIZING:
        parts.append(f"({d.phase})")
    if m is not None and m.loss is not None:
        parts.append(f"step {m.step}/{m.total_steps} epoch {m.epoch:.2f} loss {m.loss:.4f}")
        if m.tokens_per_s:
            parts.append(f"{m.tokens_per_s:,.0f} tok/s")
        if m.eta_s is not None:
            parts.append(f"ETA {fmt_duration(m.eta_s)}")
    if d.error:
        parts.append(f"error: {d.error}")
    return " ".join(parts)


def detail_text(d: Any) -> str:
    lines = [progress_line(d)]
    for k in ("cluster", "owner", "base_model", "dataset_path", "job_type", "framework", "epochs", "batch_size",
              "workers"):
        lines.append(f"  {k}: {getattr(d, k)}")
    lines.append(f"  elapsed: {fmt_duration(d.elapsed_s)}")
    if d.error_line is not None:  # the dataset line to mend, as an editor's path:line
        el = d.error_line
        lines.append(f"  dataset line: {el.path}:{el.line}" + (f"  {el.text}" if el.text else ""))
    if d.advice:
        lines.append(f"  advice: {d.advice}")
    lines.extend(f"  fix: {f.label} ({f.why})" for f in d.fixes)
    if d.status == JobStatus.QUEUED and d.queued_reason is not None:
        lines.append(f"  why queued: {d.queued_reason.message}")
        lines.extend(f"    - {s}" for s in d.queued_reason.suggestions)
    if d.curve is not None:
        lines.append(f"  loss curve: {d.curve.advice}")
    lines.extend(f"  hint: {h.message}" for h in d.hints)
    if d.checkpoint_dir:
        lines.append(f"  checkpoints: {d.checkpoint_dir}")
    for c in d.checkpoints:
        lines.append(f"    {checkpoint_line(c)}")
    lines.append(f"  ray log: {d.log_url}")
    return "\n".join(lines)


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return "-"


def checkpoint_line(c: Any) -> str:
    """`epoch-2 [best, latest]: /path (epoch 2, step 20, train loss 1.23, validation loss 1.31, 4.1 MB)`."""
    def loss(x: float | None) -> str:
        return "-" if x is None else f"{x:.4f}"

    marks = f" [{', '.join(c.marks)}]" if c.marks else ""
    numbers = [f"epoch {c.epoch if c.epoch is not None else '-'}", f"step {c.step if c.step is not None else '-'}",
               f"train loss {loss(c.train_loss)}", f"validation loss {loss(c.eval_loss)}", fmt_bytes(c.size_bytes)]
    return f"{c.name}{marks}: {c.path} ({', '.join(numbers)})"


def download_text(res: dict[str, Any]) -> str:
    lines = [f"{res.get('model')}: {'cached on every node' if res.get('ok') else 'NOT available on every node'}"]
    if res.get("error"):
        lines.append(f"  error: {res['error']}")
    for n in res.get("nodes") or []:
        where = f"{n.get('hostname') or '?'} ({n.get('node_ip') or '?'})"
        if n.get("status") == "error":
            lines.append(f"  {where}: error: {n.get('error')}")
        else:
            size = f", {n['bytes'] / 1e9:.2f} GB" if n.get("bytes") else ""
            lines.append(f"  {where}: {n['status']} {n.get('path')} ({n.get('seconds')}s{size})")
    return "\n".join(lines)


def preflight_text(p: dict[str, Any]) -> str:
    """A pre-flight as the form shows it: errors, the dataset, token lengths, the plan and its reasons, warnings,
    and the first examples with the trained tokens in [brackets]."""
    lines = [f"error: {e.get('field') or 'spec'}: {e['message']}" for e in p.get("errors") or []]
    ds = p.get("dataset")
    if ds:
        formats = ", ".join(f"{k} {v:,}" for k, v in (ds.get("formats") or {}).items())
        lines.append(f"dataset: {ds['format']}, {ds['examples']:,} examples"
                     + (f" + {ds['validation_examples']:,} validation" if ds.get("validation_examples") else "")
                     + (f" ({formats})" if formats else ""))
    tl = p.get("token_lengths")
    if tl:
        lines.append(f"token lengths: mean {tl['mean']}, p95 {tl['p95']}, max {tl['max']} "
                     f"({tl['truncated']} of {tl['sampled']} sampled truncated)")
    plan = p.get("plan")
    if plan:
        lines.append(f"plan: {plan['method']}, {plan['precision']}, {plan['strategy']}, batching "
                     f"{plan.get('batching')}")
        lines += [f"  {k}: {v}" for k, v in (plan.get("reasons") or {}).items()]
    if p.get("checkpoint_dir"):
        lines.append(f"checkpoints: {p['checkpoint_dir']}")
    lines += [f"warning: {w}" for w in p.get("warnings") or []]
    for k, runs in enumerate(p.get("preview") or [], 1):
        shown = "".join(f"[{r['text']}]" if r["trained"] else r["text"] for r in runs)
        lines.append(f"example {k} (trained tokens in [brackets]):\n  " + shown.replace("\n", "\n  "))
    return "\n".join(lines)
