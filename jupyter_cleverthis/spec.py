"""The job spec and training config (defined in `cleverthis_runtime.spec`, which travels with every job)."""

from cleverthis_runtime.spec import (  # noqa: F401
    DEFAULT_BASE_MODEL,
    DEFAULT_DATASET_PATH,
    NAME_PATTERN,
    DeepSpeedConfig,
    JobSpec,
    JobStatus,
    TrainingConfig,
    error_list,
    format_errors,
    merge_training_config,
)
