"""Statistics and plausibility flags of the host `bench` (the service bench, metric
`service-requests`): pure functions over raw per-window samples, so they can be tested on
synthetic numbers.

A window sample of one variant (worker.serve, one process per window) is
    {requests, loaded_s, latency_us: [us], loaded_steps, tokens, alone_steps, alone_s,
     pairs_in_window, pair_us: [us]}
(requests done in the measured part of the window and their latencies, arrival to done; the
scheduler's steps in it and the decode tokens they served; its steps in a window alone; the
transfer steps of the contract's workload done inside the window and the duration of each).
"""
import math

__all__ = ["percentile", "variant_summary", "summarize", "bench_flags", "history_check"]


def percentile(xs, q):
    """Linear-interpolation percentile (numpy's default) of a non-empty sequence."""
    s = sorted(float(x) for x in xs)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _median(xs):
    return percentile(xs, 50)


def _spread(xs):
    """Relative half-spread (p90 - p10) / (2 median): 0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    m = _median(xs)
    return (percentile(xs, 90) - percentile(xs, 10)) / (2 * m) if m > 0 else math.inf


def rps(sample):
    return sample["requests"] / sample["loaded_s"]


def variant_summary(windows, bytes_per_call, calls_per_step=2):
    """One variant over its measured windows: requests/s (median over windows), request latency
    (p50, p99 over every request of every window), the scheduler's steps/s alone and under the
    service and its gap (1 - loaded/alone), and the transfers' bandwidth (bytes read + written by
    `calls_per_step` calls of `bytes_per_call` per transfer step, per second of the window)."""
    per = [rps(w) for w in windows]
    lat = [x for w in windows for x in w["latency_us"]]
    alone = [w["alone_steps"] / w["alone_s"] for w in windows]
    loaded = [w["loaded_steps"] / w["loaded_s"] for w in windows]
    gaps = [1.0 - l / a for a, l in zip(alone, loaded)]
    gbps = [w["pairs_in_window"] * calls_per_step * bytes_per_call / w["loaded_s"] / 1e9 for w in windows]
    pair_us = [x for w in windows for x in w["pair_us"]]
    return {
        "requests_per_s": _median(per), "requests_per_s_all": per, "requests_spread": _spread(per),
        "requests": sum(w["requests"] for w in windows),
        "p50_us": percentile(lat, 50) if lat else math.nan, "p99_us": percentile(lat, 99) if lat else math.nan,
        "tokens_per_s": _median([w["tokens"] / w["loaded_s"] for w in windows]),
        "steps_per_s_alone": _median(alone), "steps_per_s_loaded": _median(loaded),
        "steps_per_s_alone_all": alone, "steps_per_s_loaded_all": loaded,
        "gap": _median(gaps), "gaps": gaps,
        "transfer_gbps": _median(gbps),
        "median_us": _median(pair_us) if pair_us else None,
        "p10_us": percentile(pair_us, 10) if pair_us else None,
        "p90_us": percentile(pair_us, 90) if pair_us else None,
        "samples": len(pair_us),
    }


def summarize(rounds, bytes_per_call, peak_gbps, threads, cpus=None, calls_per_step=2, step="service step"):
    """Service-level comparison of baseline and candidate over measured rounds.

    rounds: [{"baseline": window, "candidate": window}] (one dict per measured round, each window
    from a process of its own). Returns {results, speedup, noise_floor, significant, latency_ratio,
    flags}:
      speedup       median over rounds of candidate / baseline requests/s (the service's gain);
      noise_floor   the larger of each variant's relative half-spread of requests/s over the rounds
                    and that of the scheduler alone (both variants' windows: the machine's own noise);
      significant   |speedup - 1| > noise_floor;
      latency_ratio candidate / baseline p99 request latency.
    cpus: the CPUs the worker may use (bounds how fast one step of calls can move its bytes).
    calls_per_step, step: calls in one transfer step of the workload, and what a step is in words.
    """
    names = ("baseline", "candidate")
    results = {n: variant_summary([r[n] for r in rounds], bytes_per_call, calls_per_step) for n in names}
    ratios = [rps(r["candidate"]) / rps(r["baseline"]) for r in rounds]
    speedup = _median(ratios)
    alone = results["baseline"]["steps_per_s_alone_all"] + results["candidate"]["steps_per_s_alone_all"]
    noise = max(results["baseline"]["requests_spread"], results["candidate"]["requests_spread"], _spread(alone))
    b99, c99 = results["baseline"]["p99_us"], results["candidate"]["p99_us"]
    latency_ratio = c99 / b99 if b99 and b99 > 0 else math.nan
    flags = bench_flags(results, noise, peak_gbps, threads, bytes_per_call=bytes_per_call, cpus=cpus,
                        calls_per_step=calls_per_step, step=step)
    return {"results": results, "speedup": speedup, "speedups": ratios, "noise_floor": noise,
            "significant": abs(speedup - 1.0) > noise, "latency_ratio": latency_ratio, "flags": flags}


def bench_flags(results, noise_floor, peak_gbps, threads, bytes_per_call=None, cpus=None, calls_per_step=2,
                step="service step"):
    """Results that cannot be true, each as a sentence."""
    flags = []
    for n, r in results.items():
        # one step moves calls_per_step * bytes_per_call; even spread over every CPU the worker
        # has, it cannot go much faster than the measured copy on each (a call that returns before
        # its copy is done would)
        if bytes_per_call and cpus and peak_gbps > 0 and r.get("median_us"):
            pair_gbps = calls_per_step * bytes_per_call / (r["median_us"] * 1e-6) / 1e9
            limit = 1.5 * peak_gbps * cpus
            if pair_gbps > limit:
                flags.append(f"{n}: one {step} moves {pair_gbps:.1f} GB/s, beyond 1.5 x the measured "
                             f"copy peak x {cpus} CPU(s) ({limit:.1f} GB/s): the calls return before the bytes "
                             "can have moved")
        if r["gap"] < -noise_floor:
            flags.append(f"{n}: gap {r['gap']:.1%} is below -noise floor ({noise_floor:.1%}): the scheduler ran "
                         "faster with transfers than alone: the measurement is wrong")
        limit = 1.5 * peak_gbps * threads
        if peak_gbps > 0 and r["transfer_gbps"] > limit:
            flags.append(f"{n}: {r['transfer_gbps']:.1f} GB/s of transfers is beyond 1.5 x the measured copy "
                         f"peak x {threads} thread(s) ({limit:.1f} GB/s): the kernel cannot have moved the bytes")
    return flags


def history_check(value, history, noise_floor, min_runs=3, slack=0.25):
    """Whether the baseline's requests/s in this run is far below its own history (the same
    baseline build on the same machine): None when it is not (or there are fewer than `min_runs`
    earlier runs), else a sentence. Far means below the history's lowest figure by more than the
    larger of `slack` and 3 noise floors: a baseline measured far slower than it always was says the
    comparison ran under conditions it cannot be trusted in (a loaded machine, or something that
    reached the baseline's measurement), and a slow baseline is what flatters a candidate. One
    side only: a baseline faster than ever costs the candidate, never buys it a verdict."""
    hist = [float(h) for h in history if isinstance(h, (int, float)) and math.isfinite(h) and h > 0]
    if len(hist) < min_runs or not (isinstance(value, (int, float)) and math.isfinite(value)):
        return None
    lo, hi = min(hist), max(hist)
    widen = min(max(slack, 3 * noise_floor), 0.9)
    if value < lo * (1 - widen):
        return (f"baseline: {value:.1f} requests/s, far below its history on this machine ({lo:.1f}-{hi:.1f} over "
                f"{len(hist)} runs, less {widen:.0%}): the comparison is not trusted")
    return None
