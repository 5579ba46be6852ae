"""Populates a fresh Joulecast service for the fuzzer: applications with
history on named nodes, classified nodes, power caps, a budget, running jobs
and finished ones, so that the fuzzed endpoints answer 200 with real data
(on an empty database most of them only answer 404).

Usage: populate.py BASE_URL ADMIN_TOKEN. Uses only the standard library.
"""

import json
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone

base, token = sys.argv[1], sys.argv[2]
now = datetime.now(timezone.utc)


def at(**delta):
    return (now + timedelta(**delta)).isoformat()


def call(method, path, body=None, expect=(200, 201)):
    data = None if body is None else json.dumps(body).encode()
    # 503 and 429 ask for a retry after Retry-After seconds: do as a client
    # should, a few times.
    for attempt in range(5):
        request = urllib.request.Request(base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request) as response:
                status, answer = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, answer = error.code, error.read()
            if status in (429, 503) and attempt < 4:
                print(f"populate: {method} {path} answered {status}; retrying", file=sys.stderr)
                time.sleep(min(float(error.headers.get("Retry-After") or 1), 5))
                continue
        break
    if status not in expect:
        sys.exit(f"populate: {method} {path} answered {status}: {answer[:500]!r}")
    return json.loads(answer) if answer else None


def node(i):
    return f"c{i:02}"


call("PUT", "/v1/apps/lin", {"scaling_mode": "strong", "description": "linear power",
                             "allowed_rmse_pct": 5.0})
call("PUT", "/v1/apps/amd", {"scaling_mode": "strong"})
for i in range(1, 9):
    call("PUT", f"/v1/nodes/{node(i)}",
         {"partition": "batch" if i <= 4 else "gpu", "hardware_model": "XC-2",
          "idle_power_w": 100.0, "peak_power_w": 700.0})
samples = []
for i, watts in enumerate([180, 182, 200, 201, 203, 230, 232, 320], start=1):
    for minutes, delta in ((30, -1.0), (20, 1.0)):
        for workload in ("reference", "stress"):
            samples.append({"node": node(i), "workload": workload,
                            "avg_power_w": watts + delta, "measured_at": at(minutes=-minutes)})
call("POST", "/v1/nodes/samples", {"samples": samples})

runs = []
for n in (1, 2, 4, 8, 16):
    for repeat in range(2):
        end = now - timedelta(hours=2 + repeat)
        # lin: APC 1000·n W for ten minutes, on named nodes up to 8.
        power, duration = 1000.0 * n * (1 + 0.01 * repeat), 600.0
        run = {"app": "lin", "source": "clusterA", "job_id": f"lin-{n}-{repeat}",
               "nodes": n, "avg_power_w": power, "duration_s": duration,
               "energy_j": power * duration, "account": "proj",
               "started_at": (end - timedelta(seconds=duration)).isoformat(),
               "ended_at": end.isoformat()}
        if n <= 8:
            run["node_list"] = [node(i) for i in range(1, n + 1)]
        runs.append(run)
        # amd: Amdahl time, energy growing with n.
        duration = 3600.0 * (0.1 + 0.9 / n) * (1 + 0.01 * repeat)
        energy = 1e6 * (1 + 0.1 * (n - 1))
        runs.append({"app": "amd", "source": "clusterA", "job_id": f"amd-{n}-{repeat}",
                     "nodes": n, "energy_j": energy, "duration_s": duration,
                     "avg_power_w": energy / duration, "account": "proj",
                     "started_at": (end - timedelta(seconds=duration)).isoformat(),
                     "ended_at": end.isoformat()})
call("POST", "/v1/runs/batch", {"runs": runs})

call("PUT", "/v1/power-caps/site", {"limit_w": 1.0e6, "description": "utility contract"})
call("PUT", "/v1/power-caps/gpu-night", {"limit_w": 2.0e4, "partition": "gpu",
                                         "starts_at": at(hours=1), "ends_at": at(hours=9)})
call("PUT", "/v1/budgets/proj", {"limit_j": 1.0e9, "period": "month"})
for job, nodes in (("7001", 2), ("7002", 4)):
    call("POST", "/v1/jobs", {"source": "clusterA", "job_id": job, "app": "lin",
                              "nodes": nodes, "account": "proj", "time_limit_s": 3600})
call("POST", "/v1/jobs", {"source": "clusterA", "job_id": "7003", "app": "amd",
                          "node_list": "c[01-02]", "account": "proj"})
call("POST", "/v1/jobs/clusterA/7003/finish", {"avg_power_w": 2100.0, "duration_s": 1900.0})
print(f"populate: {len(runs)} runs, 8 nodes, 2 caps, 1 budget, 2 running jobs")
