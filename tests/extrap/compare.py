#!/usr/bin/env python3
"""Compare Joulecast's model search (`joulecast model FILE --json`) with Extra-P.

Run inside the venv that has Extra-P (see compare.sh, which sets it up):

    target/extrap-venv/bin/python tests/extrap/compare.py

Steps:
  1. writes the data sets into tests/fixtures/extrap/ in Extra-P's text format
     (deterministic: fixed seeds, so regenerating gives identical bytes);
  2. models every file with Extra-P in-process, default single-parameter
     modeler, timing only the modeler call;
  3. models every file with `joulecast model FILE --json --targets T1,T2
     --repeat N` (T1 = 2x, T2 = 16x the largest point), if the binary has
     that command;
  4. writes docs/extrap-comparison.md. Every number in it comes from this run.

Options: --check-fixtures only checks that the committed data files are what
this script generates; --fixtures-only only writes them; --strict exits 1
unless all three targets are met.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import warnings
import zlib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable, Optional

# ---------------------------------------------------------------------------
# Data sets
# ---------------------------------------------------------------------------

SEED = 20240611          # base seed; each file's RNG is SEED + crc32(name)
REPETITIONS = 5          # repetitions per point (Extra-P: DATA line per point)
NOISE = 0.02             # uniform multiplicative noise in [-2 %, +2 %]
POINTS = (4, 8, 16, 32, 64)
POINTS_FROM_2 = (2, 4, 8, 16, 32)
TARGET_FACTORS = (2, 16)  # predict at 2x and 16x the largest point
ACCURATE_PCT = 10.0       # target (b): |error| at both targets within this
SPEEDUP_TARGET = 50.0     # target (c)


@dataclass(frozen=True)
class DataSet:
    name: str                       # file stem
    truth: str                      # human-readable true function
    f: Callable[[float], float]
    points: tuple
    noise: float
    true_class: frozenset           # {(poly exponent, log power)} of the truth
    kind: str                       # "single" (target a) or "amdahl" (target b)

    @property
    def file_name(self) -> str:
        return self.name + ".txt"

    @property
    def targets(self) -> list:
        return [float(k * max(self.points)) for k in TARGET_FACTORS]


def _amdahl(serial: float) -> Callable[[float], float]:
    return lambda p: 1000.0 * (serial + (1.0 - serial) / p)


def _datasets() -> list:
    base = [
        ("linear", "10 + 2.5·p", lambda p: 10.0 + 2.5 * p, POINTS,
         {(Fraction(1), Fraction(0))}, "single"),
        ("log", "5 + 3·log2(p)", lambda p: 5.0 + 3.0 * math.log2(p), POINTS,
         {(Fraction(0), Fraction(1))}, "single"),
        ("pow15", "2 + 0.1·p^(3/2)", lambda p: 2.0 + 0.1 * p ** 1.5, POINTS,
         {(Fraction(3, 2), Fraction(0))}, "single"),
        # Amdahl's law, serial fraction 2 %, measured on 2..32 processes.
        ("amdahl", "1000·(0.02 + 0.98/p) = 20 + 980·p^(-1)", _amdahl(0.02),
         POINTS_FROM_2, {(Fraction(-1), Fraction(0))}, "amdahl"),
        # Amdahl's law, serial fraction 10 %, measured on 4..64 processes.
        ("amdahl10", "1000·(0.1 + 0.9/p) = 100 + 900·p^(-1)", _amdahl(0.10),
         POINTS, {(Fraction(-1), Fraction(0))}, "amdahl"),
    ]
    out = []
    for name, truth, f, points, cls, kind in base:
        out.append(DataSet(name, truth, f, points, 0.0, frozenset(cls), kind))
        out.append(DataSet(name + "-noisy", truth + " (±2 % noise)", f, points,
                           NOISE, frozenset(cls), kind))
    return out


DATASETS = _datasets()


def _num(v: float) -> str:
    """Number format of the data files (12 significant digits, stable)."""
    return format(v, ".12g")


def render_fixture(ds: DataSet) -> str:
    rng = random.Random(SEED + zlib.crc32(ds.name.encode()))
    lines = [
        "PARAMETER p",
        "POINTS " + " ".join(str(p) for p in ds.points),
        # Extra-P 4.2.5's text reader fails with "Callpaths are missing." on
        # files without a REGION line, so every file names one.
        "REGION main",
        "METRIC time",
    ]
    for p in ds.points:
        truth = ds.f(float(p))
        reps = []
        for _ in range(REPETITIONS):
            factor = 1.0 + rng.uniform(-ds.noise, ds.noise) if ds.noise else 1.0
            reps.append(_num(truth * factor))
        lines.append("DATA " + " ".join(reps))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Models: one representation for both tools
# ---------------------------------------------------------------------------

@dataclass
class Term:
    coefficient: float
    exponent: Fraction   # polynomial exponent of p
    log_power: Fraction  # power of log2(p)


@dataclass
class Result:
    constant: float = float("nan")
    terms: list = field(default_factory=list)
    predictions: dict = field(default_factory=dict)   # target p -> value
    seconds_per_model: float = float("nan")
    error: Optional[str] = None
    note: Optional[str] = None
    score: Optional[str] = None   # how the tool ranked the selected model

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def model_class(self) -> frozenset:
        return frozenset((t.exponent, t.log_power) for t in self.terms if t.coefficient != 0)

    def evaluate(self, p: float) -> float:
        y = self.constant
        for t in self.terms:
            y += t.coefficient * p ** float(t.exponent) * math.log2(p) ** float(t.log_power)
        return y


def _frac(x) -> Fraction:
    if isinstance(x, float):
        return Fraction(x).limit_denominator(1000)
    return Fraction(x)


def fmt_frac(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def fmt_term_kind(exponent: Fraction, log_power: Fraction) -> str:
    parts = []
    if exponent != 0:
        parts.append("p" if exponent == 1 else f"p^({fmt_frac(exponent)})")
    if log_power != 0:
        parts.append("log2(p)" if log_power == 1 else f"log2(p)^({fmt_frac(log_power)})")
    return "·".join(parts) if parts else "1"


def fmt_class(cls: frozenset) -> str:
    if not cls:
        return "constant"
    return "{" + ", ".join(fmt_term_kind(e, l) for e, l in sorted(cls)) + "}"


def fmt_model(r: Result) -> str:
    s = _g(r.constant)
    for t in r.terms:
        sign = "-" if t.coefficient < 0 else "+"
        s += f" {sign} {_g(abs(t.coefficient))}·{fmt_term_kind(t.exponent, t.log_power)}"
    return s


def _g(v: float, digits: int = 6) -> str:
    return format(v, f".{digits}g")


# ---------------------------------------------------------------------------
# Extra-P (in-process)
# ---------------------------------------------------------------------------

def extrap_info() -> dict:
    """Version and the default single-parameter modeler's settings."""
    import extrap
    from extrap.entities.experiment import Experiment
    from extrap.entities.parameter import Parameter
    from extrap.modelers.model_generator import ModelGenerator
    from extrap.modelers.modeler_options import modeler_options

    exp = Experiment()
    exp.add_parameter(Parameter("p"))
    modeler = ModelGenerator(exp).modeler  # what "Default" resolves to
    options = {o.field: getattr(modeler, o.field) for o in modeler_options.iter(type(modeler))}
    blocks = []
    for ct in modeler.hypotheses_building_blocks:
        e, l = Fraction(0), Fraction(0)
        for st in ct.simple_terms:
            if st.term_type == "polynomial":
                e = _frac(st.exponent)
            else:
                l = _frac(st.exponent)
        blocks.append((e, l))
    import numpy
    import scipy
    return {
        "version": extrap.__version__,
        "modeler": f"{type(modeler).__module__}.{type(modeler).__qualname__}",
        "modeler_name": modeler.NAME,
        "use_measure": modeler.use_measure.name,
        "options": options,
        "min_measurement_points": getattr(modeler, "min_measurement_points", None),
        "cv_constant_epsilon": getattr(modeler, "epsilon", None),
        "blocks": blocks,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
    }


