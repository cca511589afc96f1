"""Why a queued job waits, node by node: its request (workers x per-worker CPUs and GPUs, placement strategy) set
against each alive node's free resources, what holds them (other jobs' placement groups), and what would let it
start (fewer workers, a smaller per-worker request, waiting for a named job).

`cluster_nodes` asks the dashboard (cluster status, the state API's nodes and placement groups, the job list);
`explain` is a pure function of the request and the nodes, tested on its own.

How Ray places a job's workers (one bundle per worker): PACK and SPREAD are soft, so the bundles may land on any
nodes; STRICT_PACK needs them all on one node; STRICT_SPREAD needs each on a different node.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import requests

from .probes import cluster_resources

if TYPE_CHECKING:
    from .clusters import ClusterConfig

KINDS = ("CPU", "GPU")


def _state_rows(cfg: ClusterConfig, what: str, timeout: float) -> list[dict[str, Any]]:
    """Rows of the state API's `/api/v0/<what>` (detail view); [] when it does not answer."""
    try:
        r = requests.get(f"{cfg.address}/api/v0/{what}", params={"detail": "true", "limit": 10000},
                         headers=cfg.headers(), timeout=timeout)
        data = r.json().get("data") or {}
    except (requests.RequestException, ValueError, AttributeError):
        return []
    rows = (data.get("result") or {}) if isinstance(data, dict) else {}
    rows = rows.get("result") if isinstance(rows, dict) else rows
    return [x for x in rows or [] if isinstance(x, dict)]


def _job_names(cfg: ClusterConfig, timeout: float) -> dict[str, str]:
    """Ray's job id (hex) -> the name users know (the submission id)."""
    try:
        r = requests.get(f"{cfg.address}/api/jobs/", headers=cfg.headers(), timeout=timeout)
        jobs = r.json()
    except (requests.RequestException, ValueError):
        return {}
    return {str(j["job_id"]): str(j.get("submission_id") or j["job_id"])
            for j in jobs if isinstance(j, dict) and j.get("job_id")}


def cluster_nodes(cfg: ClusterConfig, timeout: float = 5.0) -> list[dict[str, Any]] | None:
    """Each alive node: {node_id, name, ip, head, CPU/GPU/memory: {total, free}, used_by: [{job, CPU, GPU}]}
    (used_by: the created placement groups' bundles on it, per job); None when the cluster does not answer."""
    res = cluster_resources(cfg, timeout=timeout)
    if res is None:
        return None
    meta = {n.get("node_id"): n for n in _state_rows(cfg, "nodes", timeout) if n.get("state", "ALIVE") == "ALIVE"}
    names = _job_names(cfg, timeout)
    used: dict[str, dict[str, dict[str, float]]] = {}
    for pg in _state_rows(cfg, "placement_groups", timeout):
        if pg.get("state") != "CREATED":
            continue
        job = names.get(str(pg.get("creator_job_id")), str(pg.get("creator_job_id") or "another job"))
        for b in pg.get("bundles") or []:
            node = b.get("node_id")
            for kind, amount in (b.get("unit_resources") or {}).items():
                if node and kind in KINDS and amount:
                    slot = used.setdefault(node, {}).setdefault(job, {})
                    slot[kind] = slot.get(kind, 0.0) + float(amount)
    ips = [str(m.get("node_ip") or "") for m in meta.values()]
    out = []
    for n in res.get("nodes") or []:
        nid = str(n["node_id"])
        m = meta.get(nid, {})
        ip = str(m.get("node_ip") or "") or None
        name = ip or nid[:8]
        if ip and ips.count(ip) > 1:  # several nodes on one machine (tests, a laptop): tell them apart
            name = f"{ip} ({nid[:6]})"
        out.append({**n, "name": name, "ip": ip, "head": bool(m.get("is_head_node")),
                    "used_by": [{"job": job, **amounts} for job, amounts in sorted(used.get(nid, {}).items())]})
    out.sort(key=lambda x: (not x["head"], x["name"]))
    return out


# -- the explanation (pure) ----------------------------------------------------------------------------------------

def _free(node: dict[str, Any], kind: str, field: str = "free") -> float:
    return float((node.get(kind) or {}).get(field) or 0.0)


def _slots(node: dict[str, Any], per: dict[str, float], field: str = "free") -> int:
    """How many workers of `per` fit on the node."""
    return min(math.floor(_free(node, k, field) / v + 1e-9) for k, v in per.items() if v > 0) if per else 0


