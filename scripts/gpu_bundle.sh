#!/usr/bin/env bash
# Packs what a GPU machine with only the NVIDIA driver and a CUDA 13 toolkit
# needs to take the GPU measurements (bench/gpu_measure.sh): the built programs
# and GPU tests, the scripts gpu_measure.sh runs, and every shared library they
# load that such a machine lacks: NCCL (neither the driver nor every toolkit
# brings it), OpenBLAS, OpenMPI's libraries, fmt, zlib, ... Left out, because
# the GPU machine has its own: the CUDA runtime, cuBLAS and cuBLASLt (the
# toolkit), cuDNN (a gigabyte with its engines; PyTorch's nvidia-cudnn wheel
# has it, and gpu_measure.sh finds it there), libcuda (the driver), glibc,
# libstdc++ and libgcc_s.
#
# Open MPI's launcher comes too (2 MB compressed), for runs of several ranks on
# a GPU machine without Open MPI: the packages openmpi-bin, openmpi-common,
# libopenmpi3, libpmix2, libmunge2, libhwloc15 and libevent at the versions
# installed here (the programs link the installed libmpi), fetched once with
# `apt-get download` into .cache/gpu-bundle-debs (offline: the installed files,
# dpkg -L) and unpacked with `dpkg -x` under gpu-bundle/mpi. Plugins that need
# a library neither packed nor the GPU machine's (UCX, OFI, verbs, PSM,
# netlink: fabrics a single host does not use; OpenSHMEM) are left out.
# gpu-bundle/bin/mpirun runs the packed orterun with the packed plugins and
# libraries, the ranks on this machine only (no ssh), as root, over shared
# memory, unbound; see its header. --no-mpi leaves all this out.
#
# The programs' CPU kernels must run on the GPU machine's CPU as well, so the
# build's TESSERA_HALIDE_TARGET must end with a portable target, as its default
# does (docs/cuda.md, "Running on a GPU machine").
#
# --no-nccl leaves NCCL out (208 MB of the 218): for a GPU machine that has its
# own libnccl.so.2, such as the one in PyTorch's nvidia-nccl wheel, and a
# transfer limit the whole bundle exceeds. There, gpu_measure.sh takes the
# nvidia-nccl wheel's library when the loader finds none; other programs need
# that library's folder on LD_LIBRARY_PATH.
#
# Usage: scripts/gpu_bundle.sh [--no-nccl] [--no-mpi] [BUILD_DIR=build] [OUT=gpu-bundle.tar.gz]
# There: tar xzf gpu-bundle.tar.gz
#        export LD_LIBRARY_PATH=$PWD/gpu-bundle/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
#        bash gpu-bundle/bench/gpu_measure.sh gpu-bundle gpu-results
#        gpu-bundle/bin/mpirun -np 2 gpu-bundle/launch/tessera-train --device cuda ...
set -euo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
pack_nccl=1
pack_mpi=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-nccl) pack_nccl=0 ;;
    --no-mpi) pack_mpi=0 ;;
    -*) echo "gpu_bundle: unknown option $1 (usage: scripts/gpu_bundle.sh [--no-nccl] [--no-mpi] [BUILD_DIR] [OUT])" >&2
        exit 2 ;;
    *) break ;;
  esac
  shift
done
BUILD="${1:-build}"
OUT="${2:-gpu-bundle.tar.gz}"
bins=(launch/tessera-train launch/tessera-plan bench/tessera-bench-gpu-copy tests/exec_cuda_device_test
      tests/exec_gpu_kernels_host_test)
# gpu_measure.sh and what it runs besides the programs above.
scripts=(bench/gpu_measure.sh bench/gpu_vs_pytorch.py)
# Libraries the GPU machine has, by soname.
provided='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn|libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so'
[ "$pack_nccl" = 1 ] || provided="${provided%)*}|libnccl)\\.so"

for b in "${bins[@]}"; do
  [ -x "$BUILD/$b" ] || { echo "gpu_bundle: $BUILD/$b is missing; build first (scripts/build.sh)" >&2; exit 1; }
done
# ldd's whole output first: `ldd | grep -q` under pipefail fails at random when
# grep stops reading early and ldd dies of SIGPIPE.
deps="$(ldd "$BUILD/${bins[0]}")"
grep -q libcublas <<<"$deps" ||
  { echo "gpu_bundle: $BUILD was built without CUDA (configure with TESSERA_CUDA=ON)" >&2; exit 1; }
