"""Compare runs: where the specs of several jobs differ, key by key (training_config's keys as
`training_config.<key>`), for the config diff shown beside their overlaid curves (`LossCurve([a, b])`)."""

from __future__ import annotations

from typing import Any

# what every job has its own of: never a difference worth showing
SKIP = {"name"}


def flat(spec: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in spec.items() if k != "training_config" and k not in SKIP}
    for k, v in (spec.get("training_config") or {}).items():
        out[f"training_config.{k}"] = v
    return out


def spec_diff(specs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """[{key, values: {job: value}}] for each key whose value is not the same in every job (an unset key is
    None), in key order; [] for fewer than two jobs."""
    if len(specs) < 2:
        return []
    flats = {name: flat(s or {}) for name, s in specs.items()}
    keys = sorted(set().union(*flats.values()))
    out = []
    for key in keys:
        values = {name: f.get(key) for name, f in flats.items()}
        if len({repr(v) for v in values.values()}) > 1:
            out.append({"key": key, "values": values})
    return out
