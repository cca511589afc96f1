"""One argument grammar for the `%train` magic and the `cleverthis-train` console script.

    %train --name N --cluster C --model M --dataset D [--type finetune] [--framework torch]
           [--epochs 3] [--batch-size 32] [--workers 2] [--wait]          create (the default subcommand)
    %train list | show N [--json] | logs N [--follow] | cancel N            manage jobs (all take --cluster)
    %train resume N [--epochs E] [--new-name M] [--wait] [--json]           continue a job as a new job
    %train cluster up | down | list [--json]                                the managed local cluster
    %train download MODEL [--cluster C] [--revision R] [--json]             pre-fetch a Hub model on every node
    %train sweep --name S ... --param lr=1e-4,3e-4 [--trials K] [--scheduler asha] | chat N --prompt P (cli_experiments)
    %train setup tensorflow [--path P]                                      the environment of framework tensorflow

Exit codes of `cleverthis-train`: 0 done (a waited-for job succeeded), 1 a waited-for job (or a download) did
not succeed, 2 a usage error (an unknown option, a bad value, an invalid spec), 3 the service or the cluster
refused or failed (not running, not found, Ray unreachable), 130 interrupted.
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

from .cli_experiments import add_chat_parser, add_sweep_options, chat_command, sweep_from_args, sweep_text
from .errors import BadRequest, CleverThisError, InvalidSpec
from .spec import JobSpec, JobStatus
from .text import detail_text, download_text, fmt_bytes, jobs_table, preflight_text, progress_line

SUBCOMMANDS = ("create", "sweep", "plan", "list", "show", "logs", "cancel", "resume", "export", "chat", "cluster", "download",
               "setup")


class UsageError(CleverThisError):
    status, code = 400, "usage"


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting (a magic must never kill the kernel)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}{_close_matches(message)}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:  # type: ignore[override]
        if message:
            raise UsageError(message.strip())
        raise HelpShown()


class HelpShown(Exception):
    """`--help` was shown: nothing more to do (argparse would have exited)."""


def _close_matches(message: str) -> str:
    """"; did you mean 'list'?" after argparse's "invalid choice: 'lst' (choose from ...)" (Python 3.14's
    suggest_on_error does the same; the project supports 3.10)."""
    import difflib
    import re

    m = re.match(r"argument [^:]+: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if not m:
        return ""
    choices = [c.strip().strip("'") for c in m.group(2).split(",")]
    close = difflib.get_close_matches(m.group(1), choices, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def default_cluster() -> str:
    return os.environ.get("CLEVERTHIS_CLUSTER", "local")


# create's options: (flag, JobSpec field); default, help and number type come from the field.
CREATE_OPTIONS = (
    ("--model", "base_model"), ("--dataset", "dataset_path"), ("--type", "job_type"), ("--start", "start"),
    ("--framework", "framework"),
    ("--epochs", "epochs"), ("--batch-size", "batch_size"), ("--workers", "workers"),
    ("--cpus-per-worker", "cpus_per_worker"), ("--gpus-per-worker", "gpus_per_worker"), ("--output-dir", "output_dir"),
)


def build_parser(prog: str = "cleverthis-train") -> argparse.ArgumentParser:
    import shtab

    from . import __version__

    p = _Parser(prog=prog, description="Launch and manage training jobs on Ray clusters. A first word that is an "
                "option (--name ...) creates a job.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}", help="print the version")
    shtab.add_argument_to(p, "--print-completion", help="print a shell completion script (bash, zsh or tcsh), e.g. "
                          "cleverthis-train --print-completion bash > ~/.local/share/bash-completion/completions/"
                          "cleverthis-train")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    _add_create_commands(sub)
    _add_job_commands(sub)
    _add_cluster_commands(sub)
    return p


def _cluster_opt(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--cluster", default=default_cluster(), help="cluster name or dashboard address")


def _add_create_commands(sub: Any) -> None:
    """create, sweep and plan: a job spec's options."""
    for cmd, helptext in (("create", "create a job (the default subcommand)"),
                          ("sweep", "create a sweep: the job tried over 1-3 parameters on Ray Tune (manual: Sweeps and chat)"),
                          ("plan", "the pre-flight of a job, without creating it: the dataset's formats and counts, "
                                   "token lengths, the plan and the first examples as the model sees them")):
        c = sub.add_parser(cmd, help=helptext)
        c.add_argument("--name", required=True, help=_field_help("name"))
        _cluster_opt(c)
        for flag, field in CREATE_OPTIONS:
            _spec_option(c, flag, field)
        c.add_argument("--config", dest="training_config", default=None,
                       help="training_config overrides: a JSON object, or a JSON or YAML file")
        if cmd != "plan":
            c.add_argument("--wait", action="store_true", help="block until the job ends; exit non-zero unless "
                                                               "succeeded")
        c.add_argument("--json", action="store_true", help="print the pre-flight as JSON" if cmd == "plan"
                       else "print the job as JSON")
        if cmd == "sweep":
            add_sweep_options(c, _int)


