"""The console script's (and `%train`'s) `sweep` and `chat` commands (README, "Sweeps" and "Chat").

    sweep --name S --model M --dataset D --param learning_rate=1e-4,3e-4 --param lora_r=8:32:log --trials 4 ...
    chat NAME [--checkpoint epoch-1 --checkpoint epoch-final] --prompt "..."
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from .errors import BadRequest

PARAM_HELP = ("NAME=V1,V2,... (values) or NAME=MIN:MAX[:log] (a range, linear unless :log); NAME is one of "
              "learning_rate, lora_r, lora_alpha, batch_size, epochs, warmup_ratio, weight_decay (repeat for 2-3)")


def add_sweep_options(sp: argparse.ArgumentParser, number: Callable[[str], Callable[[str], int]]) -> None:
    """The sweep's own options (the create options come first, from the CLI's table)."""
    sp.add_argument("--param", action="append", required=True, metavar="NAME=VALUES", help=PARAM_HELP)
    sp.add_argument("--trials", type=number("--trials"), default=None,
                    help="number of trials (default: every combination of the value lists)")
    sp.add_argument("--concurrent", type=number("--concurrent"), default=1, help="trials run at once (default: 1)")
    sp.add_argument("--metric", choices=("auto", "eval_loss", "loss"), default="auto",
                    help="what picks the best trial: auto is the validation loss when there is validation data")
    sp.add_argument("--scheduler", choices=("none", "asha"), default="none",
                    help="asha: Ray Tune's ASHA stops trailing trials early")


def add_chat_parser(sub: Any, cluster_opt: Callable[[argparse.ArgumentParser], None]) -> None:
    ch = sub.add_parser("chat", help="ask a job's checkpoints a prompt (generation runs on the cluster)")
    ch.add_argument("name", help="the job (or a sweep trial, NAME-t3)")
    cluster_opt(ch)
    ch.add_argument("--checkpoint", action="append", default=None,
                    help="a checkpoint by name (repeat to compare side by side; default: the final one)")
    ch.add_argument("--prompt", default=None, help="the prompt (the %%train magic opens the chat widget without one)")
    ch.add_argument("--max-new-tokens", dest="max_new_tokens", type=int, default=64,
                    help="the longest answer, in tokens (default: %(default)s)")
    ch.add_argument("--temperature", type=float, default=0.0,
                    help="sampling temperature; 0 answers greedily, the same each time (default: %(default)s)")
    ch.add_argument("--top-p", dest="top_p", type=float, default=1.0,
                    help="nucleus sampling: draw from the most likely tokens up to this probability (default: "
                         "%(default)s)")
    ch.add_argument("--serve", choices=("merged", "adapter"), default="merged",
                    help="a LoRA checkpoint: its merged weights, or its base plus the adapter")
    ch.add_argument("--json", action="store_true", help="print the answers as JSON")


def sweep_from_args(a: argparse.Namespace) -> dict[str, Any]:
    """The spec's `sweep` from --param, --trials, --concurrent, --metric and --scheduler."""
    params: dict[str, Any] = {}
    for raw in a.param:
        name, sep, rest = raw.partition("=")
        if not sep or not rest:
            raise BadRequest(f"--param {raw}: write NAME=V1,V2 or NAME=MIN:MAX[:log]", details={"field": "sweep"})
        try:
            if ":" in rest:
                lo, hi, *scale = rest.split(":")
                params[name.strip()] = {"min": float(lo), "max": float(hi), "sampling": scale[0] if scale else "linear"}
            else:
                params[name.strip()] = {"values": [float(v) for v in rest.split(",") if v.strip()]}
        except ValueError:
            raise BadRequest(f"--param {raw}: the values must be numbers", details={"field": "sweep"}) from None
    return {"parameters": params, "trials": a.trials, "concurrent": a.concurrent, "metric": a.metric,
            "scheduler": a.scheduler}


def sweep_text(d: Any) -> str:
    """A sweep's comparison as text (the CLI's `show` of a sweep, and `sweep --wait`)."""
    lines = [f"[{d.name}] {d.status.value}: best by {d.metric_label or 'metric'}: {d.best or 'none yet'}"]
    for t in d.trials:
        values = ", ".join(f"{k}={v:g}" for k, v in t.values.items())
        loss = f"val loss {t.final_eval_loss:.4f}" if t.final_eval_loss is not None else (
            f"loss {t.final_loss:.4f}" if t.final_loss is not None else "no result yet")
        lines.append(f"  {'*' if t.name == d.best else ' '} {t.name:<24} {t.status.value:<10} {values}  {loss}")
    return "\n".join(lines)


def chat_command(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    if not a.prompt:
        raise BadRequest("chat: give --prompt (in a notebook, %train chat NAME opens the chat widget)",
                         details={"field": "prompt"})
    answers = svc.chat(a.cluster, job=a.name, sources=a.checkpoint or [], prompt=a.prompt,
                       max_new_tokens=a.max_new_tokens, temperature=a.temperature, top_p=a.top_p, serve=a.serve)
    if a.json:
        out(json.dumps(answers, indent=2))
    else:
        for ans in answers:
            out(f"[{ans['label']}] ({ans.get('served_as')}, {ans.get('new_tokens')} tokens)\n{ans['text']}")
    return answers
