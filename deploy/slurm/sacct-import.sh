#!/bin/bash
# shellcheck disable=SC2016  # $names in single quotes are jq variables, not shell ones
# Joulecast sacct import (example): sends the jobs that finished since the
# last successful run to POST /v1/import/sacct, where they become runs (the
# history the predictions learn from, and the energy the budgets count).
#
# Run by joulecast-sacct-import.timer every 15 minutes, or from cron:
#   */15 * * * * joulecast-import /usr/local/libexec/joulecast/sacct-import.sh
#
# The window: from the end of the last imported window (kept in
# $STATE_DIR/last-end, seconds since the epoch) minus an overlap, to now
# minus a settling delay; the first run looks back JOULECAST_FIRST_LOOKBACK_S.
# Re-importing a job adds nothing (the service is idempotent on source and
# job id), so overlapping windows are safe, and they catch records that
# reached slurmdbd late. The state only advances after the service accepted
# the window; a long outage is caught up in windows of at most
# JOULECAST_MAX_WINDOW_S.
#
# A window is posted in parts of at most JOULECAST_MAX_BODY_BYTES, each a
# whole number of jobs (a job and its steps stay together). A part the
# service refuses as too large (413) is halved until it passes; a single job
# too large even alone is skipped and logged, so that it cannot hold the
# import back for ever. A busy or unavailable service (429, 503) is retried
# after its Retry-After (at most JOULECAST_RETRY_MAX_S), in halves, up to
# JOULECAST_RETRIES times; then the run fails and the next run retries the
# window.
#
# sacct runs with TZ=UTC, so that Start and End (printed in local time) are
# UTC, which is what the importer assumes. With --state, sacct selects jobs
# by their state within the window (for COMPLETED: jobs that completed in it;
# see sacct(1)); job steps are kept, the importer folds them into their job.
# ConsumedEnergyRaw is only filled when Slurm gathers energy
# (AcctGatherEnergyType); the importer skips jobs without it.
#
# Job names, comments and wckeys are the users' own text, and sacct prints
# them as they are: a newline in a job's name would start a line that reads
# as a record of its own (a forged run, a forged job end). So sacct writes
# its fields apart with a delimiter drawn at random for each run, after
# every name was written; the user's field comes last, and a line without
# that delimiter continues it. What is sent has one line per record, with
# the users' `|` and control characters as `-` (as the application tag would
# have them anyway).
#
# --allusers needs a user that may see every job: root, SlurmUser, a user
# with AdminLevel=Operator in slurmdbd, or any user when slurmdbd's
# PrivateData does not include "jobs".
#
# Settings: the defaults below, overridden by /etc/slurm/joulecast-slurm.conf
# (shell syntax; or the file JOULECAST_SLURM_CONF names), then by JOULECAST_*
# in the environment. Needs bash, sacct, curl, jq, flock, GNU date and od.

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin
umask 077

