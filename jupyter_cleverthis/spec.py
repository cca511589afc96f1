"""The job spec and training config (defined in `cleverthis_runtime.spec`, which travels with every job)."""

from cleverthis_runtime.spec import (  # noqa: F401
    DEFAULT_BASE_MODEL,
    DEFAULT_DATASET_PATH,
    NAME_PATTERN,
    NAME_RULE,
    DeepSpeedConfig,
    JobSpec,
    JobStatus,
    TrainingConfig,
    error_list,
    format_errors,
    merge_training_config,
)


def spec_yaml(spec: dict) -> str:
    """A submitted spec as YAML that `%%train` and `cleverthis-train create --config` read back (keys in the
    spec's order, training_config as a nested mapping; what was left unset, null, is left out)."""
    import yaml

    return yaml.safe_dump({k: v for k, v in spec.items() if v is not None}, sort_keys=False, allow_unicode=True,
                          default_flow_style=False)
