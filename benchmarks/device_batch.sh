#!/usr/bin/env bash
# One batched session on the GPU machine (the `run` tool): install the packages, run the CUDA
# tests, profile compile time, then the side-by-side harness. Results go under $OUT.
#   bash benchmarks/device_batch.sh [tests] [profile] [harness] [graphs] [some] [compile_ab] [mempeak]
#     [matmul] [matmul_tests]
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python -m pip install -q --no-deps --no-build-isolation packages/* >"$OUT/pip.txt" 2>&1 || tail -5 "$OUT/pip.txt"
python -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
python -c "import compile_api, inductor_lite, aot, evalframe; print('packages from', inductor_lite.__file__)" || {
  which python pip; tail -20 "$OUT/pip.txt"; exit 1; }
for phase in "$@"; do
  case $phase in
    tests)
      timeout 240 python -m pytest -x -q -p no:cacheprovider \
        packages/inductor_lite/tests/test_triton.py packages/inductor_lite/tests/test_triton_memory.py \
        packages/inductor_lite/tests/test_triton_input_writes.py packages/inductor_lite/tests/test_triton_dynamic.py \
        $(ls packages/*/tests/test_cudagraph*.py 2>/dev/null) 2>&1 | tail -25 | tee "$OUT/tests.txt" ;;
    profile)
      timeout 150 python benchmarks/compile_profile.py gpt4 transformer_block_train --out "$OUT/prof" ;;
    harness)
      timeout 540 python benchmarks/run.py --device cuda --timeout 100 --out-dir "$OUT/harness" 2>&1 \
        | tail -40 ;;
    graphs)  # CUDA graphs: mode="reduce-overhead" for both compilers, the launch-bound workloads
      timeout 300 python benchmarks/run.py --device cuda --timeout 100 --mode reduce-overhead \
        --only "${GRAPHS_ONLY:-mlp,mlp_train,layernorm_softmax,transformer_block}" \
        --out-dir "$OUT/graphs" --no-plot 2>&1 | tail -30 ;;
    some)  # the default harness on a few workloads ($SOME_ONLY)
      timeout 400 python benchmarks/run.py --device cuda --timeout 100 --only "$SOME_ONLY" \
        --out-dir "$OUT/some" --no-plot 2>&1 | tail -30 ;;
    compile_ab)  # cold first calls, autotune candidates compiled one by one vs side by side
      for t in 1 8; do
        export TRITON_CACHE_DIR=$(mktemp -d) STRATA_CACHE_DIR=$(mktemp -d)
        timeout 150 python benchmarks/compile_profile.py ${AB_ONLY:-gpt4 transformer_block_train} \
          --compile-threads $t --out "$OUT/prof"
      done
      unset TRITON_CACHE_DIR STRATA_CACHE_DIR ;;
    mempeak)
      timeout 200 python benchmarks/gpu_memory_peak.py ${MEM_ONLY:-gpt4 transformer_block_train} ;;
    matmul)  # max-autotune's matmul templates vs cuBLAS, eager / torch.compile / strata
      export STRATA_CACHE_DIR=$(mktemp -d)  # the choices' measurement counted in compile time
      timeout 240 python benchmarks/gpu_matmul_autotune.py --out "$OUT/matmul_autotune.json" \
        ${MATMUL_CASES:+--cases "$MATMUL_CASES"} 2>&1 | tail -45
      unset STRATA_CACHE_DIR ;;
    matmul_tests)
      timeout 200 python -m pytest -x -q -p no:cacheprovider \
        packages/inductor_lite/tests/test_triton_matmul.py 2>&1 | tail -15 | tee "$OUT/matmul_tests.txt" ;;
    strata)  # eager and strata only: correctness and memory, faster than the full harness
      timeout 400 python benchmarks/run.py --device cuda --timeout 100 --impl eager,strata \
        --repeats 5 --out-dir "$OUT/strata" 2>&1 | tail -30 ;;
  esac
done
