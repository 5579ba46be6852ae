#!/usr/bin/env bash
# Property-based fuzzing of the HTTP API from its own OpenAPI document, with
# schemathesis (PyPI). Not part of `cargo test` (it needs Python packages);
# run it with `bash tests/schemathesis/run.sh [MAX_EXAMPLES]`.
#
# It starts the debug build on a throwaway embedded data directory, populates
# it (populate.py: history, nodes, caps, a budget, jobs) so that the fuzzed
# endpoints answer with real data, and checks
# every generated request against: no 5xx, documented status codes, documented
# content types and headers, responses matching their schemas, and the checks on
# allowed methods and authentication. Two checks are left out on purpose:
# `positive_data_acceptance` and `negative_data_rejection` flag the rules a JSON
# schema cannot express (node_list length equal to nodes, end after start, times
# not in the future, opaque cursors) and the batch endpoint's documented
# per-item answers (200 with rejected items). DELETE is excluded because the
# fuzzer would revoke its own admin token.
# hooks.py brings the bodies of runs, jobs and unreserved starts within those
# rules, so that the fuzzer stores what it sends, not only has it refused.
set -euo pipefail
cd "$(dirname "$0")/../.."
examples=${1:-100}
venv=${SCHEMATHESIS_VENV:-target/schemathesis-venv}
[ -x "$venv/bin/schemathesis" ] || {
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q schemathesis==4.32.5
}
cargo build -q
data=$(mktemp -d /tmp/joulecast-fuzz-XXXXXX)
chmod 755 "$data"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
JOULECAST_DATA_DIR="$data/data" JOULECAST_LOG=warn target/debug/joulecast --listen "127.0.0.1:$port" &
service=$!
trap 'kill -TERM $service; wait $service; rm -rf "$data"' EXIT
for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    sleep 0.1
done
python3 tests/schemathesis/populate.py "http://127.0.0.1:$port" "$(cat "$data/data/admin-token")"
SCHEMATHESIS_HOOKS=tests/schemathesis/hooks.py "$venv/bin/schemathesis" --config-file tests/schemathesis/schemathesis.toml run "http://127.0.0.1:$port/openapi.json" \
    -H "Authorization: Bearer $(cat "$data/data/admin-token")" \
    --checks all --exclude-checks positive_data_acceptance,negative_data_rejection \
    --exclude-method DELETE --max-examples "$examples" --seed 1 "${@:2}"
