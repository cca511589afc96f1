"""The JSON Schemas the front-end's types are generated from (js/src/shared/generated/).

    python -m jupyter_cleverthis.schemas js/src/shared/generated

writes, next to the TypeScript that `npm run build:types` (js/scripts/build-types.mjs) compiles from them:
  api.schema.json      the REST bodies (and the widgets' traitlets) as served (serialization mode): JobSummary,
                       JobDetail (with Checkpoint, Metrics, Plan, Tracking...), the clusters, the pages of jobs,
                       events and logs, the loss curves, the pre-flight answer, a TensorBoard's address (the models
                       of service/models.py); JobSpec and TrainingConfig as accepted
  events.schema.json   the runtime's events (cleverthis_runtime.event_models), one model per `type`
  schema-bundle.json   the `GET /schema` answer the Create Job form is generated from (job_spec, training_config)

tests/unit/test_generated_types.py fails when the checked-in files differ from what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, models_json_schema

from .service.models import (
    ClusterList,
    ClusterState,
    Comparison,
    Curves,
    DownloadResult,
    EventsPage,
    ExportResult,
    FieldError,
    JobDetail,
    JobPage,
    JobSummary,
    LogsPage,
    NodeList,
    Preflight,
    SpecExport,
    Template,
    TemplateList,
    TensorBoardLink,
)
from .service.sweeps import SweepDetail
from .spec import JobSpec, TrainingConfig

# (model, mode): what REST answers is a model_dump(mode="json") of every field, defaults included, so its fields
# are all required in serialization mode; what it accepts (the spec) keeps its defaults optional.
API_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (JobSummary, "serialization"),
    (JobDetail, "serialization"),
    (JobPage, "serialization"),
    (ClusterList, "serialization"),
    (NodeList, "serialization"),
    (ExportResult, "serialization"),
    (DownloadResult, "serialization"),
    (ClusterState, "serialization"),
    (EventsPage, "serialization"),
    (LogsPage, "serialization"),
    (Curves, "serialization"),
    (Comparison, "serialization"),
    (TensorBoardLink, "serialization"),
    (SpecExport, "serialization"),
    (TemplateList, "serialization"),
    (Template, "serialization"),
    (Preflight, "serialization"),
    (FieldError, "serialization"),
    (SweepDetail, "serialization"),
    (JobSpec, "validation"),
    (TrainingConfig, "validation"),
]


class ServedJsonSchema(GenerateJsonSchema):
    """pydantic's generator, with every field of a serialized model required: model_dump writes them all
    (what `json_schema_serialization_defaults_required` does, without a change to each model's config)."""

    def field_is_required(self, field: Any, total: bool) -> bool:
        if self.mode == "serialization":
            return not field.get("serialization_exclude")
        return super().field_is_required(field, total)


def api_schema() -> dict[str, Any]:
    _, schema = models_json_schema(API_MODELS, schema_generator=ServedJsonSchema, title="CleverThisApi")
    return schema


def events_schema() -> dict[str, Any]:
    from cleverthis_runtime.event_models import json_schema

    return json_schema()


def schema_bundle() -> dict[str, Any]:
    """What `GET /schema` and the CreateJobForm widget serve (less the server's refresh interval)."""
    return {"job_spec": JobSpec.model_json_schema(), "training_config": TrainingConfig.model_json_schema()}


def schemas() -> dict[str, dict[str, Any]]:
    """File name -> content."""
    return {
        "api.schema.json": api_schema(),
        "events.schema.json": events_schema(),
        "schema-bundle.json": schema_bundle(),
    }


def dumps(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def export(out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in schemas().items():
        path = out / name
        path.write_text(dumps(schema), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m jupyter_cleverthis.schemas OUT_DIR", file=sys.stderr)
        return 2
    for path in export(args[0]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
