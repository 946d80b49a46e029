"""The one error that ends a job rather than a process."""


class CannotGoOn(Exception):
    """A role cannot go on, and a restart would end the same way (its learning has
    diverged beyond repair): the role exits 2, so the launcher restarts nothing and
    ends the job, non-zero, with this message as its cause."""
