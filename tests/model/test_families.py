"""The BERT family: RoBERTa, XLM-RoBERTa, DistilBERT and ELECTRA checkpoints written by
transformers 5 in, used, and out again.

The fixtures (tests/fixtures/families/<model_type>/<Class>/, made once by
scripts/dev/make_family_fixtures.py with transformers 5) are `save_pretrained` directories of tiny
random models (odd sizes, every weight perturbed off its init) with their own tokenizers (RoBERTa's
byte-level BPE, XLM-R's SentencePiece Unigram, WordPiece), and transformers' outputs on a right-padded batch
in float32 and float64, the gradients of a fixed weighted sum of those outputs, and its fill-mask
pipeline's answers.

Tolerance (the parity rule, `parity.noise`): each output within 1e-5 of transformers' float32 run,
or 3 x that run's own distance from its float64 run where that is larger; every position compared,
padding included. Gradients: within 1e-5 relative to each tensor's scale (transformers' float32
gradients alone are stored).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

import bertjax
from bertjax.cli.main import main
from bertjax.config.families import FAMILIES as FAMILY_TABLE
from bertjax.config.heads import MODELS
from bertjax.io.hf import hf_name
from bertjax.io.weights import state_to_numpy
from bertjax.use.encode import encode
from parity.convert import to_torch_model
from parity.noise import failures

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

TOL = 1e-5
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "families"
FAMILIES = ("roberta", "xlm-roberta", "distilbert", "electra")
CLASSES = ["BertModel", "BertForMaskedLM", "BertForSequenceClassification",
           "BertForTokenClassification", "BertForQuestionAnswering", "BertForMultipleChoice"]
CASES = [*((family, name) for family in FAMILIES for name in CLASSES),
         ("electra", "BertForReplacedTokenDetection")]  # transformers' ElectraForPreTraining
INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def _class_name(family: str, name: str) -> str:
    """transformers' name of bertjax's class `name` in `family`."""
    return FAMILY_TABLE[family].class_name(name)


def _directory(family: str, name: str) -> Path:
    return FIXTURES / family / _class_name(family, name)


def _saved(path: Path) -> dict[str, np.ndarray]:
    return dict(np.load(path / "outputs.npz"))


def _fields(name: str, family: str = "bert") -> dict[str, str]:
    """Our output field -> transformers' field, for class `name` (a bare DistilBERT or ELECTRA
    encoder has no pooler)."""
    fields = MODELS[name].hf_outputs
    if name == "BertModel" and not FAMILY_TABLE[family].base_pooler:
        fields = {k: v for k, v in fields.items() if k != "pooled_output"}
    return fields


@nnx.jit
def _forward(model, *inputs):
    """The model on `inputs`, compiled whole: op by op, JAX compiles every operation again for
    each checkpoint's sizes."""
    return model(*inputs)


