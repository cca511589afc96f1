"""How a failed request to Ray is put to the user."""

from __future__ import annotations


def test_a_ray_request_failing_as_the_cluster_stops_says_the_cluster_is_not_running(tmp_path):
    """A list in flight when the head stops: the words of a stopped cluster (409), not Ray's failure (502); a head
    that still answers keeps Ray's failure."""
    import http.server
    import socket
    import threading

    from jupyter_cleverthis.errors import ClusterError, ClusterNotRunning
    from jupyter_cleverthis.service.clusters import ClusterConfig
    from jupyter_cleverthis.service.ray_client import failure

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    gone = failure(ClusterConfig("local", f"http://127.0.0.1:{closed}", managed=True), "could not list jobs")
    assert isinstance(gone, ClusterNotRunning) and gone.status == 409
    assert str(gone) == "cluster 'local' is not running (start it with `%train cluster up`)"

    class Version(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"ray_version": "2.60.0"}')

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Version)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        up = ClusterConfig("local", f"http://127.0.0.1:{server.server_address[1]}", managed=True)
        still = failure(up, "could not list jobs on 'local': 500")
        assert isinstance(still, ClusterError) and still.status == 502 and str(still).endswith("500")
    finally:
        server.shutdown()


def test_a_submit_failing_as_the_cluster_stops_says_the_cluster_is_not_running(monkeypatch):
    """The submit is another request in flight: a connection error as the head goes away is a stopped cluster
    (409), not an internal error; a head that still answers and refuses keeps Ray's failure (502)."""
    import socket

    import pytest
    import requests

    from jupyter_cleverthis.errors import ClusterError, ClusterNotRunning
    from jupyter_cleverthis.service.clusters import ClusterConfig
    from jupyter_cleverthis.service.jobs import JobService
    from jupyter_cleverthis.spec import JobSpec

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]

    class Client:
        def get_job_info(self, name):
            raise RuntimeError(f"Job {name} does not exist")

        def submit_job(self, **kw):
            raise requests.ConnectionError("Connection refused")

    svc = JobService()
    gone = ClusterConfig("local", f"http://127.0.0.1:{closed}", managed=True)
    monkeypatch.setattr(svc, "ensure_running", lambda name: gone)
    monkeypatch.setattr(svc, "client", lambda name: Client())
    monkeypatch.setattr(svc, "_runtime_env", lambda spec: {})
    spec = JobSpec(name="mid-stop", base_model="/m", dataset_path="/d")
    with pytest.raises(ClusterNotRunning, match="is not running"):
        svc.create(spec, owner="alice", check=False)

    monkeypatch.setattr("jupyter_cleverthis.service.ray_client.ping", lambda cfg: True)  # the head still answers
    with pytest.raises(ClusterError, match="Ray refused the job") as e:
        svc.create(spec, owner="alice", check=False)
    assert e.value.status == 502
