#!/usr/bin/env bash
# The bundle's mpirun (scripts/gpu_bundle.sh, gpu-bundle/bin/mpirun) launches
# tessera-train on several ranks without this machine's Open MPI. In a private
# mount namespace, this machine's Open MPI is hidden: empty folders over its
# plugin, data and configuration folders, an empty file over its launchers and
# over each of its libraries (libmpi, libopen-pal, libopen-rte, libpmix,
# libhwloc, libevent, ...), so that a rank or launcher that reached for one of
# them would fail. Then, from the unpacked bundle, trains an MLP on the CPU with
# 2 ranks and with 4 (--partition tofu), and checks that each run ends well,
# reports its ranks, and prints losses.
#
# Needs root (unshare --mount). Not registered with CTest: it builds a bundle
# (a minute), and needs the Debian packages' download the first time.
#
# Usage: tests/scripts/gpu_bundle_mpi_test.sh [BUILD_DIR=build | BUNDLE.tar.gz]
set -uo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)"

if [ "${1:-}" = --hidden ]; then
  # Inside the namespace: hide, then run from the bundle in $2.
  bundle="$2"
  empty="$(mktemp -d)"
  nofile="$empty/nothing"
  mkdir "$empty/dir"
  : > "$nofile"
  sys=/usr/lib/x86_64-linux-gnu
  for d in $sys/openmpi $sys/pmix2 /usr/share/openmpi /usr/share/pmix /etc/openmpi; do
    [ -d "$d" ] && mount --bind "$empty/dir" "$d"
  done
  for f in /usr/bin/orterun /usr/bin/orted /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/ompi_info \
           $sys/lib{mpi,open-pal,open-rte,pmix,mca_common,ompitrace,oshmem,munge,hwloc,event}*.so*; do
    [ -f "$f" ] && mount --bind "$nofile" "$(readlink -f "$f")"
  done
  if command -v orterun > /dev/null && orterun --version > /dev/null 2>&1; then
    echo "FAIL: this machine's orterun still runs"
    exit 1
  fi
  # Without the bundle's libraries, the packed tessera-train no longer loads.
  if env -u LD_LIBRARY_PATH "$bundle/launch/tessera-train" --version > /dev/null 2>&1; then
    echo "FAIL: tessera-train still loads this machine's libmpi"
    exit 1
  fi
  fail=0
  train=("$bundle/launch/tessera-train" --device cpu --model mlp:hidden=64 --data synthetic --synthetic-size 256
         --batch 32 --steps 3 --progress none --no-eval)
  for np in 2 4; do
    args=()
    [ "$np" = 4 ] && args=(--partition tofu)
    out="$("$bundle/bin/mpirun" -np "$np" "${train[@]}" "${args[@]}" 2>&1)"
    rc=$?
    echo "--- mpirun -np $np (exit $rc)"
    echo "$out"
    [ "$rc" = 0 ] || { echo "FAIL: mpirun -np $np exited $rc"; fail=1; }
    grep -qiE "$np ranks|of $np\b" <<<"$out" || { echo "FAIL: -np $np: no mention of $np ranks"; fail=1; }
    grep -qi loss <<<"$out" || { echo "FAIL: -np $np: no losses printed"; fail=1; }
  done
  # The ranks get the bundle's libraries first (orterun puts its OPAL_PREFIX/lib,
# which the bundle lacks, before them).
  env_out="$("$bundle/bin/mpirun" -np 2 printenv LD_LIBRARY_PATH 2>&1)"
  [ "$(grep -c "^\([^:]*:\)\?$bundle/lib:" <<<"$env_out")" = 2 ] ||
    { echo "FAIL: the ranks' LD_LIBRARY_PATH does not have the bundle's lib first (after orterun's own): $env_out"
      fail=1; }
  exit "$fail"
fi

[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (unshare --mount)"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
arg="${1:-build}"
if [[ "$arg" == *.tar.gz ]]; then
  tarball="$arg"
else
  tarball="$tmp/gpu-bundle.tar.gz"
  bash "$SRC/scripts/gpu_bundle.sh" --no-nccl "$arg" "$tarball" || { echo "FAIL: gpu_bundle.sh failed"; exit 1; }
fi
tar -C "$tmp" -xzf "$tarball" || { echo "FAIL: the bundle does not unpack"; exit 1; }
[ -x "$tmp/gpu-bundle/bin/mpirun" ] || { echo "FAIL: the bundle has no bin/mpirun (packed with --no-mpi?)"; exit 1; }
if unshare --mount --propagation private bash "$SRC/tests/scripts/gpu_bundle_mpi_test.sh" --hidden "$tmp/gpu-bundle"; then
  echo "ok: the bundle's mpirun ran tessera-train on 2 and 4 ranks without this machine's Open MPI"
else
  exit 1
fi
