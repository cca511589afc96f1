"""REST through a real jupyter_server with the extension loaded, against the real local Ray cluster."""

from __future__ import annotations

import json

import pytest
from tornado.httpclient import HTTPClientError

pytestmark = pytest.mark.integration


async def _json(resp):
    return json.loads(resp.body)


async def test_clusters_and_schema(jp_fetch, ray_cluster):
    body = await _json(await jp_fetch("cleverthis", "api", "clusters"))
    local = [c for c in body["clusters"] if c["name"] == "local"][0]
    assert local["status"] == "running" and local["resources"]["CPU"]["total"] >= 1
    assert "token" not in json.dumps(body).lower()
    schema = await _json(await jp_fetch("cleverthis", "api", "schema"))
    assert schema["job_spec"]["properties"]["epochs"]["default"] == 3


async def test_create_list_detail_cancel(jp_fetch, ray_cluster, tiny_model, dataset, job_name):
    spec = {"name": job_name, "base_model": tiny_model, "dataset_path": str(dataset), "epochs": 50,
            "batch_size": 4, "workers": 1}
    resp = await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", method="POST", body=json.dumps(spec))
    assert resp.code == 201
    created = await _json(resp)
    assert created["name"] == job_name and created["owner"]
    listed = await _json(await jp_fetch("cleverthis", "api", "clusters", "local", "jobs"))
    assert job_name in [j["name"] for j in listed["jobs"]]
    with pytest.raises(HTTPClientError) as dup:
        await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", method="POST", body=json.dumps(spec))
    assert dup.value.code == 409 and json.loads(dup.value.response.body)["code"] == "job_exists"

    import asyncio

    for _ in range(240):  # until training runs, then cancel it
        detail = await _json(await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", job_name))
        if detail["status"] == "running" and detail["metrics"]:
            break
        await asyncio.sleep(0.5)
    assert detail["status"] == "running", detail
    evs = await _json(await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", job_name, "events",
                                     params={"since": 0}))
    assert evs["events"] and evs["next"] == evs["events"][-1]["i"]
    more = await _json(await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", job_name, "events",
                                      params={"since": evs["next"]}))
    assert all(e["i"] > evs["next"] for e in more["events"])
    await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", job_name, "cancel", method="POST", body="")
    for _ in range(120):
        detail = await _json(await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", job_name))
        if detail["status"] == "cancelled":
            break
        await asyncio.sleep(0.5)
    assert detail["status"] == "cancelled"
    logs = await _json(await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", job_name, "logs"))
    assert "@@cleverthis-event" in logs["text"]


@pytest.mark.parametrize(
    "body,code,field",
    [
        ({"name": "bad/name"}, 422, "name"),
        ({"name": "ok", "epochs": 0}, 422, "epochs"),
        ({"name": "ok", "surprise": 1}, 422, ""),
        ("not json", 400, None),
    ],
)
async def test_invalid_create_gets_field_errors(jp_fetch, body, code, field):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", method="POST",
                       body=body if isinstance(body, str) else json.dumps(body))
    assert e.value.code == code
    err = json.loads(e.value.response.body)
    assert set(err) == {"code", "message", "details"} and "Traceback" not in err["message"]
    if field:
        assert err["details"]["errors"][0]["field"] == field


async def test_unknown_job_and_cluster_are_404(jp_fetch):
    for path in (("clusters", "local", "jobs", "nope-404"), ("clusters", "nowhere", "jobs")):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("cleverthis", "api", *path)
        assert e.value.code in (404,) or e.value.code == 409


async def test_every_route_requires_auth(jp_fetch):
    from jupyter_cleverthis.server.handlers import routes

    checked = 0
    for pattern, handler in routes():
        parts = pattern.replace("([^/]+)", "x").replace("(up|down)", "up").strip("/").split("/")
        for method in ("get", "post", "put", "patch", "delete"):
            if method not in vars(handler):
                continue
            resp = await jp_fetch(*parts, method=method.upper(), body="{}" if method != "get" else None,
                                  headers={"Authorization": ""}, raise_error=False, follow_redirects=False)
            assert resp.code == 403, (method, parts, resp.code)
            assert b"Traceback" not in resp.body
            checked += 1
    assert checked >= len(routes())
