#!/usr/bin/env python3
"""Joulecast's served predictions against simple baselines, on synthetic
histories from a generator of its own (written without following
src/model/synth.rs, the accuracy suite's generator): docs/accuracy.md,
"A second generator". Pure Python, fixed seed.

    cargo build --release && python3 tests/independent/check.py

Without --token, it starts target/release/joulecast (or --binary) on --base's port with a
fresh embedded database in a temporary directory, and stops it at the end.
With --token FILE, it uses the service already running at --base. Writes
target/independent/report.md and target/independent/cases.json.
Rerunning against the same database with the same prefix and seed re-sends
identical runs (answered as duplicates), so the answers are the same; use
another --prefix for another seed.
"""
import argparse
import json
import math
import random
import re
import sys
import time
import urllib.error
import urllib.request
import os
import signal
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "target", "independent")

ap = argparse.ArgumentParser()
ap.add_argument("--base", default="http://127.0.0.1:18111")
ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "joulecast"),
                help="the joulecast binary to start (without --token)")
ap.add_argument("--token", help="admin token file of a running service (else one is started)")
ap.add_argument("--prefix", default="ix1")
ap.add_argument("--apps", type=int, default=150)
ap.add_argument("--seed", type=int, default=20261125)
ap.add_argument("--noise", nargs=2, type=float, default=[0.005, 0.05], metavar=("LO", "HI"),
                help="each application's run-to-run noise (relative, log-normal) is drawn "
                     "uniformly from LO to HI (default 0.005 0.05; docs/accuracy.md uses "
                     "0.04 0.10 for noisy histories)")
ap.add_argument("--count-bias", type=float, default=0.0, metavar="SD",
                help="a relative offset (log-normal, this SD; half of it for power) shared by "
                     "all runs at one node count, as a node allocation or a network placement "
                     "gives: repeated runs then understate how far the means stray from the "
                     "curve (default 0: none)")
ap.add_argument("--out", default=os.path.join(OUT, "report.md"))
ap.add_argument("--cases", default=os.path.join(OUT, "cases.json"))
args = ap.parse_args()
TOKEN = None
TAG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]*")
METRICS = ("ets", "apc", "tts")

# ----------------------------------------------------------------------------- HTTP
stats = {"requests": 0, "non2xx": [], "5xx": [], "max_s": 0.0, "total_s": 0.0}


