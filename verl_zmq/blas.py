"""One BLAS thread per role process, unless the environment says otherwise.

numpy's BLAS starts a thread per core for any matrix product past a small size.
A role is one of several processes sharing the cores (several forked from one
server), so those threads contend: a sampler stepping an LSTM over 32 envs in
numpy ran 70 times slower with them. Roles size their own parallelism (torch's
threads, `resources.*.cpu`); the role entry points (`verl`, the fork server)
import this module before numpy.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
