"""Schemathesis hooks (SCHEMATHESIS_HOOKS=tests/schemathesis/hooks.py): bring
the generated bodies of the write endpoints within the rules a JSON schema
cannot say, so that the fuzzer reaches the code that stores what it sends,
not only the code that refuses it.

Repaired, and nothing else: times before 1970 or in the future (replaced by
a past time), a run's end (dropped: its start and duration give it), a node
list (dropped: it must name exactly `nodes` nodes), a run with fewer than two
of energy, power and duration or with all three (they must agree: the energy
is dropped), power above 100 kW per node, a job's node count outside 1 to
1,000,000 (4), and every other body's job id (made its own, below). Names,
node counts, measurements, weights and flags are otherwise sent as drawn
(and a run whose node count is invalid is sent as drawn: it is refused
for that anyway).
Without these hooks the fuzzing phase never had a run, a job or an
unreserved start accepted (2026-11-28, seeds 2-4).
"""

import datetime as dt

import schemathesis

# The service's limit (src/domain.rs, MAX_POWER_PER_NODE_W).
MAX_POWER_PER_NODE_W = 100_000.0
# Drawn durations reach 10 years; a start that far back is still after 1970.
MAX_DURATION_S = 315_576_000.0


def _now():
    return dt.datetime.now(dt.timezone.utc)


def _time(value):
    """A drawn date-time as a datetime, or None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        time = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return time if time.tzinfo is not None else None


def _text(time):
    return time.isoformat().replace("+00:00", "Z")


def _past(value, before):
    """The drawn time if it lies between 1970 and `before`, else `before`."""
    time = _time(value)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    if time is None or time < epoch or time > before:
        time = before
    return _text(time)


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _nodes(value):
    """A drawn node count in the service's range as an integer (the
    schema's integers are sometimes drawn as 5823.0), or None."""
    number = _number(value)
    if number is None or number != int(number) or not 1 <= number <= 1_000_000:
        return None
    return int(number)


def _fresh(body):
    """Every other body (or job of a list) gets a job id of its own: drawn
    ids repeat (the schema's example, the stored jobs' ids), and a repeat
    with other values is a conflict (409), which the other half still
    meets."""
    global _drawn
    _drawn += 1
    if _drawn % 2 and isinstance(body.get("job_id"), str):
        body["job_id"] = f"{body['job_id'][:100]}-fz{_drawn}"


_drawn = 0


def _run(body):
    nodes = _nodes(body.get("nodes"))
    if nodes is None:
        return body
    body["nodes"] = nodes
    _fresh(body)
    body["node_list"] = None
    energy, power, duration = (
        _number(body.get(k)) for k in ("energy_j", "avg_power_w", "duration_s")
    )
    limit = MAX_POWER_PER_NODE_W * nodes
    if power is not None and power > limit:
        power = limit
    if duration is None:
        duration = 3600.0
    duration = min(duration, MAX_DURATION_S)
    if power is None:
        # The energy over the duration, held to the limit per node.
        if energy is not None and energy / duration <= limit:
            body["energy_j"] = energy
            body["avg_power_w"] = None
        else:
            body["energy_j"] = None
            body["avg_power_w"] = min(350.0 * nodes, limit)
    else:
        body["avg_power_w"] = power
        body["energy_j"] = None
    body["duration_s"] = duration
    # A start that leaves room for the duration before now; the end follows.
    latest_start = _now() - dt.timedelta(seconds=duration + 60)
    body["started_at"] = _past(body.get("started_at"), latest_start)
    body["ended_at"] = None
    return body


def _job(body):
    body["node_list"] = None
    body["nodes"] = _nodes(body.get("nodes")) or 4
    _fresh(body)
    body["started_at"] = _past(body.get("started_at"), _now() - dt.timedelta(seconds=1))
    return body


def _unreserved(body):
    jobs = body.get("jobs")
    if isinstance(jobs, list):
        before = _now() - dt.timedelta(seconds=1)
        for job in jobs:
            if isinstance(job, dict):
                job["started_at"] = _past(job.get("started_at"), before)
                _fresh(job)
    return body


REPAIRS = {
    "/v1/runs": _run,
    "/v1/jobs": _job,
    "/v1/jobs/unreserved": _unreserved,
}


@schemathesis.hook
def map_body(ctx, body):
    operation = ctx.operation
    if operation is None or operation.method.upper() != "POST" or not isinstance(body, dict):
        return body
    repair = REPAIRS.get(operation.path)
    return repair(body) if repair else body
