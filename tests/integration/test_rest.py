"""REST through a real jupyter_server with the extension loaded, against the real local Ray cluster."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

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
    from jupyter_cleverthis.service.jobs import default_owner

    # who asks, as job owners are named (a token-only server: its own user, not Jupyter's random anonymous id)
    assert body["user"] == default_owner()
    schema = await _json(await jp_fetch("cleverthis", "api", "schema"))
    assert schema["job_spec"]["properties"]["epochs"]["default"] == 3


async def _until(fetch_detail, pred, tries=240, delay=0.5):
    import asyncio

    for _ in range(tries):
        detail = await fetch_detail()
        if pred(detail):
            return detail
        await asyncio.sleep(delay)
    return detail


async def test_job_routes_on_a_running_job(jp_fetch, jp_ws_fetch, jp_serverapp, ray_cluster, tiny_model, dataset,
                                           job_name):
    api = ("cleverthis", "api", "clusters", "local")
    spec = {"name": job_name, "base_model": tiny_model, "dataset_path": str(dataset), "epochs": 50,
            "batch_size": 4, "workers": 1}
    resp = await jp_fetch(*api, "jobs", method="POST", body=json.dumps(spec), request_timeout=180)
    assert resp.code == 201
    created = await _json(resp)
    from jupyter_cleverthis.service.jobs import default_owner

    # a shared server token identifies nobody (Jupyter makes up an "Anonymous" user per request): the server's user
    assert created["name"] == job_name and created["owner"] == default_owner()
    listed = await _json(await jp_fetch(*api, "jobs", params={"owner": created["owner"], "sort": "name"}))
    assert job_name in [j["name"] for j in listed["jobs"]] and listed["total"] >= 1
    nobody = await _json(await jp_fetch(*api, "jobs", params={"owner": "nobody-else"}))
    assert nobody == {"jobs": [], "total": 0}
    # the submitted spec, also as YAML that %%train reads back into the same spec ("Export", "Create from")
    import yaml

    from jupyter_cleverthis.spec import JobSpec

    exported = await _json(await jp_fetch(*api, "jobs", job_name, "spec"))
    assert {k: exported["spec"][k] for k in spec} == spec and exported["spec"]["cluster"] == "local"
    assert yaml.safe_load(exported["yaml"]) == {k: v for k, v in exported["spec"].items() if v is not None}
    assert JobSpec.model_validate(yaml.safe_load(exported["yaml"])).model_dump(mode="json") == exported["spec"]
    assert exported["yaml"].startswith(f"name: {job_name}\n")
    with pytest.raises(HTTPClientError) as dup:
        await jp_fetch(*api, "jobs", method="POST", body=json.dumps(spec), request_timeout=180)
    assert dup.value.code == 409 and json.loads(dup.value.response.body)["code"] == "job_exists"

    async def detail():
        return await _json(await jp_fetch(*api, "jobs", job_name))

    d = await _until(detail, lambda d: d["status"] == "running" and d["metrics"])
    assert d["status"] == "running", d
    assert d["plan"]["method"] == "lora" and d["checkpoint_dir"] == str(dataset / "checkpoints")
    # the sidebar's Nodes section: the head, its CPUs, and the running job's worker holding one of them
    nodes = (await _json(await jp_fetch(*api, "nodes")))["nodes"]
    assert nodes[0]["head"] is True and nodes[0]["ip"] == "127.0.0.1" and nodes[0]["CPU"]["total"] >= 1
    assert {"job": job_name, "CPU": 1.0, "GPU": None} in nodes[0]["used_by"], nodes

    # live tail over the server's websocket
    ws = await jp_ws_fetch(*api, "jobs", job_name, "logs", "tail")
    got = ""
    for _ in range(50):
        msg = await ws.read_message()
        got += msg or ""
        if "@@cleverthis-event" in got:
            break
    ws.close()
    assert "@@cleverthis-event" in got

    evs = await _json(await jp_fetch(*api, "jobs", job_name, "events", params={"since": 0}))
    assert evs["events"] and evs["next"] == evs["events"][-1]["i"]
    more = await _json(await jp_fetch(*api, "jobs", job_name, "events", params={"since": evs["next"]}))
    assert all(e["i"] > evs["next"] for e in more["events"])
    m = await _json(await jp_fetch(*api, "jobs", job_name, "metrics", params={"max_points": 10}))
    assert 1 <= len(m["step"]) <= 10 and len(m["step"]) == len(m["loss"]) and m["count"] >= len(m["step"])
    # what a drawn curve lacks: only the steps after the one it ends at
    last = int(m["last_step"])
    rest = await _json(await jp_fetch(*api, "jobs", job_name, "metrics", params={"after_step": last - 1}))
    assert rest["after_step"] == last - 1 and rest["step"] and all(s > last - 1 for s in rest["step"])
    part = await _json(await jp_fetch(*api, "jobs", job_name, "logs", params={"offset": 0, "limit": 100}))
    assert len(part["text"]) == 100 and part["next"] == 100 and part["size"] >= 100
    await _tensorboard_of(jp_fetch, jp_serverapp, api, job_name, d)

    with pytest.raises(HTTPClientError) as busy:  # delete refuses a running job
        await jp_fetch(*api, "jobs", job_name, method="DELETE")
    assert busy.value.code == 409

    with pytest.raises(HTTPClientError) as still:  # resume refuses a running job
        await jp_fetch(*api, "jobs", job_name, "resume", method="POST", body="{}")
    assert still.value.code == 409
    d = await _until(detail, lambda d: len(d["checkpoints"]) >= 1)
    await jp_fetch(*api, "jobs", job_name, "cancel", method="POST", body="")
    d = await _until(detail, lambda d: d["status"] == "cancelled")
    assert d["status"] == "cancelled"
    with pytest.raises(HTTPClientError) as nothing:  # Export merged names what is wrong, by field
        await jp_fetch(*api, "jobs", job_name, "export", method="POST", body=json.dumps({"checkpoint": "nope"}))
    assert nothing.value.code == 400 and json.loads(nothing.value.response.body)["details"] == {"field": "checkpoint"}
    done = d["checkpoints"][-1]["epoch"]
    resp = await jp_fetch(*api, "jobs", job_name, "resume", method="POST", body="{}", request_timeout=180)
    resumed = await _json(resp)
    assert resp.code == 201 and resumed["name"] == f"{job_name}-resume-1"
    assert resumed["base_model"] == d["checkpoints"][-1]["path"] and resumed["epochs"] == 50 - done
    await jp_fetch(*api, "jobs", resumed["name"], "cancel", method="POST", body="")
    # the sidebar's Compare: where the two specs differ (the resume starts from the checkpoint, for fewer epochs)
    cmp = await _json(await jp_fetch(*api, "compare", params={"jobs": f"{job_name},{resumed['name']}"}))
    diff = {row["key"]: row["values"] for row in cmp["diff"]}
    assert cmp["jobs"] == [job_name, resumed["name"]] and "name" not in diff
    assert diff["epochs"] == {job_name: 50, resumed["name"]: 50 - done}
    assert diff["base_model"] == {job_name: tiny_model, resumed["name"]: d["checkpoints"][-1]["path"]}
    for bad in (job_name, f"{job_name},{job_name}", ""):
        with pytest.raises(HTTPClientError) as one:
            await jp_fetch(*api, "compare", params={"jobs": bad})
        assert one.value.code == 400 and json.loads(one.value.response.body)["details"] == {"field": "jobs"}
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch(*api, "compare", params={"jobs": f"{job_name},no-such-job"})
    assert missing.value.code == 404
    token = ray_cluster.auth_token()
    for body in (d, resumed, listed, part, evs):
        assert token not in json.dumps(body)
    resp = await jp_fetch(*api, "jobs", job_name, method="DELETE")
    assert resp.code == 204
    with pytest.raises(HTTPClientError) as gone:
        await jp_fetch(*api, "jobs", job_name)
    assert gone.value.code == 404


async def _tensorboard_of(jp_fetch, jp_serverapp, api, job_name, d):
    """'Open in TensorBoard': the job's checkpoint folder in a TensorBoard behind the server's proxy, which holds
    the job's losses; it stops with the server."""
    assert d["tracking"]["tensorboard"]["viewer"] is True
    r = await jp_fetch(*api, "jobs", job_name, "tensorboard", request_timeout=120, raise_error=False)
    assert r.code == 200, r.body[:500]
    tb = await _json(r)
    assert tb["log_dir"] == os.path.join(d["checkpoint_dir"], "runs") and tb["run"] == job_name
    base = jp_serverapp.base_url
    assert tb["url"].startswith(f"{base}cleverthis/tensorboard/") and tb["url"].endswith("/")
    parts = tb["url"][len(base):].strip("/").split("/")
    page = await jp_fetch(*parts, "index.html")
    assert page.headers["Content-Type"].startswith("text/html") and b"tensorboard" in page.body.lower()
    for _ in range(120):  # TensorBoard reads the folder every 5 s
        tags = await _json(await jp_fetch(*parts, "data", "plugin", "scalars", "tags"))
        if "train/loss" in tags.get(job_name, {}):
            break
        await asyncio.sleep(0.5)
    assert "train/loss" in tags.get(job_name, {}), tags
    again = await _json(await jp_fetch(*api, "jobs", job_name, "tensorboard"))
    assert again["url"] == tb["url"]  # one TensorBoard per checkpoint folder
    boards = jp_serverapp.web_app.settings["cleverthis_tensorboards"]
    proc = boards.target(parts[2]).proc
    assert proc.poll() is None
    await jp_serverapp.extension_manager.extension_points["jupyter_cleverthis"].app.stop_extension()
    assert proc.poll() is not None and boards.target(parts[2]) is None
    with pytest.raises(HTTPClientError) as gone:
        await jp_fetch(*parts, "data", "logdir")
    assert gone.value.code == 404


