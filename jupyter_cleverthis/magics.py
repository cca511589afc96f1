"""`%train` and `%%train`: the console script's grammar inside a notebook, each answer shown as a widget.

    %train --name N --model M --dataset D ...   create; shows a live status line and the loss curve
    %train list | show N | logs N               JobList / JobView / LogStream widgets
    %train cancel N | resume N [--epochs K]     returns the Job handle
    %train sweep --name S ... --param P=V1,V2   create a sweep; shows the trials compared (SweepView)
    %train chat N [--checkpoint C ...]          the ChatWithCheckpoint widget (asks --prompt at once)
    %%train [--wait]                            the cell is a YAML or JSON spec (a `training_config`
                                                mapping inside it is the training config)
"""

from __future__ import annotations

from typing import Any

import yaml
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from .cli import HelpShown, build_parser, execute, parse_line
from .errors import BadRequest, CleverThisError
from .job import Job, default_service
from .text import progress_line


@magics_class
class TrainMagics(Magics):
    @line_cell_magic
    def train(self, line: str, cell: str | None = None) -> Any:
        """Launch and manage training jobs on Ray clusters; `%train --help` shows the grammar."""
        try:
            if cell is not None:
                return self._create_from_cell(line, cell)
            if line.strip() in ("-h", "--help", "help"):
                print(build_parser("%train").format_help())
                return None
            return self._line(line)
        except HelpShown:
            return None
        except CleverThisError as e:
            print(f"error: {e.message}")
            return None

    def _line(self, line: str) -> Any:
        from .widgets import (
            ChatWithCheckpoint,
            JobList,
            JobProgress,
            JobView,
            LogStream,
            LossCurve,
            SweepView,
        )

        a = parse_line(line)
        svc = default_service()
        cmd = a.command or "create"
        if cmd == "sweep" and not a.wait:
            execute(a, lambda s: None, service=svc)
            display(SweepView(a.name, cluster=a.cluster, service=svc))
            return Job(a.name, a.cluster, service=svc)
        if cmd == "chat":
            job = Job.attach(a.name, cluster=a.cluster, service=svc)
            chat = ChatWithCheckpoint(job, a.checkpoint, serve=a.serve, max_new_tokens=a.max_new_tokens,
                                      temperature=a.temperature, top_p=a.top_p)
            display(chat)
            if a.prompt:
                chat.ask(a.prompt)
            return chat
        if cmd == "show" and not a.json and svc.get(a.cluster, a.name).trials:
            display(SweepView(a.name, cluster=a.cluster, service=svc))
            return Job(a.name, a.cluster, service=svc)
        if cmd == "create" and not a.wait:
            execute(a, lambda s: None, service=svc)
            job = Job(a.name, a.cluster, service=svc)
            display(JobProgress(job), LossCurve(job))
            return job
        if cmd == "list" and not a.json:
            display(JobList(a.cluster, service=svc))
            return None
        if cmd == "show" and not a.json:
            job = Job.attach(a.name, cluster=a.cluster, service=svc)
            display(JobView(job, service=svc))
            return job
        if cmd == "logs":
            job = Job.attach(a.name, cluster=a.cluster, service=svc)
            display(LogStream(job, service=svc))
            return None
        result = execute(a, print, service=svc)
        if cmd in ("create", "sweep", "show", "cancel", "resume"):
            return Job(result.name, a.cluster if cmd != "create" else result.cluster, service=svc)
        return result if cmd in ("list", "export") else None

    def _create_from_cell(self, line: str, cell: str) -> Any:
        from .widgets import JobProgress, LossCurve

        try:
            data = yaml.safe_load(cell) if cell.strip() else {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise BadRequest(f"%%train: the cell is not valid YAML/JSON{where}: {getattr(e, 'problem', e)}") from e
        if not isinstance(data, dict):
            raise BadRequest("%%train: the cell must be a mapping of spec fields (name, base_model, ...)")
        opts = line.split()
        svc = default_service()
        spec = svc.validate(data)
        svc.create(spec)
        job = Job(spec.name, spec.cluster, service=svc)
        if "--wait" in opts:
            d = svc.wait(spec.cluster, spec.name, on_change=lambda d: None)
            print(progress_line(d))
            return job
        display(JobProgress(job), LossCurve(job))
        return job
