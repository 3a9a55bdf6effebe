"""`@triton.autotune` where nothing can time its configs, for the check's workers (worker.py) and
the compile (aot.py): part of the sandboxed runtime (`kidiom_rt`).

Under Triton's interpreter there is no device to bench configs on (Triton fails with "0 active
drivers"), and a check must judge every config the GPU may pick, not the fastest alone: a call
runs the config the harness chooses (`choose`), and every autotuned launch is recorded
(`LAUNCHES`), from which the harness learns the configs and asks for each (check.py,
`_autotune_cases`). `@triton.heuristics` needs nothing: it computes its values from the arguments.
"""
CHOICE = [None]     # the config a call runs (the request's `autotune`); None: the default
LAUNCHES = []       # this call's autotuned launches: {kernel, config, of, ran, described}
MAX_LAUNCHES = 64   # recorded per call


def choose(value):
    """The config index the next calls run (an int), or None for the default."""
    CHOICE[0] = int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def install(interpreted):
    """Route every `Autotuner.run` of this process through the choice (idempotent). A call with a
    choice i runs config i (modulo the kernel's count) of every autotuned kernel it launches, with
    the config's pre_hook, as Triton runs the config it picked; without one it runs config 0 under
    the interpreter and Triton's own autotuning on a GPU. A config the kernel's `prune_configs_by`
    removes for these arguments never runs on them: its first remaining config does, and the
    launch says so (`ran` false)."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return
    if getattr(Autotuner.run, "_kidiom_autotune", False):
        return
    orig = Autotuner.run

    def run(self, *args, **kwargs):
        name = getattr(getattr(self, "base_fn", None), "__name__", None) or "kernel"
        choice = CHOICE[0]
        if choice is None and not interpreted:
            if len(LAUNCHES) < MAX_LAUNCHES:
                LAUNCHES.append({"kernel": name, "config": None, "of": len(self.configs), "ran": True,
                                 "described": "chosen by Triton's autotuning"})
            return orig(self, *args, **kwargs)
        i = int(choice or 0) % len(self.configs)
        self.nargs = dict(zip(self.arg_names, args))
        try:
            pruned = self.prune_configs(kwargs) if len(self.configs) > 1 else list(self.configs)
            config = self.configs[i]
            ran = any(c is config for c in pruned)
            if not ran:
                config = pruned[0]
            if len(LAUNCHES) < MAX_LAUNCHES:
                LAUNCHES.append({"kernel": name, "config": i, "of": len(self.configs), "ran": ran,
                                 "described": describe_config(self.configs[i])})
            self.best_config = config
            if config.pre_hook is not None:
                config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
            return self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.nargs = None

    run.__wrapped__ = orig
    run._kidiom_autotune = True
    Autotuner.run = run


def describe_config(config):
    """`BLOCK=64, num_warps=4, num_stages=2`: a config's meta-parameters and launch options."""
    parts = [f"{k}={v}" for k, v in sorted(getattr(config, "kwargs", {}).items())]
    for opt in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        v = getattr(config, opt, None)
        if v is not None and not (opt == "num_ctas" and v == 1):
            parts.append(f"{opt}={v}")
    return ", ".join(parts)[:300]
