# shellcheck shell=bash
# A throwaway Slurm cluster on loopback, for tests/slurm/run.sh (sourced):
# munge, MariaDB, slurmdbd, slurmctld and four slurmd (cn1..cn4, one process
# each, NodeHostname=localhost), all as root, with their state, logs and
# database under $W. The configuration goes to /etc/slurm, where the Slurm
# commands and deploy/slurm look for it; what was there is put back by
# cluster_stop.
#
# Needs root and Debian's slurm-wlm 22.05 packages (installed if missing).

SLURM_PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server jq curl lua5.4 shellcheck)
CLUSTER=jctest
PIDS=()
# shellcheck disable=SC2034  # used by run.sh, which sources this file
declare -A SLURMD_PID

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

say() { printf 'slurm-e2e: %s\n' "$*" >&2; }

# Waits until "$@" succeeds, at most $1 seconds (after the first word).
wait_for() {
	local limit=$1
	shift
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

install_packages() {
	local missing=()
	for p in "${SLURM_PACKAGES[@]}"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	say "installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

start_bg() { # name command...
	local name=$1
	shift
	"$@" >"$W/$name.out" 2>&1 &
	PIDS+=($!)
}

cluster_start() {
	install_packages
	# Job steps outlive a killed slurmd: those started here are stopped at the end.
	STEPS_BEFORE=" $(pgrep -x slurmstepd | tr '\n' ' ') "
	W=$(mktemp -d /tmp/joulecast-slurm-XXXXXX)
	chmod 755 "$W"
	mkdir -p "$W/state" "$W/spool" "$W/log"

	# /etc/slurm is put back as it was.
	if [[ -e /etc/slurm ]]; then
		cp -a /etc/slurm "$W/etc-slurm.orig"
	fi
	mkdir -p /etc/slurm

	# munge, with the packaged key, on its default socket (the Slurm
	# commands' connection to slurmdbd does not follow AuthInfo); one already
	# running is used as it is.
	if ! munge -n >/dev/null 2>&1; then
		mkdir -p /run/munge
		start_bg munged munged --foreground --force --key-file=/etc/munge/munge.key \
			--pid-file="$W/munged.pid" --log-file="$W/log/munged.log" --seed-file="$W/munge.seed"
		wait_for 10 munge -n || { say "munged did not start"; return 1; }
	fi

	# MariaDB on a loopback port, for slurmdbd.
	DB_PORT=$(free_port)
	mariadb-install-db --user=root --datadir="$W/mysql" --auth-root-authentication-method=socket \
		>"$W/log/mariadb-install.log" 2>&1
	start_bg mariadbd mariadbd --user=root --datadir="$W/mysql" --socket="$W/mysql.sock" \
		--port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$W/mysql.pid" \
		--log-error="$W/log/mariadb.log"
	wait_for 30 mariadb --socket="$W/mysql.sock" -uroot -e 'SELECT 1' || { say "mariadbd did not start"; return 1; }
	mariadb --socket="$W/mysql.sock" -uroot -e "
		CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm-test';
		GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

	DBD_PORT=$(free_port)
	CTL_PORT=$(free_port)
	cat >/etc/slurm/slurmdbd.conf <<-EOF
		AuthType=auth/munge
		DbdHost=localhost
		DbdPort=$DBD_PORT
		SlurmUser=root
		StorageType=accounting_storage/mysql
		StorageHost=127.0.0.1
		StoragePort=$DB_PORT
		StorageUser=slurm
		StoragePass=slurm-test
		StorageLoc=slurm_acct_db
		PidFile=$W/slurmdbd.pid
		LogFile=$W/log/slurmdbd.log
	EOF
	chmod 600 /etc/slurm/slurmdbd.conf

	{
		cat <<-EOF
			ClusterName=$CLUSTER
			SlurmctldHost=localhost
			SlurmctldPort=$CTL_PORT
			SlurmUser=root
			SlurmdUser=root
			AuthType=auth/munge
			StateSaveLocation=$W/state
			SlurmdSpoolDir=$W/spool/%n
			SlurmctldPidFile=$W/slurmctld.pid
			SlurmdPidFile=$W/slurmd-%n.pid
			SlurmctldLogFile=$W/log/slurmctld.log
			SlurmdLogFile=$W/log/slurmd-%n.log
			SlurmctldDebug=info
			SlurmdDebug=info
			ProctrackType=proctrack/linuxproc
			TaskPlugin=task/none
			MpiDefault=none
			ReturnToService=2
			SchedulerType=sched/backfill
			SelectType=select/linear
			SlurmctldTimeout=30
			SlurmdTimeout=10
			InactiveLimit=0
			MinJobAge=300
			KillWait=5
			AccountingStorageType=accounting_storage/slurmdbd
			AccountingStorageHost=localhost
			AccountingStoragePort=$DBD_PORT
			JobAcctGatherType=jobacct_gather/none
			JobSubmitPlugins=lua
			PrologSlurmctld=/etc/slurm/joulecast-prolog.sh
			EpilogSlurmctld=/etc/slurm/joulecast-epilog.sh
		EOF
		for k in 1 2 3 4; do
			echo "NodeName=cn$k NodeHostname=localhost Port=$(free_port) CPUs=1 RealMemory=500 State=UNKNOWN"
		done
		echo "PartitionName=batch Nodes=cn[1-4] Default=YES MaxTime=INFINITE State=UP"
	} >/etc/slurm/slurm.conf
	cat >/etc/slurm/cgroup.conf <<-EOF
		CgroupPlugin=cgroup/v1
		CgroupAutomount=no
	EOF
}

# The daemons, once deploy/slurm is installed (slurmctld reads the plugin
# and the prolog/epilog paths at start).
cluster_daemons() {
	start_bg slurmdbd slurmdbd -D
	wait_for 30 sacctmgr -n show cluster || { say "slurmdbd did not start"; return 1; }
	sacctmgr -i add cluster "$CLUSTER" >/dev/null
	sacctmgr -i add account proj poor Cluster="$CLUSTER" >/dev/null
	sacctmgr -i add user root Account=proj DefaultAccount=proj >/dev/null
	sacctmgr -i add user root Account=poor >/dev/null
	start_bg slurmctld slurmctld -D -i
	wait_for 30 scontrol ping || { say "slurmctld did not start"; return 1; }
	for k in 1 2 3 4; do
		start_slurmd "cn$k"
	done
	wait_for 60 all_idle || { say "the nodes did not come up"; sinfo >&2; return 1; }
}

start_slurmd() { # node
	start_bg "slurmd-$1" slurmd -D -N "$1"
	# shellcheck disable=SC2034  # read by run.sh
	SLURMD_PID[$1]=$!
}

all_idle() {
	[[ $(sinfo -h -N -o '%T' | grep -c '^idle') == 4 ]]
}

kill_tree() { # pid: it and its descendants
	local child
	for child in $(pgrep -P "$1"); do
		kill_tree "$child"
	done
	kill -9 "$1" 2>/dev/null || true
}

cluster_stop() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	for pid in $(pgrep -x slurmstepd); do
		[[ ${STEPS_BEFORE:-} == *" $pid "* ]] || kill_tree "$pid"
	done
	rm -rf /etc/slurm
	if [[ -e ${W:-}/etc-slurm.orig ]]; then
		cp -a "$W/etc-slurm.orig" /etc/slurm
	fi
}
