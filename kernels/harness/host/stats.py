"""Statistics and plausibility flags of the host `bench` (scheduler throughput): pure functions
over raw per-round samples, so they can be tested on synthetic numbers.

A round sample of one variant is
    {alone_steps, alone_s, loaded_steps, loaded_s, pairs_in_window, pair_us: [us]}
(scheduler steps in a window alone and in a window with the transfer threads running; the
service steps of the host contract's workload completed inside the loaded window and the
duration of each; the keys say "pairs", as one step was a pair of calls in the first workload).
"""
import math

__all__ = ["percentile", "variant_summary", "summarize", "bench_flags"]


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


def rates(sample):
    """(scheduler steps/s alone, steps/s loaded) of one round sample."""
    return sample["alone_steps"] / sample["alone_s"], sample["loaded_steps"] / sample["loaded_s"]


def variant_summary(rounds, bytes_per_call, calls_per_step=2):
    """Summary of one variant over its round samples (list of dicts as in the module doc).

    gap = 1 - loaded/alone per round (the scheduler throughput lost to the transfers);
    transfer_gbps = bytes moved (read + written: `calls_per_step` calls per step, `bytes_per_call`
    each) per second of the loaded window; median_us etc. over every step timed inside a loaded window.
    """
    alone, loaded, gaps, gbps, pair_us = [], [], [], [], []
    for s in rounds:
        a, l = rates(s)
        alone.append(a)
        loaded.append(l)
        gaps.append(1.0 - l / a)
        gbps.append(s["pairs_in_window"] * calls_per_step * bytes_per_call / s["loaded_s"] / 1e9)
        pair_us += list(s["pair_us"])
    return {
        "gap": _median(gaps), "gap_p10": percentile(gaps, 10), "gap_p90": percentile(gaps, 90), "gaps": gaps,
        "steps_per_s_alone": _median(alone), "steps_per_s_loaded": _median(loaded),
        "steps_per_s_alone_all": alone, "steps_per_s_loaded_all": loaded,
        "transfer_gbps": _median(gbps),
        "median_us": _median(pair_us) if pair_us else None,
        "p10_us": percentile(pair_us, 10) if pair_us else None,
        "p90_us": percentile(pair_us, 90) if pair_us else None,
        "samples": len(pair_us),
    }


def summarize(rounds, bytes_per_call, peak_gbps, threads, cpus=None, calls_per_step=2, step="service step"):
    """Service-level comparison of baseline and candidate over measured rounds.

    rounds: [{"baseline": sample, "candidate": sample}] (one dict per measured round).
    Returns {results, speedup, noise_floor, significant, improvement, flags}:
      speedup      median over rounds of candidate / baseline loaded steps/s (the service gain);
      noise_floor  the larger of each variant's (gap_p90 - gap_p10) / 2 and the relative
                   half-spread of the alone windows ((p90 - p10) / (2 median), both variants);
      improvement  baseline gap - candidate gap; significant when |improvement| > noise_floor.
    cpus: the CPUs the worker may use (bounds how fast one step of calls can move its bytes).
    calls_per_step, step: calls in one step of the service workload, and what a step is in words.
    """
    names = ("baseline", "candidate")
    results = {n: variant_summary([r[n] for r in rounds], bytes_per_call, calls_per_step) for n in names}
    ratios = [rates(r["candidate"])[1] / rates(r["baseline"])[1] for r in rounds]
    speedup = _median(ratios)
    alone = results["baseline"]["steps_per_s_alone_all"] + results["candidate"]["steps_per_s_alone_all"]
    alone_spread = (percentile(alone, 90) - percentile(alone, 10)) / (2 * _median(alone))
    gap_spread = max((results[n]["gap_p90"] - results[n]["gap_p10"]) / 2 for n in names)
    noise = max(gap_spread, alone_spread)
    improvement = results["baseline"]["gap"] - results["candidate"]["gap"]
    flags = bench_flags(results, speedup, noise, peak_gbps, threads, bytes_per_call=bytes_per_call, cpus=cpus,
                        calls_per_step=calls_per_step, step=step)
    return {"results": results, "speedup": speedup, "speedups": ratios, "noise_floor": noise,
            "improvement": improvement, "significant": abs(improvement) > noise, "flags": flags}


def bench_flags(results, speedup, noise_floor, peak_gbps, threads, bytes_per_call=None, cpus=None, calls_per_step=2,
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
    # removing the whole gap recovers at most 1/(1 - gap). The baseline's gap is known to within its
    # own spread over the rounds, which 1/(1 - gap) magnifies by 1/(1 - gap)^2 (4x at a 50% gap), so
    # the bound takes the largest gap within that spread, then the noise of the throughputs
    b = results["baseline"]
    spread = max((b.get("gap_p90", b["gap"]) - b.get("gap_p10", b["gap"])) / 2, 0.0)
    bgap = b["gap"] + spread
    bound = math.inf if bgap >= 1 else 1.0 / (1.0 - bgap) * (1.0 + noise_floor)
    if speedup > bound:
        flags.append(f"speedup {speedup:.3f}x exceeds 1/(1 - (baseline gap + its spread)) x (1 + noise) = {bound:.3f}x: "
                     "the candidate recovered more scheduler throughput than the transfers cost")
    return flags