def http(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(args.base + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + TOKEN)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    dt = time.monotonic() - t0
    stats["requests"] += 1
    stats["total_s"] += dt
    stats["max_s"] = max(stats["max_s"], dt)
    if not 200 <= status < 300:
        stats["non2xx"].append((method, path, status, text[:300]))
    if status >= 500:
        stats["5xx"].append((method, path, status, text[:300]))
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


# ------------------------------------------------------------------------ generator
def logu(rng, lo, hi):
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def node_set(rng):
    kind = rng.choices(["pow2", "irregular", "halfoct"], weights=[0.5, 0.3, 0.2])[0]
    if kind == "pow2":
        start = rng.choices([1, 2, 4], weights=[0.5, 0.3, 0.2])[0]
        top = rng.choice([64, 128, 256])
        counts = []
        n = start
        while n <= top:
            counts.append(n)
            n *= 2
    elif kind == "halfoct":  # 1,2,3,4,6,8,12,16,24,... (x2 and x1.5 alternately)
        start = rng.choice([1, 2, 4])
        k = rng.randint(7, 12)
        counts, n = [], start
        while len(counts) < k:
            counts.append(n)
            counts.append(n * 3 // 2 if n > 1 else 2)
            n *= 2
        counts = sorted(set(counts))[:k]
    else:  # irregular: log-uniform draws between lo and hi
        lo = rng.choice([1, 2, 3, 4, 6])
        hi = rng.randint(40, 300)
        k = rng.randint(5, 12)
        s = {lo, hi}
        while len(s) < k:
            s.add(int(round(logu(rng, lo, hi))))
        counts = sorted(s)
    return kind, counts


def make_app(rng, idx, scaling):
    nkind, counts = node_set(rng)
    nmax = counts[-1]
    p = {"idx": idx, "scaling": scaling, "node_set": nkind, "counts": counts}
    if scaling == "strong":
        T1 = logu(rng, 500, 50000)
        s = rng.uniform(0.0, 0.1)
        c = T1 * logu(rng, 1e-5, 2e-3)
        a = rng.uniform(0.3, 1.0)
        has_min = rng.random() < 0.35
        if has_min:  # place the optimum inside the measured range
            nstar = max(counts[1], nmax * rng.uniform(0.25, 0.7))
            d = T1 * (1 - s) / (a * nstar ** (a + 1))
            p["n_opt_design"] = round(nstar, 1)
        else:
            d = T1 * logu(rng, 1e-7, 3e-5)
        p.update(T1=T1, s=s, c=c, d=d, a=a, has_min=has_min, shape="amdahl+log+pow")
    else:
        T1 = logu(rng, 60, 3600)
        shape = rng.choice(["log", "pow", "log+sat"])
        if shape == "log":
            c, a, d = rng.uniform(0.01, 0.1), 0.0, 0.0
        elif shape == "pow":
            c, a, d = rng.uniform(0.002, 0.03), rng.uniform(0.2, 0.6), 0.0
        else:
            c, a, d = rng.uniform(0.005, 0.05), 0.0, rng.uniform(0.02, 0.15)
        p.update(T1=T1, c=c, a=a, d=d, shape=shape, has_min=False)
    # power: per node = idle + dyn * u(n) + network term
    pmax = rng.uniform(250, 600)
    fidle = rng.uniform(0.35, 0.6)
    p.update(P_idle=pmax * fidle, P_dyn=pmax * (1 - fidle), u_floor=rng.uniform(0.2, 0.5),
             g=rng.uniform(0.3, 1.0), P_net=rng.uniform(0.0, 25.0))
    p["sigma"] = rng.uniform(*args.noise)
    p["sigma_p"] = p["sigma"] * rng.uniform(0.3, 1.0)
    p["max_reps"] = rng.randint(1, 5)
    return p


def t_true(p, n):
    if p["scaling"] == "strong":
        return (p["T1"] * (p["s"] + (1 - p["s"]) / n) + p["c"] * math.log2(n)
                + p["d"] * n ** p["a"])
    if p["shape"] == "log":
        return p["T1"] * (1 + p["c"] * math.log2(n))
    if p["shape"] == "pow":
        return p["T1"] * (1 + p["c"] * (n ** p["a"] - 1))
    return p["T1"] * (1 + p["c"] * math.log2(n) + p["d"] * (n - 1) / n)


def efficiency(p, n):
    if p["scaling"] == "strong":
        return min(1.0, t_true(p, 1) / (n * t_true(p, n)))
    return min(1.0, t_true(p, 1) / t_true(p, n))


def apc_true(p, n):
    u = p["u_floor"] + (1 - p["u_floor"]) * efficiency(p, n) ** p["g"]
    per_node = p["P_idle"] + p["P_dyn"] * u + p["P_net"] * min(1.0, math.log2(n) / 8)
    return n * per_node


def truth(p, n):
    t, a = t_true(p, n), apc_true(p, n)
    return {"ets": a * t, "apc": a, "tts": t}


def runs_of(rng, p):
    runs = []
    # A generator of its own, so that --count-bias 0 leaves the other draws as they were.
    brng = random.Random(args.seed * 1000003 + p["idx"])
    for n in p["counts"]:
        bt = math.exp(brng.gauss(0, args.count_bias)) if args.count_bias > 0 else 1.0
        bp = math.exp(brng.gauss(0, args.count_bias / 2)) if args.count_bias > 0 else 1.0
        for _ in range(rng.randint(1, p["max_reps"])):
            t = t_true(p, n) * bt * math.exp(rng.gauss(0, p["sigma"]))
            a = apc_true(p, n) * bp * math.exp(rng.gauss(0, p["sigma_p"]))
            out = rng.random() < 0.02
            if out:
                t *= 1.3
            runs.append({"nodes": n, "tts": t, "apc": a, "ets": a * t, "outlier": out})
    return runs


# ------------------------------------------------------------------------ baselines
def lsq(xs, ys):
    m = len(xs)
    mx, my = sum(xs) / m, sum(ys) / m
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def f_line(pts, n):
    a, b = lsq([x for x, _ in pts], [y for _, y in pts])
    return a + b * n


def f_pow(pts, n):
    a, b = lsq([math.log(x) for x, _ in pts], [math.log(y) for _, y in pts])
    return math.exp(a + b * math.log(n))


def f_picked(pts, n):
    """line or power law, whichever has the smaller mean % error when each training
    count (endpoints included) is predicted from the others."""
    errs = {}
    for name, f in (("line", f_line), ("pow", f_pow)):
        e = [abs(f(pts[:i] + pts[i + 1:], x) - y) / y for i, (x, y) in enumerate(pts)]
        errs[name] = sum(e) / len(e)
    return (f_line if errs["line"] <= errs["pow"] else f_pow)(pts, n), \
        ("line" if errs["line"] <= errs["pow"] else "pow")


def f_interp(pts, n):
    """log-log interpolation between neighbouring counts; beyond the range the
    power law through the last (or first) two counts."""
    xs = [x for x, _ in pts]
    if n > xs[-1]:
        (x0, y0), (x1, y1) = pts[-2], pts[-1]
    elif n < xs[0]:
        (x0, y0), (x1, y1) = pts[0], pts[1]
    else:
        i = max(k for k in range(len(xs) - 1) if xs[k] <= n)
        (x0, y0), (x1, y1) = pts[i], pts[i + 1]
    b = math.log(y1 / y0) / math.log(x1 / x0)
    return y0 * (n / x0) ** b


def count_means(runs, metric):
    acc = {}
    for r in runs:
        acc.setdefault(r["nodes"], []).append(r[metric])
    return [(n, sum(v) / len(v)) for n, v in sorted(acc.items())]


# ------------------------------------------------------------------------- questions
def questions(p, runs):
    counts = p["counts"]
    out = []
    for n in counts[1:-1]:
        out.append(("inside", f"{args.prefix}-{p['idx']:03d}-loo-{n}", [r for r in runs if r["nodes"] != n], [n]))
    nmax = counts[-1]
    M = None
    for div in (2.0, 1.5):
        cand = [c for c in counts if c <= nmax / div]
        if len(cand) >= 1 and len([c for c in counts if c <= cand[-1]]) >= 3:
            M = cand[-1]
            break
    if M is not None:
        train = [r for r in runs if r["nodes"] <= M]
        out.append(("extrap", f"{args.prefix}-{p['idx']:03d}-ext", train, [int(round(1.5 * M)), 2 * M]))
    p["M"] = M
    # Below the range, the mirror: trained on the counts from m, the
    # smallest count at least twice the smallest generated with three
    # counts from it, asked at m / 1.5 and m / 2 (fewer nodes than the
    # application ever ran on).
    low = [c for c in counts if c >= 2 * counts[0] and len([d for d in counts if d >= c]) >= 3]
    m = low[0] if low else None
    p["m_low"] = m
    if m is not None:
        half, two_thirds = max(1, round(m / 2)), round(m / 1.5)
        # Where both round to one count, it is asked once, as m / 2.
        targets = [(two_thirds, "m/1.5"), (half, "m/2")] if two_thirds != half else [(half, "m/2")]
        train = [r for r in runs if r["nodes"] >= m]
        out.append(("below", f"{args.prefix}-{p['idx']:03d}-below", train, targets))
    return out


def to_api(tag, runs):
    return [{"app": tag, "source": "synth", "job_id": f"{tag}-{i}", "nodes": r["nodes"],
             "energy_j": r["ets"], "duration_s": r["tts"], "avg_power_w": r["apc"]}
            for i, r in enumerate(runs)]


def ready():
    try:
        with urllib.request.urlopen(args.base + "/readyz", timeout=2) as r:
            return b"ready" in r.read()
    except Exception:
        return False


def ensure_service():
    """With --token, use the running service; else start target/release/joulecast
    on --base's port with a fresh database in a temporary directory, and return
    its Popen (stopped at the end) and the token file."""
    if args.token:
        if not ready():
            sys.exit(f"no ready service at {args.base}")
        return None, args.token
    if ready():
        sys.exit(f"{args.base} is in use: pass --token for that service, or another --base")
    binary = os.path.abspath(args.binary)
    if not os.path.exists(binary):
        sys.exit(f"{binary} is missing: run `cargo build --release` first")
    data = tempfile.mkdtemp(prefix="joulecast-independent-")
    # Run as root, the embedded PostgreSQL runs as `postgres`, which must
    # enter the directory.
    os.chmod(data, 0o755)
    listen = args.base.split("//", 1)[1]
    log_path = os.path.join(data, "serve.log")
    log = open(log_path, "a")
    proc = subprocess.Popen([binary, "serve", "--listen", listen,
                             "--data-dir", os.path.join(data, "db")], cwd=data,
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(120):
        if proc.poll() is not None:
            break
        if ready():
            print(f"started joulecast pid {proc.pid} in {data}", file=sys.stderr)
            return proc, os.path.join(data, "db", "admin-token")
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    sys.exit(f"service did not become ready; see {log_path}")


def main():
    global TOKEN
    proc, token_file = ensure_service()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    os.makedirs(os.path.dirname(args.cases), exist_ok=True)
    try:
        TOKEN = open(token_file).read().strip()
        evaluate()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            print(f"stopped joulecast pid {proc.pid}", file=sys.stderr)


def evaluate():
    rng = random.Random(args.seed)
    n_strong = round(args.apps * 0.6)
    apps = [make_app(rng, i, "strong" if i < n_strong else "weak") for i in range(args.apps)]
    cases = []
    t0 = time.monotonic()
    skipped_ext = 0
    for p in apps:
        runs = runs_of(rng, p)
        p["n_runs"] = len(runs)
        p["n_outliers"] = sum(r["outlier"] for r in runs)
        qs = questions(p, runs)
        if p["M"] is None:
            skipped_ext += 1
        batch = []
        for _, tag, train, _ in qs:
            assert TAG_RE.fullmatch(tag) and len(tag) <= 128
            batch += to_api(tag, train)
        for i in range(0, len(batch), 1000):
            st, body = http("POST", "/v1/runs/batch", {"runs": batch[i:i + 1000]})
            if st != 200 or body.get("rejected", 0):
                print("BATCH PROBLEM", p["idx"], st, str(body)[:400], file=sys.stderr)
        for cat, tag, train, targets in qs:
            for n in targets:
                if cat == "inside":
                    label = cat
                elif cat == "below":
                    n, label = n
                else:
                    label = "1.5x" if n != 2 * p["M"] else "2x"
                st, ans = http("GET", f"/v1/apps/{tag}/predictions?nodes={n}")
                tr = truth(p, n)
                case = {"app": tag, "idx": p["idx"], "cat": label, "nodes": n, "status": st,
                        "truth": tr, "train_counts": sorted({r["nodes"] for r in train}),
                        "n_train_runs": len(train),
                        "train_outlier_counts": sorted({r["nodes"] for r in train if r["outlier"]}),
                        "train_runs": [[r["nodes"], r["tts"], r["apc"], r["outlier"]] for r in train]}
                if st == 200:
                    pm = {q["metric"]: q for q in ans["predictions"]}
                    case["served"] = {m: {k: pm[m].get(k) for k in
                                          ("value", "interval", "family", "flags", "source",
                                           "backtest_error_pct")} for m in METRICS}
                base = {}
                for m in METRICS:
                    pts = count_means(train, m)
                    pk, which = f_picked(pts, n)
                    base[m] = {"line": f_line(pts, n), "pow": f_pow(pts, n), "picked": pk,
                               "picked_which": which, "interp": f_interp(pts, n)}
                case["baselines"] = base
                cases.append(case)
        if p["idx"] % 10 == 9:
            print(f"app {p['idx'] + 1}/{len(apps)}: {len(cases)} questions, "
                  f"{stats['requests']} requests, {time.monotonic() - t0:.0f}s", file=sys.stderr)
    elapsed = time.monotonic() - t0
    json.dump({"apps": apps, "cases": cases, "stats": stats}, open(args.cases, "w"), indent=1)
    report(apps, cases, elapsed, skipped_ext)


# --------------------------------------------------------------------------- report
def median(v):
    s = sorted(v)
    if not s:
        return float("nan")
    k = 0.5 * (len(s) - 1)
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def pct(v, q):
    s = sorted(v)
    if not s:
        return float("nan")
    k = q * (len(s) - 1)
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def err(v, t):
    return 100.0 * abs(v - t) / t


def noise_group(p):
    s = p["sigma"] * 100
    return "noise<1.5%" if s < 1.5 else ("noise 1.5-3%" if s < 3 else "noise>=3%")


def report(apps, cases, elapsed, skipped_ext):
    A = {p["idx"]: p for p in apps}
    ok = [c for c in cases if "served" in c]
    groups = [("all apps", lambda p, c: True),
              ("strong scaling", lambda p, c: p["scaling"] == "strong"),
              ("  of which with a time minimum", lambda p, c: p["scaling"] == "strong" and p["has_min"]),
              ("weak scaling", lambda p, c: p["scaling"] == "weak"),
              ("noise < 1.5 %", lambda p, c: noise_group(p) == "noise<1.5%"),
              ("noise 1.5-3 %", lambda p, c: noise_group(p) == "noise 1.5-3%"),
              ("noise >= 3 %", lambda p, c: noise_group(p) == "noise>=3%"),
              ("training runs include an outlier (x1.3)", lambda p, c: bool(c["train_outlier_counts"])),
              ("training runs without outlier", lambda p, c: not c["train_outlier_counts"])]
    L = []
    w = L.append
    w("# Joulecast vs simple baselines on an independent synthetic generator\n")
    w(f"Generator: `tests/independent/check.py` (seed {args.seed}, prefix `{args.prefix}`), "
      f"{len(apps)} apps ({sum(p['scaling'] == 'strong' for p in apps)} strong, "
      f"{sum(p['scaling'] == 'weak' for p in apps)} weak; "
      f"{sum(p['has_min'] for p in apps)} strong apps with a time minimum inside the range), "
      f"{sum(p['n_runs'] for p in apps)} runs, {sum(p['n_outliers'] for p in apps)} outlier runs (x1.3 time), "
      f"run-to-run noise {100 * args.noise[0]:g}–{100 * args.noise[1]:g} %. "
      f"Scaling mode left at the default (`unknown`).\n")
    w(f"Questions: {len(cases)} ({sum(c['cat'] == 'inside' for c in cases)} leave-one-count-out inside the range, "
      f"{sum(c['cat'] == '1.5x' for c in cases)} at 1.5xM, {sum(c['cat'] == '2x' for c in cases)} at 2xM, "
      f"{sum(c['cat'] == 'm/1.5' for c in cases)} at m/1.5 and {sum(c['cat'] == 'm/2' for c in cases)} at m/2 "
      f"below the range, trained on the counts from m; "
      f"{skipped_ext} apps without an extrapolation question, "
      f"{sum(p.get('m_low') is None for p in apps)} without one below the range). "
      f"Truth = noiseless generator value. "
      f"Error = |pred - truth| / truth in %.\n")
    w(f"HTTP: {stats['requests']} requests, non-2xx: **{len(stats['non2xx'])}**, 5xx: **{len(stats['5xx'])}**, "
      f"max latency {stats['max_s']:.2f} s, mean {stats['total_s'] / max(1, stats['requests']):.3f} s; "
      f"wall time {elapsed:.0f} s.\n")
    for x in stats["non2xx"][:10]:
        w(f"- NON-2xx: `{x}`")
    src = {}
    for c in ok:
        for m in METRICS:
            s = c["served"][m]["source"]
            src[s] = src.get(s, 0) + 1
    w(f"Served `source` tally over all metric answers: {src}\n")
    w("Baselines fitted on the per-count means of the same training runs: line = LSQ y=a+bn; "
      "pow = LSQ line in log-log; picked = line or pow by smaller leave-one-count-out mean % error on the "
      "training counts (endpoints included); interp = log-log interpolation between neighbouring counts "
      "(beyond the range: power law through the last two counts; below it, through the first two). cov = share of truths inside Joulecast's "
      "interval. JC p90 = 90th percentile of Joulecast's error. win = share of questions where Joulecast's "
      "error <= picked's.\n")
    for gname, gf in groups:
        sel = [c for c in ok if gf(A[c["idx"]], c)]
        w(f"\n## {gname.strip()}\n")
        w("| metric | category | n | Joulecast | line | pow | picked | interp | JC p90 | picked p90 | win vs picked | cov |")
        w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for m in METRICS:
            for cat in ("inside", "1.5x", "2x", "m/1.5", "m/2"):
                cs = [c for c in sel if c["cat"] == cat]
                if not cs:
                    continue
                t = [c["truth"][m] for c in cs]
                jc = [err(c["served"][m]["value"], tt) for c, tt in zip(cs, t)]
                b = {k: [err(c["baselines"][m][k], tt) for c, tt in zip(cs, t)]
                     for k in ("line", "pow", "picked", "interp")}
                cov = sum(c["served"][m]["interval"]["low"] <= tt <= c["served"][m]["interval"]["high"]
                          for c, tt in zip(cs, t)) / len(cs)
                win = sum(j <= q + 1e-12 for j, q in zip(jc, b["picked"])) / len(cs)
                w(f"| {m} | {cat} | {len(cs)} | **{median(jc):.2f}** | {median(b['line']):.2f} | "
                  f"{median(b['pow']):.2f} | {median(b['picked']):.2f} | {median(b['interp']):.2f} | "
                  f"{pct(jc, 0.9):.2f} | {pct(b['picked'], 0.9):.2f} | {100 * win:.0f}% | {100 * cov:.0f}% |")
    # families
    fam = {}
    for c in ok:
        for m in METRICS:
            where = {"inside": "inside", "m/1.5": "below", "m/2": "below"}.get(c["cat"], "beyond")
            k = (where, m, c["served"][m]["family"])
            fam[k] = fam.get(k, 0) + 1
    w("\n## Families that answered\n")
    w("| where | metric | family | count |")
    w("|---|---|---|---:|")
    for k, v in sorted(fam.items(), key=lambda kv: (kv[0][0], kv[0][1], -kv[1])):
        w(f"| {k[0]} | {k[1]} | {k[2]} | {v} |")
    # worst cases
    rows = []
    for c in ok:
        for m in METRICS:
            rows.append((err(c["served"][m]["value"], c["truth"][m]), c, m))
    rows.sort(key=lambda r: -r[0])
    seen, uniq = set(), []
    for r in rows:
        if r[1]["app"] not in seen:
            seen.add(r[1]["app"])
            uniq.append(r)
    rows = uniq
    w("\n## 10 worst Joulecast answers (worst metric and target per training set, distinct tags)\n")
    w("Reproduce: the app's training runs are re-created by `python3 tests/independent/check.py` (same seed), "
      "stored under the tag shown; `GET /v1/apps/<tag>/predictions?nodes=N`. Full inputs and answers "
      "are in `target/independent/cases.json` (`apps[idx]` = parameters, `cases[]` = questions).\n")
    for i, (e, c, m) in enumerate(rows[:10], 1):
        p = A[c["idx"]]
        s = c["served"][m]
        b = c["baselines"][m]
        tr = c["truth"][m]
        params = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in p.items()
                  if k not in ("counts", "idx")}
        w(f"{i}. **{c['app']}** {m} at n={c['nodes']} ({c['cat']}): truth {tr:.5g}, Joulecast "
          f"{s['value']:.5g} (**{e:.1f}%**, interval [{s['interval']['low']:.4g}, {s['interval']['high']:.4g}], "
          f"family `{s['family']}`, flags {s['flags']}, backtest {s['backtest_error_pct']}); "
          f"line {b['line']:.5g} ({err(b['line'], tr):.1f}%), pow {b['pow']:.5g} ({err(b['pow'], tr):.1f}%), "
          f"picked[{b['picked_which']}] {b['picked']:.5g} ({err(b['picked'], tr):.1f}%), interp {b['interp']:.5g} "
          f"({err(b['interp'], tr):.1f}%). Other metrics here: "
          + ", ".join(f"{o} {err(c['served'][o]['value'], c['truth'][o]):.1f}% (picked {err(c['baselines'][o]['picked'], c['truth'][o]):.1f}%)"
                      for o in METRICS if o != m)
          + f".  \n   Training counts {c['train_counts']} ({c['n_train_runs']} runs; outlier runs at {c['train_outlier_counts'] or 'none'}); "
          f"all counts {p['counts']}; params `{json.dumps(params)}`")
    open(args.out, "w").write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
