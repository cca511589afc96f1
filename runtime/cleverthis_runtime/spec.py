"""The job spec and the training config: one pydantic model shared by the form, the magic, REST and the runtime.

This module imports nothing heavier than pydantic, so it travels with every job (runtime_env py_modules)
and loads in the Jupyter server without torch.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from .strict import StrictModel
from .sweep_spec import SweepSpec

NAME_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$"
# NAME_PATTERN in words: what every front-end says instead of the expression (the schema's x-pattern-message)
NAME_RULE = "use letters, digits, '.', '_' or '-', starting and ending with a letter or digit (at most 64)"
DEFAULT_BASE_MODEL = "meta-llama/Llama-2-7b-hf"
DEFAULT_DATASET_PATH = "/datasets/training"
TRAINING_CONFIG_FILE = "training_config.json"


class JobStatus(str, Enum):
    """The product page's job lifecycle."""

    QUEUED = "queued"
    INITIALIZING = "initializing"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def is_terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class DeepSpeedConfig(StrictModel):
    zero_stage: Literal[0, 1, 2, 3] = Field(2, description="ZeRO stage: 1 optimizer states, 2 + gradients, 3 + parameters")
    offload_optimizer: bool = Field(False, description="Offload optimizer states to CPU memory")
    offload_param: bool = Field(False, description="Offload parameters to CPU memory (stage 3 only)")
    fp16: bool = Field(False, description="Train in fp16 under DeepSpeed")
    bf16: bool = Field(False, description="Train in bf16 under DeepSpeed")

    @model_validator(mode="after")
    def _check(self) -> DeepSpeedConfig:
        if self.fp16 and self.bf16:
            raise ValueError("deepspeed: choose fp16 or bf16, not both")
        if self.offload_param and self.zero_stage != 3:
            raise ValueError("deepspeed.offload_param needs zero_stage 3")
        return self


