#!/usr/bin/env bash
# The GPU check, run in one go on a lent GPU machine (torch, nvcc, CMake and ninja there; the
# rest of the build's packages carried in .gpu_deps, from scripts/gpu/prepare_deps.sh):
# builds zoff against that machine's torch with every core, runs the GPU tests (gpt small,
# 20 steps, against LibTorch's AdamW on the GPU), then zoff_gpu_bench: ZeRO-Offload's step
# against everything on the GPU, and the largest models it trains. Figures go to $OUT (or
# ./gpu-check-out): gpu_tests.json, bench_*.json and check.log. Each part has its own time
# limit inside ZOFF_GPU_CHECK_SECONDS (default 540), so what ran comes back even when a
# later part runs out of time.
#   ZOFF_GPU_CHECK_LARGE  --layers of the 6.7b-wide models tried for the largest (default 20)
#   ZOFF_GPU_PYTHON       the interpreter whose torch the build uses (default python3)
#   ZOFF_GPU_CHECK_PARTS  which parts run after the build (default: tests cpu python medium large)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/check.log") 2>&1
start=$SECONDS
budget="${ZOFF_GPU_CHECK_SECONDS:-540}"
left() { echo $((budget - (SECONDS - start))); }
# `limit CAP cmd...`: runs cmd for at most CAP seconds or what is left of the budget.
limit() {
  local cap="$1"
  shift
  local l
  l="$(left)"
  ((l < cap)) && cap=$l
  if ((cap < 20)); then
    echo "gpu_check: skipped (budget spent): $*"
    return 124
  fi
  timeout --kill-after=10 "$cap" "$@"
}

echo "gpu_check: $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"
echo "gpu_check: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB host memory"
source scripts/gpu/env.sh
python="${ZOFF_GPU_PYTHON:-$(command -v python3)}"
torch_prefix="$("$python" -c 'import torch, torch.utils; print(torch.__version__, torch.utils.cmake_prefix_path)')"
echo "gpu_check: torch ${torch_prefix% *}"
BUILD=/tmp/zoff-gpu-build
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="${torch_prefix#* };$ZOFF_DEPS_PREFIX/usr" -DZOFF_PYTHON_EXECUTABLE="$python" \
  -DZOFF_BUILD_BENCH=OFF -DZOFF_BUILD_PYTHON=ON -DZOFF_WARNINGS_AS_ERRORS=OFF \
  >"$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
echo "gpu_check: configured in $((SECONDS - start)) s"
# -k 0: a target that fails to compile does not stop the others.
limit "${ZOFF_GPU_BUILD_SECONDS:-300}" cmake --build "$BUILD" -j "$(nproc)" --target zoff_test_train zoff_test_engine \
  zoff_gpu_bench zoff_python -- -k 0 >"$OUT/build.log" 2>&1
grep -E "error|FAILED|warning:" "$OUT/build.log" | head -40
[[ -x "$BUILD/zoff_test_train" ]] || { echo "gpu_check: build failed"; tail -40 "$OUT/build.log"; exit 1; }
echo "gpu_check: built in $((SECONDS - start)) s"

parts=" ${ZOFF_GPU_CHECK_PARTS:-tests cpu python medium large} "
part() { [[ "$parts" == *" $1 "* ]]; }

# The GPU tests, then the CPU stand-in of the same path (tests/engine/device_path_test.cpp)
# beside an engine test over Gloo.
if part tests; then
  limit 200 "$BUILD/zoff_test_train" --gtest_filter='GpuOffload.*' \
    --gtest_output="json:$OUT/gpu_tests.json"
  echo "gpu_check: GPU tests rc=$? at $((SECONDS - start)) s"
fi
if part cpu; then
  limit 90 "$BUILD/zoff_test_engine" \
    --gtest_filter='MixedPrecision.Bf16WithCpuOffloadTracksFp32:DevicePath*:DeviceTransfer*' \
    >"$OUT/cpu_tests.log" 2>&1
  echo "gpu_check: CPU tests rc=$? at $((SECONDS - start)) s"
  grep -E "^\[ *(OK|FAILED|RUN) *\]|Segmentation|what\(\)|error" "$OUT/cpu_tests.log" | tail -12
fi

# The same path through `import zoff` (python/tests/test_gpu.py).
if part python; then
  limit 120 env PYTHONPATH="$BUILD/python" "$python" -m pytest -q -p no:cacheprovider \
    python/tests/test_gpu.py -s 2>&1 | tail -8
fi

# Throughput: offloaded against all on the GPU, alternating, two rounds.
part medium && limit 130 "$BUILD/zoff_gpu_bench" --preset medium --batch 8 --steps 10 --rounds 2 \
  --modes offload dpu stage3 gpu \
  --json "$OUT/bench_medium.json"
echo "gpu_check: medium bench rc=$? at $((SECONDS - start)) s"
# The largest: both modes at 2.7b (memory of each), then zoff alone on larger models.
part large && limit 150 "$BUILD/zoff_gpu_bench" --preset 2.7b --context 1024 --batch 2 --steps 2 --warmup 1 \
  --json "$OUT/bench_2.7b.json"
echo "gpu_check: 2.7b bench rc=$? at $((SECONDS - start)) s"
part large && for layers in ${ZOFF_GPU_CHECK_LARGE:-20}; do
  limit 200 "$BUILD/zoff_gpu_bench" --preset 6.7b --layers "$layers" --context 1024 --batch 2 \
    --steps 2 --warmup 1 --modes offload --pin-memory false \
    --json "$OUT/bench_6.7b_${layers}layers.json"
  echo "gpu_check: 6.7b width, $layers layers, rc=$? at $((SECONDS - start)) s"
done
echo "gpu_check: done in $((SECONDS - start)) s"
