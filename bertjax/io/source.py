"""A MODEL argument resolved once: `locate(model)` turns a directory, a Hub id or a `bertjax
pretrain` run directory into a `ModelSource` that every loader takes, so a path is resolved
(and the Hub asked) once and its configuration read once (config.json, or a run's
run_config.json), however many questions follow (which class the checkpoint is, its weights,
its tokenizer).

    source = locate("google-bert/bert-base-uncased")   # or a directory, a run
    source.kind, source.directory, source.architecture
    model, tokenizer = bertjax.from_pretrained(source)

Hugging Face Hub ids (`google-bert/bert-base-uncased`) become local directories through
`huggingface_hub` (an optional dependency): its cache, `HF_HUB_OFFLINE`, `revision=`, and the
token from the environment (`HF_TOKEN` or `hf auth login`). `resolve_model(name)` returns `name`
itself when it exists on disk, else the cached snapshot of the Hub repository of that id, holding
`config.json`, the tokenizer's files and ONE set of weights: safetensors first, then
`pytorch_model.bin`, then transformers-4 `flax_model.msgpack` (sharded ones with their index), so
a repository that carries every format costs one download. Offline with the model absent from
the cache is one error naming the id and how to get it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertjax.errors import InputError
from bertjax.io.hf import CONFIG, architecture_in, read_config_json, weights_format
from bertjax.runs.config import RunConfig
from bertjax.runs.layout import RunDir

__all__ = ["HUGGING_FACE", "RUN", "ModelSource", "local_place", "locate", "looks_like_hub_id",
           "resolve_model"]

RUN, HUGGING_FACE = "bertjax pretrain run", "Hugging Face directory"


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a model is and what it holds, found once."""

    given: str  # what was passed: a directory, a run directory or a Hub id
    directory: Path  # the local directory (a Hub id's cached snapshot)
    kind: str  # RUN or HUGGING_FACE
    config: Mapping[str, Any] | None = None  # config.json as read (Hugging Face directories)
    run: RunConfig | None = None  # a run's configuration, from its run_config.json

    @property
    def architecture(self) -> str | None:
        """The class the checkpoint is: the one a run trains, or the one config.json names
        (`architectures`; a v4 `FlaxBert*` name as its class), None if it names none."""
        if self.run is not None:
            return self.run.model_class
        return None if self.config is None else architecture_in(self.config)

    @property
    def weights(self) -> str:
        """The weights file read: a run's checkpoints, or a Hugging Face directory's format."""
        return RUN if self.kind == RUN else weights_format(self.directory) or ""


def locate(model: str | Path | ModelSource, *, revision: str | None = None) -> ModelSource:
    """`model` resolved: a `ModelSource` as it is, else the local directory of a path or Hub id
    (at `revision`), which holds a run (run_config.json, read here) or a Hugging Face model
    (config.json, read here); otherwise an InputError naming what to pass."""
    if isinstance(model, ModelSource):
        return model
    directory = resolve_model(model, revision=revision)
    if not directory.exists():
        raise InputError(
            f"model {model} does not exist; pass a Hugging Face BERT directory (config.json + "
            "model.safetensors + tokenizer.json/vocab.txt), a Hub id (organisation/name) or a "
            "`bertjax pretrain` run directory")
    if not directory.is_dir():
        raise InputError(f"model {model} is a file; pass the directory that holds it")
    run = RunDir(directory)
    if run.config.is_file():
        saved = run.saved_config(reading=True)  # damaged: an error naming how to restore it
        return ModelSource(str(model), directory, RUN, saved,
                           RunConfig.from_dict(saved or {}, source=str(run.config)))
    if not (directory / CONFIG).is_file() and run.checkpoints.is_dir():
        raise InputError(f"{model} holds a `bertjax pretrain` run's checkpoints but not its "
                         f"{run.config.name}; {run.config_fix(reading=True, missing=True)}")
    if not (directory / CONFIG).is_file():
        raise InputError(
            f"{model} holds neither config.json (a Hugging Face model) nor run_config.json (a "
            "`bertjax pretrain` run); pass a directory that holds one")
    return ModelSource(str(model), directory, HUGGING_FACE, read_config_json(directory))


# --- Hub ids ---------------------------------------------------------------------------------

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
# a sentence-transformers model's pooling and maximum length (`bertjax embed` follows them)
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json")
# (weight file, its shard index): the first present is fetched, as transformers prefers them
WEIGHTS = (("model.safetensors", "model.safetensors.index.json"),
           ("pytorch_model.bin", "pytorch_model.bin.index.json"),
           ("flax_model.msgpack", "flax_model.msgpack.index.json"))
# a Hub repository id as bertjax takes one: `owner/name` (the Hub redirects the old single names,
# such as bert-base-uncased, to an owner's: google-bert/bert-base-uncased); anything else that is
# not on disk is a path that does not exist, said at once, without asking the Hub
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# the HTTP libraries whose errors mean "no answer from the Hub" (no network, refused, timed out)
_TRANSPORT_MODULES = ("httpx", "httpx2", "requests", "urllib3", "socket", "ssl")


def looks_like_hub_id(name: str) -> bool:
    """Whether `name` could be a Hub repository id (`owner/name`: one slash, no leading ./ or /)
    and is no path on this machine: not there, and not inside a directory that is (`runs/typo`
    is a mistyped run, not a Hub id)."""
    path = Path(name)
    return (bool(_REPO_ID.fullmatch(name)) and not path.exists() and ".." not in name
            and not name.startswith(".") and not name.endswith((".json", ".safetensors", ".bin"))
            and not (len(path.parts) > 1 and path.parent.is_dir()))