def _add_job_commands(sub: Any) -> None:
    """list, show, logs, cancel, resume and export: what is done to jobs."""
    ls = sub.add_parser("list", help="list jobs")
    _cluster_opt(ls)
    ls.add_argument("--json", action="store_true", help="print the jobs as JSON")

    for name, helptext in (("show", "show one job"), ("logs", "print a job's log"), ("cancel", "cancel a job")):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("name", help="the job's name")
        _cluster_opt(sp)
        if name == "show":
            sp.add_argument("--json", action="store_true", help="print the job's detail as JSON")
        if name == "logs":
            sp.add_argument("--follow", "-f", action="store_true",
                            help="keep printing the log as it grows, until the job ends")

    rs = sub.add_parser("resume", help="continue a job from its latest checkpoint as a new job")
    rs.add_argument("name", help="the job to continue")
    _cluster_opt(rs)
    rs.add_argument("--epochs", type=_int("--epochs"), default=None, help="default: the epochs that remain")
    rs.add_argument("--new-name", dest="new_name", default=None, help="default: NAME-resume-N")
    rs.add_argument("--wait", action="store_true", help="block until the new job ends; exit non-zero unless succeeded")
    rs.add_argument("--json", action="store_true", help="print the new job as JSON")

    ex = sub.add_parser("export", help="write a checkpoint as a standalone merged fp16/bf16 model folder")
    ex.add_argument("name", help="the job whose checkpoint to export")
    _cluster_opt(ex)
    ex.add_argument("--checkpoint", default=None, help="a checkpoint of the job (default: its last, e.g. epoch-final)")
    ex.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"),
                    help="the exported weights' precision (default: %(default)s)")
    ex.add_argument("--json", action="store_true", help="print the export's result as JSON")


def _add_cluster_commands(sub: Any) -> None:
    """download, cluster, chat and setup: the cluster, its model cache and environments."""
    dl = sub.add_parser("download", help="pre-fetch a Hugging Face model into the model cache of every node")
    dl.add_argument("model", help="Hub model id, e.g. meta-llama/Llama-2-7b-hf")
    _cluster_opt(dl)
    dl.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    dl.add_argument("--json", action="store_true", help="print the download's result per node as JSON")

    cl = sub.add_parser("cluster", help="manage clusters: up, down, list")
    cl.add_argument("action", choices=["up", "down", "list"],
                    help="up: start the managed local cluster, down: stop it, list: the clusters this server knows")
    cl.add_argument("--name", default="local", help="managed cluster name (up/down)")
    cl.add_argument("--num-cpus", dest="num_cpus", type=_int("--num-cpus"), default=None,
                    help="CPUs the local cluster offers jobs (up; default: the machine's)")
    cl.add_argument("--metrics", action="store_true", default=None,
                    help="export Ray's Prometheus metrics on a loopback port (no authentication; off by default)")
    cl.add_argument("--json", action="store_true", help="print the clusters as JSON")

    add_chat_parser(sub, _cluster_opt)
    st = sub.add_parser("setup", help="create an environment jobs need: tensorflow (for framework tensorflow)")
    st.add_argument("what", choices=["tensorflow"], help="which environment: tensorflow")
    st.add_argument("--path", default=None, help="where (default: $CLEVERTHIS_HOME/envs/tensorflow)")


