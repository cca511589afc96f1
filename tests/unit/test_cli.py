from __future__ import annotations

import json

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


def test_version_unknown_subcommands_completion_and_help_on_every_option(capsys):
    import argparse

    from jupyter_cleverthis import __version__
    from jupyter_cleverthis.cli import build_parser

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"cleverthis-train {__version__}"
    # a first word that is no subcommand is refused with the close matches, not taken for create's arguments
    assert main(["lst"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'lst'" in err and "did you mean 'list'" in err and "--name" not in err
    assert main(["--print-completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert "complete -o filenames -F _shtab_cleverthis_train cleverthis-train" in script and "'resume'" in script
    # %train shares the grammar
    with pytest.raises(UsageError, match="did you mean 'show'"):
        parse_line("shw j1", prog="%train")

    def undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
        out = []
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    out += undocumented(sub, f"{path} {name}")
            elif not a.help:
                out.append(f"{path} {'/'.join(a.option_strings) or a.dest}")
        return out

    assert undocumented(build_parser(), "cleverthis-train") == []


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


def test_config_arg_reads_a_json_or_yaml_file_and_names_a_bad_line(tmp_path):
    from jupyter_cleverthis.errors import BadRequest

    (tmp_path / "tc.yaml").write_text("method: lora\nlora_r: 4\n# a comment\nlearning_rate: 1.0e-4\n")
    (tmp_path / "tc.json").write_text('{"method": "full", "max_seq_length": 64}')
    spec = spec_from_args(parse(["--name", "n", "--config", str(tmp_path / "tc.yaml")]))
    assert (spec.training_config.method, spec.training_config.lora_r, spec.training_config.learning_rate) == \
        ("lora", 4, 1e-4)
    assert spec_from_args(parse(["--name", "n", "--config", str(tmp_path / "tc.json")])).training_config.max_seq_length == 64
    (tmp_path / "bad.yaml").write_text("method: lora\nlora_r: [4\n")
    with pytest.raises(BadRequest, match=r"bad.yaml: not valid JSON or YAML \(line 3\)"):
        spec_from_args(parse(["--name", "n", "--config", str(tmp_path / "bad.yaml")]))
    (tmp_path / "list.yaml").write_text("- method\n")
    with pytest.raises(BadRequest, match="expected a mapping"):
        spec_from_args(parse(["--name", "n", "--config", str(tmp_path / "list.yaml")]))


class _Job:
    """What the CLI reads of a job detail."""

    def __init__(self, name, status, phase=None, checkpoints=()):
        from types import SimpleNamespace

        self.name, self.cluster, self.status, self.phase, self.error = name, "local", status, phase, None
        self.metrics, self.base_model, self.epochs = None, "/ckpt/epoch-1", 1
        self.checkpoints = [SimpleNamespace(name=c, path=f"/ckpt/{c}") for c in checkpoints]

    def model_dump_json(self, indent=None):
        import json

        return json.dumps({"name": self.name, "status": self.status.value})


class _FakeService:
    """A job service whose job runs for three polls and whose log grows at each read."""

    def __init__(self, final):
        from jupyter_cleverthis.spec import JobStatus

        self.final, self.gets, self.log = final, 0, ""
        self.running = JobStatus.RUNNING

    def get(self, cluster, name):
        self.gets += 1
        return _Job(name, self.running if self.gets < 3 else self.final, checkpoints=["epoch-1"])

    def logs(self, cluster, name, offset=0, limit=None):
        self.log += f"line {len(self.log.splitlines()) + 1}\n"
        return {"text": self.log[offset:], "offset": offset, "next": len(self.log), "size": len(self.log)}

    def resume(self, cluster, name, epochs=None, new_name=None):
        return _Job(new_name or f"{name}-resume-1", self.running)

    def wait(self, cluster, name, on_change=None, **kw):
        while True:
            d = self.get(cluster, name)
            on_change(d)
            if d.status.is_terminal():
                return d


def test_logs_follow_prints_whole_lines_as_the_follow_brings_them(monkeypatch):
    """The follow itself (Ray's log stream) is tested on the real cluster (test_hardening); here: chunks that cut
    lines anywhere are printed as whole lines, each once, and a last line without a newline is not lost."""
    from jupyter_cleverthis.cli import _logs
    from jupyter_cleverthis.service import log_stream
    from jupyter_cleverthis.spec import JobStatus

    followed = []
    monkeypatch.setattr(log_stream, "iter_job_log", lambda cfg, name: followed.append(name) or
                        iter(["line 1\nli", "ne 2", "\n", "line 3\nline 4"]))
    svc = _FakeService(JobStatus.SUCCEEDED)
    svc.cluster = lambda name: f"cfg {name}"
    out = []
    _logs(parse(["logs", "j", "--follow"]), out.append, svc)
    assert "\n".join(out).splitlines() == [f"line {k}" for k in range(1, 5)] and followed == ["j"]
    out.clear()
    _logs(parse(["logs", "j"]), out.append, _FakeService(JobStatus.SUCCEEDED))
    assert out == ["line 1"]


@pytest.mark.parametrize(("final", "code"), [("SUCCEEDED", 0), ("FAILED", 1)])
def test_resume_wait_follows_the_new_job_and_exits_with_its_outcome(monkeypatch, capsys, final, code):
    import jupyter_cleverthis.service.jobs as jobs
    from jupyter_cleverthis.spec import JobStatus

    monkeypatch.setattr(jobs, "JobService", lambda: _FakeService(JobStatus[final]))
    assert main(["resume", "j", "--new-name", "j2", "--wait"]) == code
    out = capsys.readouterr().out
    assert "[j2] running" in out and f"[j2] {final.lower()}" in out and "checkpoint epoch-1: /ckpt/epoch-1" in out


def test_exit_codes_separate_usage_from_service_errors(monkeypatch, tmp_path, capsys):
    from jupyter_cleverthis.errors import ClusterNotRunning, JobNotFound

    assert main(["show"]) == 2  # a missing argument
    assert main(["--name", "bad/name"]) == 2  # an invalid spec
    for err in (JobNotFound("no job named 'j' on cluster 'local'"), ClusterNotRunning("cluster 'local' is not running")):
        class Failing:
            def get(self, cluster, name, _e=err):
                raise _e

        import jupyter_cleverthis.service.jobs as jobs

        monkeypatch.setattr(jobs, "JobService", Failing)
        assert main(["show", "j"]) == 3
        assert capsys.readouterr().err.startswith("error: ")


def test_plan_prints_the_preflight_without_creating_a_job():
    """`cleverthis-train plan` (and `%train plan`) take create's options, ask the service's pre-flight and print
    what the form shows: the formats and counts, token lengths, the plan and the first example; --json as is."""
    from jupyter_cleverthis.cli import execute

    asked = []

    class Svc:
        def preflight(self, spec):
            asked.append(spec)
            return {"errors": [], "warnings": ["1 example(s) have no trained token left"],
                    "dataset": {"format": "instruction", "formats": {"instruction": 900, "sharegpt": 100},
                                "examples": 1000, "validation_examples": 0, "files": []},
                    "token_lengths": {"sampled": 1000, "min": 5, "max": 90, "mean": 30.5, "p50": 28, "p95": 70,
                                      "truncated": 0},
                    "plan": {"method": "full", "precision": "no", "strategy": "ddp", "batching": "packed",
                             "start": "scratch", "reasons": {"start": "fresh weights of m's architecture"}},
                    "preview": [[{"text": "<|user|>\nhi\n<|assistant|>\n", "trained": False, "tokens": 9},
                                 {"text": "yo", "trained": True, "tokens": 1}]]}

        def create(self, spec):  # never called by plan
            raise AssertionError("plan created a job")

    out: list[str] = []
    a = parse(["plan", "--name", "p", "--dataset", "/data/corpus", "--type", "train", "--start", "scratch"])
    execute(a, out.append, service=Svc())
    assert asked[0].job_type == "train" and asked[0].start == "scratch" and asked[0].dataset_path == "/data/corpus"
    text = out[0]
    assert "dataset: instruction, 1,000 examples (instruction 900, sharegpt 100)" in text
    assert "plan: full, no, ddp, batching packed" in text and "start: fresh weights" in text
    assert "example 1 (trained tokens in [brackets]):\n  <|user|>\n  hi\n  <|assistant|>\n  [yo]" in text
    out.clear()
    execute(parse(["plan", "--name", "p", "--json"]), out.append, service=Svc())
    assert json.loads(out[0])["dataset"]["formats"] == {"instruction": 900, "sharegpt": 100}