target="$(sed -n 's/^TESSERA_HALIDE_TARGET:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)"
if [ "${target##*,}" = host ]; then
  echo "gpu_bundle: $BUILD's CPU kernels are compiled for this machine's CPU only (TESSERA_HALIDE_TARGET=$target)" \
       "and die of an illegal instruction on a CPU without its features; reconfigure with the default" \
       "(cmake -U TESSERA_HALIDE_TARGET $BUILD) or end the list with a portable target such as x86-64-linux-sse41" >&2
  exit 1
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
dest="$stage/gpu-bundle"
mkdir -p "$dest/lib"
for b in "${bins[@]}"; do
  mkdir -p "$dest/$(dirname "$b")"
  cp "$BUILD/$b" "$dest/$b"
  missing="$(ldd "$BUILD/$b" | awk '/not found/ {print $1}' | grep -vE '^libcuda\.so' || true)"
  [ -z "$missing" ] || { echo "gpu_bundle: $BUILD/$b needs $missing, which this machine lacks" >&2; exit 1; }
  # Each library under its soname, the name the loader looks for.
  ldd "$BUILD/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    while read -r name path; do
      [[ "$name" =~ $provided ]] || [ -e "$dest/lib/$name" ] || cp -L "$path" "$dest/lib/$name"
    done
done
for s in "${scripts[@]}"; do
  mkdir -p "$dest/$(dirname "$s")"
  cp -p "$SRC/$s" "$dest/$s"
