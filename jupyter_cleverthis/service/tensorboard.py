"""TensorBoard for a job's records ("Open in TensorBoard"): one TensorBoard per checkpoint folder, started on
demand by the Jupyter server on a free loopback port, reached only through the server's authenticated proxy
(`<base_url>cleverthis/tensorboard/<key>/`), and stopped when the server stops."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import requests

from ..errors import BadRequest, CleverThisError
from .clusters import free_port

log = logging.getLogger(__name__)
PREFIX = "cleverthis/tensorboard"


@dataclass
class Board:
    key: str
    log_dir: str
    port: int
    proc: subprocess.Popen[bytes]

    def alive(self) -> bool:
        return self.proc.poll() is None


def installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def viewable(log_dir: str | None) -> bool:
    """Whether this machine can show a TensorBoard of log_dir's checkpoint folder (installed, and the folder here)."""
    return bool(log_dir) and installed() and Path(log_dir).parent.is_dir()  # type: ignore[arg-type]


def key_of(log_dir: str) -> str:
    return hashlib.sha1(os.path.realpath(log_dir).encode()).hexdigest()[:16]


class TensorBoards:
    """The server's TensorBoards, by the key of their folder (`runs/` of a checkpoint folder)."""

    def __init__(self, base_url: str = "/", start_timeout: float = 90.0) -> None:
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self.start_timeout = start_timeout
        self._boards: dict[str, Board] = {}
        self._lock = threading.Lock()

    def path_prefix(self, key: str) -> str:
        return f"{self.base_url}{PREFIX}/{key}"

    def open(self, log_dir: str) -> Board:
        """The TensorBoard of the checkpoint folder holding log_dir (`<checkpoints>/runs/<job>`): running, or
        started now; every job that wrote there is one of its runs."""
        if not installed():
            raise CleverThisError("TensorBoard is not installed on this Jupyter server: pip install tensorboard")
        runs = Path(log_dir).parent
        if not runs.is_dir():
            raise BadRequest(f"the TensorBoard folder {runs} is not on this Jupyter server's disk (the job's "
                             "checkpoint folder is elsewhere): run tensorboard where it is",
                             details={"field": "tracking.tensorboard"})
        key = key_of(str(runs))
        with self._lock:
            board = self._boards.get(key)
            if board is None or not board.alive():
                board = self._boards[key] = self._start(key, str(runs))
        self._wait(board)
        return board

    def target(self, key: str) -> Board | None:
        board = self._boards.get(key)
        return board if board is not None and board.alive() else None

    def stop_all(self) -> None:
        with self._lock:
            boards, self._boards = list(self._boards.values()), {}
        for b in boards:
            _stop(b.proc)

    def _start(self, key: str, runs: str) -> Board:
        port = free_port()
        # TensorBoard compares its prefix with the decoded request path (a base_url may be quoted: /a%40b/)
        cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", runs, "--host", "127.0.0.1",
               "--port", str(port), "--path_prefix", unquote(self.path_prefix(key)), "--reload_interval", "5"]
        logf = open(os.devnull, "wb")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        logf.close()
        log.info("TensorBoard for %s on 127.0.0.1:%d (pid %d)", runs, port, proc.pid)
        return Board(key, runs, port, proc)

    def _wait(self, board: Board) -> None:
        url = f"http://127.0.0.1:{board.port}{self.path_prefix(board.key)}/data/logdir"
        end = time.time() + self.start_timeout
        while time.time() < end:
            if not board.alive():
                raise CleverThisError(f"TensorBoard for {board.log_dir} exited at start (code "
                                      f"{board.proc.returncode})")
            try:
                if requests.get(url, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        raise CleverThisError(f"TensorBoard for {board.log_dir} did not start within {self.start_timeout:.0f}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
