"""Write tests/fixtures/seqeval/cases.json: seqeval's own outputs on tricky tag sequences, the
reference `bertjax.tasks.entities` is tested against (tests/tasks/test_tagging.py).

seqeval is not a bertjax dependency: run this in a side environment,

    python3 -m venv /tmp/seq && /tmp/seq/bin/pip install seqeval
    /tmp/seq/bin/python scripts/make_seqeval_fixtures.py

Each case holds the true and predicted sentences and what seqeval's default mode (not strict)
says of them: `get_entities` of every sentence, `classification_report(output_dict=True)`,
`precision_score`/`recall_score`/`f1_score` (micro) and `accuracy_score`.
"""

from __future__ import annotations

import json
import math
import random
import warnings
from importlib.metadata import version
from pathlib import Path

from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score
from seqeval.metrics.sequence_labeling import get_entities

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "seqeval" / "cases.json"

# (name, true sentences, predicted sentences)
HAND_CASES = [
    ("readme default mode",  # seqeval README, "default mode" example
     [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]],
     [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]),
    ("readme default vs strict",  # README: I-NP I-NP is the entity B-NP I-NP in default mode
     [["B-NP", "I-NP", "O"]], [["I-NP", "I-NP", "O"]]),
    ("docstring f1_score",
     [["O", "O", "B-MISC", "I-MISC", "B-MISC", "O", "O"], ["B-PER", "I-PER", "O"]],
     [["O", "O", "B-MISC", "I-MISC", "B-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]),
    ("I- opens the sentence", [["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]]),
    ("I- after O", [["O", "B-LOC", "I-LOC"]], [["O", "I-LOC", "I-LOC"]]),
    ("type switch inside a run", [["B-PER", "I-PER", "I-PER"]], [["B-PER", "I-LOC", "I-PER"]]),
    ("trailing B-", [["O", "O", "B-ORG"]], [["O", "B-ORG", "B-ORG"]]),
    ("no entity spans sentences",
     [["O", "B-PER"], ["I-PER", "O"]], [["O", "B-PER"], ["B-PER", "O"]]),
    ("adjacent B- of one type", [["B-PER", "B-PER", "I-PER"]], [["B-PER", "I-PER", "I-PER"]]),
    ("all O both sides", [["O", "O"], ["O"]], [["O", "O"], ["O"]]),
    ("nothing predicted", [["B-PER", "O"], ["B-LOC", "I-LOC"]], [["O", "O"], ["O", "O"]]),
    ("nothing true", [["O", "O"], ["O", "O"]], [["B-PER", "O"], ["I-LOC", "O"]]),
    ("same span in two sentences",
     [["B-PER", "O"], ["B-PER", "O"]], [["B-PER", "O"], ["O", "O"]]),
    ("hyphenated type", [["B-MISC-X", "I-MISC-X", "O"]], [["B-MISC-X", "I-MISC", "O"]]),
    ("IOBES tags", [["S-PER", "B-LOC", "I-LOC", "E-LOC", "O"]],
     [["S-PER", "B-LOC", "E-LOC", "E-LOC", "S-LOC"]]),
    ("bare B and I", [["B", "I", "O", "B"]], [["B", "B", "O", "I"]]),
    ("empty sentence between", [["B-PER", "O"], [], ["O", "B-LOC"]],
     [["B-PER", "O"], [], ["B-LOC", "B-LOC"]]),
    ("I- of another type after B-", [["B-ORG", "I-ORG", "O", "B-LOC"]],
     [["B-ORG", "I-PER", "O", "I-LOC"]]),
]

TYPES = ("PER", "LOC", "ORG", "MISC")


def random_tags(rng: random.Random, n: int, well_formed: bool) -> list[str]:
    """`n` tags; well formed (BIO) or any mix of O, B-X and I-X."""
    tags = []
    for _ in range(n):
        r = rng.random()
        if r < 0.45:
            tags.append("O")
        elif well_formed and tags and tags[-1] != "O" and r < 0.75:
            tags.append("I-" + tags[-1][2:])
        else:
            tags.append(rng.choice("BI") + "-" + rng.choice(TYPES))
            if well_formed and tags[-1][0] == "I":
                tags[-1] = "B-" + tags[-1][2:]
    return tags


def perturb(rng: random.Random, tags: list[str], rate: float) -> list[str]:
    """`tags` with some replaced by any O/B-X/I-X tag (ill-formed sequences included)."""
    return [rng.choice(["O", *(p + "-" + t for p in "BI" for t in TYPES)])
            if rng.random() < rate else t for t in tags]


def random_cases(n: int, seed: int = 0) -> list[tuple[str, list, list]]:
    rng = random.Random(seed)
    cases = []
    for k in range(n):
        lengths = [rng.randint(0 if k % 5 == 4 else 1, 14) for _ in range(rng.randint(1, 6))]
        lengths[-1] = lengths[-1] or 1  # seqeval's accuracy divides by the number of tokens
        true = [random_tags(rng, m, well_formed=k % 3 != 2) for m in lengths]
        pred = [perturb(rng, t, rate=rng.choice([0.1, 0.3, 0.6])) for t in true]
        cases.append((f"random {k}", true, pred))
    return cases


def plain(value):
    """numpy numbers as JSON numbers; NaN (seqeval's macro average with no types) as null."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value


def case(name: str, true: list, pred: list) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # undefined-metric and "not an NE tag" warnings
        report = classification_report(true, pred, output_dict=True)
        return {
            "name": name, "true": true, "pred": pred,
            "true_entities": [get_entities(s) for s in true],
            "pred_entities": [get_entities(s) for s in pred],
            "report": {row: {k: plain(v) for k, v in cols.items()}
                       for row, cols in report.items()},
            "precision": plain(precision_score(true, pred)),
            "recall": plain(recall_score(true, pred)),
            "f1": plain(f1_score(true, pred)),
            "accuracy": plain(accuracy_score(true, pred)),
        }


def main() -> None:
    cases = [case(*c) for c in HAND_CASES + random_cases(20)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    lines = ",\n".join(json.dumps(c) for c in cases)  # one case per line
    OUT.write_text(f'{{"seqeval": "{version("seqeval")}", "cases": [\n{lines}\n]}}\n')
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