# Settings given in the environment (JOULECAST_*, e.g. a run by hand or a
# systemd Environment= line) win over the defaults and the settings file.
from_environment=$(
	names=("${!JOULECAST_@}")
	((${#names[@]} == 0)) || declare -p "${names[@]}"
)

JOULECAST_URL="http://joulecast.example.org:8080"
# An `ingest` token. Under systemd it comes from LoadCredential= instead.
JOULECAST_INGEST_TOKEN_FILE="/etc/joulecast/slurm-ingest.token"
JOULECAST_IMPORT_TIMEOUT_S=300
# The job's system in Joulecast, as the prolog reports it (SLURM_CLUSTER_NAME);
# empty: ClusterName from `scontrol show config`.
JOULECAST_SOURCE=""
# jobname, comment or wckey: where the application tag comes from.
JOULECAST_APP_FROM=jobname
JOULECAST_STATES=COMPLETED
JOULECAST_OVERLAP_S=1800
JOULECAST_SETTLE_S=300
JOULECAST_FIRST_LOOKBACK_S=7200
JOULECAST_MAX_WINDOW_S=86400
# The largest request body sent (the service refuses more than 16 MiB by default).
JOULECAST_MAX_BODY_BYTES=4194304
JOULECAST_RETRIES=3
JOULECAST_RETRY_MAX_S=60
JOULECAST_STATE_DIR=${STATE_DIRECTORY:-/var/lib/joulecast-import}
JOULECAST_SACCT=sacct
JOULECAST_CURL=curl
JOULECAST_JQ=jq

conf=${JOULECAST_SLURM_CONF:-/etc/slurm/joulecast-slurm.conf}
if [[ -r $conf ]]; then
	# shellcheck source=/dev/null
	. "$conf"
fi
eval "$from_environment"

log() { # priority message...
	local priority=$1
	shift
	# Under systemd, standard error goes to the journal already.
	if [[ -z ${INVOCATION_ID:-} ]]; then
		logger -t joulecast-sacct-import -p "daemon.$priority" -- "$*" 2>/dev/null || true
	fi
	printf '%s: %s\n' "$priority" "$*" >&2
}

die() {
	log err "$*"
	exit 1
}

for tool in "$JOULECAST_SACCT" "$JOULECAST_CURL" "$JOULECAST_JQ" flock date od; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
case $JOULECAST_APP_FROM in
jobname) app_field=JobName ;;
comment) app_field=Comment ;;
wckey) app_field=WCKey ;;
*) die "JOULECAST_APP_FROM must be jobname, comment or wckey" ;;
esac
for n in JOULECAST_OVERLAP_S JOULECAST_SETTLE_S JOULECAST_FIRST_LOOKBACK_S JOULECAST_MAX_WINDOW_S \
	JOULECAST_MAX_BODY_BYTES JOULECAST_RETRIES JOULECAST_RETRY_MAX_S; do
	[[ ${!n} =~ ^[0-9]+$ ]] || die "$n must be a whole number"
done
((JOULECAST_MAX_BODY_BYTES >= 1024)) || die "JOULECAST_MAX_BODY_BYTES must be at least 1024"
((JOULECAST_MAX_WINDOW_S > JOULECAST_OVERLAP_S)) || die "JOULECAST_MAX_WINDOW_S must exceed JOULECAST_OVERLAP_S"

token_file=$JOULECAST_INGEST_TOKEN_FILE
if [[ -n ${CREDENTIALS_DIRECTORY:-} && -r $CREDENTIALS_DIRECTORY/ingest.token ]]; then
	token_file=$CREDENTIALS_DIRECTORY/ingest.token
fi
token=""
if [[ -r $token_file ]]; then
	read -r token <"$token_file" || true
fi
[[ $token =~ ^[A-Za-z0-9._~+/=-]+$ ]] || die "no valid token in $token_file"

source_name=$JOULECAST_SOURCE
if [[ -z $source_name ]]; then
	source_name=$(scontrol show config 2>/dev/null | awk -F' *= *' '$1 == "ClusterName" { print $2; exit }') || true
fi
[[ -n $source_name ]] || die "set JOULECAST_SOURCE (ClusterName could not be read)"

query=$("$JOULECAST_JQ" -rn --arg a "$JOULECAST_APP_FROM" --arg s "$source_name" --arg st "$JOULECAST_STATES" \
	'"app_from=\($a | @uri)&source=\($s | @uri)&states=\($st | @uri)"')
# The fields Slurm writes first; the user's own text ($app_field) last.
format="JobID,Account,Partition,NNodes,NodeList,State,Start,End,ElapsedRaw,ConsumedEnergyRaw,Cluster,$app_field"

[[ -d $JOULECAST_STATE_DIR && -w $JOULECAST_STATE_DIR ]] ||
	die "the state directory $JOULECAST_STATE_DIR is missing or not writable"
state_file=$JOULECAST_STATE_DIR/last-end
exec 9>"$JOULECAST_STATE_DIR/lock"
if ! flock -n 9; then
	log info "another import is running; nothing to do"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