def capacity(per: dict[str, float], strategy: str, nodes: list[dict[str, Any]], field: str = "free") -> int:
    """How many workers of `per` could be placed now (field="free") or on an empty cluster (field="total")."""
    slots = [_slots(n, per, field) for n in nodes]
    if strategy == "STRICT_PACK":
        return max(slots, default=0)
    if strategy == "STRICT_SPREAD":
        return sum(1 for s in slots if s >= 1)
    return sum(slots)


def _largest_fitting(kind: str, per: dict[str, float], workers: int, strategy: str,
                     nodes: list[dict[str, Any]]) -> float | None:
    """The largest per-worker amount of `kind` (the rest of the request as asked) with which `workers` fit now."""
    frees = sorted({_free(n, kind) for n in nodes if _free(n, kind) > 0}, reverse=True)
    candidates = sorted({f / m for f in frees for m in range(1, workers + 1)}, reverse=True)
    for amount in candidates:
        if amount < per[kind] and capacity({**per, kind: amount}, strategy, nodes) >= workers:
            return amount
    return None


def _amounts(x: dict[str, float]) -> str:
    return " and ".join(f"{v:g} {k}{'s' if v != 1 else ''}" for k, v in x.items() if v)


def _node_line(node: dict[str, Any], per: dict[str, float]) -> str:
    parts = []
    for kind in per:
        used = [f"{u[kind]:g} used by job {u['job']}" for u in node.get("used_by") or [] if u.get(kind)]
        parts.append(f"{_free(node, kind):g} free {kind}{'s' if _free(node, kind) != 1 else ''}"
                     + (f" ({', '.join(used)})" if used else "")
                     + ("" if node.get(kind) else " (it has none)"))
    return f"node {node.get('name') or node['node_id'][:8]}{' (head)' if node.get('head') else ''} has " \
           + " and ".join(parts)


def _holders(nodes: list[dict[str, Any]], per: dict[str, float], own_job: str | None) -> list[str]:
    """The other jobs holding resources of the kinds asked for, most first."""
    held: dict[str, float] = {}
    for n in nodes:
        for u in n.get("used_by") or []:
            if u["job"] != own_job and any(u.get(k) for k in per):
                held[u["job"]] = held.get(u["job"], 0.0) + sum(float(u.get(k) or 0) for k in per)
    return [job for job, _ in sorted(held.items(), key=lambda kv: -kv[1])]


def _without(nodes: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    """The nodes as they would be once `job` ended (its placement groups' resources free again)."""
    out = []
    for n in nodes:
        gain = {k: sum(float(u.get(k) or 0) for u in n.get("used_by") or [] if u["job"] == job) for k in KINDS}
        out.append({**n, **{k: {**n[k], "free": _free(n, k) + gain[k]} for k in KINDS if n.get(k)}})
    return out


def explain(workers: int, per: dict[str, float], strategy: str, nodes: list[dict[str, Any]] | None,
            own_job: str | None = None) -> dict[str, Any]:
    """{message, blockers, suggestions, fits_now, fits_ever}: what blocks `workers` x `per` with `strategy`."""
    ask = f"needs {workers} worker{'s' if workers != 1 else ''} \u00d7 {_amounts(per)} with {strategy}"
    if not nodes:
        return {"message": f"{ask}; the cluster does not say what its nodes have free", "blockers": [],
                "suggestions": [], "fits_now": None, "fits_ever": None}
    now, ever = capacity(per, strategy, nodes), capacity(per, strategy, nodes, "total")
    blockers = [_node_line(n, per) for n in nodes]
    if now >= workers:
        return {"message": f"{ask}; the nodes have room: Ray is starting the workers", "blockers": blockers,
                "suggestions": [], "fits_now": now, "fits_ever": ever}
    suggestions = []
    if ever < workers:
        suggestions.append(f"this cluster can never hold it ({ever} such worker{'s' if ever != 1 else ''} at most, "
                           f"even with nothing else running): add nodes, or ask for less")
    if 0 < now < workers:
        suggestions.append(f"fewer workers: {now} would start now")
    for kind in per:
        amount = _largest_fitting(kind, per, workers, strategy, nodes)
        if amount is not None:
            amount = math.floor(amount * 100) / 100  # a figure to type; smaller still fits
            if amount > 0:
                suggestions.append(f"a smaller request: {amount:g} {kind} per worker would start now")
    if strategy.startswith("STRICT") and capacity(per, "PACK", nodes) >= workers:
        suggestions.append("placement_strategy PACK (or SPREAD): the workers would start now")
    for job in _holders(nodes, per, own_job):
        if capacity(per, strategy, _without(nodes, job)) >= workers:
            suggestions.append(f"wait for job {job} to end: its workers hold what this job needs")
    return {"message": f"{ask}; " + "; ".join(blockers), "blockers": blockers, "suggestions": suggestions,
            "fits_now": now, "fits_ever": ever}
