"""The REST bodies that are not a job's projection: the answers of the helper jobs (the pre-flight,
`POST /clusters/{cluster}/plan`, cleverthis_runtime.preflight; the pre-fetch, `POST .../download`; Export merged,
`POST .../export`), templates, a spec's export, a comparison of jobs and the TensorBoard link; re-exported by
models.py with the other REST bodies."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from .models import Plan


class FieldError(BaseModel):
    """A problem with one field of the spec (`training_config.x` for a training config field; "" for the spec)."""

    field: str
    message: str
    path: str | None = None  # a dataset error on one line of a file: that file, the line (1-based) and its text
    line: int | None = None
    text: str | None = None


class DatasetFacts(BaseModel):
    format: str
    formats: dict[str, int] = {}  # records of each format, when the data mixes conversational formats
    examples: int
    validation_examples: int = 0
    files: list[str] = []
    sampled: bool = False  # create's quick check: the counts are of the first records only


class ChatTemplateChoice(BaseModel):
    name: str
    reason: str


class TargetModulesChoice(BaseModel):
    modules: str | list[str]
    reason: str


class PreviewRun(BaseModel):
    """A run of an example's tokens as the model sees them; `trained`: they count toward the loss."""

    text: str
    trained: bool
    tokens: int


class Preflight(BaseModel):
    """`POST /clusters/{cluster}/plan`: what the job would do, computed on the cluster (cleverthis_runtime.preflight):
    field errors, warnings, the dataset's facts, token lengths, the merged training config, the checkpoint folder and
    its owner, and the automatic plan. A fact the pre-flight could not establish (or skipped) is null."""

    model_config = ConfigDict(extra="allow")
    errors: list[FieldError] = []
    warnings: list[str] = []
    training_config_file: str | None = None
    dataset: DatasetFacts | None = None
    training_config: dict[str, Any] | None = None
    checkpoint_dir: str | None = None
    checkpoint_owner: str | None = None
    resume_from: str | None = None
    # sampled, min, max, mean, p50, p95, truncated
    token_lengths: dict[str, float] | None = None
    parameters: float | None = None
    plan: Plan | None = None
    chat_template: ChatTemplateChoice | None = None
    lora_target_modules: TargetModulesChoice | None = None
    preview: list[list[PreviewRun]] = []


class DownloadResult(BaseModel):
    """`POST /clusters/{cluster}/download`: the pre-fetch's answer, per node (status cached, downloaded or error,
    with path, bytes, seconds or the error); `ok` when every node has the model."""

    model_config = ConfigDict(extra="allow")
    model: str
    revision: str | None = None
    ok: bool
    nodes: list[dict[str, Any]] = []
    seconds: float | None = None
    error: str | None = None


class ExportResult(BaseModel):
    """`POST .../jobs/{name}/export`: the standalone merged model folder written on the cluster."""

    job: str
    checkpoint: str
    source: str
    path: str
    dtype: str
    size_bytes: int | None = None


class Template(BaseModel):
    """A saved spec (`$CLEVERTHIS_HOME/templates/<name>.yaml`): every field but the job's name."""

    name: str
    spec: dict[str, Any]


class TemplateList(BaseModel):
    """`GET /templates`, by name."""

    templates: list[Template]


class SpecExport(BaseModel):
    """`GET .../jobs/{name}/spec`: the spec a job was submitted with, as a dict and as YAML that `%%train` and
    `cleverthis-train create --config` accept."""

    spec: dict[str, Any]
    yaml: str


class TensorBoardLink(BaseModel):
    """`GET .../jobs/{name}/tensorboard`: where the TensorBoard of the job's records is (the server's proxy, same
    origin), the folder it shows and the job's run in it."""

    url: str
    log_dir: str
    run: str


class SpecDifference(BaseModel):
    """One key whose value differs between the compared jobs' specs (`training_config.<key>` for its keys)."""

    key: str
    values: dict[str, Any]


class Comparison(BaseModel):
    """`GET /clusters/{cluster}/compare?jobs=a,b`: where the jobs' specs differ, key by key (their curves come from
    each job's `GET .../metrics`)."""

    jobs: list[str]
    diff: list[SpecDifference]