utc() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%S; }

# Splits the sacct output $1 (header line first) into parts of at most $2
# bytes named $3.NNNN, each with the header and whole jobs: a job's lines
# (JobID 123, 123.batch, 123.0, ...) go together, in the order the job first
# appears. A job larger than $2 alone makes a part of its own. Prints the
# number of parts.
split_jobs() {
	LC_ALL=C awk -v max="$2" -v prefix="$3" '
		NR == 1 { header = $0 "\n"; next }
		{
			id = $0; sub(/\|.*/, "", id); sub(/\..*/, "", id)
			if (!(id in lines)) order[++jobs] = id
			lines[id] = lines[id] $0 "\n"
		}
		function flush() {
			if (part == "") return
			file = sprintf("%s.%04d", prefix, ++parts)
			printf "%s%s", header, part > file
			close(file)
			part = ""
		}
		END {
			for (i = 1; i <= jobs; i++) {
				job = lines[order[i]]
				if (part != "" && length(header) + length(part) + length(job) > max) flush()
				part = part job
			}
			flush()
			print parts + 0
		}' "$1"
}

# Rewrites sacct's output $1, its fields apart by the delimiter $2 (which
# no user's text contains), as one line per record, fields apart by `|`: a
# line without the delimiter continues the last field of the record before
# (a newline in the user's text), and `|` and control characters in the
# fields become `-`.
one_line_per_record() {
	LC_ALL=C awk -v d="$2" '
		function clean(s) { gsub(/[|[:cntrl:]]/, "-", s); return s }
		function emit() { if (record != "") print record; record = "" }
		{
			n = split($0, f, d)
			if (n > 1) {
				emit()
				record = clean(f[1])
				for (i = 2; i <= n; i++) record = record "|" clean(f[i])
			} else if (record != "") {
				record = record "-" clean($0)
			}
		}
		END { emit() }' "$1"
}

# Posts the part $1 (a file); on 413 or when busy, posts it again in halves.
# $2: the retries left for 429/503 and unreachable. Returns 1 when the
# service did not take it.
post_part() {
	local part=$1 retries=$2 code size halves wait i
	rm -f "$tmp/answer" "$tmp/headers"
	code=$("$JOULECAST_CURL" --disable -sS --proto =http,https \
		--max-time "$JOULECAST_IMPORT_TIMEOUT_S" --connect-timeout 10 \
		--config <(printf 'header = "Authorization: Bearer %s"\n' "$token") \
		-H 'Content-Type: text/plain' -H 'Accept: application/json' \
		--data-binary @"$part" -o "$tmp/answer" -D "$tmp/headers" -w '%{http_code}' \
		"$JOULECAST_URL/v1/import/sacct?$query" 2>"$tmp/curl.err") || true
	size=$(wc -c <"$part")
	case $code in
	200)
		log info "$(utc "$from")..$(utc "$to") UTC: $("$JOULECAST_JQ" -r \
			'"\(.lines) lines: \(.created) created, \(.duplicate) duplicate, \(.skipped | length) skipped, \(.steps) steps"' \
			"$tmp/answer" 2>/dev/null || echo "imported")"
		"$JOULECAST_JQ" -r '.skipped[:20][]? | "skipped line \(.line) (job \(.job_id)): \(.reason)"' \
			"$tmp/answer" 2>/dev/null | while IFS= read -r line; do log info "$line"; done
		return 0
		;;
	413 | 429 | 503 | 000)
		if [[ $code == 413 ]]; then
			log warning "$size bytes are too large for the service (413); halving"
		else
			if ((retries <= 0)); then
				log err "import of $(utc "$from")..$(utc "$to") UTC failed (HTTP $code) after $JOULECAST_RETRIES retries:" \
					"$("$JOULECAST_JQ" -r '.detail // empty' "$tmp/answer" 2>/dev/null | head -c 300)" \
					"$(head -c 300 "$tmp/curl.err")"
				return 1
			fi
			retries=$((retries - 1))
			wait=$(awk -F': *' 'tolower($1) == "retry-after" { print $2 + 0; exit }' "$tmp/headers" 2>/dev/null || true)
			[[ $wait =~ ^[0-9]+$ ]] || wait=1
			((wait <= JOULECAST_RETRY_MAX_S)) || wait=$JOULECAST_RETRY_MAX_S
			log warning "service answered HTTP $code; retrying in ${wait}s ($retries retries left)"
			sleep "$wait"
		fi
		halves=$(split_jobs "$part" $(((size + 1) / 2)) "$part")
		if ((halves < 2)); then
			if [[ $code == 413 ]]; then
				log err "job $(awk -F'|' 'NR == 2 { print $1; exit }' "$part") alone ($size bytes) exceeds" \
					"the service's body limit; skipped (import it with \`joulecast import sacct\`)"
				return 0
			fi
			rm -f "$part".0*
			post_part "$part" "$retries"
			return
		fi
		for ((i = 1; i <= halves; i++)); do
			post_part "$(printf '%s.%04d' "$part" "$i")" "$retries" || return 1
		done
		return 0
		;;
	*)
		log err "import of $(utc "$from")..$(utc "$to") UTC failed (HTTP ${code:-000}):" \
			"$("$JOULECAST_JQ" -r '.detail // empty' "$tmp/answer" 2>/dev/null | head -c 300)" \
			"$(head -c 300 "$tmp/curl.err")"
		return 1
		;;
	esac
}

