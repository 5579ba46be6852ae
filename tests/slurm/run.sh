#!/usr/bin/env bash
# deploy/slurm end to end, under real Slurm daemons (issue 14).
#
#   sudo bash tests/slurm/run.sh
#
# Starts a throwaway cluster on loopback (tests/slurm/cluster.sh: munge,
# MariaDB, slurmdbd, slurmctld, four slurmd), the Joulecast debug build on
# its embedded default, installs deploy/slurm as its README says, submits
# real jobs with sbatch, and checks what the service saw. Prints one line
# per check and exits non-zero if any failed. Needs root (Slurm's daemons
# run as root here); installs the Debian packages if missing. Bounded in
# time (each wait has a limit); everything is stopped and /etc/slurm put
# back at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [[ $(id -u) != 0 ]]; then
	exec sudo -E bash "$0" "$@"
fi
# shellcheck source=tests/slurm/cluster.sh
source tests/slurm/cluster.sh

JOULECAST=${JOULECAST_BIN:-target/debug/joulecast}
FAILED=()
PASSED=0

check() { # name command...
	local name=$1
	shift
	if "$@"; then
		printf 'ok      %s\n' "$name"
		PASSED=$((PASSED + 1))
	else
		printf 'FAILED  %s\n' "$name"
		FAILED+=("$name")
	fi
}

api() { # method path [body] (admin token): the answer's body
	local method=$1 path=$2 body=${3:-}
	curl -sS -X "$method" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
		${body:+--data "$body"} "$URL$path"
}

