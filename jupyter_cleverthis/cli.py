"""One argument grammar for the `%train` magic and the `cleverthis-train` console script.

    %train --name N --cluster C --model M --dataset D [--type finetune] [--framework torch]
           [--epochs 3] [--batch-size 32] [--workers 2] [--wait]          create (the default subcommand)
    %train list | show N [--json] | logs N | cancel N                       manage jobs (all take --cluster)
    %train cluster up | down | list [--json]                                the managed local cluster
    %train download MODEL [--cluster C] [--revision R] [--json]             pre-fetch a Hub model on every node
    %train setup tensorflow [--path P]                                      the environment of framework tensorflow
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import BadRequest, CleverThisError
from .spec import DEFAULT_BASE_MODEL, DEFAULT_DATASET_PATH, JobStatus

SUBCOMMANDS = ("create", "list", "show", "logs", "cancel", "resume", "cluster", "download", "setup")


class UsageError(CleverThisError):
    status, code = 400, "usage"


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting (a magic must never kill the kernel)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:  # type: ignore[override]
        if message:
            raise UsageError(message.strip())
        raise _HelpShown()


class _HelpShown(Exception):
    pass


def default_cluster() -> str:
    return os.environ.get("CLEVERTHIS_CLUSTER", "local")


def build_parser(prog: str = "cleverthis-train") -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="Launch and manage training jobs on Ray clusters.")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    def cluster_opt(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--cluster", default=default_cluster(), help="cluster name or dashboard address")

    c = sub.add_parser("create", help="create a job (the default subcommand)")
    c.add_argument("--name", required=True, help="unique job name")
    cluster_opt(c)
    c.add_argument("--model", dest="base_model", default=DEFAULT_BASE_MODEL, help="HF model id or local path")
    c.add_argument("--dataset", dest="dataset_path", default=DEFAULT_DATASET_PATH, help="dataset path on the nodes")
    c.add_argument("--type", dest="job_type", default="finetune", help="train or finetune")
    c.add_argument("--framework", default="torch", help="torch or tensorflow")
    c.add_argument("--epochs", type=_int("--epochs"), default=3)
    c.add_argument("--batch-size", dest="batch_size", type=_int("--batch-size"), default=32)
    c.add_argument("--workers", type=_int("--workers"), default=2)
    c.add_argument("--cpus-per-worker", dest="cpus_per_worker", type=_float("--cpus-per-worker"), default=1.0)
    c.add_argument("--gpus-per-worker", dest="gpus_per_worker", type=_float("--gpus-per-worker"), default=0.0)
    c.add_argument("--output-dir", dest="output_dir", default=None, help="checkpoint folder")
    c.add_argument("--config", dest="training_config", default=None,
                   help="training_config overrides: a JSON object or a path to a JSON file")
    c.add_argument("--wait", action="store_true", help="block until the job ends; exit non-zero unless succeeded")
    c.add_argument("--json", action="store_true", help="print the job as JSON")

    ls = sub.add_parser("list", help="list jobs")
    cluster_opt(ls)
    ls.add_argument("--json", action="store_true")

    for name, helptext in (("show", "show one job"), ("logs", "print a job's log"), ("cancel", "cancel a job")):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("name")
        cluster_opt(sp)
        if name == "show":
            sp.add_argument("--json", action="store_true")

    rs = sub.add_parser("resume", help="continue a job from its latest checkpoint as a new job")
    rs.add_argument("name")
    cluster_opt(rs)
    rs.add_argument("--epochs", type=_int("--epochs"), default=None, help="default: the epochs that remain")
    rs.add_argument("--new-name", dest="new_name", default=None, help="default: NAME-resume-N")

    dl = sub.add_parser("download", help="pre-fetch a Hugging Face model into the model cache of every node")
    dl.add_argument("model", help="Hub model id, e.g. meta-llama/Llama-2-7b-hf")
    cluster_opt(dl)
    dl.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    dl.add_argument("--json", action="store_true")

    cl = sub.add_parser("cluster", help="manage clusters: up, down, list")
    cl.add_argument("action", choices=["up", "down", "list"])
    cl.add_argument("--name", default="local", help="managed cluster name (up/down)")
    cl.add_argument("--num-cpus", dest="num_cpus", type=_int("--num-cpus"), default=None)
    cl.add_argument("--metrics", action="store_true", default=None,
                    help="export Ray's Prometheus metrics on a loopback port (no authentication; off by default)")
    cl.add_argument("--json", action="store_true")

    st = sub.add_parser("setup", help="create an environment jobs need: tensorflow (for framework tensorflow)")
    st.add_argument("what", choices=["tensorflow"])
    st.add_argument("--path", default=None, help="where (default: $CLEVERTHIS_HOME/envs/tensorflow)")
    return p


def _number(flag: str, kind: type, expected: str) -> Callable[[str], Any]:
    def conv(v: str) -> Any:
        try:
            return kind(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got '{v}'") from None

    conv.__name__ = flag
    return conv


def _int(flag: str) -> Callable[[str], int]:
    return _number(flag, int, "a whole number")


def _float(flag: str) -> Callable[[str], float]:
    return _number(flag, float, "a number")


def parse(argv: Sequence[str], prog: str = "cleverthis-train") -> argparse.Namespace:
    args = list(argv)
    if not args or (args[0] not in SUBCOMMANDS and args[0] not in ("-h", "--help")):
        args = ["create", *args]
    return build_parser(prog).parse_args(args)


def parse_line(line: str, prog: str = "%train") -> argparse.Namespace:
    try:
        return parse(shlex.split(line), prog)
    except ValueError as e:  # unbalanced quotes
        raise UsageError(f"{prog}: {e}") from e


def spec_from_args(a: argparse.Namespace) -> Any:
    from .service.jobs import JobService

    data: dict[str, Any] = {
        k: getattr(a, k)
        for k in ("name", "cluster", "base_model", "dataset_path", "job_type", "framework", "epochs",
                  "batch_size", "workers", "cpus_per_worker", "gpus_per_worker", "output_dir")
    }
    if a.training_config:
        data["training_config"] = load_config_arg(a.training_config)
    return JobService.validate(data)


def load_config_arg(value: str) -> dict[str, Any]:
    text = value
    if not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.exists():
            raise BadRequest(f"--config: {value} is neither a JSON object nor an existing file")
        text = path.read_text()
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise BadRequest(f"--config: not valid JSON ({e})") from e
    if not isinstance(obj, dict):
        raise BadRequest("--config: expected a JSON object")
    return obj


# -- rendering shared by the CLI and the magic's text output ------------------------------------------------------
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
    if d.checkpoint_dir:
        lines.append(f"  checkpoints: {d.checkpoint_dir}")
    for c in d.checkpoints:
        lines.append(f"    {c.name}: {c.path} (train loss {c.train_loss})")
    lines.append(f"  ray log: {d.log_url}")
    return "\n".join(lines)


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


def execute(a: argparse.Namespace, out: Callable[[str], None], *, service: Any = None) -> Any:
    """Run a parsed command; text goes to `out`. Returns the job detail(s) or cluster list."""
    from .service.clusters import ClusterRegistry, cluster_resources
    from .service.jobs import JobService

    svc = service or JobService()
    cmd = a.command or "create"
    if cmd == "create":
        spec = spec_from_args(a)
        d = svc.create(spec)
        if a.wait:
            last = [""]

            def show(det: Any) -> None:
                line = progress_line(det)
                if line != last[0]:
                    out(line)
                    last[0] = line

            d = svc.wait(spec.cluster, spec.name, on_change=show)
            for c in d.checkpoints:
                out(f"checkpoint {c.name}: {c.path}")
        out(d.model_dump_json(indent=2) if a.json else progress_line(d))
        return d
    if cmd == "list":
        jobs = svc.list(a.cluster)
        out(json.dumps([j.model_dump(mode="json") for j in jobs], indent=2) if a.json else jobs_table(jobs))
        return jobs
    if cmd == "show":
        d = svc.get(a.cluster, a.name)
        out(d.model_dump_json(indent=2) if a.json else detail_text(d))
        return d
    if cmd == "logs":
        text = svc.logs(a.cluster, a.name)["text"]
        out(text)
        return text
    if cmd == "resume":
        d = svc.resume(a.cluster, a.name, epochs=a.epochs, new_name=a.new_name)
        out(f"[{d.name}] resuming '{a.name}' from {d.base_model} for {d.epochs} epoch(s) ({d.status.value})")
        return d
    if cmd == "cancel":
        d = svc.cancel(a.cluster, a.name)
        out(f"[{d.name}] cancel requested ({d.status.value})")
        return d
    if cmd == "download":
        def progress(e: dict[str, Any]) -> None:
            if e["type"] == "download_progress" and e.get("total") and not a.json:
                out(f"  {e.get('node')}: {e['downloaded'] / 1e9:.2f} / {e['total'] / 1e9:.2f} GB")

        res = svc.download(a.cluster, a.model, revision=a.revision, on_progress=progress)
        if a.json:
            out(json.dumps(res, indent=2))
        else:
            out(download_text(res))
        return res
    if cmd == "cluster":
        reg: ClusterRegistry = svc.registry
        if a.action == "up":
            if reg.local(a.name).is_running():
                cfg = reg.local(a.name).config()
                out(f"cluster '{cfg.name}' already running at {cfg.address}")
                return cfg.public()
            t0 = time.time()
            local = reg.local(a.name)
            cfg = local.up(num_cpus=a.num_cpus, metrics=a.metrics)
            out(f"cluster '{cfg.name}' running at {cfg.address} ({time.time() - t0:.1f}s)")
            if (local.state() or {}).get("metrics_url"):
                out(f"Ray metrics (Prometheus, no authentication): {local.state()['metrics_url']}")
            return cfg.public()
        if a.action == "down":
            was = reg.local(a.name).down()
            out(f"cluster '{a.name}' stopped" if was else f"cluster '{a.name}' was not running")
            return was
        rows = []
        for name, cfg in reg.configs().items():
            status = reg.status(name)
            rows.append({**cfg.public(), "status": status, "dashboard_url": cfg.address,
                         "resources": cluster_resources(cfg) if status == "running" else None})
        if a.json:
            out(json.dumps(rows, indent=2))
        else:
            out("\n".join(f"{r['name']:<14} {r['status']:<12} {r['address']}" for r in rows))
        return rows
    if cmd == "setup":
        from .service import tfenv

        return str(tfenv.setup(a.path, out=out))
    raise UsageError(f"unknown command {cmd}")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        a = parse(sys.argv[1:] if argv is None else argv)
        d = execute(a, lambda s: print(s, flush=True))
    except _HelpShown:
        return 0
    except CleverThisError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if a.command == "create" and getattr(a, "wait", False):
        return 0 if d.status == JobStatus.SUCCEEDED else 1
    if a.command == "download":
        return 0 if d.get("ok") else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
