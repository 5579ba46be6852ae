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
cd "$(dirname "$0")/../.." || exit 1
if [[ $(id -u) != 0 ]]; then
	sudo -n true 2>/dev/null || {
		echo "slurm-e2e: needs root or passwordless sudo (Slurm's daemons run as root here)." >&2
		echo "slurm-e2e: to leave it out of cargo test, set JOULECAST_SKIP_SLURM=1." >&2
		exit 1
	}
	exec sudo -n -E bash "$0" "$@"
fi
# shellcheck source=tests/slurm/cluster.sh
source tests/slurm/cluster.sh

REPO=$(pwd)
JOULECAST=$(realpath -m "${JOULECAST_BIN:-target/debug/joulecast}")
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
start_service() {
	JOULECAST_DATA_DIR=$W/jc JOULECAST_LOG=warn "$JOULECAST" --listen "127.0.0.1:$PORT" \
		>>"$W/log/joulecast.log" 2>&1 &
	SERVICE_PID=$!
	wait_for 90 curl -sf "$URL/readyz" || { say "joulecast did not start"; return 1; }
}
start_service || exit 1
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
install -o root -g root -m 0755 deploy/slurm/reconcile.sh /etc/slurm/joulecast-reconcile.sh
install -d -o root -g root -m 0700 "$W/spool-joulecast"
echo "JOULECAST_SPOOL_DIR=$W/spool-joulecast" >>/etc/slurm/joulecast-slurm.conf
cluster_daemons || exit 1
# The reconciler on a node failure, as the README installs it (the timer
# that also runs it is systemd's, not started here).
check "install: the node-down trigger is set" \
	strigger --set --node --down --flags=PERM --program=/etc/slurm/joulecast-reconcile.sh

# The nodes in the registry (deploy/slurm sends node lists), but for cn4.
for k in 1 2 3; do
	api PUT "/v1/nodes/cn$k" '{"partition": "batch", "idle_power_w": 100, "peak_power_w": 700}' >/dev/null
done

# History for `lin`: 1000 W per node for ten minutes, on 1, 2 and 4 nodes.
runs=$(jq -cn --arg s "$CLUSTER" '{runs: [range(0; 3) | pow(2; .) as $n |
	{app: "lin", source: $s, job_id: "h\($n)", nodes: $n, avg_power_w: (1000 * $n), duration_s: 600}]}')
api POST /v1/runs/batch "$runs" >/dev/null

job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2; }
job_field() { scontrol show job "$1" 2>/dev/null | grep -o "$2=[^ ]*" | head -1 | cut -d= -f2-; }
running_jobs() { api GET '/v1/jobs?limit=1000' | jq -r '.items[].job_id'; }
is_running_in_service() { running_jobs | grep -qx "$1"; }
not_running_in_service() { ! is_running_in_service "$1"; }
state_is() { [[ $(job_state "$1") == "$2" ]]; }
finished() { [[ $(job_state "$1") =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT)$ ]]; }

# Jobs write their output in the working directory: $W's.
mkdir -p "$W/jobs"
cd "$W/jobs" || exit 1

