"""`bertjax bench train|infer` options come from `BenchSettings`' fields, once: a field's default,
help, choices and checks are the parser's; the jobs sent to a child survive the JSON round trip."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys

import pytest

from bertjax.bench import options
from bertjax.bench.options import BenchSettings
from bertjax.bench.timing import Gemm, Probe, RowSpec, read_job, write_job
from bertjax.cli import bench as cli_bench
from bertjax.cli.fields import add_field_arguments, command_options, settings_from_args
from bertjax.config import BertConfig
from bertjax.train.schedule import OptimConfig


def _parser(klass: type = BenchSettings, mode: str = "train") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench", allow_abbrev=False)
    add_field_arguments(parser, klass, exclude=cli_bench.EXCLUDED[mode],
                        parsers={"overrides": cli_bench.parse_override})
    return parser


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.dest != "help"}


def test_every_option_is_a_field_with_its_default_and_help() -> None:
    actions = _actions(_parser())
    fields = {f.name: f for f in dataclasses.fields(BenchSettings)}
    assert set(actions) == set(fields) - {"mode"}  # the sub-command is not an option
    for name, action in actions.items():
        field = fields[name]
        expected_default = [] if name == "overrides" else field.default
        assert action.default == expected_default, name
        assert action.help.startswith(field.metadata["help"]), name
        if "device_default" in field.metadata:
            cpu, accelerator = field.metadata["device_default"]
            shown = [",".join(v) if isinstance(v, tuple) else str(v) for v in (cpu, accelerator)]
            assert f"(default: {shown[0]} on CPU, {shown[1]} on GPU/TPU)" in action.help, name
    assert "dropout" not in _actions(_parser(mode="infer"))


def test_a_changed_field_changes_the_parser() -> None:
    """A field's default, help and choices are read from the dataclass, not written again."""

    @dataclasses.dataclass(frozen=True)
    class Changed(BenchSettings):
        seq: int = dataclasses.field(default=64, metadata={"help": "new help", "check": "positive"})
        compile_backend: str = dataclasses.field(
            default="eager", metadata={"help": "backend", "choices": ("eager", "inductor")})

    parser = _parser(Changed)
    actions = _actions(parser)
    assert actions["seq"].default == 64 and actions["seq"].help == "new help (default: 64)"
    assert actions["compile_backend"].choices == ("eager", "inductor")
    settings = settings_from_args(Changed, parser.parse_args([]), mode="train")
    assert isinstance(settings, Changed) and settings.seq == 64
    assert settings_from_args(BenchSettings, _parser().parse_args([]), mode="train") == BenchSettings()


def test_parsed_settings_have_the_field_types() -> None:
    args = _parser().parse_args(["--seq", "32", "--dtype", "bfloat16,float32,bfloat16", "--impl",
                                 "bertjax", "--hf-dtype", "float32", "--set",
                                 "num_hidden_layers=1", "--set", "hidden_act=relu", "--prng", "rbg",
                                 "--json", "out.json", "--dropout", "0.25", "--warmup", "0"])
    settings = settings_from_args(BenchSettings, args, mode="infer")
    assert settings == BenchSettings(
        mode="infer", seq=32, dtypes=("bfloat16", "float32"), impls=("bertjax",),
        hf_dtypes=("float32",), overrides=(("num_hidden_layers", 1), ("hidden_act", "relu")),
        prng_impl="rbg", json_path="out.json", dropout=0.25, warmup=0)


def test_device_defaults_are_the_fields_metadata() -> None:
    assert options.DEVICE_DEFAULTS == {
        f.name: f.metadata["device_default"] for f in dataclasses.fields(BenchSettings)
        if "device_default" in f.metadata}
    cpu, gpu = BenchSettings().resolve("cpu"), BenchSettings().resolve("gpu")
    for name, (on_cpu, on_gpu) in options.DEVICE_DEFAULTS.items():
        assert (getattr(cpu, name), getattr(gpu, name)) == (on_cpu, on_gpu)
    assert (cpu.gemm_size, cpu.gemm_dtype, gpu.gemm_size, gpu.gemm_dtype) == (
        4096, "float32", 8192, "bfloat16")
    assert {o.name for o in command_options(BenchSettings)} >= set(options.DEVICE_DEFAULTS)


@pytest.mark.parametrize(("text", "value"), [
    ("num_hidden_layers=2", ("num_hidden_layers", 2)),
    ("layer_norm_eps=1e-5", ("layer_norm_eps", 1e-5)),
    ("scan_layers=yes", ("scan_layers", True)),
    ("classifier_dropout=0.2", ("classifier_dropout", 0.2)),
    ("id2label=a, b", ("id2label", ("a", "b"))),
])
def test_set_parses_with_the_run_configs_parser(text, value) -> None:
    assert cli_bench.parse_override(text) == value


def test_flat_optimizer_reaches_the_rows_optimizer() -> None:
    from bertjax.bench.options import Row
    from bertjax.bench.run import _row_spec
    from bertjax.bench.timing import Pinning

    args = _parser().parse_args(["--flat-optimizer", "true", "--preset", "tiny"])
    settings = settings_from_args(BenchSettings, args, mode="train").resolve("cpu")
    spec = _row_spec(settings, Row("bertjax", "float32"), "cpu", Pinning(cores=(0,), threads=1))
    assert settings.flat_optimizer and spec.optim.flatten
    plain = settings_from_args(BenchSettings, _parser().parse_args([]), mode="train")
    assert not plain.flat_optimizer


def test_jobs_round_trip_through_json(tmp_path) -> None:
    row = RowSpec(cores=(0, 1), threads=2, impl="bert_torch", mode="train", dtype="float32",
                  config=BertConfig.from_preset("tiny", num_hidden_layers=1), seq=16, batch=4,
                  predictions=2, steps=2, warmup=1, seed=3,
                  optim=OptimConfig(total_steps=1_000_000), compile_backend="eager",
                  prng_impl="rbg", device="cpu")
    for job in (Probe(cores=(0,), threads=1), Gemm(cores=(1,), threads=1, size=128,
                                                   dtype="float32"), row):
        write_job(job, tmp_path / "spec.json")
        assert read_job(tmp_path / "spec.json") == job


def test_the_parent_loads_no_framework_and_the_bench_no_command_line() -> None:
    """The parent process must not initialise JAX's GPU backend (it would take the children's
    memory), and the bench, below the command line, does not import it."""
    code = ("import sys\n"
            "import bertjax.bench.run, bertjax.bench.options, bertjax.bench.report\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'torch')"
            " or m.startswith('bertjax.cli')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