def _spec_option(parser: argparse.ArgumentParser, flag: str, field: str) -> None:
    """`flag` for JobSpec's `field`: its default, its description as help, and a number type for a number field."""
    info = JobSpec.model_fields[field]
    kind = {int: _int, float: _float}.get(info.annotation)  # type: ignore[call-overload]
    parser.add_argument(flag, dest=field, default=info.default, type=kind(flag) if kind else None,
                        help=_field_help(field) + (" (default: %(default)s)" if info.default is not None else ""))


def _field_help(field: str) -> str:
    return (JobSpec.model_fields[field].description or field).replace("%", "%%")


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


TOP_LEVEL_OPTIONS = ("-h", "--help", "--version", "--print-completion")


def parse(argv: Sequence[str], prog: str = "cleverthis-train") -> argparse.Namespace:
    """The arguments; a first word that is an option other than the top level's (--name ...) means `create`, a
    first word that is no subcommand is refused with the close matches."""
    args = list(argv)
    if not args or (args[0].startswith("-") and args[0].split("=")[0] not in TOP_LEVEL_OPTIONS):
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
        for k in ("name", "cluster", "base_model", "dataset_path", "job_type", "start", "framework", "epochs",
                  "batch_size", "workers", "cpus_per_worker", "gpus_per_worker", "output_dir")
    }
    if a.training_config:
        data["training_config"] = load_config_arg(a.training_config)
    if getattr(a, "param", None):  # `sweep`
        data["sweep"] = sweep_from_args(a)
    return JobService.validate(data)


def load_config_arg(value: str) -> dict[str, Any]:
    """--config: a JSON object, or a JSON or YAML file (YAML is a superset of JSON: one parser reads both)."""
    import yaml

    text, where = value, "--config"
    if not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.is_file():
            raise BadRequest(f"--config: {value} is neither a JSON object nor an existing file")
        text, where = path.read_text(), f"--config {value}"
    try:
        obj = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise BadRequest(f"{where}: not valid JSON or YAML{line}: {getattr(e, 'problem', e)}") from e
    if not isinstance(obj, dict):
        raise BadRequest(f"{where}: expected a mapping of training_config keys (a JSON object or YAML mapping)")
    return obj


def execute(a: argparse.Namespace, out: Callable[[str], None], *, service: Any = None) -> Any:
    """Run a parsed command; text goes to `out`. Returns the job detail(s) or cluster list."""
    from .service.jobs import JobService

    cmd = a.command or "create"
    run = COMMANDS.get(cmd)
    if run is None:
        raise UsageError(f"unknown command {cmd}")
    return run(a, out, service or JobService())