async def test_plan_and_feasibility(jp_fetch, ray_cluster, tiny_model, dataset, tmp_path, job_name):
    api = ("cleverthis", "api", "clusters", "local")
    spec = {"name": job_name, "base_model": tiny_model, "dataset_path": str(dataset), "workers": 1}
    plan = await _json(await jp_fetch(*api, "plan", method="POST", body=json.dumps(spec), request_timeout=180))
    assert plan["errors"] == []
    assert plan["dataset"]["format"] == "instruction" and plan["dataset"]["examples"] == 158
    assert plan["token_lengths"]["max"] <= 128 and plan["token_lengths"]["mean"] > 0
    assert plan["plan"]["method"] == "lora" and "training_config" in plan["plan"]["reasons"]["method"]
    assert plan["checkpoint_dir"] == str(dataset / "checkpoints")
    # feasibility at create: the dataset must exist on the cluster (checked there), error names the field
    bad = {**spec, "dataset_path": str(tmp_path / "missing")}
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch(*api, "jobs", method="POST", body=json.dumps(bad), request_timeout=180)
    body = json.loads(e.value.response.body)
    assert e.value.code == 422 and body["details"]["errors"][0]["field"] == "dataset_path"
    assert str(tmp_path / "missing") in body["message"]
    broken = dataset / "train.jsonl"
    broken.write_text(broken.read_text() + "{oops\n")
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch(*api, "jobs", method="POST", body=json.dumps(spec), request_timeout=180)
    body = json.loads(e.value.response.body)
    assert e.value.code == 422 and "line 159: broken JSON" in body["message"]
    # the line as data, for the form's "Open at line 159"
    assert {k: body["details"]["errors"][0][k] for k in ("field", "path", "line", "text")} == {
        "field": "dataset_path", "path": str(broken), "line": 159, "text": "{oops"}
    # ... and where this server's files are (the lab opens the file there when it lies inside)
    clusters = await _json(await jp_fetch("cleverthis", "api", "clusters"))
    assert clusters["server_root"] and Path(clusters["server_root"]).is_absolute()