def _ours(model, saved: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our outputs on the saved inputs, by transformers' field name."""
    with jax.default_matmul_precision("highest"):
        out = _forward(model, *(jnp.asarray(saved[k]) if k in saved else None for k in INPUTS))
    return {theirs: np.asarray(getattr(out, ours))
            for ours, theirs in _fields(type(model).__name__, model.config.model_type).items()}


def _theirs(saved: dict[str, np.ndarray], fields: list[str], suffix: str = ""
            ) -> dict[str, np.ndarray]:
    return {f: saved[f + suffix] for f in fields}


@pytest.fixture(scope="module")
def loaded() -> dict[tuple[str, str], tuple]:
    """Each fixture through `bertjax.from_pretrained`: (model, tokenizer), loaded once."""
    return {case: bertjax.from_pretrained(_directory(*case)) for case in CASES}


@pytest.mark.parametrize(("family", "name"), CASES)
def test_checkpoint_gives_transformers_outputs(loaded, family, name):
    model, tokenizer = loaded[family, name]
    assert type(model).__name__ == name  # config.json's RobertaFor... is bertjax's BertFor...
    assert model.config.model_type == family and tokenizer.family.model_type == family
    saved = _saved(_directory(family, name))
    ours = _ours(model, saved)
    assert failures(ours, _theirs(saved, list(ours)), _theirs(saved, list(ours), "@float64"),
                    TOL) == []


@pytest.mark.parametrize(("family", "name"), CASES)
def test_gradients_match_transformers(loaded, family, name):
    model, _ = loaded[family, name]
    saved = _saved(_directory(family, name))
    weights = {f: jnp.asarray(saved[f"loss_weight/{f}"]) for f in _fields(name, family).values()}
    inputs = [jnp.asarray(saved[k]) if k in saved else None for k in INPUTS]

    @nnx.jit
    def gradients(m, weights, inputs):
        def loss(m):
            out = m(*inputs)
            return sum(jnp.sum(getattr(out, ours) * weights[theirs])
                       for ours, theirs in _fields(name, family).items())
        return nnx.grad(loss)(m)

    with jax.default_matmul_precision("highest"):
        grads = state_to_numpy(gradients(model, weights, inputs))
    ours = {hf_name(k, type(model).base_model_prefix, family): v for k, v in grads.items()}
    theirs = {k.removeprefix("grad/"): v for k, v in saved.items() if k.startswith("grad/")}
    assert set(ours) == set(theirs)
    worst = {k: float(np.max(np.abs(ours[k] - theirs[k])) / max(1.0, np.max(np.abs(theirs[k]))))
             for k in theirs}
    assert max(worst.values()) <= TOL, sorted(worst.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.parametrize(("family", "name"), CASES)
def test_mirror_computes_the_same(loaded, family, name):
    """bert_torch mirrors the family's options name for name (strict load) and gives the same
    outputs, in float32 and float64 (its float64 run measures float32's noise)."""
    model, _ = loaded[family, name]
    saved = _saved(_directory(family, name))
    ours = _ours(model, saved)
    runs = []
    for float64 in (False, True):
        mirror = to_torch_model(model, float64=float64)
        with torch.no_grad():
            out = mirror(*(torch.from_numpy(saved[k]).long() if k in saved else None
                           for k in INPUTS))
        runs.append({theirs: getattr(out, o).double().numpy()
                     for o, theirs in _fields(name, family).items()})
    assert failures(ours, *runs, TOL) == []


@pytest.mark.parametrize("family", FAMILIES)
def test_parity_command_passes_the_family_encoder(family, capsys):
    """`bertjax parity --hf` against bert_torch: outputs and every gradient (the bare encoder of
    a family without a pooler has no pooled output to compare)."""
    assert main(["parity", "--hf", str(_directory(family, "BertModel")), "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].endswith(" 0 failed")
    assert ("pooled_output" in out) == FAMILY_TABLE[family].base_pooler


@pytest.mark.parametrize(("family", "name"), CASES)
def test_saved_back_transformers_loads_the_same(loaded, family, name, tmp_path):
    model, tokenizer = loaded[family, name]
    bertjax.save_pretrained(model, tmp_path / "out", tokenizer)
    cls = getattr(transformers, _class_name(family, name))
    hf, info = cls.from_pretrained(tmp_path / "out", attn_implementation="eager",
                                   output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}, info
    saved = _saved(_directory(family, name))
    with torch.no_grad():
        out = hf.eval()(**{k: torch.from_numpy(saved[k]).long() for k in INPUTS if k in saved})
    fields = list(_fields(name, family).values())
    theirs = {f: getattr(out, f).numpy() for f in fields}
    assert failures(theirs, _theirs(saved, fields), _theirs(saved, fields, "@float64"),
                    TOL) == []
    # the tokenizer as transformers reads it: the same pieces and the same pair template
    text, pair = "Then let us go, my lord.", "What light through yonder window breaks?"
    before = transformers.AutoTokenizer.from_pretrained(_directory(family, name))
    after = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert after(text, pair)["input_ids"] == before(text, pair)["input_ids"]


@pytest.mark.parametrize("family", FAMILIES)
def test_pairs_are_encoded_as_transformers_does(loaded, family):
    _, tokenizer = loaded[family, "BertModel"]
    hf = transformers.AutoTokenizer.from_pretrained(_directory(family, "BertModel"))
    texts, pairs = ["Good morrow, cousin.", "A horse!"], ["How now?", None]
    batch = encode(tokenizer, texts, pairs, max_length=32)
    for i, (a, b) in enumerate(zip(texts, pairs, strict=True)):
        want = hf(a, b) if b is not None else hf(a)
        n = batch.attention_mask[i].sum()
        assert batch.input_ids[i, :n].tolist() == want["input_ids"]  # <s> A </s></s> B </s>, ...
        types = want.get("token_type_ids", [0] * n)  # RoBERTa's one type, DistilBERT's none
        assert batch.token_type_ids[i, :n].tolist() == types


@pytest.mark.parametrize("family", FAMILIES)
def test_fill_mask_tops_transformers_pipeline(loaded, family):
    model, tokenizer = loaded[family, "BertForMaskedLM"]
    expected = json.loads((_directory(family, "BertForMaskedLM") / "fill_mask.json").read_text())
    mask = tokenizer.special_tokens["mask"]
    # [MASK] in a user's text is the model's <mask>
    texts = [t.replace(mask, "[MASK]") for t in expected["inputs"]]
    got = bertjax.fill_mask(model, tokenizer, texts, top_k=5)
    for predictions, theirs in zip(got, expected["outputs"], strict=True):
        theirs = theirs[0] if isinstance(theirs[0], list) else theirs  # one mask per text
        assert [p.id for p in predictions[0]] == [t["token"] for t in theirs]
        np.testing.assert_allclose([p.probability for p in predictions[0]],
                                   [t["score"] for t in theirs], rtol=1e-4)


@pytest.mark.parametrize("family", ["roberta", "electra"])
def test_packed_rows_give_the_unpacked_predictions(loaded, family):
    """Packed rows restart positions per sequence: RoBERTa's from pad_token_id + 1, as each
    sequence alone would have them."""
    model, tokenizer = loaded[family, "BertForMaskedLM"]
    texts = ["Then let us [MASK], my lord.", "[MASK]", "What light through yonder [MASK]?"] * 3
    alone = bertjax.fill_mask(model, tokenizer, texts, top_k=3)
    packed = bertjax.fill_mask(model, tokenizer, texts, top_k=3, max_tokens=64)
    for a, b in zip(alone, packed, strict=True):
        assert [p.id for p in a[0]] == [p.id for p in b[0]]
        np.testing.assert_allclose([p.probability for p in a[0]],
                                   [p.probability for p in b[0]], rtol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_fill_mask_command_fills_as_the_pipeline(family, capsys):
    """`bertjax fill-mask` with [MASK] for the family's mask token: the pipeline's best token
    first; a BPE or SentencePiece text filled as the pipeline's `sequence`."""
    directory = _directory(family, "BertForMaskedLM")
    expected = json.loads((directory / "fill_mask.json").read_text())
    text = expected["inputs"][0].replace(FAMILY_TABLE[family].specials["mask"], "[MASK]")
    assert main(["fill-mask", str(directory), text]) == 0
    lines = capsys.readouterr().out.splitlines()
    best = expected["outputs"][0][0]
    assert lines[2].split()[2] == best["token_str"].strip()  # "  [MASK] 1: TOKEN P, ..."
    if family in ("roberta", "xlm-roberta"):
        assert lines[1] == f"  -> {best['sequence']}"


def test_next_sentence_is_refused_for_a_family_without_it(capsys):
    assert main(["nsp", str(_directory("roberta", "BertModel")), "A.", "B."]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "roberta has no next-sentence head" in err


def test_a_family_bertjax_lacks_is_one_line_listing_those_it_has(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}')
    assert main(["fill-mask", str(tmp_path), "a [MASK]"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "model_type 'gpt2'" in err and "bert, roberta, xlm-roberta, distilbert, electra" in err


# --- transformers 4's Flax checkpoints of the family (made once by
# scripts/dev/make_flax_v4_family_fixtures.py with transformers 4.57.6 + flax 0.12.8): loaded, and
# converted to a directory transformers 5 loads; judged against FlaxRoberta's own float32 outputs,
# with transformers 5's float64 run of the converted weights measuring float32's noise.
FLAX_V4 = Path(__file__).resolve().parents[1] / "fixtures" / "flax_v4_families"


def _hf_outputs(directory: Path, cls_name: str, saved: dict[str, np.ndarray], fields: list[str],
                float64: bool) -> dict[str, np.ndarray]:
    hf = getattr(transformers, cls_name).from_pretrained(directory, attn_implementation="eager")
    hf = (hf.double() if float64 else hf).eval()
    with torch.no_grad():
        out = hf(**{k: torch.from_numpy(saved[k]).long() for k in INPUTS if k in saved})
    return {f: getattr(out, f).double().numpy() for f in fields}


@pytest.mark.parametrize(("family", "name"), CASES)
def test_v4_flax_checkpoint_loads_and_converts_for_transformers_5(family, name, tmp_path):
    cls_name = _class_name(family, name)
    path = FLAX_V4 / family / f"Flax{cls_name}"
    saved = _saved(path)
    model = bertjax.load_hf(path)
    assert type(model).__name__ == name and model.config.model_type == family
    assert main(["convert", str(path), str(tmp_path / "out")]) == 0  # with its own checks
    fields = list(_fields(name, family).values())
    flax = _theirs(saved, fields)
    theirs64 = _hf_outputs(tmp_path / "out", cls_name, saved, fields, float64=True)
    assert failures(_ours(model, saved), flax, theirs64, TOL) == []
    theirs = _hf_outputs(tmp_path / "out", cls_name, saved, fields, float64=False)
    assert failures(theirs, flax, theirs64, TOL) == []


# --- fine-tuning a RoBERTa: each task end to end on tiny settings, the model written as the
# family's class that transformers loads
TASKS = {"shakespeare-genres": ("BertModel", "RobertaForSequenceClassification",
                                ["--per-genre", "8"]),
         "shakespeare-characters": ("BertModel", "RobertaForTokenClassification", []),
         "shakespeare-next-line": ("BertModel", "RobertaForMultipleChoice", [])}


@pytest.mark.parametrize("task", TASKS)
def test_finetune_runs_on_a_roberta(task, tmp_path):
    start, written, extra = TASKS[task]
    out = tmp_path / "run"
    assert main(["finetune", str(_directory("roberta", start)), "--task", task, "--output-dir",
                 str(out), "--epochs", "1", "--batch-size", "32", "--max-length", "32",
                 "--no-progress", *extra]) == 0
    _, info = getattr(transformers, written).from_pretrained(out / "model",
                                                             output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}, info


def test_finetune_question_answering_on_a_roberta(tmp_path):
    from use_helpers import qa_records

    from bertjax.data.squad import write_squad

    files = []
    for split, n, seed in (("train", 32, 0), ("validation", 8, 1), ("test", 8, 2)):
        write_squad(qa_records(n, seed), tmp_path / f"{split}.json")
        files += [f"--{split}", str(tmp_path / f"{split}.json")]
    out = tmp_path / "run"
    assert main(["finetune", str(_directory("roberta", "BertModel")), "--task",
                 "question-answering", *files, "--output-dir", str(out), "--epochs", "1",
                 "--batch-size", "16", "--max-length", "40", "--doc-stride", "12",
                 "--max-query-length", "8", "--no-progress"]) == 0
    _, info = transformers.RobertaForQuestionAnswering.from_pretrained(
        out / "model", output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}, info


@pytest.mark.parametrize("family", FAMILIES)
def test_tag_finds_what_transformers_pipeline_finds(loaded, family):
    """Words and character offsets from byte-level BPE, SentencePiece and WordPiece pieces, as
    transformers' token-classification pipeline groups them."""
    model, tokenizer = loaded[family, "BertForTokenClassification"]
    texts = ["Good morrow, Hamlet, and good night.", "What light through yonder window breaks?"]
    path = str(_directory(family, "BertForTokenClassification"))
    for aggregation in ("none", "simple", "first"):
        pipe = transformers.pipeline("token-classification", model=path,
                                     aggregation_strategy=aggregation)
        key = "entity" if aggregation == "none" else "entity_group"
        theirs = [[(e[key], e["start"], e["end"], e["word"]) for e in row] for row in pipe(texts)]
        ours = bertjax.tag(model, tokenizer, texts, aggregation=aggregation)
        assert [[(e[key], e["start"], e["end"], e["word"]) for e in row]
                for row in ours] == theirs


@pytest.mark.parametrize("family", FAMILIES)
def test_a_new_model_of_the_family_saves_to_what_transformers_loads(loaded, family, tmp_path):
    """A model built from a BertConfig of the family (ELECTRA with embeddings of hidden_size,
    whose config.json must then say so: transformers' default is 128), not loaded from one:
    `verify_export` reloads it in bertjax and in transformers 5 with the same outputs."""
    from bertjax.io.verify import verify_export

    _, tokenizer = loaded[family, "BertModel"]
    config = bertjax.BertConfig.from_preset(
        "tiny", model_type=family, vocab_size=tokenizer.vocab_size,
        pad_token_id=tokenizer.special.pad, type_vocab_size=1 if family != "electra" else 2,
        max_position_embeddings=64)
    model = bertjax.BertForMaskedLM(config, rngs=nnx.Rngs(0))
    bertjax.save_pretrained(model, tmp_path / "out", tokenizer)
    lines = verify_export(model, tokenizer, tmp_path / "out")
    assert lines[1].startswith(f"verified: transformers {transformers.__version__} loads it as "
                               f"{_class_name(family, 'BertForMaskedLM')}")


@pytest.mark.parametrize(("mode", "family"), [("train", "roberta"), ("infer", "distilbert"),
                                              ("infer", "electra")])
def test_bench_times_the_family(mode, family, tmp_path, capsys):
    """`bench train|infer --set model_type=...`: the family's pre-training model in each
    framework (its masked LM without NSP; DistilBERT's without token types), every row run."""
    from bench_helpers import TINY

    path = tmp_path / "bench.json"
    assert main(["bench", mode, *TINY, "--set", "num_hidden_layers=1", "--set",
                 f"model_type={family}", "--dtype", "float32", "--impl",
                 "bertjax,hf-eager,bert_torch", "--json", str(path)]) == 0, capsys.readouterr()
    report = json.loads(path.read_text())
    assert [r["row"] for r in report["rows"]] == ["bertjax fp32", "hf-eager fp32",
                                                  "bert_torch fp32"]
    assert report["config"]["model_type"] == family and not report["failed"]
    if mode == "train":
        assert all(0 < r["loss"] < 20 for r in report["rows"])  # ~ ln(1024): the MLM alone


@pytest.mark.parametrize("family", ["xlm-roberta", "distilbert"])
def test_embed_command_gives_transformers_mean_pooled_vectors(family, tmp_path):
    """`bertjax embed` of a family's encoder: transformers' last hidden state (its own
    tokenizer's encoding), mean-pooled over the real tokens."""
    lines = ["Good morrow, cousin.", "What light through yonder window breaks?"]
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n")
    directory = _directory(family, "BertModel")
    assert main(["embed", str(directory), "--file", str(tmp_path / "lines.txt"), "--out",
                 str(tmp_path / "v.npy"), "--pooling", "mean", "--no-progress"]) == 0
    ours = np.load(tmp_path / "v.npy")
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    hf = transformers.AutoModel.from_pretrained(directory, attn_implementation="eager").eval()
    batch = tokenizer(lines, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = hf(**batch).last_hidden_state.double()  # (B, S, H)
    mask = batch["attention_mask"][..., None].double()
    theirs = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_weights_that_disagree_with_the_config_are_one_line(tmp_path, capsys):
    import shutil

    copy = Path(shutil.copytree(_directory("roberta", "BertForMaskedLM"), tmp_path / "bad"))
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "intermediate_size": 56}))
    assert main(["fill-mask", str(copy), "a [MASK]"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "wrong shape for bert.layers.0.intermediate.bias: expected (56,), found (52,)" in err


@pytest.mark.parametrize("family", FAMILIES)
def test_question_answering_windows_are_the_tokenizers_pairs(loaded, family):
    """A question and a short context as one window: transformers' tokenizer's pair of them
    (`<s> q </s></s> c </s>`, one token type for RoBERTa), and every answer inside the context."""
    from bertjax.data.squad import QAExample, encode_squad

    _, tokenizer = loaded[family, "BertForQuestionAnswering"]
    hf = transformers.AutoTokenizer.from_pretrained(_directory(family, "BertForQuestionAnswering"))
    question, context = "Who is there?", "Nay, answer me. Stand and unfold yourself."
    example = QAExample("0", question, context, (("Nay", 0),), "t")
    windows = encode_squad(tokenizer, [example], 40, 8, max_query_length=16)
    want = hf(question, context)
    n = int(windows.attention_mask[0].sum())
    assert windows.input_ids[0, :n].tolist() == want["input_ids"]
    types = want.get("token_type_ids", [0] * n)  # DistilBERT's tokenizer gives none
    assert windows.token_type_ids[0, :n].tolist() == types
    assert windows.input_ids[0, windows.start_positions[0]] == want["input_ids"][
        want["input_ids"].index(hf.sep_token_id) + FAMILY_TABLE[family].pair_separators]


def test_distilbert_reads_no_token_types(loaded):
    """DistilBERT's models take no token types: a BERT-style pair's type 1 is not an error and
    changes nothing, in both frameworks."""
    model, _ = loaded["distilbert", "BertModel"]
    saved = _saved(_directory("distilbert", "BertModel"))
    ids, mask = jnp.asarray(saved["input_ids"]), jnp.asarray(saved["attention_mask"])
    ones = jnp.ones_like(ids)
    np.testing.assert_array_equal(model(ids, ones, mask).sequence_output,
                                  model(ids, None, mask).sequence_output)
    mirror = to_torch_model(model)
    t_ids, t_mask = torch.from_numpy(saved["input_ids"]), torch.from_numpy(saved["attention_mask"])
    with torch.no_grad():
        assert torch.equal(mirror(t_ids, torch.ones_like(t_ids), t_mask).sequence_output,
                           mirror(t_ids, None, t_mask).sequence_output)


def test_an_electra_config_without_embedding_size_has_transformers_default():
    config = bertjax.BertConfig.from_hf_dict({"model_type": "electra", "hidden_size": 256,
                                              "num_attention_heads": 4})
    assert config.embedding_width == transformers.ElectraConfig().embedding_size == 128


@pytest.mark.parametrize("family", ["roberta", "electra"])
def test_the_masked_lm_head_is_gelu_whatever_hidden_act_says(family, tmp_path):
    """transformers' RoBERTa and ELECTRA masked-LM heads use GELU even when hidden_act is the
    tanh approximation; the logits of such a model agree with transformers'."""
    cls = getattr(transformers, _class_name(family, "BertForMaskedLM"))
    config = transformers.AutoConfig.for_model(
        family, vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=40, max_position_embeddings=24, hidden_act="gelu_new",
        initializer_range=0.5,  # large pre-activations, where the two GELUs differ
        **({"embedding_size": 16} if family == "electra" else {}))
    torch.manual_seed(0)
    hf = cls(config).eval()
    hf.save_pretrained(tmp_path)
    model = bertjax.load_hf(tmp_path)
    ids = np.random.default_rng(0).integers(3, 50, size=(2, 9))
    with torch.no_grad():
        theirs = hf(torch.from_numpy(ids)).logits.numpy()
    with jax.default_matmul_precision("highest"):
        ours = np.asarray(model(jnp.asarray(ids, jnp.int32)).mlm_logits)
    # relative to the logits' scale (large here), as the export check judges them
    assert np.abs(ours - theirs).max() <= 1e-5 * max(1.0, np.abs(theirs).max())


def test_default_stride_fits_a_roberta_window(loaded):
    """The default doc_stride counts RoBERTa's four special tokens: a window of 24 with a
    16-piece question holds 4 context pieces, so the stride must be 3 (BERT's 3 specials: 4)."""
    from bertjax.data.squad import QAExample
    from bertjax.tasks.question_answering import QuestionAnsweringTask

    _, tokenizer = loaded["roberta", "BertForQuestionAnswering"]
    context = "Nay, answer me. Stand and unfold yourself. Long live the king."
    example = QAExample("0", "Who is there?", context, (("Nay", 0),), "t")
    windows = QuestionAnsweringTask(max_query_length=16)._windows(tokenizer, [example], 24)
    assert len(windows.example) > 1  # the context takes several windows, each moving forward
    assert QuestionAnsweringTask(max_query_length=16)._stride(24, 4) == 3
    assert QuestionAnsweringTask(max_query_length=16)._stride(24) == 4


def test_answer_says_when_a_roberta_window_holds_too_little(loaded):
    """`answer`'s own one-line error counts the family's special tokens (RoBERTa: 4)."""
    model, tokenizer = loaded["roberta", "BertForQuestionAnswering"]
    question = "Who is there?"
    asked = len(tokenizer.encode_batch([question])[0])
    with pytest.raises(bertjax.InputError, match="a window holds 4 context pieces, not more "
                                                 "than doc_stride 4"):
        bertjax.answer(model, tokenizer, question, "Nay, answer me. Stand and unfold yourself.",
                       max_seq_len=asked + 8, doc_stride=4)
