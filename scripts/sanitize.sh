#!/usr/bin/env bash
# Builds and runs unit tests under a sanitizer, each in a build directory of its
# own (docs/design.md, "Sanitizers"):
#   asan  AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer over
#         every GoogleTest suite (build-asan);
#   tsan  ThreadSanitizer over the suites of the executor, the devices and the
#         communicator, where the stream threads and the watchdog run, and the
#         swap planner's, whose search scores candidates on threads
#         (build-tsan).
# -O1 with line tables, no CUDA, no benchmarks, and only the test programs
# (not tessera-train and the rest); the kernels of the main build (below).
# Tests under mpirun, of the command-line programs, or of a GPU are not run:
# OpenMPI is not instrumented, and those programs are what the suites test.
# Any sanitizer report fails the test that made it, and so the script.
#   scripts/sanitize.sh asan|tsan
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
jobs=${TESSERA_JOBS:-2}

case "$mode" in
  asan)
    flags=(-DTESSERA_ASAN=ON -DTESSERA_UBSAN=ON)
    programs='^(base|lang|graph|models|exec|program|partition|swap|sim|comm|pipeline|checkpoint|predict|train)_[a-z0-9_]+_test$'
    ;;
  tsan)
    flags=(-DTESSERA_TSAN=ON)
    programs='^(exec_(cpu_device|executor|staged_device|device_budget|thread_budget|profile)|comm_(communicator|launcher|watchdog)|swap_(plan|executed))_test$'
    ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan" >&2; exit 2 ;;
esac
dir=build-$mode
# Not these: comm_mpi_test runs under mpirun, exec_cuda_device_test needs a GPU.
skip='^(comm_mpi_test|exec_cuda_device_test)$'

# The sanitizers' settings for everything below. Build-time tools (Halide's
# generators, gtest's test listing) run instrumented too; LLVM inside Halide
# leaks by design at exit, so leaks are checked in the test run only.
suppressions=$PWD/scripts/sanitizers
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$suppressions/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$suppressions/tsan.supp"
# allocator_may_return_null: tests ask for arenas of 2^62 bytes to check that a
# failed allocation is a clear error; ASan and TSan abort on those unless told
# not to.
export ASAN_OPTIONS="detect_leaks=0:strict_string_checks=1:allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=$suppressions/lsan.supp"
# Property tests run a tenth of their random cases here (tests/trials.h); the
# main test run runs them all.
export TESSERA_TEST_TRIALS=tenth

# The Halide kernels are ahead-of-time objects, not instrumented either way:
# after scripts/build.sh (as in CI) they and the strategy table come from
# build/lang/gen, for its targets, rather than being generated again; without
# it they are generated here, for this machine's target only.
main_targets=$(sed -n 's/^TESSERA_HALIDE_TARGET:STRING=//p' build/CMakeCache.txt 2>/dev/null || true)
if [ -n "$main_targets" ] && [ -f build/lang/gen/kernel_targets.cpp ]; then
  kernels=(-DTESSERA_GENERATED_FROM="$PWD/build/lang/gen" -DTESSERA_HALIDE_TARGET="$main_targets")
else
  kernels=(-DTESSERA_GENERATED_FROM= -DTESSERA_HALIDE_TARGET=host)
fi

start=$(date +%s)
# -g1: line tables only, enough for the reports' stacks, and quicker to build.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DTESSERA_CUDA=OFF -DTESSERA_BUILD_BENCH=OFF "${kernels[@]}" "${flags[@]}" >/dev/null
mapfile -t targets < <(ninja -C "$dir" -t targets all | sed -n 's/^\([a-z0-9_]*_test\): phony$/\1/p' |
                       grep -E "$programs" | grep -vE "$skip")
cmake --build "$dir" -j"$jobs" --target "${targets[@]}"
built=$(date +%s)

[ "$mode" = asan ] && export ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=0/detect_leaks=1}"
# GoogleTest's tests, and only those, are named Suite.Case: -R '\.' leaves out
# the script tests (they run the programs) and the placeholders of the suites
# not built here (NAME_NOT_BUILT).
(cd "$dir" && ctest --output-on-failure -j"$jobs" --timeout 900 -R '\.' -LE 'mpi|cli|gpu')
echo "sanitize.sh $mode: built ${#targets[@]} test programs in $((built - start)) s, tests took $(($(date +%s) - built)) s"