# Imports the jobs of one window [$1, $2] (epoch seconds).
import_window() {
	local from=$1 to=$2 records parts i delimiter
	# Drawn now, after every name in the window was written: letters and
	# digits only, so that awk reads it as itself.
	delimiter="_jc$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')_"
	((${#delimiter} == 28)) || die "could not draw a delimiter from /dev/urandom"
	if ! TZ=UTC "$JOULECAST_SACCT" --allusers --parsable2 --delimiter="$delimiter" --format="$format" \
		--starttime "$(utc "$from")" --endtime "$(utc "$to")" \
		--state="$JOULECAST_STATES" >"$tmp/sacct.raw" 2>"$tmp/sacct.err"; then
		log err "sacct failed for $(utc "$from")..$(utc "$to") UTC: $(head -c 500 "$tmp/sacct.err")"
		return 1
	fi
	one_line_per_record "$tmp/sacct.raw" "$delimiter" >"$tmp/sacct.txt"
	records=$(($(wc -l <"$tmp/sacct.txt") - 1))
	if ((records <= 0)); then
		log info "$(utc "$from")..$(utc "$to") UTC: no finished jobs"
		return 0
	fi
	rm -f "$tmp"/part*
	parts=$(split_jobs "$tmp/sacct.txt" "$JOULECAST_MAX_BODY_BYTES" "$tmp/part")
	for ((i = 1; i <= parts; i++)); do
		post_part "$(printf '%s/part.%04d' "$tmp" "$i")" "$JOULECAST_RETRIES" || return 1
	done
	return 0
}

now=$(date +%s)
until_s=$((now - JOULECAST_SETTLE_S))
last=""
if [[ -r $state_file ]]; then
	read -r last <"$state_file" || true
fi
if [[ $last =~ ^[0-9]+$ ]]; then
	from=$((last - JOULECAST_OVERLAP_S))
else
	from=$((until_s - JOULECAST_FIRST_LOOKBACK_S))
fi

while ((from < until_s)); do
	to=$((from + JOULECAST_MAX_WINDOW_S))
	((to > until_s)) && to=$until_s
	import_window "$from" "$to" || exit 1
	printf '%s\n' "$to" >"$state_file.new"
	mv -f "$state_file.new" "$state_file"
	((to >= until_s)) && break
	from=$((to - JOULECAST_OVERLAP_S))
done
exit 0
