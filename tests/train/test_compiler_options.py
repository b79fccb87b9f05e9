"""The XLA options the train and eval steps compile with on a GPU (`bertjax.train.parallel`):
which apply where, that XLA knows each by name, and that the strategies compile with them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from bertjax.train import parallel
from bertjax.train.parallel import GPU_COMPILER_OPTIONS, compiler_options


def test_only_a_gpu_gets_them_and_xla_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert compiler_options("cpu") is None and compiler_options("tpu") is None
    assert compiler_options("gpu") == GPU_COMPILER_OPTIONS
    for flags in ("--xla_gpu_enable_triton_gemm=true --xla_dump_to=/tmp/x",
                  "--xla_dump_to=/tmp/x --xla_gpu_enable_triton_gemm"):  # bare: XLA reads true
        monkeypatch.setenv("XLA_FLAGS", flags)
        assert compiler_options("gpu") is None  # the user's setting is left alone
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_triton_gemm_any_type=true")
    assert compiler_options("gpu") == GPU_COMPILER_OPTIONS  # another option of a longer name


def test_xla_knows_every_option_by_name() -> None:
    """An unknown name fails compilation ("No such compile option"): a typo shows here, on a CPU,
    not on the first GPU run (XLA takes GPU options on any backend)."""
    square = jax.jit(lambda x: x @ x, compiler_options=GPU_COMPILER_OPTIONS)
    assert float(square(jnp.eye(4)).sum()) == 4.0
    with pytest.raises(Exception, match="No such compile option"):
        jax.jit(lambda x: x @ x, compiler_options={"xla_gpu_enable_trton_gemm": False})(jnp.eye(4))


def test_pmap_takes_none() -> None:
    assert parallel.make_strategy("pmap").compiler_options is None


@pytest.mark.parametrize("kind", ["none", "mesh"])
def test_the_strategies_compile_the_steps_with_them(kind: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert parallel.make_strategy(kind).compiler_options is None  # this CPU: XLA's defaults
    monkeypatch.setattr(parallel, "platform_of", lambda device: "gpu")
    strategy = parallel.make_strategy(kind)
    jit, seen = jax.jit, []
    monkeypatch.setattr(jax, "jit", lambda fn, **kw: seen.append(kw) or jit(fn, **kw))
    assert strategy.compiler_options == GPU_COMPILER_OPTIONS
    state = {"w": jnp.ones((4,))}
    step = strategy.compile_step(lambda s, b: ({"w": s["w"] * 2}, {"loss": jnp.sum(s["w"])}),
                                 state)
    state = strategy.place_state(state)
    state, metrics = step(state, {"x": jnp.zeros((4,))})
    assert float(metrics["loss"]) == 4.0 and float(state["w"][0]) == 2.0
    assert float(strategy.compile_eval(lambda s: jnp.sum(s["w"]))(state)) == 8.0
    assert [kw["compiler_options"] for kw in seen] == [GPU_COMPILER_OPTIONS] * 2  # step, eval
