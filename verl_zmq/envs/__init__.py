"""Environments: what the job's env is (`make`: spec, creation, vector envs,
reward and time-limit wrappers) and the guard that keeps a hanging or crashing
env from taking its sampler down (`guard`)."""
