"""Ray clusters: the managed `local` one (started and stopped by us, loopback only) and configured ones.

Configured clusters come from `$CLEVERTHIS_HOME/clusters.json` ({"name": {"address": "http://host:8265",
"token_file": "..."}}) and from `RAY_ADDRESS` (an http(s) dashboard address, cluster name `ray-address`).
A `--cluster` value that is itself an http(s) address is accepted too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from ..errors import ClusterError, ClusterNotFound
from .probes import cluster_resources, jobs_api_ready, node_registered, ping

log = logging.getLogger(__name__)

LOCAL = "local"
START_ATTEMPTS = 3
AGENT_WAIT_S = 60.0  # the head's job agent answers within seconds on an idle machine
AGENT_FAILED = "Failed to start HTTP server"  # Ray's agent log when its port is taken (the agent stays, unusable)
ENV_CLUSTER = "ray-address"


def home() -> Path:
    return Path(os.environ.get("CLEVERTHIS_HOME", Path.home() / ".cleverthis"))


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    address: str  # the dashboard's http address, which serves the Job API
    token_file: str | None = None
    token: str | None = None
    managed: bool = False
    # Whether the environment's default token (RAY_AUTH_TOKEN_PATH, RAY_AUTH_TOKEN, ~/.ray/auth_token) may go to
    # this address: only to a cluster somebody configured (clusters.json, the server's trait, RAY_ADDRESS), never to
    # an ad-hoc address typed on the command line, and never to the managed cluster (its own token file).
    default_token: bool = False

    def auth_token(self) -> str | None:
        if self.token:
            return self.token
        if self.token_file:
            return Path(self.token_file).read_text().strip() if os.path.exists(self.token_file) else None
        if not self.default_token:
            return None
        f = os.environ.get("RAY_AUTH_TOKEN_PATH")
        if f and os.path.exists(f):
            return Path(f).read_text().strip()
        if os.environ.get("RAY_AUTH_TOKEN"):
            return os.environ["RAY_AUTH_TOKEN"].strip()
        default = Path.home() / ".ray" / "auth_token"
        return default.read_text().strip() if default.exists() else None

    def headers(self) -> dict[str, str]:
        tok = self.auth_token()
        return {"Authorization": f"Bearer {tok}"} if tok else {}

    def sdk_headers(self) -> dict[str, str | None]:
        """Headers for Ray's JobSubmissionClient. Without a token of ours, Ray's SDK would add the environment's
        default token itself (to any address); an `Authorization: None` entry stops that, and requests drops it."""
        return self.headers() or {"Authorization": None}

    def public(self) -> dict[str, Any]:
        """What may be shown to users: never the token."""
        return {"name": self.name, "address": self.address, "managed": self.managed}


def loopback_interface() -> str | None:
    """The name of this machine's loopback interface (`lo` on Linux, `lo0` on macOS), if it has one."""
    names = {name for _, name in socket.if_nameindex()}
    return next((n for n in ("lo", "lo0") if n in names), None)


