#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, libFuzzer with Debian's clang, under ASan
# and UBSan) in build-fuzz and runs each for SECONDS (default 10) from its
# seed corpus (fuzz/corpus/TARGET, read only: new inputs go to a scratch
# directory). Exits 1 when a target finds a crash, a sanitizer error or an
# error other than a refusal of bad input; the input that did it is left in
# build-fuzz/findings. fuzz_onnx needs Debian's libonnx-dev (scripts/deps.sh
# installs it); without it the target is skipped with a message.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
shift || true
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is missing (Debian: clang-14 libclang-rt-14-dev)" >&2; exit 1; }
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_size fuzz_json_input fuzz_machine fuzz_plan fuzz_safetensors fuzz_idx fuzz_graph_json
                                  fuzz_model_spec fuzz_onnx)
CXX=clang++ cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if ! grep -q '^build fuzz_onnx:' build-fuzz/build.ninja; then
  for i in "${!targets[@]}"; do
    [ "${targets[$i]}" = fuzz_onnx ] && { unset 'targets[i]'; echo "skip fuzz_onnx: libonnx-dev is missing (scripts/deps.sh)"; }
  done
  targets=("${targets[@]}")
  [ ${#targets[@]} -gt 0 ] || exit 0
fi
cmake --build build-fuzz -j"${TESSERA_JOBS:-2}" --target "${targets[@]}"
mkdir -p build-fuzz/findings
failed=0
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  if build-fuzz/"$t" -max_total_time="$seconds" -max_len=65536 -timeout=30 -rss_limit_mb=2048 \
      -artifact_prefix=build-fuzz/findings/"$t"- "$scratch" fuzz/corpus/"$t" >build-fuzz/"$t".log 2>&1; then
    echo "ok   $t: $(grep -E '^Done [0-9]+ runs' build-fuzz/"$t".log), $(grep -oE 'cov: [0-9]+' build-fuzz/"$t".log | tail -1) edges"
  else
    echo "FAIL $t: see build-fuzz/$t.log"; tail -30 build-fuzz/"$t".log; failed=1
  fi
  rm -rf "$scratch"
done
exit $failed
