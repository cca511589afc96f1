"""The front-end's generated types start from JSON Schemas checked in under js/src/shared/generated: they must be
what the pydantic models export today (js/test/generatedTypes.test.ts checks the TypeScript compiled from them).

On a failure: python -m jupyter_cleverthis.schemas js/src/shared/generated && (cd js && npm run build:types)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_cleverthis import schemas
from jupyter_cleverthis.service.models import Checkpoint, JobDetail, JobSummary, Metrics
from jupyter_cleverthis.spec import JobSpec

GENERATED = Path(__file__).resolve().parents[2] / "js" / "src" / "shared" / "generated"
REGENERATE = "python -m jupyter_cleverthis.schemas js/src/shared/generated && (cd js && npm run build:types)"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("schemas")
    assert schemas.main([str(out)]) == 0
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(out.iterdir())}


def test_exports_every_schema(exported: dict[str, str]) -> None:
    assert set(exported) == {"api.schema.json", "events.schema.json", "schema-bundle.json"}
    checked_in = {p.name for p in GENERATED.glob("*.json")}
    assert checked_in == set(exported), f"js/src/shared/generated has other schemas than the exporter's: {REGENERATE}"


@pytest.mark.parametrize("name", ["api.schema.json", "events.schema.json", "schema-bundle.json"])
def test_checked_in_schema_is_current(exported: dict[str, str], name: str) -> None:
    current = (GENERATED / name).read_text(encoding="utf-8")
    assert json.loads(current) == json.loads(exported[name]), f"{name} is stale: {REGENERATE}"
    assert current == exported[name], f"{name} differs in layout only: {REGENERATE}"


def test_api_schema_has_the_rest_models() -> None:
    defs = schemas.api_schema()["$defs"]
    for model in (JobSummary, JobDetail, Checkpoint, Metrics, JobSpec):
        assert model.__name__ in defs
    assert defs["JobStatus"]["enum"] == ["queued", "initializing", "running", "succeeded", "failed", "cancelled"]


def test_served_fields_are_required() -> None:
    """model_dump writes every field, defaults included: the front-end may rely on each being there."""
    defs = schemas.api_schema()["$defs"]
    for model in (JobSummary, JobDetail, Checkpoint, Metrics):
        assert set(defs[model.__name__]["required"]) == set(model.model_fields), model.__name__
    detail = JobDetail(name="j", cluster="local", status="queued", ray_status="PENDING").model_dump(mode="json")
    assert set(detail) == set(defs["JobDetail"]["required"])


def test_accepted_spec_keeps_defaults_optional() -> None:
    spec = schemas.api_schema()["$defs"]["JobSpec"]
    assert "epochs" not in spec.get("required", [])
    assert "epochs" in spec["properties"]


def test_bundle_is_what_get_schema_serves() -> None:
    bundle = schemas.schema_bundle()
    assert bundle["job_spec"] == JobSpec.model_json_schema()
    assert list(bundle) == ["job_spec", "training_config"]


def test_events_are_one_model_per_type() -> None:
    events = schemas.events_schema()
    assert events["discriminator"]["propertyName"] == "type"
    step = events["$defs"]["StepEvent"]
    assert step["properties"]["type"]["const"] == "step"
    assert "enum" in events["$defs"]["Phase"]