class TrainingConfig(StrictModel):
    """training_config.json: the keys of the product page plus what a fine-tune needs beside them."""

    method: Literal["full", "lora", "qlora"] | None = Field(
        None, description="full, lora or qlora; unset = automatic (LoRA when a full fine-tune does not fit)"
    )
    lora_r: int = Field(16, ge=4, le=64, description="Rank of the LoRA matrices (4-64)")
    lora_alpha: float | None = Field(None, gt=0, description="LoRA scaling factor (default 2 x lora_r)")
    lora_dropout: float = Field(0.05, ge=0.0, le=0.1, description="Dropout on LoRA layers (0.0-0.1)")
    target_modules: list[str] | Literal["all-linear"] | None = Field(
        None,
        description='Modules LoRA adapts: a list of module names, or "all-linear"; unset = peft\'s default for '
                    "the model's architecture, else every linear layer of its attention blocks",
    )
    chat_template: str | None = Field(
        None, max_length=20000,
        description="chatml, llama-3, mistral, gemma, phi-3, model (the model's own), default (the runtime's), "
                    "or Jinja text; unset = the model's own, else the runtime's default",
    )
    quantization: Literal["4bit", "8bit"] | None = Field(None, description="4bit or 8bit frozen base (QLoRA only)")
    mixed_precision: Literal["no", "fp16", "bf16"] | None = Field(
        None, description="no, fp16 or bf16; unset = bf16 on compute capability >= 8.0, fp16 on older GPUs, fp32 on CPU"
    )
    deepspeed: DeepSpeedConfig | None = Field(None, description="DeepSpeed ZeRO settings")
    strategy: Literal["ddp", "fsdp"] | None = Field(
        None, description="ddp or fsdp (FSDP2 fully_shard); unset = DDP when the model fits one device, else FSDP"
    )
    gradient_checkpointing: bool | None = Field(
        None, description="Recompute activations in backward; unset = automatic"
    )
    optim: Literal["adamw_torch", "adamw_torch_fused", "adamw_bnb_8bit", "paged_adamw_8bit", "paged_adamw_32bit",
                   "adafactor"] | None = Field(
        None,
        description="Optimizer, by its transformers name: adamw_torch, adamw_torch_fused, adamw_bnb_8bit (8-bit "
                    "states), paged_adamw_8bit / paged_adamw_32bit (states paged to CPU memory on a GPU), adafactor; "
                    "unset = adamw_torch, and paged_adamw_8bit for QLoRA on a GPU",
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] | None = Field(
        None,
        description="Attention kernel: sdpa (torch's scaled_dot_product_attention), eager, or flash_attention_2 (a "
                    "GPU and the flash-attn package); unset = the model's own, flash_attention_2 where packed rows "
                    "can use it",
    )
    use_liger_kernel: bool = Field(
        False,
        description="Liger's fused Triton kernels (RMSNorm, RoPE, SwiGLU, cross-entropy) for less memory and more "
                    "speed: needs a GPU and the liger-kernel package on the workers",
    )
    learning_rate: float = Field(2e-4, gt=0, lt=1, description="Peak learning rate (1e-4 to 2e-5 is usual for fine-tuning)")
    warmup_ratio: float = Field(0.0, ge=0, lt=1, description="Fraction of steps spent warming up")
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = Field(
        "linear", description="Learning-rate schedule"
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    max_grad_norm: float = Field(1.0, ge=0, description="Gradient clipping norm (0 disables)")
    max_seq_length: int = Field(512, ge=8, le=131072, description="Longer examples are truncated")
    packing: bool | None = Field(
        None,
        description="Pack several examples into one row, kept apart by position_ids; unset = automatic: packed "
                    "where the attention runs packed rows as variable-length sequences (flash-attention on a GPU), "
                    "else length-grouped batches",
    )
    group_by_length: bool | None = Field(
        None,
        description="Batch examples of similar length together (less padding) in an order seeded per epoch; "
                    "unset = automatic: on whenever rows are not packed",
    )
    validation_split: float = Field(0.0, ge=0, lt=1, description="Fraction of examples held out for validation")
    eval_steps: int | None = Field(
        None, ge=1,
        description="Validate every N optimizer steps as well as at each epoch's end (needs validation data); "
                    "unset = at epoch ends only",
    )
    early_stopping_patience: int | None = Field(
        None, ge=1,
        description="Stop after this many validations in a row without improvement (needs validation data); "
                    "the job ends succeeded, stopped early, with its checkpoint written; unset = never",
    )
    early_stopping_threshold: float = Field(
        0.0, ge=0, description="How much lower the validation loss must be than the best so far to count as improvement"
    )
    keep_checkpoints: int | None = Field(
        None, ge=1,
        description="Keep this job's last N checkpoints (epochs and cancels) besides best and epoch-final, deleting "
                    "older ones as new ones are written; unset = keep every checkpoint",
    )
    gradient_accumulation_steps: int = Field(1, ge=1, description="Micro-batches per optimizer step")
    seed: int = Field(42, ge=0, description="Random seed")
    logging_steps: int = Field(1, ge=1, description="Emit a step event every N optimizer steps")
    max_failures: int = Field(
        2, ge=-1, le=1000,
        description="Worker failures (a killed worker, a lost node) recovered from the latest checkpoint before "
                    "the job fails; -1 = no limit, 0 = fail at the first",
    )
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK", description="Ray placement of the workers: PACK fills a node first, STRICT_SPREAD puts each on its own node"
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=1024,
        description="Tensor parallelism: split each layer's weights over this many workers (1 = off; CPU or GPU; "
                    "method full, a model with a transformers tp_plan; "
                    "tensor_parallel_size x pipeline_parallel_size must divide workers)",
    )
    pipeline_parallel_size: int = Field(
        1, ge=1, le=1024,
        description="Pipeline parallelism: split the decoder layers into this many stages, one per worker (1 = off; "
                    "CPU or GPU; method full; workers must equal it)",
    )
    pipeline_microbatches: int | None = Field(
        None, ge=1, le=1024,
        description="Pipeline parallelism: micro-batches each batch is cut into; unset = 2 per stage (at most the "
                    "batch size)",
    )
    pipeline_schedule: Literal["gpipe", "1f1b"] = Field(
        "gpipe", description="Pipeline parallelism: torch's GPipe schedule, or 1F1B (one forward, one backward)",
    )
    columns: dict[str, str] | None = Field(
        None,
        description='The keys of your records, when they differ from a known format\'s: the format\'s key -> '
                    'yours, e.g. {"instruction": "question", "output": "answer"} or {"text": "content"}',
    )
    report_to: list[Literal["tensorboard", "mlflow", "wandb", "none"]] = Field(
        default_factory=lambda: ["tensorboard"],
        description="Where the Trainer reports (rank 0): tensorboard (runs/ in the checkpoint folder), mlflow "
                    "(MLFLOW_TRACKING_URI), wandb (WANDB_PROJECT, WANDB_MODE), or none",
    )
    cancel_grace_s: int | None = Field(
        None, ge=5, le=86400,
        description="Seconds a cancelled job may take to write its checkpoint before it is killed; "
                    "unset = computed from the model size (manual: Checkpoints, cancel and resume)",
    )

    @field_validator("report_to")
    @classmethod
    def _report_to(cls, v: list[str]) -> list[str]:
        if "none" in v and len(v) > 1:
            raise ValueError('"none" stands alone: it turns every tracker off')
        return list(dict.fromkeys(v)) or ["none"]

    @field_validator("chat_template")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        from .templates import check  # templates -> data -> spec

        return None if v is None else check(v)

    @field_validator("target_modules")
    @classmethod
    def _targets(cls, v: list[str] | str | None) -> list[str] | str | None:
        if isinstance(v, list):
            if not v or any(not t.strip() for t in v):
                raise ValueError('give module names (e.g. ["q_proj", "v_proj"]), "all-linear", or leave it unset')
            if "all-linear" in v:
                if len(v) > 1:
                    raise ValueError('"all-linear" stands alone: it already means every linear layer')
                return "all-linear"
        return v

    @model_validator(mode="after")
    def _contradictions(self) -> TrainingConfig:
        if self.method == "qlora" and self.quantization is None:
            raise ValueError("method 'qlora' needs quantization '4bit' or '8bit'")
        if self.strategy is not None and self.deepspeed is not None:
            raise ValueError(f"strategy '{self.strategy}' and deepspeed exclude each other (remove one)")
        if self.quantization is not None and self.method not in ("qlora", None):
            raise ValueError(f"quantization is for method 'qlora' only, not '{self.method}'")
        if self.model_parallel_size > 1 and self.deepspeed is not None:
            raise ValueError("tensor/pipeline parallelism and deepspeed exclude each other (remove one)")
        if self.packing and self.group_by_length:
            raise ValueError("packing and group_by_length exclude each other: packed rows are already full, there is "
                             "no padding to group away (set one of them to false)")
        return self

    @property
    def model_parallel_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def effective_lora_alpha(self) -> float:
        return self.lora_alpha if self.lora_alpha is not None else 2.0 * self.lora_r


