"""`bertjax bench pack` and `bertjax bench finetune` on tiny settings: they run end to end, their
JSON holds what the docs tables are rendered from, and the numbers that are not timings are
exact: the real-token shares of the two corpora (what `data.packing=auto` decides on), the pairs
a packed step holds, the steps a matching token budget gives. No timing is asserted."""

from __future__ import annotations

import json

import pytest
from use_helpers import tiny_checkpoint

from bertjax.bench.finetune import format_table as finetune_table
from bertjax.bench.finetune import run_finetune_benchmark
from bertjax.bench.packing import format_table as pack_table
from bertjax.bench.packing import run_packing_benchmark

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out


def test_pack_bench_measures_real_tokens_per_row_and_step():
    # the recipe's 512-piece vocabulary: the shares docs/packing.md reports
    result = run_packing_benchmark(preset="tiny", seq_len=128, batch_size=4, steps=2, repeats=1,
                                   quiet=True)
    json.dumps(result)  # what --json writes
    scenes, speeches = result["corpora"]["scenes"], result["corpora"]["speeches"]
    assert scenes["auto"] == "none" and speeches["auto"] == "best-fit"
    assert scenes["none"]["real_token_share"] == pytest.approx(0.89, abs=0.03)
    assert speeches["none"]["real_token_share"] == pytest.approx(0.5, abs=0.1)
    for corpus in (scenes, speeches):
        assert corpus["best-fit"]["real_token_share"] > 0.97
        assert corpus["best-fit"]["rows"] < corpus["none"]["rows"] == corpus["none"]["pairs"]
    unpacked, packed = result["rows"]
    assert [unpacked["packing"], packed["packing"]] == ["none", "best-fit"]
    assert unpacked["pairs_per_step"] == 4 < packed["pairs_per_step"]
    assert packed["real_tokens_per_step"] > 1.5 * unpacked["real_tokens_per_step"]  # 2 samples
    assert packed["real_tokens_per_step"] <= 4 * 128
    assert "tokens of real text per second" in pack_table(result)


def test_finetune_bench_runs_both_modes_with_matching_steps():
    result = run_finetune_benchmark(["shakespeare-genres"], model=tiny_checkpoint(), seeds=(0,),
                                    batch_size=8, max_length=64, limit=48, quiet=True)
    json.dumps(result)
    assert [(r["packed"], r["seed"]) for r in result["runs"]] == [(False, 0), (True, 0)]
    (task,) = result["tasks"]
    assert task["padded_steps"] == 48 // 8 and abs(task["packed_steps"] - 6) <= 2
    assert task["max_tokens"] % 64 == 0  # whole rows (of the --max-length's 64 tokens here)
    assert all(r["train_s"] > 0 and 0 <= r["score"] <= 1 for r in result["runs"])
    for mode in ("padded", "packed"):  # the summary is the runs' mean
        runs = [r["train_s"] for r in result["runs"] if r["packed"] == (mode == "packed")]
        assert task[f"{mode}_train_s"] == pytest.approx(sum(runs) / len(runs))
    assert "shakespeare-genres" in finetune_table(result)


def test_finetune_bench_refuses_a_budget_too_small_for_any_task_before_running():
    with pytest.raises(ValueError, match=r"shakespeare-genres: max_tokens \(--max-tokens\) 16 holds no"):
        run_finetune_benchmark(["shakespeare-genres"], model=tiny_checkpoint(), seeds=(0,),
                               max_tokens=16, max_length=64, limit=8, quiet=True)
