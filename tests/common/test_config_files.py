"""Config files are read by their fields' types: a YAML value is the text written, parsed as
its setting's type (never YAML 1.1's octal or yes/no), and a value of the wrong kind or a
section given as a value is named as what it is."""

from __future__ import annotations

import pytest

from bertjax.cli.main import main
from bertjax.errors import InputError
from bertjax.jobs.finetune.config import FinetuneJob
from bertjax.runs import config as rc


def _load(tmp_path, text: str, name: str = "run.yaml") -> rc.RunConfig:
    (tmp_path / name).write_text(text)
    return rc.load(tmp_path / name)


def test_a_yaml_seed_written_0123_is_123_never_the_octal_83(tmp_path):
    config = _load(tmp_path, "train:\n  seed: 0123\n")
    assert config.train.seed == 123


def test_yaml_plain_scalars_are_read_by_each_fields_type(tmp_path):
    config = _load(tmp_path, "data:\n  corpus: no\n  batch_size: 1e1\n  mask_prob: .25\n"
                             "optim:\n  flatten: yes\n  warmup_steps: ~\n  warmup_fraction: 0.1\n")
    assert config.data.corpus == "no"  # YAML 1.1 would make it False
    assert (config.data.batch_size, config.data.mask_prob) == (10, 0.25)
    assert config.optim.flatten is True
    assert (config.optim.warmup_steps, config.optim.warmup_fraction) == (None, 0.1)


@pytest.mark.parametrize(("name", "text", "message"), [
    ("run.yaml", "train:\n  seed: 0x10\n", "train.seed must be an integer >= 0, got '0x10'"),
    ("run.yaml", "data:\n  batch_size: {a: 1}\n",
     "data.batch_size must be a positive integer, got a table {'a': '1'}"),
    ("run.toml", 'model = "tiny"\n',
     "model is a section of options (a [model] table), not a value: got 'tiny'; write its "
     "options under [model]"),
    ("run.yaml", "train: 5\n", "train is a section of options (a [train] table)"),
    ("run.json", '{"optim": {"learning_rate": [1]}}', "optim.learning_rate must be a number above 0"),
])
def test_a_value_of_the_wrong_kind_names_the_setting_and_what_it_takes(tmp_path, name, text,
                                                                        message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]").replace("{", r"\{")
                       .replace("}", r"\}")):
        _load(tmp_path, text, name)


def test_the_command_lines_read_config_files_the_same_way(tmp_path, capsys):
    (tmp_path / "job.yaml").write_text("seed: 0123\noptim:\n  learning_rate: 5e-4\n")
    assert main(["finetune", "--print-config", f"--config={tmp_path / 'job.yaml'}"]) == 0
    out = capsys.readouterr().out
    assert "seed = 123\n" in out and "learning_rate = 0.0005\n" in out
    (tmp_path / "bad.yaml").write_text("epochs: {a: 1}\n")
    assert main(["finetune", "--print-config", f"--config={tmp_path / 'bad.yaml'}"]) == 2
    assert "epochs must be a positive integer, got a table" in capsys.readouterr().err
    assert FinetuneJob().optim.warmup_fraction == 0.1
