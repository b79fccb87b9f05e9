"""WordPiece: deterministic training, saving, loading, special tokens looked up, bad vocabs."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from data_helpers import minilm_dir, minilm_tokenizer, shakespeare_tokenizer

from bertjax.config import BertConfig
from bertjax.data import SpecialTokens, Tokenizer, corpus_documents


def test_trained_vocabulary_has_pad_zero_and_round_trips(tmp_path):
    tok = shakespeare_tokenizer()
    assert tok.vocab_size == 8000
    assert tok.special == SpecialTokens(pad=0, unk=1, cls=2, sep=3, mask=4)
    tok.save(tmp_path)
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 8000 and lines[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    text = ["Now is the winter of our discontent", "Wherefore art thou ROMEO?"]
    for path in (tmp_path, tmp_path / "vocab.txt", tmp_path / "tokenizer.json"):
        loaded = Tokenizer.load(path)
        assert loaded.vocab_hash == tok.vocab_hash
        assert loaded.encode_batch(text) == tok.encode_batch(text)
    ids = tok.encode_batch(text)[1]
    assert tok.decode(ids).startswith("wherefore art thou romeo")  # lower-cased by default
    assert tok.special.unk not in ids
    assert BertConfig(vocab_size=tok.vocab_size, pad_token_id=tok.special.pad).vocab_size == 8000


def test_cased_training_keeps_case():
    sentences = ["Hello World", "hello world", "HELLO there"] * 50
    cased = Tokenizer.train(sentences, 200, lowercase=False)
    uncased = Tokenizer.train(sentences, 200)
    assert cased.tokenizer.decode(cased.encode_batch(["Hello"])[0]) == "Hello"
    assert uncased.tokenizer.decode(uncased.encode_batch(["Hello"])[0]) == "hello"


def test_existing_bert_vocabulary_from_package_files():
    for name in ("vocab.txt", "tokenizer.json"):
        tok = Tokenizer.load(minilm_dir() / name)
        assert tok.vocab_size == 30522
        assert tok.special == SpecialTokens(pad=0, unk=100, cls=101, sep=102, mask=103)
        assert tok.encode_batch(["hello world"]) == [[7592, 2088]]
    repl = minilm_tokenizer().replacement_ids()
    # never [PAD]/[UNK]/[CLS]/[SEP]/[MASK] nor [unusedN]
    assert not set(repl.tolist()) & {0, 100, 101, 102, 103, 1, 998}
    assert len(repl) == 30522 - 5 - 994
    cont = minilm_tokenizer().continuation_mask()
    assert cont[minilm_tokenizer().token_to_id("##ing")] and not cont[7592]


def test_vocabulary_without_special_tokens_names_them(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[SEP]\nhello\nworld\n##s\n")
    with pytest.raises(ValueError, match=r"lacks the special tokens \[CLS\], \[MASK\]; add them"):
        Tokenizer.load(path)
    with pytest.raises(ValueError, match=r"vocab.txt is empty"):
        path.write_text("\n")
        Tokenizer.load(path)


def test_missing_vocabulary_and_empty_training_corpus(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"vocabulary .*nope.txt does not exist"):
        Tokenizer.load(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError, match="neither tokenizer.json nor vocab.txt"):
        Tokenizer.load(tmp_path)
    with pytest.raises(ValueError, match="empty corpus"):
        Tokenizer.train(iter([]), 100)


_TRAIN_IN_A_PROCESS = """
import sys
from bertjax.data import Tokenizer
sentences = open(sys.argv[1], encoding="utf-8").read().splitlines()
print(Tokenizer.train(sentences, 300).vocab_hash)
"""


def test_vocabulary_training_is_deterministic_within_and_across_processes(tmp_path):
    # `tokenizers` numbers the "##x" pieces in the order of a hash map seeded afresh for every
    # map, and breaks ties between equally frequent merges by those numbers: three plays and
    # 300 tokens gave four different vocabularies in four trainings before training fixed it.
    docs = itertools.islice(corpus_documents("shakespeare", split="train"), 3)
    sentences = [s for d in docs for s in d]
    corpus = tmp_path / "three_plays.txt"
    corpus.write_text("\n".join(sentences), encoding="utf-8")
    trained = [Tokenizer.train(sentences, 300) for _ in range(4)]
    in_process = {t.vocab_hash for t in trained}
    across = {
        subprocess.run([sys.executable, "-c", _TRAIN_IN_A_PROCESS, str(corpus)], check=True,
                       capture_output=True, text=True).stdout.strip()
        for _ in range(2)
    }
    assert len(in_process) == 1 and across == in_process
    tok = trained[0]
    # the continuation pieces got fixed ids but stay ordinary vocabulary entries
    assert set(tok.tokenizer.get_added_tokens_decoder()) == set(tok.special.ids)
    assert tok.token_to_id("##e") in set(tok.replacement_ids().tolist())
    assert tok.encode_batch(["the##e"]) == tok.encode_batch(["the # # e"])


def test_alphabet_limit_keeps_the_most_frequent_characters_ties_by_character():
    sentences = ["aaa bb cc dd ee"] * 20
    tok = Tokenizer.train(sentences, 100, limit_alphabet=3)
    single = {t for t in tok.tokenizer.get_vocab() if len(t) == 1}
    assert single == {"a", "b", "c"}  # a most frequent; b, c, d, e tie: the first two kept
    assert tok.encode_batch(["dd"]) == [[tok.special.unk]]


def test_too_small_a_vocabulary_is_said_and_a_bad_alphabet_limit_refused():
    with pytest.warns(UserWarning, match=r"has 13 tokens, not 8: the special tokens, the corpus's "
                                         r"4 characters and their 4 '##' forms are always kept"):
        tok = Tokenizer.train(["abcd dcba"] * 10, 8)
    assert tok.vocab_size == 13  # 5 special + a b c d + ##a ##b ##c ##d
    with pytest.raises(ValueError, match="limit_alphabet must be at least 1, got 0"):
        Tokenizer.train(["abcd"], 100, limit_alphabet=0)