def local_place(name: str | Path, *, cache_dir: str | Path | None = None) -> Path:
    """Where the model `name` lies on this machine, found without asking the Hub: the path
    itself if it exists or is no Hub id, else the Hub cache's folder of that id (its snapshots
    and blobs; it may not exist yet). What a command that writes must keep its output out of."""
    if Path(name).exists() or not looks_like_hub_id(str(name)):
        return Path(name)
    try:
        from huggingface_hub import constants
    except ImportError:
        return Path(name)
    folder = f"models--{str(name).replace('/', '--')}"
    return Path(cache_dir if cache_dir is not None else constants.HF_HUB_CACHE) / folder


def resolve_model(name: str | Path, *, revision: str | None = None,
                  cache_dir: str | Path | None = None) -> Path:
    """A local directory for `name`: the path itself if it exists, else the Hub snapshot of the
    repository `name` at `revision` (see the module docstring). Raises FileNotFoundError for a
    missing path that is no Hub id, or a Hub id that cannot be had (one line saying why)."""
    path = Path(name)
    if path.exists() or not looks_like_hub_id(str(name)):
        if revision is not None and path.exists():
            raise InputError(f"{name} is a local directory: revision={revision!r} only chooses a "
                             "version of a Hub model")
        return path
    return _download(str(name), revision, cache_dir)


def _download(repo_id: str, revision: str | None, cache_dir: str | Path | None) -> Path:
    """The snapshot directory holding config.json, the tokenizer files and one set of weights.
    The Hub is asked once whether it answers; if not (no network), every file comes from the
    cache, so a model missing there fails at once instead of after each file's retries."""
    try:
        import huggingface_hub as hub
        from huggingface_hub import constants, errors
    except ImportError:
        raise InputError(
            f"{repo_id}: no such local directory; as a Hugging Face Hub id it needs "
            "huggingface_hub (pip install 'bertjax[hub]')") from None
    cache = Path(cache_dir if cache_dir is not None else constants.HF_HUB_CACHE)
    offline = constants.is_offline_mode()
    local_only = offline or not _hub_answers(repo_id, revision)

    def fetch(filename: str, required: bool = False) -> Path | None:
        try:
            return Path(hub.hf_hub_download(repo_id, filename, revision=revision,
                                            cache_dir=cache_dir, local_files_only=local_only))
        except errors.RepositoryNotFoundError:
            raise FileNotFoundError(
                f"{repo_id}: no such local directory, and no model of that id on the Hugging Face "
                "Hub (or a private or gated one: log in with `hf auth login` or set HF_TOKEN); "
                "check the name") from None
        except errors.RevisionNotFoundError:
            raise FileNotFoundError(f"the Hub model {repo_id} has no revision {revision!r}; pass "
                                    "a branch, tag or commit it has") from None
        except errors.LocalEntryNotFoundError:
            if required:
                raise _not_cached(repo_id, revision, offline, cache) from None
            return None
        except errors.EntryNotFoundError:  # not in the repository
            if required:
                raise FileNotFoundError(f"the Hub model {repo_id} has no {filename}: it is not a "
                                        "transformers model directory") from None
            return None

    config = fetch(CONFIG, required=True)
    assert config is not None  # required: fetched or raised
    for filename in (*TOKENIZER_FILES, *SENTENCE_TRANSFORMERS_FILES):
        fetch(filename)
    for single, index in WEIGHTS:
        if fetch(single) is not None:
            return config.parent
        index_path = fetch(index)
        if index_path is not None:
            for shard in sorted(set(json.loads(index_path.read_text()).get("weight_map", {})
                                    .values())):
                fetch(shard, required=True)
            return config.parent
    if local_only:
        raise _not_cached(repo_id, revision, offline, cache)
    raise FileNotFoundError(f"the Hub model {repo_id} holds no weights bertjax reads (none of "
                            f"{', '.join(w for pair in WEIGHTS for w in pair)})")


def _hub_answers(repo_id: str, revision: str | None) -> bool:
    """Whether the Hub answers one request (for the id's config.json, no retries): any HTTP
    answer counts, an error of the connection does not."""
    import huggingface_hub as hub
    from huggingface_hub import errors

    try:
        hub.get_hf_file_metadata(hub.hf_hub_url(repo_id, CONFIG, revision=revision))
    except errors.HfHubHTTPError:
        return True  # it answered (no such model, gated, ...): the download says which
    except Exception as err:
        if type(err).__module__.split(".")[0] in _TRANSPORT_MODULES or isinstance(err, OSError):
            return False
        raise
    return True


def _not_cached(repo_id: str, revision: str | None, offline: bool, cache: Path
                ) -> FileNotFoundError:
    at = f" (revision {revision})" if revision else ""
    why = "HF_HUB_OFFLINE is set" if offline else "the Hub cannot be reached"
    return FileNotFoundError(
        f"{repo_id}: no such local directory, and the Hub model of that id{at} is not in the "
        f"local cache ({cache}) and {why}: download it first "
        f"(hf download {repo_id}{' --revision ' + revision if revision else ''}) with network "
        "access, or pass a local directory")