def _from_extrap_function(fn) -> Result:
    """Constant and (coefficient, exponent, log power) terms of an Extra-P function."""
    r = Result(constant=float(fn.constant_coefficient))
    for ct in fn.compound_terms:
        e, l = Fraction(0), Fraction(0)
        for st in ct.simple_terms:
            if st.term_type == "polynomial":
                e = _frac(st.exponent)
            elif st.term_type == "logarithm":
                l = _frac(st.exponent)
        r.terms.append(Term(float(ct.coefficient), e, l))
    return r


def run_extrap(path: Path, targets: list, repeats: int) -> Result:
    from extrap.fileio.file_reader.text_file_reader import TextFileReader
    from extrap.modelers.model_generator import ModelGenerator

    try:
        experiment = TextFileReader().read_experiment(str(path))
        generator = ModelGenerator(experiment)  # modeler="Default", mean of repetitions
        modeler = generator.modeler
        sequences = list(experiment.measurements.values())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            modeler.model(sequences)  # warm-up: the first fit imports scipy.optimize lazily
            elapsed = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                models = modeler.model(sequences)  # <- the only timed step
                elapsed.append(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - reported in the document
        return Result(error=f"{type(e).__name__}: {e}")

    model = models[0]
    fn = model.hypothesis.function
    r = _from_extrap_function(fn)
    r.predictions = {t: float(fn.evaluate(t)) for t in targets}  # Extra-P's own evaluation
    r.seconds_per_model = statistics.fmean(elapsed) / len(sequences)
    kind = "cross-validated" if fn.compound_terms else "in-sample"
    r.score = f"{kind} SMAPE {model.hypothesis.SMAPE:.3g} %"
    if not fn.compound_terms and hasattr(modeler, "build_hypotheses"):
        # Explain a constant model: rerun the one-term search alone (untimed).
        measurements = sequences[0]
        constant, constant_cost = modeler.create_constant_model(measurements)
        if constant_cost != 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                best = modeler.find_best_hypothesis(modeler.build_hypotheses(measurements), constant_cost,
                                                    measurements)
            r.note = (f"Extra-P kept the constant model: its in-sample SMAPE, {constant.SMAPE:.2f} %, is "
                      f"below the cross-validated SMAPE, {best.SMAPE:.2f} %, of the best one-term "
                      f"candidate, {fmt_model(_from_extrap_function(best.function))}")
    if len(models) != 1:
        r.note = f"{len(models)} models in file; the first is compared"
    for t in targets:
        mine = r.evaluate(t)
        if not math.isclose(mine, r.predictions[t], rel_tol=1e-9, abs_tol=1e-9):
            r.note = f"evaluation mismatch at p={t:g}: Extra-P {r.predictions[t]!r}, terms {mine!r}"
    return r


# ---------------------------------------------------------------------------
# Joulecast (subprocess)
# ---------------------------------------------------------------------------

def _p_arg(t: float) -> str:
    return str(int(t)) if float(t).is_integer() else repr(t)


def joulecast_status(binary: Path) -> tuple:
    """(available, reason)."""
    if not binary.exists():
        return False, f"{binary} does not exist"
    try:
        r = subprocess.run([str(binary), "model", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"`joulecast model --help` failed: {e}"
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        return False, "`joulecast model --help` exited {}: {}".format(r.returncode, msg[0] if msg else "")
    return True, ""


def run_joulecast(binary: Path, path: Path, targets: list, repeats: int) -> Result:
    cmd = [str(binary), "model", str(path), "--json",
           "--targets", ",".join(_p_arg(t) for t in targets), "--repeat", str(repeats)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Result(error=f"{' '.join(cmd)}: {e}")
    if proc.returncode != 0:
        return Result(error=f"exit {proc.returncode}: {proc.stderr.strip()[:500]}")
    try:
        doc = json.loads(proc.stdout)
        entries = doc["models"]
        entry = entries[0]
        m = entry["model"]
        r = Result(constant=float(m["constant"]))
        for t in m["terms"]:
            r.terms.append(Term(float(t["coefficient"]), Fraction(str(t["exponent"])),
                                Fraction(int(t["log_power"]))))
        got = {float(x["p"]): float(x["value"]) for x in entry["predictions"]}
        r.predictions = {t: got[t] for t in targets}
        r.seconds_per_model = float(entry["seconds_per_model"])
        if "cv_smape_pct" in m:
            r.score = f"CV SMAPE {float(m['cv_smape_pct']):.3g} %"
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return Result(error=f"unexpected JSON ({type(e).__name__}: {e}): {proc.stdout[:500]}")
    if len(entries) != 1:
        r.note = f"{len(entries)} models in output; the first is compared"
    for t in targets:
        mine = r.evaluate(t)
        if not math.isclose(mine, r.predictions[t], rel_tol=1e-6, abs_tol=1e-9):
            r.note = (f"reported prediction at p={t:g} ({r.predictions[t]:.6g}) differs from the "
                      f"reported terms evaluated here ({mine:.6g})")
    return r


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

def pct_err(pred: float, truth: float) -> float:
    e = (pred - truth) / truth * 100.0
    return 0.0 if abs(e) < 0.05 else e  # no "-0.0 %"


def fmt_pred(pred: float, truth: float) -> str:
    s = f"{_g(pred)} ({pct_err(pred, truth):+.1f} %)"
    return s + " **NEGATIVE**" if pred < 0 else s


def fmt_time(sec: float) -> str:
    if sec != sec:
        return "n/a"
    if sec >= 1e-3:
        return f"{sec * 1e3:.2f} ms"
    return f"{sec * 1e6:.1f} µs"


def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "unknown"
    return {"cpu": cpu, "cores": os.cpu_count(), "load": load,
            "python": platform.python_version(), "system": platform.platform()}


def git_rev(repo: Path) -> str:
    try:
        rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return rev + (" (with uncommitted changes)" if dirty else "") if rev else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def evaluate_targets(rows: list, jc_available: bool) -> dict:
    """Returns {key: (status, detail)} for targets a, b, c."""
    out = {}
    if not jc_available:
        for k in "abc":
            out[k] = ("NOT EVALUATED", "`joulecast model` was not available")
        return out

    # (a) same class as Extra-P on clean and noisy single-term data
    singles = [(ds, x, j) for ds, x, j in rows if ds.kind == "single"]
    bad = [ds.name for ds, x, j in singles if not (x.ok and j.ok and x.model_class == j.model_class)]
    out["a"] = ("MET" if not bad else "NOT MET",
                f"{len(singles) - len(bad)}/{len(singles)} single-term data sets in the same class"
                + (f"; differing: {', '.join(bad)}" if bad else ""))

    # (b) Amdahl: where Extra-P predicts a negative value, Joulecast positive and accurate
    amdahl = [(ds, x, j) for ds, x, j in rows if ds.kind == "amdahl"]
    neg = [(ds, x, j) for ds, x, j in amdahl if x.ok and any(v < 0 for v in x.predictions.values())]
    if not neg:
        out["b"] = ("NOT APPLICABLE", "Extra-P predicted no negative value on the Amdahl-shaped data")
    else:
        failing = []
        for ds, x, j in neg:
            good = j.ok and all(j.predictions[t] > 0 and abs(pct_err(j.predictions[t], ds.f(t))) <= ACCURATE_PCT
                                for t in ds.targets)
            if not good:
                failing.append(ds.name)
        out["b"] = ("MET" if not failing else "NOT MET",
                    f"Extra-P went negative on {len(neg)}/{len(amdahl)} Amdahl-shaped data sets "
                    f"({', '.join(ds.name for ds, _, _ in neg)}); Joulecast positive and within "
                    f"±{ACCURATE_PCT:g} % of the truth at both targets on "
                    f"{len(neg) - len(failing)}/{len(neg)}"
                    + (f"; failing: {', '.join(failing)}" if failing else ""))

    # (c) speed
    ratios = [(ds.name, x.seconds_per_model / j.seconds_per_model) for ds, x, j in rows
              if x.ok and j.ok and j.seconds_per_model > 0]
    if not ratios:
        out["c"] = ("NOT EVALUATED", "no timing pairs")
    else:
        worst = min(ratios, key=lambda r: r[1])
        geo = math.exp(statistics.fmean(math.log(r) for _, r in ratios))
        missing = len(rows) - len(ratios)
        ok = worst[1] >= SPEEDUP_TARGET and missing == 0
        out["c"] = ("MET" if ok else "NOT MET",
                    f"speed-up per model: lowest {worst[1]:.0f}× ({worst[0]}), geometric mean {geo:.0f}× "
                    f"over {len(ratios)} data sets" + (f"; {missing} without timing" if missing else ""))
    return out


def write_report(out_path: Path, repo: Path, info: dict, machine: dict, machine_end: dict, rows: list,
                 jc_available: bool, jc_reason: str, args) -> dict:
    targets = evaluate_targets(rows, jc_available)
    opts = info["options"]
    L = []
    a = L.append
    a("# Extra-P vs Joulecast model search")
    a("")
    a("<!-- Generated by tests/extrap/compare.py; edit that script, not this file. -->")
    a("")
    a(f"Generated {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')} at commit "
      f"{git_rev(repo)}. Every number below comes from that run.")
    a("")
    a("## How to regenerate")
    a("")
    a("```sh")
    a("bash tests/extrap/compare.sh")
    a("```")
    a("")
    a("The script creates or reuses a venv (`target/extrap-venv`, override with `EXTRAP_VENV`), installs "
      f"the pinned `tests/extrap/requirements.txt` (Extra-P {info['version']}) if missing, runs "
      "`cargo build --release`, and then `tests/extrap/compare.py`, which rewrites the data files in "
      "`tests/fixtures/extrap/` (byte-identical on every run; `--check-fixtures` verifies that) and this "
      "document.")
    a("")
    a("## Tools")
    a("")
    a(f"- **Extra-P {info['version']}** from PyPI (`pip install extrap=={info['version']}`; numpy "
      f"{info['numpy']}, scipy {info['scipy']}). The package pulls in PySide6-Essentials for its GUI; "
      "the comparison never imports it, so no display or `QT_QPA_PLATFORM` is needed.")
    a("  Run in-process: `TextFileReader().read_experiment(path)` "
      "(`extrap.fileio.file_reader.text_file_reader`), `ModelGenerator(experiment)` "
      "(`extrap.modelers.model_generator`, modeler \"Default\"), then "
      "`generator.modeler.model(list(experiment.measurements.values()))` — only this call is timed, "
      f"after one warm-up call, mean of {args.extrap_repeat} calls. Predictions are "
      "`model.hypothesis.function.evaluate(p)`.")
    a(f"- **Joulecast**: `target/release/joulecast model FILE --json --targets T1,T2 --repeat "
      f"{args.joulecast_repeat}`; the time is the tool's own `seconds_per_model` (one in-process model "
      "search, mean over the repeats). Neither time includes process start-up or file parsing.")
    if not jc_available:
        a(f"  **Not available in this run**: {jc_reason}. The Joulecast columns are empty.")
    a("")
    a("### Extra-P's default single-parameter modeler")
    a("")
    a(f"From the installed source (`{info['modeler']}`, NAME \"{info['modeler_name']}\"; "
      "`extrap.modelers.single_parameter.all_modelers['Default']`):")
    a("")
    a("- Model form: a constant plus **one** term, c0 + c1·p^i·log2(p)^j (the default modeler never "
      "combines two terms), or a constant alone.")
    pos = [b for b in info["blocks"] if b[0] >= 0 and b[1] >= 0]
    a(f"- Search space: {len(info['blocks'])} (i, j) building blocks: "
      + ", ".join(fmt_term_kind(e, l) for e, l in info["blocks"]) + ".")
    a(f"  All exponents are ≥ 0 (`allow_negative_exponents = {opts.get('allow_negative_exponents')}`; "
      "setting it adds p^(-i) and log2(p)^(-j) blocks). "
      f"Log terms allowed: `allow_log_terms = {opts.get('allow_log_terms')}`."
      if len(pos) == len(info["blocks"]) else
      f"  Negative exponents present: {len(info['blocks']) - len(pos)} blocks.")
    a(f"- Fit: least squares (numpy.linalg.lstsq) on the {info['use_measure'].lower()} of the repetitions "
      f"per point; needs ≥ {info['min_measurement_points']} points (fewer only warns).")
    a(f"- Selection: `use_crossvalidation = {opts.get('use_crossvalidation')}` — each candidate is scored "
      "by leave-one-out cross-validation, the SMAPE of the held-out points "
      f"(`compare_with_RSS = {opts.get('compare_with_RSS')}`, so SMAPE, not RSS); the lowest SMAPE wins, "
      "then the coefficients are refitted on all points. The search starts from the constant model "
      "(mean of the data), scored by its in-sample SMAPE; if that model's RSS is exactly 0 it is returned "
      "at once. A candidate is dropped if its term's coefficient is 0 or its largest contribution "
      f"|term(p)/y(p)| is below `minimum_term_contribution = {opts.get('minimum_term_contribution')}`. "
      f"During cross-validation a constant within {info['cv_constant_epsilon']} of the smallest value "
      "(relative) is set to 0.")
    a("")
    a("## Machine")
    a("")
    a(f"{machine['cores']} shared cores ({machine['cpu']}), {machine['system']}, Python {machine['python']}. "
      "Other work (compiles) may run on the same cores, so times are indicative; "
      f"load average {machine['load']} at the start, {machine_end['load']} at the end.")
    a("")
    a("## Summary")
    a("")
    a("| data set | true class | Extra-P class | Joulecast class | same | "
      f"Extra-P @{TARGET_FACTORS[0]}× | Joulecast @{TARGET_FACTORS[0]}× | "
      f"Extra-P @{TARGET_FACTORS[1]}× | Joulecast @{TARGET_FACTORS[1]}× | "
      "Extra-P / model | Joulecast / model | speed-up |")
    a("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for ds, x, j in rows:
        t1, t2 = ds.targets
        cells = [f"`{ds.name}`", fmt_class(ds.true_class)]
        cells.append(fmt_class(x.model_class) if x.ok else "error")
        cells.append(fmt_class(j.model_class) if j.ok else ("n/a" if not jc_available else "error"))
        cells.append(("yes" if x.model_class == j.model_class else "no") if x.ok and j.ok else "n/a")
        for t in (t1, t2):
            for r in (x, j):
                cells.append(f"{pct_err(r.predictions[t], ds.f(t)):+.1f} %"
                             + (" **neg**" if r.predictions[t] < 0 else "") if r.ok else "n/a")
        # reorder: x@t1, j@t1, x@t2, j@t2 already in that order
        cells.append(fmt_time(x.seconds_per_model) if x.ok else "n/a")
        cells.append(fmt_time(j.seconds_per_model) if j.ok else "n/a")
        cells.append(f"{x.seconds_per_model / j.seconds_per_model:.0f}×" if x.ok and j.ok
                     and j.seconds_per_model > 0 else "n/a")
        a("| " + " | ".join(cells) + " |")
    a("")
    a("Percentages are the prediction's error against the true function at 2× and 16× the largest "
      "measured point; **neg** marks a negative prediction.")
    a("")
    a("### Targets")
    a("")
    labels = {
        "a": "(a) same model class as Extra-P on clean and ±2 % noisy single-term data",
        "b": "(b) on Amdahl-shaped data, positive predictions within "
             f"±{ACCURATE_PCT:g} % of the truth (at 2× and 16×) where Extra-P's defaults predict negative values",
        "c": f"(c) Joulecast at least {SPEEDUP_TARGET:g}× faster per model than Extra-P's modeling step "
             "(on every data set)",
    }
    for k in "abc":
        status, detail = targets[k]
        a(f"- {labels[k]}: **{status}** — {detail}.")
    a("")
    a("## Per data set")
    for ds, x, j in rows:
        a("")
        a(f"### `{ds.name}`")
        a("")
        a(f"`tests/fixtures/extrap/{ds.file_name}`: y = {ds.truth}; p = "
          f"{', '.join(str(p) for p in ds.points)}; {REPETITIONS} repetitions per point"
          + (f", each times a uniform factor in [1 − {ds.noise:g}, 1 + {ds.noise:g}]" if ds.noise else
             ", all equal to the truth") + ".")
        a("")
        t1, t2 = ds.targets
        a("| | Extra-P | Joulecast |")
        a("|---|---|---|")

        def cell(r: Result, fn: Callable[[Result], str]) -> str:
            if r.ok:
                return fn(r)
            return "n/a" if (r is j and not jc_available) else "error (below)"

        a(f"| model | {cell(x, fmt_model)} | {cell(j, fmt_model)} |")
        a(f"| class | {cell(x, lambda r: fmt_class(r.model_class))} | "
          f"{cell(j, lambda r: fmt_class(r.model_class))} |")
        a(f"| score | {cell(x, lambda r: r.score or '')} | {cell(j, lambda r: r.score or '')} |")
        same = ("yes" if x.model_class == j.model_class else "no") if x.ok and j.ok else "n/a"
        a(f"| same class | {same} | |")
        for t in (t1, t2):
            truth = ds.f(t)
            a(f"| p = {_p_arg(t)} (truth {_g(truth)}) | {cell(x, lambda r: fmt_pred(r.predictions[t], truth))} | "
              f"{cell(j, lambda r: fmt_pred(r.predictions[t], truth))} |")
        a(f"| time per model | {cell(x, lambda r: fmt_time(r.seconds_per_model))} | "
          f"{cell(j, lambda r: fmt_time(r.seconds_per_model))} |")
        if x.ok and j.ok and j.seconds_per_model > 0:
            a(f"| speed-up | | {x.seconds_per_model / j.seconds_per_model:.0f}× |")
        for name, r in (("Extra-P", x), ("Joulecast", j)):
            if r.error and (r is x or jc_available):
                a("")
                a(f"Error ({name}): `{' '.join(r.error.split())}`")
            if r.note:
                a("")
                a(f"Note ({name}): {r.note}.")
    a("")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text("\n".join(L))
    return targets


# ---------------------------------------------------------------------------

def main() -> int:
    here = Path(__file__).resolve().parent
    default_repo = here.parent.parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=default_repo)
    ap.add_argument("--joulecast", type=Path, default=None,
                    help="joulecast binary (default: REPO/target/release/joulecast)")
    ap.add_argument("--extrap-repeat", type=int, default=int(os.environ.get("EXTRAP_REPEAT", "20")))
    ap.add_argument("--joulecast-repeat", type=int, default=int(os.environ.get("JOULECAST_REPEAT", "500")))
    ap.add_argument("--out", type=Path, default=None, help="default: REPO/docs/extrap-comparison.md")
    ap.add_argument("--fixtures-only", action="store_true", help="write the data files and stop")
    ap.add_argument("--check-fixtures", action="store_true",
                    help="check that the data files are what this script generates; write nothing")
    ap.add_argument("--strict", action="store_true", help="exit 1 unless targets a, b and c are all met")
    args = ap.parse_args()

    repo = args.repo.resolve()
    fixtures = repo / "tests" / "fixtures" / "extrap"
    binary = args.joulecast or repo / "target" / "release" / "joulecast"
    out = args.out or repo / "docs" / "extrap-comparison.md"

    if args.check_fixtures:
        stale = [ds.file_name for ds in DATASETS
                 if not (fixtures / ds.file_name).exists()
                 or (fixtures / ds.file_name).read_bytes() != render_fixture(ds).encode()]
        if stale:
            print("fixtures differ from the generator: " + ", ".join(stale), file=sys.stderr)
            return 1
        print(f"{len(DATASETS)} fixtures match")
        return 0

    fixtures.mkdir(parents=True, exist_ok=True)
    for ds in DATASETS:
        data = render_fixture(ds).encode()
        path = fixtures / ds.file_name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
    print(f"wrote {len(DATASETS)} data files to {fixtures}")
    if args.fixtures_only:
        return 0

    machine = machine_info()
    info = extrap_info()
    jc_available, jc_reason = joulecast_status(binary)
    if not jc_available:
        print(f"warning: Joulecast side skipped: {jc_reason}", file=sys.stderr)

    rows = []
    for ds in DATASETS:
        path = fixtures / ds.file_name
        x = run_extrap(path, ds.targets, args.extrap_repeat)
        j = (run_joulecast(binary, path, ds.targets, args.joulecast_repeat) if jc_available
             else Result(error="joulecast model unavailable"))
        rows.append((ds, x, j))
        line = f"{ds.name:16s} Extra-P: "
        line += (f"{fmt_model(x)}  @{_p_arg(ds.targets[0])}={_g(x.predictions[ds.targets[0]])} "
                 f"@{_p_arg(ds.targets[1])}={_g(x.predictions[ds.targets[1]])}  {fmt_time(x.seconds_per_model)}"
                 if x.ok else x.error)
        if jc_available:
            line += "\n" + " " * 17 + "Joulecast: " + (
                f"{fmt_model(j)}  @{_p_arg(ds.targets[0])}={_g(j.predictions[ds.targets[0]])} "
                f"@{_p_arg(ds.targets[1])}={_g(j.predictions[ds.targets[1]])}  {fmt_time(j.seconds_per_model)}"
                if j.ok else j.error)
        print(line, flush=True)

    targets = write_report(out, repo, info, machine, machine_info(), rows, jc_available, jc_reason, args)
    print(f"wrote {out}")
    for k, (status, detail) in targets.items():
        print(f"target ({k}): {status} — {detail}")
    if args.strict and any(status != "MET" for status, _ in targets.values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
