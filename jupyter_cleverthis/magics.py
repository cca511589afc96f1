"""The `%train` line magic: the console script's grammar inside a notebook, with a live view on create."""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics, line_magic, magics_class
from IPython.display import display

from .cli import _HelpShown, execute, parse_line
from .errors import CleverThisError
from .job import Job, default_service


@magics_class
class TrainMagics(Magics):
    @line_magic
    def train(self, line: str) -> Any:
        """Launch and manage training jobs: `%train --help` shows the grammar."""
        try:
            a = parse_line(line)
            if a.command == "create" and not a.wait:
                from .widgets.live import JobProgress

                execute(a, lambda s: None, service=default_service())
                job = Job(a.name, a.cluster)
                display(JobProgress(job))
                return job
            result = execute(a, print, service=default_service())
        except _HelpShown:
            return None
        except CleverThisError as e:
            print(f"error: {e.message}")
            return None
        if a.command in ("create", "show", "cancel", "resume"):
            return Job(result.name, result.cluster)
        return result if a.command in ("list",) else None
