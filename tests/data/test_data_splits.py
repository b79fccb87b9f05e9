"""Held-out splits of a training file (`bertjax.data.labelled.split_examples`), and the split
`bertjax finetune` makes of a question-answering file: whole contexts, never one passage on both
sides (a model that trained on the passage has read the held-out question's answer)."""

from __future__ import annotations

import pytest

from bertjax.data.labelled import split_examples
from bertjax.data.squad import QAExample, read_squad, write_squad
from bertjax.jobs.finetune.config import FinetuneJob
from bertjax.jobs.finetune.run import read_job_examples


def test_a_split_is_reproducible_disjoint_and_keeps_the_order() -> None:
    examples = list(range(50))
    rest, held = split_examples(examples, 0.2, seed=3)
    assert len(held) == 10 and sorted(rest + held) == examples
    assert rest == sorted(rest) and held == sorted(held)
    assert split_examples(examples, 0.2, seed=3) == (rest, held)
    assert split_examples(examples, 0.2, seed=4)[1] != held
    # the examples the split held out before it took groups (3236c78), for the same seeds:
    # runs that name a seed keep their validation set
    assert split_examples(list(range(20)), 0.25, seed=0)[1] == [0, 10, 14, 16, 18]
    assert split_examples(list(range(7)), 0.5, seed=11)[1] == [0, 1, 2, 5]


def test_a_grouped_split_holds_whole_groups_out_and_no_more_than_the_share() -> None:
    examples = [(g, i) for g in range(12) for i in range(g % 4 + 1)]  # 30 in groups of 1 to 4
    share = round(0.25 * len(examples))
    for seed in range(20):
        rest, held = split_examples(examples, 0.25, seed, group=lambda e: e[0])
        assert {g for g, _ in rest}.isdisjoint({g for g, _ in held})
        assert sorted(rest + held) == examples
        assert share - 3 <= len(held) <= share  # what fits of groups of at most 4
    assert split_examples(examples, 0.25, 1, group=lambda e: e[0]) == \
        split_examples(examples, 0.25, 1, group=lambda e: e[0])


def test_a_group_larger_than_the_share_is_not_taken_while_a_smaller_one_fits() -> None:
    examples = [("big", i) for i in range(9)] + [("a", 0), ("b", 0)]
    for seed in range(10):
        _, held = split_examples(examples, 0.1, seed, group=lambda e: e[0])
        assert held in ([("a", 0)], [("b", 0)])
    # every group larger than the share: the smallest one
    examples = [("big", i) for i in range(9)] + [("small", i) for i in range(3)]
    for seed in range(10):
        assert split_examples(examples, 0.1, seed, group=lambda e: e[0])[1] == examples[9:]


def test_one_context_cannot_be_split() -> None:
    with pytest.raises(ValueError, match="5 examples are all about one context: none can be "
                                         "held out a context at a time"):
        split_examples([("same", i) for i in range(5)], 0.1, 0, group=lambda e: e[0],
                       unit="context")


def test_too_few_examples_for_the_share() -> None:
    with pytest.raises(ValueError, match="1 examples are too few to hold 50% out"):
        split_examples(["only"], 0.5, 0)
    with pytest.raises(ValueError, match="4 examples are too few to hold 90% out"):
        split_examples([0, 1, 2, 3], 0.9, 0)


def _questions(tmp_path):
    """29 questions about 8 passages (2 to 6 each), in a SQuAD file."""
    examples = []
    for p in range(8):
        context = f"Passage {p}: Horatio speaks to Hamlet at the platform number {p}."
        for q in range(2 + p % 5):
            examples.append(QAExample(f"{p}-{q}", f"Who speaks ({q})?", context,
                                      (("Horatio", context.index("Horatio")),), f"{p}-{q}"))
    path = tmp_path / "train.json"
    write_squad(examples, path)
    return path, read_squad(path)


def test_finetune_holds_out_whole_contexts_of_a_squad_file(tmp_path) -> None:
    path, examples = _questions(tmp_path)
    for seed in range(5):
        job = FinetuneJob(task="question-answering", train=str(path), validation_fraction=0.2,
                          seed=seed)
        train, validation, test = read_job_examples(job)
        assert test is None
        assert {e.context for e in train}.isdisjoint({e.context for e in validation})
        assert sorted(e.id for e in train + validation) == sorted(e.id for e in examples)
        assert 1 <= len(validation) <= round(0.2 * 29)  # whole passages, at most the share
