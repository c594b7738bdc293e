#!/usr/bin/env bash
# CI service: the stand-ins for the vendor base images (NGC PyTorch, Habana's), built on the local base
# once the engine answers (docker.sh, before this), as a vendor's registry would serve them: their
# framework is downloaded and installed here, not inside the timed test suite. tests/standins.py says
# what each mimics; a machine without them builds them in the tests that need them.
set -euo pipefail
cd "$(dirname "$0")/../.."
make --no-print-directory .venv/.test >/dev/null
exec .venv/bin/python -m tests.standins
