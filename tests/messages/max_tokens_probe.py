"""Run by tests/messages/test_max_tokens.py in a process of its own under a memory limit
(RLIMIT_DATA): every command that takes --max-tokens, given values from 1 to 10^12 drawn by
Hypothesis, either answers (exit 0) or refuses in one line (exit 2), never a traceback. A process
killed by the limit is seen by the caller. Not a test module: `python max_tokens_probe.py DIR
LIMIT`, DIR holding the models and inputs the caller made, LIMIT the memory limit in bytes (set
here, before anything is imported); prints one line per example run.
"""

from __future__ import annotations

import resource
import sys

if __name__ == "__main__":  # the limit first: it holds for everything this process allocates
    resource.setrlimit(resource.RLIMIT_DATA, (int(sys.argv[2]), int(sys.argv[2])))

import contextlib  # noqa: E402
import io  # noqa: E402
import itertools  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from bertjax.cli.main import main  # noqa: E402

WORK = Path(sys.argv[1])
RUNS = itertools.count()
# command -> its arguments before --max-tokens ({n}: a fresh output name)
COMMANDS = {
    "fill-mask": ["fill-mask", "{model}", "To be or not to [MASK]."],
    "nsp": ["nsp", "{model}", "To be or not to be.", "That is the question."],
    "embed": ["embed", "{model}", "--file", "{lines}", "--out", "{out}/e{n}.npy"],
    "similarity": ["similarity", "{model}", "--file", "{lines}", "--query", "a king"],
    "classify": ["classify", "{classifier}", "--file", "{lines}"],
    "tag": ["tag", "{tagger}", "Hamlet met Ophelia in Denmark."],
    "answer": ["answer", "{reader}", "--question", "Who is dead?", "--context",
               "The king is dead. Long live the king."],
    "finetune": ["finetune", "{model}", "--train", "{train}", "--output-dir", "{out}/ft{n}",
                 "--epochs", "1", "--max-length", "16", "--no-progress"],
}


def run(command: str, value: int) -> tuple[int, str]:
    """`bertjax COMMAND ... --max-tokens VALUE` in this process: (exit status, stderr)."""
    places = {name.split(".")[0]: str(WORK / name) for name in (
        "model", "classifier", "tagger", "reader", "lines.txt", "train.jsonl", "out")}
    n = f"{os.getpid()}-{next(RUNS)}"
    argv = [a.format(n=n, **places) for a in COMMANDS[command]]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main([*argv, "--max-tokens", str(value)])
        except SystemExit as exit_:  # argparse's refusal
            code = int(exit_.code or 0)
    return code, err.getvalue()


@settings(max_examples=5, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(command=st.sampled_from(sorted(COMMANDS)), value=st.integers(1, 10**12))
@example(command="fill-mask", value=99_999_999_999)  # the sweep's: 373 GiB asked for
@example(command="embed", value=2_000_000)  # 35 GB for one text, sized by the option
@example(command="answer", value=1)
@example(command="classify", value=10**12)
@example(command="tag", value=63)
@example(command="nsp", value=64)
@example(command="similarity", value=10**9)
@example(command="finetune", value=64)  # one row of the few examples: it trains
def test_answers_or_refuses_in_one_line(command: str, value: int) -> None:
    code, err = run(command, value)
    print(f"{command} --max-tokens {value}: exit {code}", flush=True)
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert code in (0, 2), (code, err)
    if code == 2:  # about the budget, not some other mistake of this probe's
        assert lines[-1].startswith(f"bertjax {command}: error: "), err
        assert "max-tokens" in lines[-1] or "max_tokens" in lines[-1], err
        assert sum("error:" in line for line in lines) == 1, err


if __name__ == "__main__":
    test_answers_or_refuses_in_one_line()
