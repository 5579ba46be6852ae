#!/usr/bin/env bash
# Peak memory of `joulecast import sacct` on a large accounting file, read a
# part at a time (the default) and whole (one part), into two fresh databases
# of a throwaway PostgreSQL; both must store the same runs.
#
#   cargo build --release && bash tests/bench/sacct_import.sh [JOBS]
#
# JOBS (default 300,000) jobs of three lines each (job, .batch, .extern):
# about 94 MB at the default. Needs python3, PostgreSQL's initdb and pg_ctl,
# and GNU time (/usr/bin/time); as root, PostgreSQL runs as `postgres`.
set -euo pipefail
cd "$(dirname "$0")/../.."
jobs=${1:-300000}
bin=$PWD/target/release/joulecast
work=$(mktemp -d)
chmod 755 "$work"
trap 'pg_ctl -D "$work/data" stop -m immediate >/dev/null 2>&1 || su postgres -s /bin/bash -c "pg_ctl -D $work/data stop -m immediate" >/dev/null 2>&1; rm -rf "$work"' EXIT
for dir in /usr/lib/postgresql/*/bin; do PATH=$PATH:$dir; done

python3 - "$jobs" "$work/sacct.txt" <<'PY'
import random, sys
jobs, path = int(sys.argv[1]), sys.argv[2]
random.seed(1)
apps = ["lammps", "gromacs", "wrf", "cp2k", "vasp", "nemo"]
with open(path, "w") as f:
    f.write("JobID|JobName|Account|Partition|NNodes|NodeList|State|Start|End|"
            "ElapsedRaw|ConsumedEnergyRaw|Cluster\n")
    for j in range(jobs):
        n = random.choice([1, 2, 4, 8, 16, 32])
        energy = random.randint(1000, 100000) * n
        day, hour, minute = 1 + j // 20000 % 28, j // 1000 % 24, j // 20 % 60
        start = f"2026-03-{day:02d}T{hour:02d}:{minute:02d}:00"
        end = f"2026-03-{day:02d}T{hour:02d}:{minute:02d}:30"
        nodes = f"cn[{j % 1000:04d}-{j % 1000 + n - 1:04d}]" if n > 1 else f"cn{j % 1000:04d}"
        job, acct = j + 100000, f"acct{j % 7}"
        f.write(f"{job}|{random.choice(apps)}|{acct}|compute|{n}|{nodes}|COMPLETED|"
                f"{start}|{end}|30|{energy}|hawk\n")
        f.write(f"{job}.batch|batch|{acct}||1|cn0001|COMPLETED|{start}|{end}|30|{energy // n}|hawk\n")
        f.write(f"{job}.extern|extern|{acct}||{n}|{nodes}|COMPLETED|{start}|{end}|30|{energy}|hawk\n")
PY

as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$work"
port=$((20000 + RANDOM % 20000))
as_pg "initdb -D $work/data -A trust -U postgres >/dev/null"
as_pg "pg_ctl -D $work/data -o '-p $port -k $work -c listen_addresses=127.0.0.1' -l $work/log -w start >/dev/null"
url=postgres://postgres@127.0.0.1:$port
psql -q "$url/postgres" -c 'CREATE DATABASE parts' -c 'CREATE DATABASE whole'

echo "input: $(wc -l <"$work/sacct.txt") lines, $(($(stat -c %s "$work/sacct.txt") / 1048576)) MiB"
for how in parts whole; do
    extra=()
    [ "$how" = whole ] && extra=(--lines-per-segment 1000000000)
    /usr/bin/time -f '%M %e' -o "$work/$how.time" \
        "$bin" import sacct "$work/sacct.txt" --database-url "$url/$how" "${extra[@]}" | head -1
    read -r kib seconds <"$work/$how.time"
    sum=$(psql -At "$url/$how" -c 'SELECT count(*) || $$ runs, $$ || sum(energy_j) || $$ J$$ FROM runs')
    echo "$how: peak RSS $((kib / 1024)) MiB, $seconds s; stored $sum"
done
