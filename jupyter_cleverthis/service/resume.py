"""Resume: a new job continuing a finished one from its latest (or a named) checkpoint (docs/checkpoints.md)."""

from __future__ import annotations

import logging
from typing import Any

from ..errors import BadRequest, JobConflict, JobExists
from .models import JobDetail

log = logging.getLogger(__name__)


def resume_job(svc: Any, cluster: str, name: str, *, epochs: int | None = None, new_name: str | None = None,
               owner: str | None = None, checkpoint: str | None = None) -> JobDetail:
    """A new job continuing `name` from its latest checkpoint (or the named one, e.g. "epoch-1");
    epochs default to what remains. Only the job's owner (or an admin) may resume it; the new job is `owner`'s."""
    svc.check_owner(cluster, name, owner, "resume")
    d = svc.get(cluster, name)
    if not d.status.is_terminal():
        raise JobConflict(f"job '{name}' is still {d.status.value}; cancel it or wait for it to end",
                          details={"field": "name"})
    if not d.checkpoints or d.spec is None:
        raise JobConflict(f"job '{name}' wrote no checkpoint to resume from", details={"field": "name"})
    last = d.checkpoints[-1]
    if checkpoint is not None:
        found = [c for c in d.checkpoints if checkpoint in (c.name, c.path)]
        if not found:
            raise BadRequest(f"job '{name}' has no checkpoint '{checkpoint}' (it has: "
                             f"{', '.join(c.name for c in d.checkpoints)})", details={"field": "checkpoint"})
        last = found[-1]
    done = int(last.epoch or 0)  # epochs completed since the lineage's start (a mid-epoch cancel: not counted)
    started = next((int(e.get("start_epoch") or 0) for e in svc.store.events(cluster, name)
                    if e["type"] == "config"), 0)
    remaining = epochs if epochs is not None else started + int(d.spec.get("epochs", 0)) - done
    if remaining < 1:
        raise JobConflict(f"job '{name}' already finished its {d.spec.get('epochs')} epochs; pass epochs to "
                          "train further", details={"field": "epochs"})
    base = d.spec.get("base_model")
    spec_data = {**d.spec, "name": new_name or next_name(svc, cluster, name), "base_model": last.path,
                 "epochs": remaining, "output_dir": d.checkpoint_dir}
    spec = svc.validate(spec_data)
    log.info("resuming %s from %s (base %s) as %s", name, last.path, base, spec.name)
    return svc.create(spec, owner=owner)


def next_name(svc: Any, cluster: str, name: str) -> str:
    """The first free `NAME-resume-N`."""
    base = name.split("-resume-")[0][:50]
    for n in range(1, 1000):
        cand = f"{base}-resume-{n}"
        if svc.info(cluster, cand) is None:
            return cand
    raise JobExists(f"too many resumed jobs of '{name}'")
