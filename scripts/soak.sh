#!/usr/bin/env bash
# The soak and fault harness at the issue's full figures (tests/soak.rs, issue 25):
# runtime kills (110 pods, 6 SIGKILLs, the bed's containerd and oxlet's own), apiserver
# outages (5 s, 60 s, 5 min, then a new cluster; 105 API pods and 5 static ones), churn (2,000 pods in
# waves of 50, then a 32-minute settle) and hours (1 h with a crash loop, a probe-killed
# pod, a chatty logger and 100 idle pods). About 2 h on 2 cores, release build,
# one scenario at a time so their figures do not disturb each other.
#
#   scripts/soak.sh [SCENARIO...]     (kills, outages, churn, hours; default: all)
#
# Each scenario prints its table and appends it to target/soak/results.md, with the
# commit, the containerd release and the machine; docs/reliability.md keeps the figures.
# The short form of every scenario runs with the rest of the suite (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

filters=()
for s in "${@:-kills outages churn hours}"; do
    for one in $s; do
        case $one in
            kills) filters+=(runtime_kills) ;;
            outages) filters+=(apiserver_outages) ;;
            churn) filters+=(churn_leaves) ;;
            hours) filters+=(hours_of) ;;
            *) echo "soak.sh: unknown scenario $one (kills, outages, churn, hours)" >&2; exit 2 ;;
        esac
    done
done
OXLET_SOAK=full cargo test --release --test soak -- --nocapture --test-threads=1 "${filters[@]}"