class JobSpec(StrictModel):
    """What a user asks for when creating a job (the Create Job dialog's fields, the page's defaults)."""

    name: str = Field(
        ...,
        title="Name",
        pattern=NAME_PATTERN,
        description="Unique job name, e.g. llama2-customer-support-v1 (letters, digits, . _ -; at most 64)",
        json_schema_extra={"x-pattern-message": NAME_RULE},
    )
    cluster: str = Field("local", title="Ray Cluster", description="Ray cluster to submit to; must be running")
    base_model: str = Field(
        DEFAULT_BASE_MODEL, title="Base Model", min_length=1, description="HuggingFace model ID or local path"
    )
    dataset_path: str = Field(
        DEFAULT_DATASET_PATH,
        title="Dataset Path",
        min_length=1,
        description="Path on the compute nodes where training data lives (file, folder, s3:// or gs://)",
    )
    job_type: Literal["train", "finetune"] = Field(
        "finetune", title="Job Type",
        description="train (pre-train a causal LM on every token, from scratch or continued) or finetune",
    )
    start: Literal["scratch", "pretrained"] | None = Field(
        None, title="Start from",
        description="Training: scratch (fresh weights of the base model's architecture) or pretrained (continue "
                    "pre-training from the base model's or a checkpoint's weights); unset = scratch. Fine-tuning "
                    "always starts from the pretrained weights",
        json_schema_extra={"x-job-types": ["train"]},
    )
    framework: Literal["torch", "tensorflow"] = Field(
        "torch", title="Framework", description="Training framework: torch (PyTorch) or tensorflow"
    )
    epochs: int = Field(3, ge=1, le=10000, title="Epochs", description="Number of passes over the full training dataset")
    batch_size: int = Field(32, ge=1, le=65536, title="Batch Size", description="Per-worker micro-batch size")
    workers: int = Field(2, ge=1, le=4096, title="Workers", description="Number of Ray Train workers")
    cpus_per_worker: float = Field(1.0, gt=0, title="CPUs per worker", description="CPUs reserved by each worker")
    gpus_per_worker: float = Field(
        0.0, ge=0, title="GPUs per worker", description="GPUs reserved by each worker (0 = train on CPU)"
    )
    output_dir: str | None = Field(
        None,
        title="Checkpoint folder",
        description="Where checkpoints go (a folder on the nodes); default: the checkpoints/ folder beside the data, "
                    "or $CLEVERTHIS_HOME/checkpoints/... for an s3:// or gs:// dataset (manual: Checkpoints)",
    )
    training_config: TrainingConfig | None = Field(
        None,
        title="Training config",
        description="Overrides training_config.json keys found in the dataset path",
    )
    sweep: SweepSpec | None = Field(
        None, title="Sweep",
        description="Try one to three parameters over several trials on Ray Tune (manual: Sweeps and chat)",
    )

    @field_validator("name")
    @classmethod
    def _name_safe(cls, v: str) -> str:
        if ".." in v:
            raise ValueError("must not contain '..'")
        return v

    @field_validator("output_dir")
    @classmethod
    def _output_dir_local(cls, v: str | None) -> str | None:
        if v is not None and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", v):
            raise ValueError("must be a folder on the cluster's nodes, not a URL: checkpoints are written with an "
                             "atomic rename that object stores lack (a remote dataset's checkpoints go to a local folder by "
                             "default: see the manual's Checkpoints page)")
        return v

    @model_validator(mode="after")
    def _start(self) -> JobSpec:
        if self.job_type == "finetune" and self.start == "scratch":
            raise ValueError("start 'scratch' is for job type train: a fine-tune starts from the base model's weights")
        return self

    @property
    def from_scratch(self) -> bool:
        """Fresh weights: a train job that does not ask to continue from pretrained ones."""
        return self.job_type == "train" and self.start != "pretrained"

    @model_validator(mode="after")
    def _framework_limits(self) -> JobSpec:
        tc = self.training_config
        if self.framework == "tensorflow" and tc is not None:
            if tc.method in ("lora", "qlora"):
                raise ValueError("framework tensorflow does not support LoRA or DeepSpeed (method must be 'full')")
            if tc.deepspeed is not None:
                raise ValueError("framework tensorflow does not support LoRA or DeepSpeed (remove 'deepspeed')")
        if tc is not None:
            problem = parallelism_error(tc, framework=self.framework, workers=self.workers, job_type=self.job_type)
            if problem:
                raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _sweep_trials(self) -> JobSpec:
        """Every trial is a valid job: its name fits, its values are allowed where they go."""
        if self.sweep is None:
            return self
        from .sweep_spec import trial_spec_data, trial_values

        if self.framework != "torch":
            raise ValueError("sweep: sweeps run framework torch jobs")
        count = self.sweep.trial_count()
        if len(self.name) + len(f"-t{count}") > 64:
            raise ValueError(f"name: a sweep's trials are named {self.name}-t1 ... -t{count}, which must fit in 64 "
                             "characters: choose a shorter name")
        data = self.model_dump(mode="json")
        if self.training_config is not None:
            data["training_config"] = self.training_config.model_dump(mode="json", exclude_unset=True)
        for i, values in enumerate(trial_values(self.sweep), 1):
            try:
                JobSpec.model_validate(trial_spec_data(data, values, i))
            except ValidationError as e:
                shown = ", ".join(f"{k}={v:g}" for k, v in values.items())
                raise ValueError(f"sweep.parameters: trial {i} ({shown}): {format_errors(e)}") from None
        return self