cleanup() {
	if [[ -n ${SERVICE_PID:-} ]]; then
		kill "$SERVICE_PID" 2>/dev/null
		wait "$SERVICE_PID" 2>/dev/null
	fi
	cluster_stop
	if ((${#FAILED[@]} > 0)); then
		say "logs kept in $W"
	else
		rm -rf "$W"
	fi
}
trap cleanup EXIT

if [[ ! -x $JOULECAST ]]; then
	cargo build -q || exit 1
fi
cluster_start || exit 1

# The service, on its embedded default.
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
JOULECAST_DATA_DIR=$W/jc JOULECAST_LOG=warn "$JOULECAST" --listen "127.0.0.1:$PORT" \
	>"$W/log/joulecast.log" 2>&1 &
SERVICE_PID=$!
wait_for 90 curl -sf "$URL/readyz" || { say "joulecast did not start"; exit 1; }
ADMIN=$(cat "$W/jc/admin-token")

# Install deploy/slurm as its README says (tokens, shared settings, plugin,
# prolog and epilog).
JOULECAST_DATA_DIR=$W/jc "$JOULECAST" token create --scope schedule --name slurmctld \
	>"$W/slurmctld.token" 2>/dev/null
install -o root -g root -m 0400 "$W/slurmctld.token" /etc/slurm/joulecast.token
cat >/etc/slurm/joulecast-slurm.conf <<EOF
JOULECAST_URL=$URL
# The test keeps what the scripts say (slurmctld drops their output).
exec 2>>"$W/log/scripts.log"
EOF
chmod 0644 /etc/slurm/joulecast-slurm.conf
install -o root -g root -m 0644 deploy/slurm/job_submit.lua /etc/slurm/job_submit.lua
sed -i "s#^\tURL = \".*\",#\tURL = \"$URL\",#" /etc/slurm/job_submit.lua
install -o root -g root -m 0755 deploy/slurm/prolog_slurmctld.sh /etc/slurm/joulecast-prolog.sh
install -o root -g root -m 0755 deploy/slurm/epilog_slurmctld.sh /etc/slurm/joulecast-epilog.sh
cluster_daemons || exit 1

# The nodes in the registry (deploy/slurm sends node lists).
for k in 1 2 3 4; do
	api PUT "/v1/nodes/cn$k" '{"partition": "batch", "idle_power_w": 100, "peak_power_w": 700}' >/dev/null
done

# History for `lin`: 1000 W per node for ten minutes, on 1, 2 and 4 nodes.
runs=$(jq -cn --arg s "$CLUSTER" '{runs: [range(0; 3) | pow(2; .) as $n |
	{app: "lin", source: $s, job_id: "h\($n)", nodes: $n, avg_power_w: (1000 * $n), duration_s: 600}]}')
api POST /v1/runs/batch "$runs" >/dev/null

job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_field() { scontrol show job "$1" 2>/dev/null | grep -o "$2=[^ ]*" | head -1 | cut -d= -f2-; }
running_jobs() { api GET /v1/jobs | jq -r '.items[].job_id'; }
is_running_in_service() { running_jobs | grep -qx "$1"; }
not_running_in_service() { ! is_running_in_service "$1"; }
state_is() { [[ $(job_state "$1") == "$2" ]]; }
finished() { [[ $(job_state "$1") =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ ]]; }

# 1. A job with history: the prediction in AdminComment, the reservation
# while it runs, its release at the end.
jid=$(sbatch --parsable -N2 -J lin -A proj -t 5 --wrap 'sleep 6')
wait_for 30 state_is "$jid" RUNNING
check "submission: the prediction is in AdminComment" \
	bash -c "[[ \$(scontrol show job $jid | grep -o 'AdminComment=joulecast:[^ ]*') == *ets_j=* ]]"
check "start: the running job is reserved" wait_for 10 is_running_in_service "$jid"
wait_for 60 finished "$jid"
check "end: the epilog releases the reservation" wait_for 10 not_running_in_service "$jid"

# 2. An account whose budget cannot cover the job: refused at submission.
api PUT /v1/budgets/poor '{"limit_j": 1000, "period": "month"}' >/dev/null
if out=$(sbatch --parsable -N4 -J lin -A poor -t 5 --wrap 'sleep 1' 2>&1); then
	check "submission: refused for lack of budget" false
	scancel "$out" 2>/dev/null
else
	check "submission: refused for lack of budget" grep -q 'Joulecast' <<<"$out"
fi

# 3. A job over the power cap: the prolog's 409 requeues it; it runs once
# the cap allows.
api PUT /v1/power-caps/site '{"limit_w": 500}' >/dev/null
jid=$(sbatch --parsable -N2 -J lin -A proj -t 5 --wrap 'sleep 2')
restarted() { (($(job_field "$1" Restarts) >= 1)); }
check "start: a job over the cap is requeued" wait_for 60 restarted "$jid"
check "start: a requeued job is not reserved" not_running_in_service "$jid"
api DELETE /v1/power-caps/site >/dev/null
scontrol release "$jid" >/dev/null 2>&1 || true
scontrol update JobId="$jid" StartTime=now >/dev/null 2>&1 || true
check "start: the held-back job runs once the cap allows" wait_for 120 finished "$jid"

# 4. Every job is reserved: a name that is no application tag stands for
# the tag it maps to; a job without an account (Slurm says "(null)") is
# reserved without one.
app_of() { api GET /v1/jobs | jq -r --arg j "$1" '.items[] | select(.job_id == $j) | .app'; }
app_is() { [[ $(app_of "$1") == "$2" ]]; }
jid=$(sbatch --parsable -N1 -J 'my job!' -A proj -t 5 --wrap 'sleep 4')
check "start: a job named 'my job!' is reserved as my-job-" wait_for 20 app_is "$jid" my-job-
wait_for 60 finished "$jid"
jid=$(runuser -u nobody -- sbatch --parsable -N1 -J lin -t 5 --chdir=/tmp -o /dev/null --wrap 'sleep 4')
account_of() { api GET /v1/jobs | jq -r --arg j "$1" '.items[] | select(.job_id == $j) | .account'; }
check "start: a job without an account is reserved" wait_for 20 is_running_in_service "$jid"
null_account() {
	[[ $(job_field "$1" Account) == "(null)" ]] && is_running_in_service "$1" &&
		[[ $(account_of "$1") == null ]]
}
check "start: (null) is no account" null_account "$jid"
wait_for 60 finished "$jid"

echo "slurm end to end: $PASSED passed, ${#FAILED[@]} failed${FAILED:+: ${FAILED[*]}}"
((${#FAILED[@]} == 0))
