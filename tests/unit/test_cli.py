from __future__ import annotations

import pytest

from jupyter_cleverthis.cli import UsageError, main, parse, parse_line, spec_from_args
from jupyter_cleverthis.errors import InvalidSpec


def test_create_is_the_default_subcommand_with_page_defaults():
    a = parse_line("--name n1 --cluster c1 --model m --dataset /d")
    assert a.command == "create"
    spec = spec_from_args(a)
    assert (spec.name, spec.cluster, spec.base_model, spec.dataset_path) == ("n1", "c1", "m", "/d")
    assert (spec.epochs, spec.batch_size, spec.workers, spec.job_type, spec.framework) == (3, 32, 2, "finetune", "torch")


def test_subcommands_take_cluster():
    for line in ("list --cluster c", "show j --cluster c --json", "logs j --cluster c", "cancel j --cluster c"):
        assert parse_line(line).cluster == "c"
    assert parse_line("cluster list --json").action == "list"


@pytest.mark.parametrize(
    "line,needle",
    [
        ("--name x --epochs zz", "--epochs: expected a whole number, got 'zz'"),
        ("--epochs 2", "--name"),
        ("show", "name"),
        ("cluster sideways", "invalid choice"),
        ("--name 'unterminated", "quotation"),
    ],
)
def test_usage_errors_are_one_clear_line(line, needle):
    with pytest.raises(UsageError) as e:
        parse_line(line)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_spec_errors_name_the_field():
    with pytest.raises(InvalidSpec) as e:
        spec_from_args(parse_line("--name ok --type pretrain"))
    assert "job_type" in e.value.message
    assert e.value.details["errors"][0]["field"] == "job_type"


def test_console_script_prints_one_line_error(capsys):
    assert main(["--name", "bad/name"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid job spec: name:") and "Traceback" not in err


def test_config_arg_inline_json():
    spec = spec_from_args(parse(["--name", "n", "--config", '{"method": "lora", "lora_r": 8}']))
    assert spec.training_config.lora_r == 8