def free_port() -> int:
    """One free loopback port. For several at once use `free_ports`: two calls here may give the same port."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports: every socket stays bound until all are chosen, so the kernel cannot hand
    the same port out twice (it did: `ray start` refused a metrics port equal to the agent's grpc port)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return True


class LocalCluster:
    """A Ray head on this machine: `ray start --head --block` on free loopback ports, stopped by its pid."""

    def __init__(self, name: str = LOCAL, root: Path | None = None) -> None:
        self.name = name
        self.dir = (root or home()) / "clusters" / name
        self.state_file = self.dir / "state.json"
        self.token_file = self.dir / "auth_token"
        self.log_file = self.dir / "ray-start.log"

    def state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def config(self) -> ClusterConfig:
        st = self.state() or {}
        return ClusterConfig(
            name=self.name,
            address=st.get("dashboard_url", "http://127.0.0.1:8265"),
            token_file=str(self.token_file),
            managed=True,
        )

    def is_running(self) -> bool:
        st = self.state()
        return bool(st and _pid_alive(int(st["pid"])) and ping(self.config()))

    def up(self, *, num_cpus: int | None = None, metrics: bool | None = None, timeout: float = 180.0) -> ClusterConfig:
        """Start the head unless it already runs (idempotent); returns its config once the Job API answers.

        `metrics`: export Ray's Prometheus metrics (default: `CLEVERTHIS_LOCAL_METRICS=1`, else off). The export
        port has no authentication, so it is off unless asked for; when on it listens on loopback only."""
        if metrics is None:
            metrics = os.environ.get("CLEVERTHIS_LOCAL_METRICS", "").strip().lower() in ("1", "true", "yes", "on")
        st = self.state()
        if st and _pid_alive(int(st["pid"])):
            if _wait(lambda: ping(self.config()), 60):
                return self.config()
            raise ClusterError(f"local cluster process {st['pid']} runs but its dashboard does not answer")
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.token_file.exists():
            self.token_file.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
            self.token_file.chmod(0o600)
        # A loaded machine: Ray gives its raylet 30 s to register with the GCS ("The current node timed out during
        # startup"), a limit it does not let us change; starting again is what a user would do.
        for attempt in range(1, START_ATTEMPTS + 1):
            since = self.log_file.stat().st_size if self.log_file.exists() else 0
            cfg, proc = self._launch(num_cpus, metrics)
            up = _wait(lambda c=cfg, p=proc: (ping(c) and node_registered(c)) or p.poll() is not None, timeout)
            up = up and proc.poll() is None
            # The dashboard answers before the job agent is ready; wait for the Job API and for the head's job agent
            # (Ray submits every job through it), then for the first resource report (the sidebar and why-queued
            # read it; it lags the node by a few seconds).
            no_agent = up and not (_wait(lambda c=cfg: jobs_api_ready(c), 60) and self._wait_for_agent())
            if up and not no_agent:
                _wait(lambda c=cfg: cluster_resources(c) is not None, 30)
                return cfg
            said = (self._agent_log_tail() if no_agent else "") or self._log_since(since)
            self.down()
            if attempt == START_ATTEMPTS or not (no_agent or "timed out during startup" in said):
                what = "its job agent did not start" if no_agent else f"it did not start within {timeout:.0f}s"
                raise ClusterError(f"local Ray cluster: {what}; Ray said:\n{said}")
            # A port another program took between our pick and Ray's bind kills the job agent, and with it every
            # submit ("No available agent"): fresh ports on a new start are what a user would try.
            log.warning("local Ray cluster: %s; starting again on fresh ports",
                        "the job agent did not come up" if no_agent else "the node timed out during startup")
        raise AssertionError("unreachable")

    def _agent_ready(self) -> bool:
        """The head's dashboard agent answers its health check (Ray's job head submits every job through it)."""
        url = (self.state() or {}).get("agent_url")
        if not url:
            return True  # a head started by an older version: nothing to check
        try:
            return requests.get(f"{url}/api/healthz", headers=self.config().headers(), timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def _log_since(self, offset: int) -> str:
        with open(self.log_file, errors="replace") as f:
            f.seek(offset)
            return f.read()[-2000:]

    def _agent_port(self, free: int) -> int:
        """The dashboard agent's port: `free`, chosen with the others (a seam for the test of a taken port)."""
        return free

    def _wait_for_agent(self) -> bool:
        """True once the agent answers; False when it said it cannot serve (its port was taken) or after a minute."""
        _wait(lambda: self._agent_ready() or AGENT_FAILED in self._agent_log_tail(), AGENT_WAIT_S)
        return self._agent_ready()

    def _agent_log_tail(self) -> str:
        """The end of the head's dashboard agent log (where Ray says why the agent died)."""
        temp = (self.state() or {}).get("temp_dir")
        path = Path(temp or "/nonexistent") / "session_latest" / "logs" / "dashboard_agent.log"
        try:
            return path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _launch(self, num_cpus: int | None, metrics: bool = False) -> tuple[ClusterConfig, subprocess.Popen[bytes]]:
        """`ray start --head --block` on free loopback ports; its pid and addresses go to the state file.

        Every listener on loopback: `ray start` turns `--node-ip-address=127.0.0.1` into the machine's address
        (`services.resolve_ip_for_localhost`) unless Ray's multi-node mode is off
        (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, what Ray does on macOS and Windows); the node's address then
        stays 127.0.0.1, and the GCS, raylet, workers, agents and metrics exporters all bind to it. The cluster
        is for this machine: another node can still join it from here (the tests' second node does)."""
        gcs, dash, client, autoscaler_metrics, dashboard_metrics, metrics_port, agent = free_ports(7)
        agent_port = self._agent_port(agent)
        # Ray's autoscaler and dashboard always serve their own Prometheus series, on fixed ports (44217, 44227)
        # unless told; free ones keep two users' clusters on one machine apart. Both bind to the node address.
        own_metrics = {"AUTOSCALER_METRIC_PORT": str(autoscaler_metrics), "DASHBOARD_METRIC_PORT": str(dashboard_metrics)}
        tag = hashlib.sha1(str(self.dir.resolve()).encode()).hexdigest()[:8]
        temp_dir = f"/tmp/cleverthis-ray-{tag}"
        ray_bin = str(Path(sys.executable).with_name("ray"))
        cmd = [
            ray_bin, "start", "--head", "--block", "--disable-usage-stats",
            "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
            f"--port={gcs}", f"--dashboard-port={dash}",
            f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent_port}",
            f"--temp-dir={temp_dir}",
        ]  # fmt: skip
        if metrics:
            cmd.append(f"--metrics-export-port={metrics_port}")
        if num_cpus is not None:
            cmd.append(f"--num-cpus={num_cpus}")
        env = dict(os.environ)
        env.update(
            RAY_AUTH_MODE="token",
            RAY_AUTH_TOKEN_PATH=str(self.token_file),
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            RAY_USAGE_STATS_ENABLED="0",
            RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
            # Ray Train's preemption watcher polls for cloud node drains: none happen on this machine, and it is
            # one more Python process for every job (docs/clusters.md)
            RAY_TRAIN_ENABLE_PREEMPTION_WATCHER="0",
            RAY_enable_metrics_collection="1" if metrics else "0",
            **own_metrics,
        )
        # Ray's log monitor (workers' output -> drivers -> job logs) globs the session's log folder and stats every
        # worker log in it 10 times a second while it holds under 1,000 files: with a few hundred files from earlier
        # jobs, ~5% of a core. Once a second finds a new worker's log just as well (read from its start: no line is
        # lost, the first may come up to a second later); lines of a log already open still follow at 10 Hz.
        env.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")
        env.setdefault("LOG_NAME_UPDATE_INTERVAL_S", "1")
        # torch's gloo connects its workers on the address the host name resolves to (often the machine's own
        # address): on the loopback interface instead, unless the user chose one
        lo = loopback_interface()
        if lo and "GLOO_SOCKET_IFNAME" not in env:
            env["GLOO_SOCKET_IFNAME"] = lo
        env.pop("RAY_ADDRESS", None)
        env.pop("RAY_AUTH_TOKEN", None)
        with open(self.log_file, "ab") as logf:
            proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                                    stdin=subprocess.DEVNULL)
        state = {
            "pid": proc.pid,
            "dashboard_url": f"http://127.0.0.1:{dash}",
            "gcs_address": f"127.0.0.1:{gcs}",
            "temp_dir": temp_dir,
            "agent_url": f"http://127.0.0.1:{agent_port}",
            "metrics_url": f"http://127.0.0.1:{metrics_port}/metrics" if metrics else None,
            "component_metrics_ports": {k: int(v) for k, v in own_metrics.items()},
            "started_at": time.time(),
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, self.state_file)
        return self.config(), proc

    def down(self, timeout: float = 90.0) -> bool:
        """SIGTERM the `ray start --block` process (it drains the node), then wait; True if it was running."""
        st = self.state()
        if not st:
            return False
        pid = int(st["pid"])
        was = _pid_alive(pid)
        if was:
            os.kill(pid, signal.SIGTERM)
            if not _wait(lambda: not _pid_alive(pid), timeout):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        self.state_file.unlink(missing_ok=True)
        return was


