"""Authorization and owners on a real jupyter_server (the extension loaded) and the real local Ray cluster.

The server's identity provider says the token's user is "bob"; its authorizer records every question it is asked and
can be told to refuse writes, as a deployment that lets a user read but not write would.
"""

from __future__ import annotations

import json

import pytest
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User

from jupyter_cleverthis.server.handlers import routes
from jupyter_cleverthis.service.jobs import JobService
from jupyter_cleverthis.spec import JobSpec

pytestmark = pytest.mark.integration


class RecordingAuthorizer(Authorizer):
    deny_writes = False
    asked: list[tuple[str, str, str]] = []

    def is_authorized(self, handler, user, action, resource):  # noqa: ANN001
        RecordingAuthorizer.asked.append((user.username, action, resource))
        return not (self.deny_writes and action == "write" and resource == "cleverthis")


class Bob(IdentityProvider):
    def generate_anonymous_user(self, handler):  # noqa: ANN001 - a token login is bob, not a random id
        return User(username="bob", name="Bob")


@pytest.fixture
def jp_server_config() -> dict:
    return {"ServerApp": {"jpserver_extensions": {"jupyter_cleverthis": True}, "authorizer_class": RecordingAuthorizer,
                          "identity_provider_class": Bob},
            "CleverThisApp": {"admin_users": ["carol"]}}


@pytest.fixture
def alices_job(ray_cluster, tiny_model, tmp_path, job_name) -> str:
    """A job of alice's (submitted from her own process); it fails fast (no dataset), so it has ended."""
    svc = JobService()
    svc.create(JobSpec(name=job_name, base_model=tiny_model, dataset_path=str(tmp_path / "none"), epochs=1,
                       workers=1), owner="alice", check=False)
    svc.wait("local", job_name, poll=1.0, timeout=300)
    return job_name


def _calls(job: str) -> list[tuple[str, list[str], str | None]]:
    """(method, path parts, body) for every route and method the extension serves."""
    out = []
    for pattern, handler in routes():
        parts = (pattern.replace("/cleverthis/api/clusters/([^/]+)/jobs/([^/]+)", f"/cleverthis/api/clusters/local/jobs/{job}")
                 .replace("([^/]+)/(up|down)", "local/up").replace("([^/]+)", "local").replace("(/.*)", "/data/logdir")
                 .replace("(.*)", "api/version"))
        for method in ("get", "post", "put", "patch", "delete"):
            if method in vars(handler):
                reads = method.upper() in getattr(handler, "reads", {"GET"})
                out.append((method.upper(), parts.strip("/").split("/"), "{}" if method in ("post", "put") else None,
                            reads))
    return out


async def test_a_read_only_user_can_read_everything_and_change_nothing(jp_fetch, alices_job):
    RecordingAuthorizer.deny_writes, RecordingAuthorizer.asked = True, []
    try:
        calls = _calls(alices_job)
        for method, parts, body, reads in calls:
            r = await jp_fetch(*parts, method=method, body=body, raise_error=False, request_timeout=120)
            if reads:  # GETs, and the TensorBoard proxy's POSTs (its data queries)
                assert r.code != 403, (parts, r.code, r.body[:200])
            else:
                assert r.code == 403, (method, parts, r.code)
                err = json.loads(r.body)
                assert err["code"] == "forbidden" and "does not allow you to change" in err["message"], err
        # every request was put to Jupyter's authorizer as (action, "cleverthis"): a route without it fails here
        asked = [(a, res) for u, a, res in RecordingAuthorizer.asked if res == "cleverthis"]
        assert len(asked) >= len(calls) and {a for a, _ in asked} == {"read", "write"}
        assert all(u == "bob" for u, _, _ in RecordingAuthorizer.asked)
    finally:
        RecordingAuthorizer.deny_writes = False


async def test_only_the_owner_or_an_admin_changes_a_job(jp_fetch, jp_serverapp, alices_job):
    api = ("cleverthis", "api", "clusters", "local", "jobs")
    listed = json.loads((await jp_fetch(*api)).body)["jobs"]
    assert [j["owner"] for j in listed if j["name"] == alices_job] == ["alice"]  # everyone sees every job's owner
    for action, method, body in (("cancel", "POST", ""), ("resume", "POST", "{}"), (None, "DELETE", None)):
        parts = (*api, alices_job, action) if action else (*api, alices_job)
        r = await jp_fetch(*parts, method=method, body=body, raise_error=False)
        err = json.loads(r.body)
        assert r.code == 403 and err["code"] == "forbidden", (action, r.code, err)
        assert err["message"].startswith(f"job '{alices_job}' belongs to alice: only alice (or an admin")
    svc = jp_serverapp.web_app.settings["cleverthis_service"]
    assert svc.admin_users == {"carol"}  # CleverThisApp.admin_users reaches the service
    svc.admin_users = frozenset({"bob"})
    try:  # an admin may: the cancel of an ended job is accepted, the delete forgets it
        assert (await jp_fetch(*api, alices_job, "cancel", method="POST", body="")).code == 200
        assert (await jp_fetch(*api, alices_job, method="DELETE")).code == 204
    finally:
        svc.admin_users = frozenset({"carol"})


def test_the_kernel_and_the_cli_act_for_the_jupyterhub_user(monkeypatch, alices_job):
    from jupyter_cleverthis.errors import Forbidden

    monkeypatch.setenv("JUPYTERHUB_USER", "bob")
    with pytest.raises(Forbidden, match="belongs to alice"):
        JobService().cancel("local", alices_job)
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    assert JobService().cancel("local", alices_job).name == alices_job
