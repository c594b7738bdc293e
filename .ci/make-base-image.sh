#!/usr/bin/env bash
# Make reprokit/base:bookworm, a minimal Debian bookworm with python3 and pip, with no registry:
# debootstrap from the apt mirror this machine already uses, then `docker import`. Air-gapped
# machines and CI build the kit's cpu image on it:
#   inv build --accelerator cpu --base-image reprokit/base:bookworm --wheelhouse DIR
# --start-engine: start dockerd first when no engine answers (CI; needs root).
# --force: remake the base image even when it exists.
set -euo pipefail
IMAGE=${BASE_IMAGE_TAG:-reprokit/base:bookworm}
SUITE=bookworm
ENGINE_WAIT_S=${ENGINE_WAIT_S:-60}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/reprokit-dockerd.log}
start_engine=0 force=0
for arg in "$@"; do
  case $arg in
    --start-engine) start_engine=1 ;;
    --force) force=1 ;;
    *) echo "usage: $0 [--start-engine] [--force]" >&2; exit 2 ;;
  esac
done
started=$(date +%s)
say() { printf '[make-base-image %ss] %s\n' "$(( $(date +%s) - started ))" "$*"; }
die() { printf 'make-base-image: %s\n' "$*" >&2; exit 1; }

if ! docker info >/dev/null 2>&1; then
  [ "$start_engine" = 1 ] || die "no Docker engine answers (start dockerd, or rerun with --start-engine as root)"
  command -v dockerd >/dev/null || die "dockerd is not installed (apt-get install docker.io)"
  say "starting dockerd (log: $DOCKERD_LOG)"
  # setsid: the daemon outlives this script and the CI step that ran it.
  setsid dockerd >"$DOCKERD_LOG" 2>&1 < /dev/null &
  for _ in $(seq "$ENGINE_WAIT_S"); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    tail -n 30 "$DOCKERD_LOG" >&2 || true
    die "dockerd did not answer within ${ENGINE_WAIT_S}s (log above: $DOCKERD_LOG)"
  fi
fi
say "Docker engine $(docker version --format '{{.Server.Version}}') answers"

if [ "$force" = 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE exists: $(docker image inspect --format '{{.Id}}' "$IMAGE")"
  exit 0
fi

# The mirror apt uses here (deb822 or one-line sources); the air-gapped case is a local mirror.
mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -h -E '^URIs:.*/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1 | awk '{print $2}' || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(grep -h -E '^deb +(\[[^]]*\] +)?https?://[^ ]*/debian/? +bookworm ' /etc/apt/sources.list 2>/dev/null \
    | head -n 1 | sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{print $1}' || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"

work=$(mktemp -d /var/tmp/reprokit-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
say "debootstrap $SUITE from $mirror"
# minbase: apt, dpkg and the essentials; python3-pip brings python3 (3.11 on bookworm, the
# cp311 the wheelhouse holds). ca-certificates so pip works against an index too.
if ! debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates \
    "$SUITE" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
  tail -n 30 "$work/debootstrap.log" >&2
  die "debootstrap failed (log above)"
fi
# What a container never needs: apt lists and caches, docs (a smaller layer to import).
rm -rf "$work/rootfs"/var/lib/apt/lists/* "$work/rootfs"/var/cache/apt/*.bin \
  "$work/rootfs"/var/cache/apt/archives/*.deb "$work/rootfs"/usr/share/doc/* "$work/rootfs"/usr/share/man/*
say "docker import -> $IMAGE"
tar -C "$work/rootfs" -c . | docker import \
  --change 'CMD ["/bin/bash"]' \
  --change 'ENV LANG=C.UTF-8' \
  --message "debootstrap --variant=minbase $SUITE $mirror" - "$IMAGE" >/dev/null
say "$IMAGE: $(docker image inspect --format '{{.Id}} {{.Size}} bytes' "$IMAGE")"