done
if [ "$pack_mpi" = 1 ]; then
  # Open MPI's launcher, at the versions installed here: the packed libmpi is
  # the installed one. Each package is fetched once into .cache/gpu-bundle-debs;
  # offline, its installed files (dpkg -L) are copied instead.
  debs="$SRC/.cache/gpu-bundle-debs"
  mpi="$dest/mpi"
  mkdir -p "$debs" "$mpi"
  for p in openmpi-bin openmpi-common libopenmpi3 libpmix2 libmunge2 libhwloc15 libevent-core-2.1-7 \
           libevent-pthreads-2.1-7; do
    v="$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null)" ||
      { echo "gpu_bundle: $p is not installed here; install Open MPI (openmpi-bin) or pass --no-mpi" >&2; exit 1; }
    deb=""
    for f in "$debs/${p}_"*.deb; do
      [ -e "$f" ] && [ "$(dpkg-deb -f "$f" Version)" = "$v" ] && deb="$f"
    done
    if [ -z "$deb" ]; then
      (cd "$debs" && { apt-get download "$p=$v" || { apt-get update && apt-get download "$p=$v"; }; }) \
        > "$debs/apt.log" 2>&1 || true
      for f in "$debs/${p}_"*.deb; do
        [ -e "$f" ] && [ "$(dpkg-deb -f "$f" Version)" = "$v" ] && deb="$f"
      done
    fi
    if [ -n "$deb" ]; then
      dpkg -x "$deb" "$mpi"
    else
      echo "gpu_bundle: could not download $p $v ($debs/apt.log); packing its installed files instead" >&2
      dpkg -L "$p" | while read -r f; do
        [ -d "$f" ] || ! [ -e "$f" ] || { mkdir -p "$mpi$(dirname "$f")" && cp -P "$f" "$mpi$f"; }
      done
    fi
  done
  mlib="$mpi/usr/lib/x86_64-linux-gnu"
  # Not needed to launch C++ programs: manuals, compiler wrappers, the Fortran,
  # Java and OpenSHMEM libraries, and the launcher's other names (mpirun ->
  # orterun), whose links point into /usr.
  rm -rf "$mpi/usr/share/doc" "$mpi/usr/share/man" "$mlib"/lib{mpi_mpifh,mpi_usempi,mpi_java,oshmem,ompitrace}*
  find "$mpi/usr/bin" -mindepth 1 \( -type l -o \! \( -name orterun -o -name orted -o -name ompi_info \) \) -delete
  # The libraries the bundle's lib already holds, once: they must be the same files.
  for f in "$mlib"/*.so.*; do
    n="$(basename "$f")"
    [ -e "$dest/lib/$n" ] || continue
    cmp -s "$f" "$dest/lib/$n" ||
      { echo "gpu_bundle: the downloaded $n differs from the one $BUILD links; are the packages' versions the installed ones?" >&2
        exit 1; }
    rm -f "$(readlink -f "$f")" "$f"
  done
  find "$mlib" -xtype l -delete
  # A plugin that needs a library neither packed nor the GPU machine's is for
  # a fabric that machine lacks (UCX, OFI, verbs, PSM, ...) or for OpenSHMEM:
  # left out, so that Open MPI does not try it.
  mpath="$dest/lib:$mlib:$mlib/pmix2/lib:$mlib/openmpi/lib"
  dropped=()
  for f in "$mlib"/openmpi/lib/openmpi3/*.so "$mlib"/pmix2/lib/pmix/*.so; do
    out="$(LD_LIBRARY_PATH="$mpath" ldd "$f")"
    while read -r name arrow path _; do
      [ "$arrow" = "=>" ] || continue
      if [ "$path" = not ] || { [[ "$path" != "$stage/"* ]] && ! [[ "$name" =~ $provided ]]; }; then
        dropped+=("$(basename "$f" .so)")
        rm -f "$f"
        break
      fi
    done <<<"$out"
  done
  # The plugins' own libraries that no plugin kept needs.
  for f in "$mlib"/libmca_common_*.so.*; do
    [ -L "$f" ] || continue
    n="$(basename "$f")"
    grep -qlF "$n" "$mlib"/openmpi/lib/openmpi3/*.so || rm -f "$(readlink -f "$f")" "$f"
  done
  for f in "$mpi"/usr/bin/*; do
    out="$(LD_LIBRARY_PATH="$mpath" ldd "$f")"
    if awk -v stage="$stage/" -v re="$provided" \
         '$2 == "=>" && ($3 == "not" || (index($3, stage) != 1 && $1 !~ re)) {bad = 1} END {exit !bad}' <<<"$out"; then
      echo "gpu_bundle: the packed $(basename "$f") needs a library that is not packed:" >&2
      echo "$out" >&2
      exit 1
    fi
  done
  echo "gpu_bundle: left out the Open MPI plugins ${dropped[*]:-(none)}" >&2
  mkdir -p "$dest/bin"
  cat > "$dest/bin/mpirun" <<'WRAPPER'
#!/usr/bin/env bash
# Open MPI's mpirun from the bundle (gpu_bundle.sh), for one machine without
# Open MPI: the packed orterun, orted, plugins and libraries, as root, no ssh
# (plm isolated: every rank on this machine), shared memory between the ranks
# (vader without single-copy, which containers often forbid), and the ranks
# not bound to cores. The OMPI_MCA_ variables set below can be overridden by
# setting them before, and any mpirun option can follow:
#   gpu-bundle/bin/mpirun -np 2 gpu-bundle/launch/tessera-train ...
# The ranks load the bundle's libraries: LD_LIBRARY_PATH is exported to them.
set -euo pipefail
here="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"
usr="$here/mpi/usr"
lib="$usr/lib/x86_64-linux-gnu"
export OPAL_PREFIX="$usr"
export OPAL_SYSCONFDIR="$here/mpi/etc/openmpi"
export PMIX_MCA_mca_base_component_path="$lib/pmix2/lib/pmix"
# An H200 machine's image has a PMIx of its own whose zlib plugin the ranks
# try and refuse (an undefined symbol); PMIx then warns it cannot compress.
export PMIX_MCA_pcompress_base_silence_warning=1
export LD_LIBRARY_PATH="$here/lib:$lib:$lib/pmix2/lib:$lib/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$usr/bin:$PATH"
export OMPI_MCA_plm="${OMPI_MCA_plm:-isolated}"
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
export OMPI_MCA_hwloc_base_binding_policy="${OMPI_MCA_hwloc_base_binding_policy:-none}"
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$usr/bin/orterun" --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x PATH "$@"
WRAPPER
  chmod +x "$dest/bin/mpirun"
fi
{
  echo "commit: $(git -C "$SRC" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "packed: $(date -u +%Y-%m-%dT%H:%MZ) from $BUILD"
  echo "TESSERA_HALIDE_TARGET: $target"
  [ "$pack_nccl" = 1 ] || echo "nccl: not packed (--no-nccl); put the GPU machine's libnccl.so.2 on LD_LIBRARY_PATH"
  if [ "$pack_mpi" = 1 ]; then
    echo "mpi: Open MPI $(dpkg-query -W -f='${Version}' openmpi-bin); run ranks with gpu-bundle/bin/mpirun -np N PROGRAM ..."
  else
    echo "mpi: not packed (--no-mpi)"
  fi
} > "$dest/BUILD_INFO"
tar -C "$stage" -czf "$OUT" gpu-bundle
echo "gpu_bundle: $OUT ($(du -h "$OUT" | cut -f1)): ${#bins[@]} programs, ${#scripts[@]} scripts," \
     "$(ls "$dest/lib" | wc -l) libraries$([ "$pack_mpi" = 0 ] || echo ", Open MPI's mpirun (bin/mpirun)")"