def parallelism_error(tc: TrainingConfig, *, framework: str, workers: int, job_type: str = "finetune") -> str | None:
    """Why this job cannot use the requested tensor/pipeline parallelism, or None (1 x 1 always passes)."""
    problem = parallelism_problem(tc, framework=framework, workers=workers, job_type=job_type)
    return problem[1] if problem else None


def parallelism_problem(tc: TrainingConfig, *, framework: str, workers: int,
                        job_type: str = "finetune") -> tuple[str, str] | None:
    """(the training_config key to blame, why) when the requested tensor/pipeline parallelism cannot run.

    Checked at spec validation (the spec's own training_config), at pre-flight and in the plan (with
    training_config.json merged), and by the workers. What depends on the model (its tensor-parallel plan, its
    heads) is `parallel.refusal`, checked where the model's config is read. Tensor parallelism runs on CPU
    (gloo) and GPU alike.
    """
    tp, pp = tc.tensor_parallel_size, tc.pipeline_parallel_size
    if tp == 1 and pp == 1:
        return None
    key = "tensor_parallel_size" if tp > 1 else "pipeline_parallel_size"
    which = " and ".join(f"{k} > 1" for k, v in (("tensor_parallel_size", tp), ("pipeline_parallel_size", pp))
                         if v > 1)
    if framework == "tensorflow":
        return key, f"framework tensorflow does not support tensor or pipeline parallelism ({which}); set them to 1"
    if workers % (tp * pp):
        return key, (f"tensor_parallel_size x pipeline_parallel_size = {tp} x {pp} = {tp * pp} must divide workers "
                     f"({workers}): each group of {tp * pp} workers holds one copy of the model")
    if pp > 1 and tp > 1:
        return key, ("tensor_parallel_size and pipeline_parallel_size cannot both be > 1 yet: choose one of them")
    if pp > 1 and workers != pp:
        return "pipeline_parallel_size", (
            f"pipeline_parallel_size ({pp}) must equal workers ({workers}): data-parallel copies of a pipeline are "
            "not supported yet")
    if pp > 1 and tc.packing:
        return "packing", ("packing cannot be combined with pipeline_parallel_size > 1: the stages pass only the "
                           "hidden states, not the examples' boundaries; set packing to false")
    if tc.method in ("lora", "qlora"):
        which = "tensor_parallel_size" if tp > 1 else "pipeline_parallel_size"
        return "method", (f"{which} > 1 needs method 'full' (not '{tc.method}'): LoRA adapters are not split over "
                          "the workers")
    if job_type == "train" and tp > 1:
        return key, ("tensor_parallel_size > 1 needs pretrained weights (job type finetune): transformers splits a "
                     "model over the workers as it loads its weights; train from scratch with strategy 'fsdp'")
    return None


def merge_training_config(file_config: dict[str, Any] | None, override: TrainingConfig | None) -> TrainingConfig:
    """training_config.json from the dataset path, overridden key by key by the spec's own training_config."""
    merged: dict[str, Any] = dict(file_config or {})
    if override is not None:
        merged.update(override.model_dump(exclude_unset=True))
    return TrainingConfig.model_validate(merged)


def error_list(exc: ValidationError) -> list[dict[str, str]]:
    """Pydantic errors as [{field, message}] with dotted field paths (what forms and the CLI show)."""
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = err.get("msg", "invalid")
        msg = re.sub(r"^Value error, ", "", msg)
        if err.get("type") == "string_pattern_mismatch" and loc.endswith("name"):
            msg = NAME_RULE
        out.append({"field": loc, "message": msg})
    return out


def format_errors(exc: ValidationError, prefix: str = "") -> str:
    return "; ".join(
        f"{prefix}{e['field']}: {e['message']}" if e["field"] else f"{prefix.rstrip('.')}: {e['message']}".lstrip(": ")
        for e in error_list(exc)
    )
