"""`bertjax bench` options come from the settings dataclasses' fields, once: a field's default,
help, choices and checks are the parser's; --print-config read back with --config prints the same
for every benchmark; the jobs sent to a child survive the JSON round trip."""

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
from bertjax.cli.main import main
from bertjax.cli.options import add_settings_arguments, settings_from_args
from bertjax.common.options import options as settings_options
from bertjax.config import BertConfig
from bertjax.train.schedule import OptimConfig


def _parser(klass: type = BenchSettings, mode: str = "train") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench", allow_abbrev=False)
    add_settings_arguments(parser, klass, exclude=cli_bench.EXCLUDED[mode],
                           parsers={"overrides": cli_bench.parse_override})
    return parser


def _settings(args: argparse.Namespace, klass: type = BenchSettings, mode: str = "train"):
    return settings_from_args(args, klass, base=klass(mode=mode), exclude=cli_bench.EXCLUDED[mode])


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions
            if a.dest not in ("help", "config", "print_config")}


def test_every_option_is_a_field_with_its_default_and_help() -> None:
    actions = _actions(_parser())
    fields = {f.name: f for f in dataclasses.fields(BenchSettings)}
    assert set(actions) == set(fields) - {"mode"}  # the sub-command is not an option
    for name, action in actions.items():
        field = fields[name]
        assert action.help.startswith(field.metadata["help"]), name
        if field.default not in (None, ()) and "device_default" not in field.metadata:
            shown = (",".join(field.default) if isinstance(field.default, tuple)
                     else str(field.default).lower() if isinstance(field.default, bool)
                     else str(field.default))
            assert f"(default: {shown})" in action.help, name
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
    assert actions["seq"].help == "new help (default: 64)"
    assert "{eager,inductor}" in actions["compile_backend"].metavar
    with pytest.raises(SystemExit):
        parser.parse_args(["--compile-backend", "cudagraphs"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--seq", "0"])
    settings = _settings(parser.parse_args([]), Changed)
    assert isinstance(settings, Changed) and settings.seq == 64
    assert _settings(_parser().parse_args([])) == BenchSettings()


def test_parsed_settings_have_the_field_types() -> None:
    args = _parser().parse_args(["--seq", "32", "--dtype", "bfloat16,float32,bfloat16", "--impl",
                                 "bertjax", "--hf-dtype", "float32", "--set",
                                 "num_hidden_layers=1", "--set", "hidden_act=relu", "--prng-impl",
                                 "rbg", "--json", "out.json", "--dropout", "0.25", "--warmup", "0"])
    settings = _settings(args, mode="train")
    assert settings == BenchSettings(
        mode="train", seq=32, dtypes=("bfloat16", "float32"), impls=("bertjax",),
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
    assert {o.name for o in settings_options(BenchSettings)} >= set(options.DEVICE_DEFAULTS)


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

    args = _parser().parse_args(["--flat-optimizer", "--preset", "tiny"])
    settings = _settings(args).resolve("cpu")
    spec = _row_spec(settings, Row("bertjax", "float32"), "cpu", Pinning(cores=(0,), threads=1))
    assert settings.flat_optimizer and spec.optim.flatten
    plain = _settings(_parser().parse_args([]))
    assert not plain.flat_optimizer


def test_jobs_round_trip_through_json(tmp_path) -> None:
    row = RowSpec(cores=(0, 1), threads=2, impl="bert_torch", mode="train", dtype="float32",
                  config=BertConfig.from_preset("tiny", num_hidden_layers=1), seq=16, batch=4,
                  predictions=2, steps=2, warmup=1, seed=3,
                  optim=OptimConfig(), compile_backend="eager",
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


# each benchmark with options of every kind set away from their defaults
PRINTED = {
    "data": ["--corpus", "a.txt", "b dir/", "--split", "all", "--vocab-size", "300",
             "--whole-word-mask", "--cpu", "1"],
    "train": ["--preset", "tiny", "--dtype", "bfloat16", "--impl", "bertjax,hf-eager", "--set",
              "num_hidden_layers=1", "--set", "hidden_act=relu", "--flat-optimizer", "--dropout",
              "0.2", "--json", "out.json"],
    "infer": ["--seq", "64", "--hf-dtype", "float32", "--no-flat-optimizer"],
    "embed": ["--lines", "7", "--max-tokens", "0", "--attn-implementation", "eager"],
    "corpus": ["--sizes-mb", "0.5", "2", "--formats", "jsonl", "parquet", "--seq-len", "64"],
    "finetune": ["--tasks", "shakespeare-genres", "--seeds", "1", "--limit", "40"],
    "pack": ["--preset", "tiny", "--seq-len", "64"],
}


@pytest.mark.parametrize("bench", sorted(cli_bench.BENCHMARKS))
def test_print_config_read_back_with_config_prints_the_same(bench, tmp_path, capsys) -> None:
    assert main(["bench", bench, "--print-config", *PRINTED[bench]]) == 0
    first = capsys.readouterr().out
    assert first.strip(), bench
    (tmp_path / "bench.toml").write_text(first)
    assert main(["bench", bench, "--print-config", f"--config={tmp_path / 'bench.toml'}"]) == 0
    assert capsys.readouterr().out == first
    defaults = bertjax_defaults(bench)
    assert first != defaults, "every option given above is at its default"


def bertjax_defaults(bench: str) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["bench", bench, "--print-config"])
    return out.getvalue()


def test_a_config_file_names_a_setting_that_is_not_this_benchmarks(tmp_path, capsys) -> None:
    (tmp_path / "b.toml").write_text("dropout = 0.1\n")
    assert main(["bench", "infer", f"--config={tmp_path / 'b.toml'}"]) == 2
    assert "dropout is not a setting of this command" in capsys.readouterr().err
    (tmp_path / "b.toml").write_text("sizes_mb = [0.5, nan]\n")
    assert main(["bench", "corpus", f"--config={tmp_path / 'b.toml'}"]) == 2
    assert ("sizes_mb must be a list of numbers from 0.1 to 100,000.0, got [0.5, nan]"
            in capsys.readouterr().err)