selftest() { lua5.4 "$REPO/deploy/slurm/test_job_submit.lua" >"$W/log/lua-selftest.log" 2>&1; }
check "the plugin's self-test passes" selftest
lint() { (cd "$REPO" && shellcheck -x deploy/slurm/*.sh tests/slurm/*.sh) >"$W/log/shellcheck.log" 2>&1; }
check "the scripts pass shellcheck" lint

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
# Slurm delays a requeued job (its BeginTime); the test does not wait for it.
runs_once_allowed() {
	scontrol release "$1" >/dev/null 2>&1
	scontrol update JobId="$1" StartTime=now >/dev/null 2>&1
	finished "$1"
}
check "start: the held-back job runs once the cap allows" wait_for 90 runs_once_allowed "$jid"

# 4. Every job is reserved: a name that is no application tag stands for
# the tag it maps to; a job without an account (Slurm says "(null)") is
# reserved without one.
app_of() { api GET '/v1/jobs?limit=1000' | jq -r --arg j "$1" '.items[] | select(.job_id == $j) | .app'; }
app_is() { [[ $(app_of "$1") == "$2" ]]; }
jid=$(sbatch --parsable -N1 -J 'my job!' -A proj -t 5 --wrap 'sleep 4')
check "start: a job named 'my job!' is reserved as my-job-" wait_for 20 app_is "$jid" my-job-
wait_for 60 finished "$jid"
jid=$(runuser -u nobody -- sbatch --parsable -N1 -J lin -t 5 --chdir=/tmp -o /dev/null --wrap 'sleep 4')
account_of() { api GET '/v1/jobs?limit=1000' | jq -r --arg j "$1" '.items[] | select(.job_id == $j) | .account'; }
check "start: a job without an account is reserved" wait_for 20 is_running_in_service "$jid"
null_account() {
	[[ $(job_field "$1" Account) == "(null)" ]] && is_running_in_service "$1" &&
		[[ $(account_of "$1") == null ]]
}
check "start: (null) is no account" null_account "$jid"
wait_for 60 finished "$jid"

jid=$(sbatch --parsable -N1 -w cn4 -J lin -A proj -t 5 --wrap 'sleep 4')
check "start: a job on a node missing from the registry is reserved" wait_for 20 is_running_in_service "$jid"
wait_for 60 finished "$jid"

# 5. The time limit reaches the service (22.05 has no SLURM_JOB_END_TIME in
# the prolog's environment: the prolog asks scontrol).
limit_of() { api GET '/v1/jobs?limit=1000' | jq -r --arg j "$1" '.items[] | select(.job_id == $j) | .time_limit_s'; }
limit_is() { [[ $(limit_of "$1") == "$2" ]]; }
jid=$(sbatch --parsable -N1 -J lin -A proj -t 7 --wrap 'sleep 4')
check "start: the time limit reaches the service" wait_for 20 limit_is "$jid" 420
wait_for 60 finished "$jid"

# 6. Arrays, heterogeneous jobs, srun and salloc: every part is reserved.
jid=$(sbatch --parsable -N1 -J lin -A proj -t 5 --array=1-2 --wrap 'sleep 6')
both_tasks() { is_running_in_service "${1}_1" && is_running_in_service "${1}_2"; }
no_task() { ! running_jobs | grep -q "^${1}_"; }
check "start: each task of an array job is reserved" wait_for 30 both_tasks "$jid"
wait_for 60 finished "${jid}_1"
wait_for 60 finished "${jid}_2"
check "end: each task of an array job is released" wait_for 15 no_task "$jid"
jid=$(sbatch --parsable -J lin -A proj -t 5 -N1 : -N1 --wrap 'sleep 6')
het_parts() { is_running_in_service "$1" && is_running_in_service "$(($1 + 1))"; }
check "start: each part of a heterogeneous job is reserved" wait_for 30 het_parts "$jid"
wait_for 60 finished "$jid"
srun -N1 -J lin-srun -A proj -t 5 sleep 6 >/dev/null 2>&1 &
srun_pid=$!
named_job() { squeue -h -n "$1" -o '%i' | head -1; }
named_reserved() {
	local j
	j=$(named_job "$1")
	[[ -n $j ]] && is_running_in_service "$j"
}
check "start: an srun job is reserved" wait_for 30 named_reserved lin-srun
wait "$srun_pid"
salloc -N1 -J lin-salloc -A proj -t 5 sleep 6 >/dev/null 2>&1 &
salloc_pid=$!
check "start: a salloc job is reserved" wait_for 30 named_reserved lin-salloc
wait "$salloc_pid"

# 7. Cancelled while pending: never reserved; while running: released.
jid=$(sbatch --parsable -N1 -J lin -A proj -t 5 --begin=now+3600 --wrap 'sleep 1')
wait_for 10 state_is "$jid" PENDING
scancel "$jid"
check "cancel: a job cancelled while pending is never reserved" not_running_in_service "$jid"
jid=$(sbatch --parsable -N1 -J lin -A proj -t 5 --wrap 'sleep 120')
wait_for 30 is_running_in_service "$jid"
scancel "$jid"
check "cancel: a job cancelled while running is released" wait_for 20 not_running_in_service "$jid"

# 8. The service down at submission and at start: the job is accepted and
# runs (fail open), and says so; once the service is back, jobs are reserved
# again.
kill "$SERVICE_PID"
wait "$SERVICE_PID" 2>/dev/null
jid=$(sbatch --parsable -N1 -J lin -A proj -t 5 --wrap 'sleep 2')
check "service down: the job is accepted" test -n "$jid"
check "service down: the job runs" wait_for 60 finished "$jid"
check "service down: AdminComment says the job went unchecked" \
	grep -q 'AdminComment=joulecast:unchecked' <(scontrol show job "$jid")
check "service down: the prolog says the job runs unreserved" \
	grep -q "job $jid: .*without a power reservation" "$W/log/scripts.log"
# A job that starts while the service is down and still runs once it is
# back: reconcile.sh records it (forced, from its own start), so that its
# power counts under the caps again.
long=$(sbatch --parsable -N1 -J lin -A proj -t 5 --wrap 'sleep 300')
check "service down: a long job runs unreserved" wait_for 60 state_is "$long" RUNNING
start_service
recorded_by_reconcile() { /etc/slurm/joulecast-reconcile.sh && is_running_in_service "$1"; }
check "service back: reconcile records the job still running unreserved" recorded_by_reconcile "$long"
check "service back: reconcile says so" \
	grep -q "job $long (RUNNING in Slurm): ran unreserved; recorded now" "$W/log/scripts.log"
scancel "$long"
check "service back: the recorded job's end releases it" wait_for 30 not_running_in_service "$long"
jid=$(sbatch --parsable -N1 -J lin -A proj -t 5 --wrap 'sleep 6')
check "service back: the next job is reserved" wait_for 30 is_running_in_service "$jid"
unreserved_counted() { curl -s "$URL/metrics" | grep -q '^jobs_run_unreserved_total 2$'; }
check "service back: the jobs that ran unreserved are counted on /metrics" wait_for 10 unreserved_counted
wait_for 60 finished "$jid"

# A service that answers but refuses the report (here: a revoked token) is
# no reason to run unreserved: the job is held back until the setup is fixed.
cp /etc/slurm/joulecast.token "$W/good.token"
echo "not-a-valid-token" >/etc/slurm/joulecast.token
jid=$(sbatch --parsable -N1 -J lin -A proj -t 5 --wrap 'sleep 2')
check "bad token: the job is held back, not run unreserved" wait_for 60 restarted "$jid"
install -o root -g root -m 0400 "$W/good.token" /etc/slurm/joulecast.token
check "bad token fixed: the job runs" wait_for 90 runs_once_allowed "$jid"

# 9. sacct for real: the import reads slurmdbd; no energy plugin measures
# anything here, so every job is skipped, and the import says why.
# One job's name adds lines that read as records with energy, written as
# sacct --parsable2 would print them, JobName second (as the import asked
# for until 2026-11-29) and the user's field last (as it asks now): no run
# may come of them. (Plausible ones: 29 GWh over 30 days on 4000 nodes.)
began=$(date -u -d '30 days ago' +%FT%T)
now=$(date -u +%FT%T)
forged_jobname_second="99998|lin|proj|batch|4000||COMPLETED|$began|$now|2592000|104000000000000|$CLUSTER"
forged_user_field_last="99997|proj|batch|4000||COMPLETED|$began|$now|2592000|104000000000000|$CLUSTER|lin"
forger=$(sbatch --parsable -N1 -A proj -t 5 \
	-J "forger"$'\n'"$forged_jobname_second"$'\n'"$forged_user_field_last" --wrap true)
check "a job named with newlines and bars runs" wait_for 60 state_is "$forger" COMPLETED
# slurmdbd learns a short job's name after its end ("allocation" until then).
named_in_slurmdbd() { sacct --allusers -n -P -X -o JobName -j "$1" | grep -qx forger; }
check "slurmdbd has the job's name, newlines and all" wait_for 60 named_in_slurmdbd "$forger"
JOULECAST_DATA_DIR=$W/jc "$JOULECAST" token create --scope ingest --name sacct-import \
	>"$W/ingest.token" 2>/dev/null
mkdir -p "$W/import-state"
{
	echo "JOULECAST_URL=$URL"
	echo "JOULECAST_INGEST_TOKEN_FILE=$W/ingest.token"
	echo "JOULECAST_STATE_DIR=$W/import-state"
	echo "JOULECAST_SETTLE_S=0"
	echo "JOULECAST_FIRST_LOOKBACK_S=3600"
} >"$W/import.conf"
INVOCATION_ID=slurm-e2e JOULECAST_SLURM_CONF=$W/import.conf bash "$REPO/deploy/slurm/sacct-import.sh" \
	>"$W/log/import.log" 2>&1
check "sacct import: runs against slurmdbd" test -s "$W/import-state/last-end"
check "sacct import: names why jobs without energy are skipped" \
	grep -qi "skipped line .*energy" "$W/log/import.log"
stored_runs() { api GET '/v1/apps/lin/runs?limit=1000' | jq -r '.items[].job_id'; }
no_forged_run() {
	! grep -Eq '[1-9][0-9]* created' "$W/log/import.log" &&
		stored_runs | grep -qx h1 && ! stored_runs | grep -Eqx '9999[78]'
}
check "sacct import: a job's name cannot add records (no forged run)" no_forged_run

# A job whose id is already a stored run (Slurm's job ids started again):
# the prolog lets it run, says why, and counts it as unreserved.
curl -sS -o /dev/null -H "Authorization: Bearer $(cat "$W/ingest.token")" \
	-H 'Content-Type: application/json' "$URL/v1/runs" \
	-d "{\"app\":\"lin\",\"source\":\"$CLUSTER\",\"job_id\":\"reused-1\",\"nodes\":1,\"energy_j\":1000,\"duration_s\":10}"
reused_id_runs_counted() {
	SLURM_JOB_ID=reused-1 SLURM_CLUSTER_NAME=$CLUSTER SLURM_JOB_NAME=lin SLURM_JOB_NUM_NODES=1 \
		/etc/slurm/joulecast-prolog.sh &&
		grep -q "job reused-1: .*set a new JOULECAST_SOURCE" "$W/log/scripts.log" &&
		grep -q "^reused-1 " "$W/spool-joulecast/unreserved"
}
check "a job id already stored as a run: it runs, counted as unreserved" reused_id_runs_counted

# 10. The epilog misses a job's end (here: the service is down when the job
# is cancelled), so the job stays held, until reconcile.sh releases it. The
# reconciler leaves running jobs alone, array tasks and heterogeneous parts
# included, and --dry-run releases nothing.
array=$(sbatch --parsable -N1 -w cn1 -J lin -A proj -t 5 --array=3 --wrap 'sleep 300')
het=$(sbatch --parsable -J lin -A proj -t 5 -N1 -w cn2 : -N1 -w cn3 --wrap 'sleep 300')
plain=$(sbatch --parsable -N1 -w cn4 -J lin -A proj -t 5 --wrap 'sleep 300')
all_held() {
	local j
	for j in "$@"; do
		is_running_in_service "$j" || return 1
	done
}
running=("${array}_3" "$het" "$((het + 1))")
wait_for 30 all_held "${running[@]}" "$plain"
reconcile() { /etc/slurm/joulecast-reconcile.sh "$@"; }
reconcile_keeps() { reconcile && all_held "$@"; }
check "reconcile: running jobs stay reserved" reconcile_keeps "${running[@]}" "$plain"
kill "$SERVICE_PID"
wait "$SERVICE_PID" 2>/dev/null
scancel "$plain"
wait_for 30 finished "$plain"
wait_for 30 grep -q "job $plain: ended .*no answer" "$W/log/scripts.log"
start_service
check "epilog missed: the ended job is still held" is_running_in_service "$plain"
dry_run_keeps() { reconcile --dry-run && is_running_in_service "$1"; }
check "reconcile --dry-run: releases nothing" dry_run_keeps "$plain"
check "reconcile --dry-run: names the job it would release" \
	grep -q "job $plain (CANCELLED in Slurm): would be released" "$W/log/scripts.log"
reconcile_releases() { reconcile && not_running_in_service "$1"; }
check "reconcile: the ended job is released" reconcile_releases "$plain"
check "reconcile: the running jobs are still reserved" all_held "${running[@]}"

# A job requeued while the service is down (its epilog cannot reach it):
# Slurm holds it back PENDING (BeginTime), and the reconciler releases it;
# with a squeue that fails, the reconciler fails and releases nothing.
requeued=$(sbatch --parsable -N1 -w cn4 -J lin -A proj -t 5 --wrap 'sleep 300')
wait_for 30 is_running_in_service "$requeued"
kill "$SERVICE_PID"
wait "$SERVICE_PID" 2>/dev/null
scontrol requeue "$requeued"
wait_for 30 state_is "$requeued" PENDING
start_service
check "requeue missed: the pending job is still held" is_running_in_service "$requeued"
printf '%s\n' ". /etc/slurm/joulecast-slurm.conf" "JOULECAST_SQUEUE=false" >"$W/failing-squeue.conf"
failing_squeue_keeps() {
	! JOULECAST_SLURM_CONF=$W/failing-squeue.conf /etc/slurm/joulecast-reconcile.sh &&
		is_running_in_service "$1"
}
check "reconcile: a failing squeue releases nothing" failing_squeue_keeps "$requeued"
# One job per page: the reconciler follows the pages (four jobs are held).
printf '%s\n' ". /etc/slurm/joulecast-slurm.conf" "JOULECAST_PAGE_SIZE=1" >"$W/paged.conf"
paged_reconcile_releases() {
	JOULECAST_SLURM_CONF=$W/paged.conf /etc/slurm/joulecast-reconcile.sh && not_running_in_service "$1"
}
check "reconcile, one job per page: a requeued (pending) job is released" \
	paged_reconcile_releases "$requeued"
check "reconcile, one job per page: the running jobs are still reserved" all_held "${running[@]}"
check "reconcile: says the job was pending" \
	grep -q "job $requeued (PENDING in Slurm): power reservation released" "$W/log/scripts.log"
scancel "$array" "$het" "$requeued"
wait_for 30 finished "${array}_3"
wait_for 30 finished "$het"
wait_for 30 finished "$requeued"

# 11. A node fails under a running job: the job ends (requeued) and its
# reservation with it. The epilog releases it, unless slurmctld kills the
# epilog as it requeues the job (it does when the launch was under way);
# then the node-down trigger's reconciler does.
jid=$(sbatch --parsable -N1 -w cn4 -J lin -A proj -t 5 --wrap 'sleep 300')
wait_for 30 is_running_in_service "$jid"
log_lines=$(wc -l <"$W/log/scripts.log")
kill -9 "${SLURMD_PID[cn4]}"
wait "${SLURMD_PID[cn4]}" 2>/dev/null
check "node failure: the job's reservation is released" wait_for 90 not_running_in_service "$jid"
reconciler_ran() { tail -n "+$((log_lines + 1))" "$W/log/scripts.log" | grep -q '^joulecast-reconcile: '; }
check "node failure: the node-down trigger runs the reconciler" wait_for 90 reconciler_ran
scancel "$jid" 2>/dev/null

echo "slurm end to end: $PASSED passed, ${#FAILED[@]} failed${FAILED:+: ${FAILED[*]}}"
((${#FAILED[@]} == 0))
