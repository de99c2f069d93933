#!/usr/bin/env bash
# Checks the README's set-up on a minimal Debian 12 (bookworm): creates a
# `debootstrap --variant=minbase` chroot, copies this working tree (tracked and
# untracked, not ignored) to /src/main in it and ../shared to /src/shared, and
# runs the README's two commands there as on a fresh machine:
#   bash scripts/test.sh   (installs Debian deps, builds, runs ctest)
#   bash scripts/main.sh   (installs Debian deps, builds, trains the CNN)
# Needs root, debootstrap and a reachable Debian mirror; see docs/setup.md.
#
# Usage: sudo bash scripts/check_minimal_debian.sh [options] [-- tessera-train args]
#   --with-cuda     bind-mount the host's CUDA toolkit (read-only, $CUDA_DIR,
#                   default /usr/local/cuda) at the same path and put its bin/ on
#                   PATH, so CMake finds nvcc and builds the CUDA backend
#   --build-only    run scripts/deps.sh and scripts/build.sh only (no ctest, no training)
#   --skip-main     run scripts/test.sh only
#   --reuse         keep an existing chroot (its packages from earlier runs stay
#                   installed, so it is no longer minimal); default: make a new one
#   --chroot DIR    where the chroot lives (default /tmp/chroot)
# Arguments after `--` go to scripts/main.sh, e.g. `-- --epochs 1`.
# Environment: MIRROR (default http://deb.debian.org/debian), JOBS (build and
# ctest parallelism, default 2), NICE (default 19), LOG_DIR (default
# /tmp/check_minimal_debian-logs). When the host has ccache, its cache
# directory is bind-mounted into the chroot, so reruns (same paths) do not
# recompile; set NO_HOST_CCACHE=1 to use a cache inside the chroot. (No
# CCACHE_BASEDIR: it makes __FILE__ relative, and Safetensors.PythonReaderAgrees
# finds its Python checker through __FILE__.)
#
# Every mount it makes is unmounted on exit, also on failure or Ctrl-C.
# Exit status: 0 when every command it ran succeeded, else the first failure's.
set -euo pipefail

CHROOT=/tmp/chroot
WITH_CUDA=0 BUILD_ONLY=0 SKIP_MAIN=0 REUSE=0
MAIN_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --with-cuda) WITH_CUDA=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --skip-main) SKIP_MAIN=1 ;;
    --reuse) REUSE=1 ;;
    --chroot) CHROOT="$2"; shift ;;
    --) shift; MAIN_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "check_minimal_debian.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

MIRROR="${MIRROR:-http://deb.debian.org/debian}"
JOBS="${JOBS:-2}"
NICE="${NICE:-19}"
LOG_DIR="${LOG_DIR:-/tmp/check_minimal_debian-logs}"
CUDA_DIR="${CUDA_DIR:-/usr/local/cuda}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
SHARED="$REPO/../shared"

die() { echo "check_minimal_debian.sh: $*" >&2; exit 1; }
log() { echo "== $(date '+%F %T') $*"; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install -y debootstrap"
[ -d "$SHARED" ] || die "$SHARED is missing (the design docs sit beside the repository)"
case "$CHROOT" in /|"") die "refusing chroot directory '$CHROOT'" ;; esac
CHROOT="$(realpath -m "$CHROOT")"
mkdir -p "$LOG_DIR"

# ---- mounts: everything mounted here is unmounted on exit -----------------------
MOUNTED=()
mounts_below() { awk -v d="$CHROOT" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts; }
cleanup() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount -R "${MOUNTED[i]}" 2>/dev/null || umount -R -l "${MOUNTED[i]}" ||
      echo "check_minimal_debian.sh: could not unmount ${MOUNTED[i]}" >&2
  done
  MOUNTED=()
  if [ -n "$(mounts_below)" ]; then
    echo "check_minimal_debian.sh: still mounted under $CHROOT:" >&2; mounts_below >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
do_mount() {  # do_mount TARGET mount-args...
  local target="$1"; shift
  mkdir -p "$target"
  if mountpoint -q "$target"; then return 0; fi
  mount "$@" "$target"
  MOUNTED+=("$target")
}

# ---- the base system ------------------------------------------------------------
if [ -n "$(mounts_below)" ]; then
  die "something is already mounted under $CHROOT (another run?):
$(mounts_below)"
fi
if [ -e "$CHROOT" ] && [ "$REUSE" -eq 0 ]; then
  [ -e "$CHROOT/.tessera-minbase" ] || [ -z "$(ls -A "$CHROOT")" ] ||
    die "$CHROOT exists and was not made by this script; remove it or pick --chroot"
  log "removing the previous chroot $CHROOT"
  rm -rf --one-file-system "$CHROOT"
fi
if [ ! -e "$CHROOT/.tessera-minbase" ]; then
  log "debootstrap --variant=minbase bookworm $CHROOT $MIRROR"
  nice -n "$NICE" debootstrap --variant=minbase bookworm "$CHROOT" "$MIRROR" \
    > "$LOG_DIR/debootstrap.log" 2>&1 || die "debootstrap failed, see $LOG_DIR/debootstrap.log"
  touch "$CHROOT/.tessera-minbase"
