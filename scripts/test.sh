#!/usr/bin/env bash
# The whole test suite: test images, the unit tests and the integration tests (against
# real containerd test beds), a build (not a run) of the benchmarks, and the docs.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build-images.sh target/test-images
# Two cores: two tests at a time keeps test beds (one containerd each) from starving.
# The benchmarks are long and not part of the suite, but they must keep building; build
# them first so the test results are the last thing this prints.
if [ -d benches ]; then
    cargo bench --no-run
fi
# The doc comments' links must resolve: a renamed or moved item shows here first.
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --document-private-items --quiet
cargo test --lib --bins --tests -- --test-threads=2
