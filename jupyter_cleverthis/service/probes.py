"""What a cluster's dashboard says over HTTP: is it up, its Ray version, its node and Job API, its resources."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import requests

if TYPE_CHECKING:
    from .clusters import ClusterConfig


def ping(cfg: ClusterConfig, timeout: float = 3.0) -> bool:
    try:
        r = requests.get(f"{cfg.address}/api/version", headers=cfg.headers(), timeout=timeout)
        return r.status_code == 200
    except requests.RequestException:
        return False


def ray_version(cfg: ClusterConfig, timeout: float = 3.0) -> str | None:
    """The cluster's Ray version, as its dashboard reports it (None when it does not answer)."""
    try:
        r = requests.get(f"{cfg.address}/api/version", headers=cfg.headers(), timeout=timeout)
        return str(r.json().get("ray_version") or "") or None
    except (requests.RequestException, ValueError, AttributeError):
        return None


def node_registered(cfg: ClusterConfig) -> bool:
    """The head's raylet has registered with the GCS (the dashboard lists an alive node)."""
    try:
        r = requests.get(f"{cfg.address}/nodes?view=summary", headers=cfg.headers(), timeout=5)
        return bool(r.status_code == 200 and r.json().get("data", {}).get("summary"))
    except (requests.RequestException, ValueError, AttributeError):
        return False


def jobs_api_ready(cfg: ClusterConfig) -> bool:
    try:
        return requests.get(f"{cfg.address}/api/jobs/", headers=cfg.headers(), timeout=5).status_code == 200
    except requests.RequestException:
        return False


def cluster_resources(cfg: ClusterConfig, timeout: float = 5.0) -> dict[str, Any] | None:
    """Total and free resources per kind, from the dashboard's cluster status endpoint."""
    try:
        r = requests.get(f"{cfg.address}/api/cluster_status", headers=cfg.headers(), timeout=timeout)
        data = r.json().get("data", {}).get("clusterStatus", {})
    except (requests.RequestException, ValueError, AttributeError):
        return None
    load = (data or {}).get("loadMetricsReport") or {}

    def pairs(usage: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind, pair in (usage or {}).items():
            key = {"objectStoreMemory": "object_store_memory"}.get(kind, kind)
            if key in ("CPU", "GPU", "memory") and isinstance(pair, list) and len(pair) == 2:
                used, total = pair
                out[key] = {"total": total, "free": total - used}
        return out

    out = pairs(load.get("usage") or {})
    if not out:
        return None
    nodes = load.get("usageByNode") or {}
    out["nodes"] = [{"node_id": nid, **pairs(u)} for nid, u in nodes.items()]
    return out