def _create(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    spec = spec_from_args(a)
    d = svc.create(spec)
    return _finish(a, out, svc, d, progress_line)


def _plan(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    """The form's pre-flight from the command line: computed on the cluster, nothing is created."""
    result = svc.preflight(spec_from_args(a))
    out(json.dumps(result, indent=2) if a.json else preflight_text(result))
    if result.get("errors"):
        raise UsageError("the pre-flight found errors (above)")
    return result


def _finish(a: argparse.Namespace, out: Callable[[str], None], svc: Any, d: Any, line: Callable[[Any], str]) -> Any:
    """After create or resume: with --wait, progress lines until the job ends and its checkpoints; then the job."""
    if a.wait:
        last = [""]

        def show(det: Any) -> None:
            text = progress_line(det)
            if text != last[0]:
                out(text)
                last[0] = text

        d = svc.wait(d.cluster, d.name, on_change=show)
        for c in d.checkpoints:
            out(f"checkpoint {c.name}: {c.path}")
        line = progress_line
    out(d.model_dump_json(indent=2) if a.json else line(d))
    return d


def _list(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    jobs = svc.list(a.cluster)
    out(json.dumps([j.model_dump(mode="json") for j in jobs], indent=2) if a.json else jobs_table(jobs))
    return jobs


def _show(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    d = svc.get(a.cluster, a.name)
    out(d.model_dump_json(indent=2) if a.json else detail_text(d) + (
        "\n" + sweep_text(svc.sweep(a.cluster, a.name)) if d.trials else ""))
    return d


def _logs(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    if not a.follow:
        page = svc.logs(a.cluster, a.name)
        if page["text"]:
            out(page["text"].rstrip("\n"))
        return page["text"]
    from .service.log_stream import iter_job_log  # aiohttp: only for a follow

    svc.get(a.cluster, a.name)  # an unknown job is a clear error, not an empty follow
    rest = ""  # the log from its start, line by line as it is written, until the job has ended
    for text in iter_job_log(svc.cluster(a.cluster), a.name):
        *lines, rest = (rest + text).split("\n")
        if lines:
            out("\n".join(lines))
    if rest:
        out(rest)
    return None


def _resume(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    d = svc.resume(a.cluster, a.name, epochs=a.epochs, new_name=a.new_name)
    return _finish(a, out, svc, d, lambda d: f"[{d.name}] resuming '{a.name}' from {d.base_model} for {d.epochs} "
                                             f"epoch(s) ({d.status.value})")


def _export(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    checkpoint = a.checkpoint
    if checkpoint is None:  # the job's result: its final checkpoint once it has one, else the newest
        ckpts = svc.get(a.cluster, a.name).checkpoints
        final = [c for c in ckpts if "epoch-final" in c.marks]
        checkpoint = (final or ckpts or [None])[-1]
        if checkpoint is None:
            raise BadRequest(f"job '{a.name}' has no checkpoint yet", details={"field": "checkpoint"})
        checkpoint = checkpoint.name
    r = svc.export(a.cluster, a.name, checkpoint, a.dtype)
    out(r.model_dump_json(indent=2) if a.json else
        f"[{a.name}] {checkpoint} exported as {r.dtype} to {r.path} ({fmt_bytes(r.size_bytes)})")
    return r


def _cancel(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    d = svc.cancel(a.cluster, a.name)
    out(f"[{d.name}] cancel requested ({d.status.value})")
    return d


def _download(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    def progress(e: dict[str, Any]) -> None:
        if e["type"] == "download_progress" and e.get("total") and not a.json:
            out(f"  {e.get('node')}: {e['downloaded'] / 1e9:.2f} / {e['total'] / 1e9:.2f} GB")

    res = svc.download(a.cluster, a.model, revision=a.revision, on_progress=progress)
    out(json.dumps(res, indent=2) if a.json else download_text(res))
    return res


def _cluster(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    from .service.clusters import ClusterRegistry
    from .service.probes import cluster_resources

    reg: ClusterRegistry = svc.registry
    if a.action == "up":
        local = reg.local(a.name)
        if local.is_running():
            cfg = local.config()
            out(f"cluster '{cfg.name}' already running at {cfg.address}")
            return cfg.public()
        t0 = time.time()
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


def _setup(a: argparse.Namespace, out: Callable[[str], None], svc: Any) -> Any:
    from .service import tfenv

    return str(tfenv.setup(a.path, out=out))


COMMANDS: dict[str, Callable[[argparse.Namespace, Callable[[str], None], Any], Any]] = {
    "create": _create, "sweep": _create, "plan": _plan, "chat": chat_command, "list": _list, "show": _show, "logs": _logs, "resume": _resume, "export": _export, "cancel": _cancel,
    "download": _download, "cluster": _cluster, "setup": _setup,
}


#: errors that mean "what you typed is wrong" (exit 2); every other error is the service's or the cluster's (3)
USAGE_ERRORS = (UsageError, BadRequest, InvalidSpec)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        a = parse(sys.argv[1:] if argv is None else argv)
        d = execute(a, lambda s: print(s, flush=True))
    except HelpShown:
        return 0
    except USAGE_ERRORS as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    except CleverThisError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    if a.command in ("create", "sweep", "resume", None) and getattr(a, "wait", False):
        return 0 if d.status == JobStatus.SUCCEEDED else 1
    if a.command == "download":
        return 0 if d.get("ok") else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