def _wait(cond: Any, timeout: float, every: float = 0.5) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(every)
    return bool(cond())


class ClusterRegistry:
    """Name -> cluster. Reads the config each time, so edits apply without a restart.

    `allow_addresses`: whether a raw http(s) address stands for a cluster. True in the user's own process (the CLI,
    the magic); the server passes False, so that no request can point it, and a token, at another host.
    """

    def __init__(self, root: Path | None = None, extra: dict[str, dict[str, Any]] | None = None, *,
                 allow_addresses: bool = True) -> None:
        self.root = root
        self.extra = extra or {}
        self.allow_addresses = allow_addresses

    def local(self, name: str = LOCAL) -> LocalCluster:
        return LocalCluster(name, self.root)

    def configs(self) -> dict[str, ClusterConfig]:
        out = {LOCAL: self.local().config()}
        cfg_file = (self.root or home()) / "clusters.json"
        entries: dict[str, dict[str, Any]] = {}
        if cfg_file.exists():
            try:
                entries.update(json.loads(cfg_file.read_text()))
            except ValueError as e:
                raise ClusterError(f"{cfg_file}: not valid JSON ({e})") from e
        entries.update(self.extra)
        for name, e in entries.items():
            if not isinstance(e, dict) or "address" not in e:
                raise ClusterError(f"cluster '{name}' needs an 'address' (the dashboard's http address)")
            out[name] = ClusterConfig(name=name, address=str(e["address"]).rstrip("/"),
                                      token_file=e.get("token_file"), token=e.get("token"), default_token=True)
        ra = os.environ.get("RAY_ADDRESS", "")
        if ra.startswith(("http://", "https://")) and ENV_CLUSTER not in out:
            out[ENV_CLUSTER] = ClusterConfig(name=ENV_CLUSTER, address=ra.rstrip("/"), default_token=True)
        return out

    def get(self, name: str) -> ClusterConfig:
        cfgs = self.configs()
        if name in cfgs:
            return cfgs[name]
        if self.allow_addresses and name.startswith(("http://", "https://")):
            configured = [c for c in cfgs.values() if c.address == name.rstrip("/")]
            # the address of a configured cluster is that cluster (its own token); any other gets no token
            return configured[0] if configured else ClusterConfig(name=name, address=name.rstrip("/"))
        raise ClusterNotFound(
            f"unknown cluster '{name[:200]}'; known: {', '.join(sorted(cfgs))}",
            details={"field": "cluster"},
        )

    def status(self, name: str) -> str:
        cfg = self.get(name)
        if cfg.managed:
            st = self.local(name).state()
            if not st or not _pid_alive(int(st["pid"])):
                return "stopped"
        return "running" if ping(cfg) else ("unreachable" if not cfg.managed else "starting")