async def test_dashboard_proxy_reaches_configured_clusters_only(jp_fetch, ray_cluster):
    resp = await jp_fetch("cleverthis", "proxy", "local", "api", "version")
    assert resp.code == 200 and "ray_version" in json.loads(resp.body)
    for bad in ("..%2F..%2Fetc%2Fpasswd", "%2e%2e/api/version", "http:%2F%2Fexample.com"):
        r = await jp_fetch("cleverthis", "proxy", "local", bad, raise_error=False)
        assert r.code in (400, 404), (bad, r.code)
    r = await jp_fetch("cleverthis", "proxy", "elsewhere", "api", "version", raise_error=False)
    assert r.code == 404


async def test_cookie_session_posts_need_xsrf(jp_fetch, jp_serverapp):
    token = jp_serverapp.identity_provider.token
    r = await jp_fetch("api", "status", params={"token": token}, headers={"Authorization": ""})
    cookies = [c.split(";")[0] for c in r.headers.get_list("Set-Cookie")]
    cookie = "; ".join(c for c in cookies if not c.startswith("_xsrf"))
    assert cookie
    ok = await jp_fetch("cleverthis", "api", "clusters", headers={"Authorization": "", "Cookie": cookie})
    assert ok.code == 200  # the session cookie authenticates reads
    r = await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", method="POST", body="{}",
                       headers={"Authorization": "", "Cookie": cookie}, raise_error=False)
    assert r.code == 403  # ...but a cross-site POST without the XSRF token is refused


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
        parts = (pattern.replace("([^/]+)", "x").replace("(up|down)", "up").replace("(/.*)", "/data/logdir")
                 .replace("(.*)", "api/version"))
        parts = parts.strip("/").split("/")
        for method in ("get", "post", "put", "patch", "delete"):
            if method not in vars(handler) and not (method == "get" and "open" in vars(handler)):
                continue
            resp = await jp_fetch(*parts, method=method.upper(), body="{}" if method in ("post", "put") else None,
                                  headers={"Authorization": ""}, raise_error=False, follow_redirects=False)
            # the API answers 403; a page for the browser (the TensorBoard proxy) sends a GET to the login page
            login = resp.code == 302 and "/login" in resp.headers.get("Location", "") and method == "get"
            assert resp.code == 403 or login, (method, parts, resp.code)
            assert b"Traceback" not in resp.body
            checked += 1
    assert checked >= len(routes())