else
  log "reusing $CHROOT (packages installed by earlier runs are still there)"
fi
log "base system: Debian $(cat "$CHROOT/etc/debian_version") ($(grep -h '^deb ' "$CHROOT/etc/apt/sources.list"))"
cp -L /etc/resolv.conf "$CHROOT/etc/resolv.conf"
# No service may start inside the chroot.
printf '#!/bin/sh\nexit 101\n' > "$CHROOT/usr/sbin/policy-rc.d"; chmod +x "$CHROOT/usr/sbin/policy-rc.d"

do_mount "$CHROOT/proc" -t proc proc
do_mount "$CHROOT/sys" -t sysfs sysfs
do_mount "$CHROOT/dev" --rbind /dev
mount --make-rslave "$CHROOT/dev"

CCACHE_ENV=()
if [ -z "${NO_HOST_CCACHE:-}" ] && command -v ccache >/dev/null; then
  HOST_CCACHE="$(ccache -k cache_dir)"
  mkdir -p "$HOST_CCACHE"
  do_mount "$CHROOT/var/cache/host-ccache" --bind "$HOST_CCACHE"
  CCACHE_ENV=(CCACHE_DIR=/var/cache/host-ccache)
  log "host ccache $HOST_CCACHE mounted at /var/cache/host-ccache"
fi

CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
if [ "$WITH_CUDA" -eq 1 ]; then
  [ -x "$CUDA_DIR/bin/nvcc" ] || die "--with-cuda: no $CUDA_DIR/bin/nvcc (set CUDA_DIR)"
  CUDA_REAL="$(realpath "$CUDA_DIR")"
  do_mount "$CHROOT$CUDA_REAL" --bind "$CUDA_REAL"
  mount -o remount,bind,ro "$CHROOT$CUDA_REAL"
  if [ "$CUDA_REAL" != "$CUDA_DIR" ] && [ ! -e "$CHROOT$CUDA_DIR" ]; then
    mkdir -p "$(dirname "$CHROOT$CUDA_DIR")"; ln -s "$CUDA_REAL" "$CHROOT$CUDA_DIR"
  fi
  CHROOT_PATH="$CUDA_DIR/bin:$CHROOT_PATH"
  log "CUDA toolkit $CUDA_REAL mounted read-only ($("$CUDA_DIR/bin/nvcc" --version | tail -2 | head -1))"
fi

# ---- the sources: this working tree, as git sees it ------------------------------
log "copying $REPO (working tree at $(git -C "$REPO" rev-parse --short HEAD), $(git -C "$REPO" status --porcelain | wc -l) changed or untracked files) to /src/main, ../shared to /src/shared"
rm -rf --one-file-system "$CHROOT/src"
mkdir -p "$CHROOT/src/main"
(cd "$REPO" && git ls-files -z -c -o --exclude-standard |
  while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done |
  tar --null -T - -cf -) | tar -C "$CHROOT/src/main" -xf -
cp -r "$SHARED" "$CHROOT/src/shared"

# ---- the commands -----------------------------------------------------------------
in_chroot() {  # in_chroot NAME COMMAND: runs COMMAND in /src/main, logs to LOG_DIR/NAME.log
  local name="$1" cmd="$2" start rc
  start=$(date +%s)
  log "[$name] $cmd (log: $LOG_DIR/$name.log)"
  set +e
  chroot "$CHROOT" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 PATH="$CHROOT_PATH" \
    TESSERA_JOBS="$JOBS" "${CCACHE_ENV[@]}" \
    nice -n "$NICE" bash -c "cd /src/main && $cmd" > "$LOG_DIR/$name.log" 2>&1 < /dev/null
  rc=$?
  set -e
  log "[$name] exit $rc after $(( $(date +%s) - start )) s"
  RESULTS+=("$name: exit $rc, $(( $(date +%s) - start )) s")
  [ "$rc" -eq 0 ] || FAILED="${FAILED:-$rc}"
  return 0
}
RESULTS=()
FAILED=
if [ "$BUILD_ONLY" -eq 1 ]; then
  in_chroot build 'bash scripts/deps.sh && bash scripts/build.sh'
  grep -h "Tessera: CUDA=" "$LOG_DIR/build.log" || true
else
  in_chroot test 'bash scripts/test.sh'
  grep -h "Tessera: CUDA=" "$LOG_DIR/test.log" || true
  grep -hE "tests passed|tests failed" "$LOG_DIR/test.log" || true
  if [ "$SKIP_MAIN" -eq 0 ]; then
    printf -v main_args ' %q' "${MAIN_ARGS[@]}"
    [ ${#MAIN_ARGS[@]} -gt 0 ] || main_args=""
    in_chroot main "bash scripts/main.sh$main_args"
    tail -n 1 "$LOG_DIR/main.log" || true
  fi
fi
log "summary (Debian $(cat "$CHROOT/etc/debian_version") minbase, CUDA toolkit: $([ "$WITH_CUDA" -eq 1 ] && echo mounted || echo none)):"
printf '   %s\n' "${RESULTS[@]}"
exit "${FAILED:-0}"
