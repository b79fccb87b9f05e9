"""The public Python API checks its arguments as the command line checks its options (issue 45):
each wrong argument is a TypeError (a wrong Python type) or an InputError (a wrong value) whose
message names the argument and the fix, raised before any work, with every file left as it was.

Before: `fill_mask(model, tok, "to be or not to [MASK]")` said "line 3 is empty"; a BertModel
failed deep inside with "takes from 2 to 4 positional arguments but 5 were given";
`model_cls="BertModel"` said "'str' object is not callable"; `hidden_size=100` blamed config.json;
`missing_heads="explode"` loaded as "init"; `Checkpointer` on a file failed at the first save,
after training; a tokenizer of another vocabulary gave vectors.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from data_helpers import minilm_dir
from flax import nnx
from use_helpers import tiny_checkpoint

import bertjax
from bertjax import InputError
from bertjax.data import Tokenizer
from bertjax.train import Checkpointer, OptimConfig, assemble


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("api") / "model"
    shutil.copytree(tiny_checkpoint(), path)
    return path


@pytest.fixture(scope="module")
def loaded(model_dir):
    return bertjax.from_pretrained(model_dir)


@pytest.fixture
def untouched(model_dir):
    """The model directory, checked byte for byte after the test."""
    before = _snapshot(model_dir)
    yield model_dir
    assert _snapshot(model_dir) == before


def _first_line(err: pytest.ExceptionInfo) -> str:
    return str(err.value).splitlines()[0]


def test_one_string_where_a_list_is_due(loaded):
    model, tokenizer = loaded
    with pytest.raises(TypeError) as err:
        bertjax.fill_mask(model, tokenizer, "to be or not to [MASK]")
    assert _first_line(err) == ("texts must be a list of strings, got one str; pass [text] for "
                                "one")
    with pytest.raises(TypeError, match=r"^first must be a list of strings, got one str"):
        bertjax.next_sentence_probability(model, tokenizer, "To be.", ["Or not."])
    with pytest.raises(TypeError, match=r"^question must be a string, got list"):
        bertjax.answer(model, tokenizer, ["Who?"], "Hamlet.")


@pytest.mark.parametrize(("texts", "expected"), [
    ([123, None], "texts[0] is int, not a string"),
    (["fine [MASK]", None], "texts[1] is NoneType, not a string"),
    ([b"to be [MASK]"], "texts[0] is bytes, not a string (decode bytes first: "
                        "text.decode('utf-8'))"),
])
def test_items_that_are_not_strings_are_named(loaded, texts, expected):
    model, tokenizer = loaded
    with pytest.raises(TypeError) as err:
        bertjax.fill_mask(model, tokenizer, texts)
    assert _first_line(err) == expected


def test_a_model_without_the_head_is_named_with_the_class_to_load(untouched):
    encoder, tokenizer = bertjax.from_pretrained(untouched, model_cls=bertjax.BertModel)
    with pytest.raises(TypeError) as err:
        bertjax.fill_mask(encoder, tokenizer, ["to be or not to [MASK]"])
    assert _first_line(err) == ("fill_mask needs a model with the mlm_head head; a BertModel has "
                                "none: load the model with model_cls=bertjax.BertForMaskedLM (or "
                                "a class with that head)")
    with pytest.raises(TypeError, match="needs a model with the nsp_head head; a BertModel"):
        bertjax.next_sentence_probability(encoder, tokenizer, ["To be."], ["Or not."])
    with pytest.raises(TypeError, match=r"^fill_mask takes a bertjax model \(e\.g\. from "
                                        r"bertjax\.from_pretrained\), got str"):
        bertjax.fill_mask("model", tokenizer, ["a [MASK]"])


@pytest.mark.parametrize(("model_cls", "shown", "fix"), [
    ("BertModel", "'BertModel'", "bertjax.BertModel"),
    (int, "<class 'int'>", "bertjax.BertForMaskedLM"),
])
def test_model_cls_must_be_a_bertjax_class(untouched, model_cls, shown, fix):
    for load in (bertjax.from_pretrained, bertjax.load_hf):
        with pytest.raises(TypeError) as err:
            load(untouched, model_cls=model_cls)
        assert _first_line(err).startswith(f"{load.__name__}(model_cls=...) takes a bertjax model "
                                           "class (one of BertModel, BertForPreTraining, ")
        assert _first_line(err).endswith(f"got {shown}; pass e.g. model_cls={fix}")


def test_config_overrides_must_be_fields_that_keep_the_shapes(untouched):
    with pytest.raises(InputError) as err:
        bertjax.from_pretrained(untouched, hidden_size=100)
    assert _first_line(err) == ("from_pretrained(hidden_size=100): hidden_size sets the shapes of "
                                "the weights, which the checkpoint's config.json decides; leave "
                                "it out (or initialise a new model with BertConfig)")
    with pytest.raises(TypeError, match=r"^from_pretrained\(\) got an unexpected keyword argument "
                                        r"'hiden_dropout_prob': the keywords after the loader's"):
        bertjax.from_pretrained(untouched, hiden_dropout_prob=0.2)
    with pytest.raises(InputError) as err:
        bertjax.from_pretrained(untouched, dtype="float16")
    assert _first_line(err) == ("from_pretrained(dtype='float16'): BertConfig.dtype 'float16' is "
                                "not one of ('float32', 'bfloat16')")  # not config.json's fault
    model, _ = bertjax.from_pretrained(untouched, hidden_dropout_prob=0.2, dtype="bfloat16")
    assert (model.config.hidden_dropout_prob, model.config.dtype) == (0.2, "bfloat16")


def test_missing_heads_takes_init_or_error(untouched):
    with pytest.raises(InputError) as err:
        bertjax.from_pretrained(untouched, missing_heads="explode")
    assert _first_line(err) == ("from_pretrained(missing_heads='explode'): choose \"init\" (heads "
                                "the weights lack start from random weights, with a warning) or "
                                "\"error\" (refuse them)")


def test_assemble_names_what_it_takes():
    with pytest.raises(TypeError) as err:
        assemble("model", OptimConfig())
    assert _first_line(err) == ("assemble takes the model to train (a bertjax model, e.g. "
                                "bertjax.BertForPreTraining(config, rngs=nnx.Rngs(0))), got str")
    model = bertjax.BertForPreTraining(bertjax.BertConfig.from_preset("tiny"), rngs=nnx.Rngs(0))
    assert assemble(model, OptimConfig(), steps=10).state.step == 0


def test_a_checkpointer_that_cannot_write_fails_when_made(tmp_path, unwritable_dir):
    afile = tmp_path / "notes.txt"
    afile.write_text("mine\n")
    with pytest.raises(NotADirectoryError) as err:
        Checkpointer(afile)
    assert _first_line(err) == (f"checkpoint directory {afile} is a file, not a directory; "
                                "choose another path")
    with pytest.raises(NotADirectoryError, match=rf"^checkpoint directory {afile}/ckpt: {afile} "
                                                 "is a file, not a directory"):
        Checkpointer(afile / "ckpt")
    for path in (unwritable_dir, unwritable_dir / "ckpt"):
        with pytest.raises(PermissionError) as err:
            Checkpointer(path)
        assert _first_line(err) == (f"checkpoint directory {path}: cannot write in "
                                    f"{unwritable_dir} (permission denied); check its "
                                    "permissions or choose another checkpoint directory")
    assert afile.read_text() == "mine\n" and list(unwritable_dir.iterdir()) == []
    Checkpointer(tmp_path / "fine").close()  # a writable place still makes one


def test_a_tokenizer_of_another_vocabulary_is_refused_both_ways(loaded):
    """The tiny model's 400-token tokenizer with MiniLM's 30,522 rows (ids inside its range:
    once read as other words, silently), and MiniLM's tokenizer with the tiny model (ids past
    its rows: caught only when the text used one)."""
    tiny, tiny_tokenizer = loaded
    minilm, minilm_tokenizer = bertjax.from_pretrained(minilm_dir(), model_cls=bertjax.BertModel)
    for model, tokenizer in ((minilm, tiny_tokenizer), (tiny, minilm_tokenizer)):
        with pytest.raises(InputError) as err:
            bertjax.embed(model, tokenizer, ["a"])  # "a": an id both vocabularies have
        tokens, rows = tokenizer.vocab_size, model.config.vocab_size
        assert _first_line(err) == (
            f"the tokenizer has {tokens:,} tokens but the model's vocabulary has {rows:,} rows: "
            "it is another model's tokenizer, whose ids would be read as other words; pass the "
            "tokenizer loaded with this model (bertjax.from_pretrained returns both)")
    with pytest.raises(InputError, match="^the tokenizer has 30,522 tokens"):
        bertjax.fill_mask(tiny, minilm_tokenizer, ["a [MASK]"])
    with pytest.raises(TypeError, match="^tokenizer must be a bertjax.Tokenizer"):
        bertjax.embed(tiny, "tokenizer.json", ["a"])
    assert bertjax.embed(tiny, Tokenizer.load(tiny_checkpoint()), ["a"]).shape == (1, 128)
