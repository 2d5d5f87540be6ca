#!/usr/bin/env bash
# `make demo`: start the embedded platform, upload the digits data, train the example with
# 2 learners while following its logs, then show its final metrics and fetch its results.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
results="${DLAAS_DEMO_RESULTS:-$PWD/digits-results}"

dlaas up --detach
dlaas data upload digits-data "$here/data/digits.npz"
job="$(dlaas train "$here/manifest.yml" "$here/model")"
status=0
dlaas logs "$job" --follow || status=$?
dlaas show "$job" --events 6
echo
echo "final metrics of $job:"
dlaas metrics "$job" --tail 4
if [ "$status" -eq 0 ]; then
  dlaas download "$job" --dest "$results" --force
  echo
  echo "results of $job are in $results (and on the platform: dlaas download $job)"
fi
echo "the platform keeps running for more jobs; stop it with: make down  (or: .venv/bin/dlaas down)"
exit "$status"
