#!/usr/bin/env bash
# CI service: a running Docker engine and a local Debian base image, made without any registry.
# Starts dockerd (Debian's docker.io) unless an engine already answers, then makes
# reprokit/base:bookworm (python3 + pip) with debootstrap from the apt mirror of this machine.
# The test suite (tests/test_docker.py) builds the cpu image on top of it and runs a cell inside.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .ci/make-base-image.sh --start-engine
