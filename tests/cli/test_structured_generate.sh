#!/usr/bin/env bash
# test_structured_generate.sh - `deltaserve generate` with --json-schema, --regex and
# --grammar on random-weight models: finished answers validate, cut ones are prefixes
# of valid ones (tests/cli/structured_generate.py).
set -u
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 tests/cli/structured_generate.py