async def test_routes_live_under_a_non_root_base_url(jp_fetch, jp_base_url, jp_http_port, jp_serverapp):
    from tornado.httpclient import AsyncHTTPClient

    assert jp_base_url not in ("", "/")  # pytest-jupyter serves under a base_url like /a%40b/, as JupyterHub does
    assert (await jp_fetch("cleverthis", "api", "schema")).code == 200
    token = jp_serverapp.identity_provider.token
    r = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{jp_http_port}/cleverthis/api/schema",
                                      headers={"Authorization": f"token {token}"}, raise_error=False)
    assert r.code == 404


async def test_malformed_requests_never_get_a_500(jp_fetch):
    import random

    rng = random.Random(7)
    values = [None, True, 0, -1, 3, 1e309, "x", "a/b", "..", "é" * 70, [], {}, {"method": "sgd"}, "0" * 10_000]
    keys = ["name", "epochs", "batch_size", "workers", "job_type", "framework", "training_config", "extra"]
    bodies = ["", "null", "[]", "{", "{\"name\": ", "\x00\x01", "9" * 5000, json.dumps("just a string")]
    for _ in range(60):
        bodies.append(json.dumps({k: rng.choice(values) for k in rng.sample(keys, rng.randint(0, len(keys)))}))
    codes = []
    for body in bodies:
        for content_type in ("application/json", "text/plain"):
            r = await jp_fetch("cleverthis", "api", "clusters", "nowhere", "jobs", method="POST", body=body,
                               headers={"Content-Type": content_type}, raise_error=False)
            codes.append(r.code)
            assert 400 <= r.code < 500, (body[:80], r.code, r.body[:200])
            err = json.loads(r.body)
            assert set(err) == {"code", "message", "details"} and "Traceback" not in r.body.decode()
    for query in ({"since": "abc"}, {"since": "-5"}, {"max_points": "1"}, {"offset": "x"}):
        r = await jp_fetch("cleverthis", "api", "clusters", "local", "jobs", "nope", "events", params=query,
                           raise_error=False)
        assert 400 <= r.code < 500
    assert len(codes) >= 130


async def test_templates_save_list_and_delete(jp_fetch, job_name):
    """Save as template, through the server: validated as a spec, listed, removed (no cluster involved)."""
    api = ("cleverthis", "api", "templates")
    spec = {"name": job_name, "base_model": "/models/m", "dataset_path": "/data/d", "epochs": 2,
            "training_config": {"lora_r": 8}}
    saved = await _json(await jp_fetch(*api, job_name, method="PUT", body=json.dumps({"spec": spec})))
    assert saved == {"name": job_name, "spec": {k: v for k, v in spec.items() if k != "name"}}
    listed = await _json(await jp_fetch(*api))
    assert {"name": job_name, "spec": saved["spec"]} in listed["templates"]
    with pytest.raises(HTTPClientError) as bad:
        await jp_fetch(*api, job_name, method="PUT", body=json.dumps({"spec": {"epochs": 0}}))
    assert bad.value.code == 422 and json.loads(bad.value.response.body)["details"]["errors"][0]["field"] == "epochs"
    resp = await jp_fetch(*api, job_name, method="DELETE")
    assert resp.code == 204
    with pytest.raises(HTTPClientError) as gone:
        await jp_fetch(*api, job_name, method="DELETE")
    assert gone.value.code == 404


async def test_prefetch_answers_per_node(jp_fetch, ray_cluster, tiny_model, tmp_path, monkeypatch):
    """`POST .../download` (the job tab's "Pre-fetch model", the palette's command): the model cache of each node,
    read on the cluster; a model no node has (nothing can be downloaded here) is named, per node."""
    import uuid
    from pathlib import Path

    from .training_helpers import make_cached_model

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # travels with the helper job to the nodes
    repo = f"cleverthis-test/tiny-{uuid.uuid4().hex[:8]}"
    snap = make_cached_model(tmp_path / "hf", repo, Path(tiny_model))
    api = ("cleverthis", "api", "clusters", "local", "download")
    got = await _json(await jp_fetch(*api, method="POST", body=json.dumps({"model": repo}), request_timeout=300))
    assert got["ok"] is True and [(n["status"], n["path"]) for n in got["nodes"]] == [("cached", str(snap))], got
    other = f"cleverthis-test/absent-{uuid.uuid4().hex[:8]}"
    miss = await _json(await jp_fetch(*api, method="POST", body=json.dumps({"model": other}), request_timeout=300))
    assert miss["ok"] is False and f"model '{other}' is not in the model cache" in miss["nodes"][0]["error"]
    with pytest.raises(HTTPClientError) as bad:
        await jp_fetch(*api, method="POST", body=json.dumps({"model": " "}))
    assert bad.value.code == 400 and json.loads(bad.value.response.body)["details"] == {"field": "model"}
