"""Unroll a fragment (T steps x E envs, NEXT_STEP autoreset layout) into
transitions with n-step returns, for off-policy replay.

For a valid step t the transition holds obs_t, a_t, R = sum_{k<m} gamma^k r_{t+k}
over the next m <= n valid steps of the same episode, the observation after them
and the discount to apply to its bootstrap value: gamma^m, or 0 when the episode
terminated within them. A truncated episode bootstraps from its final
observation (which NEXT_STEP layout records as the obs of the following, invalid
step); a window cut by the fragment's end bootstraps from `bootstrap_obs`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..batch import bootstrap

Windows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def windows(a: Mapping[str, np.ndarray], gamma: float, n: int) -> Windows:
    """For every valid (t, e): the n-step window's last step k, return R and discount.
    Returns arrays (t, e, k, R, discount), e-major."""
    rew = a["reward"]
    term, trunc, valid = a["terminated"], a["truncated"], a["valid"]
    T, E = rew.shape
    out_t, out_e, ret, disc, nxt_t = [], [], [], [], []
    for e in range(E):
        for t in range(T):
            if not valid[t, e]:
                continue
            g, R, k, d = 1.0, 0.0, t, 0.0
            while True:
                R += g * float(rew[k, e])
                g *= gamma
                if term[k, e]:
                    d = 0.0
                    break
                if trunc[k, e] or k - t + 1 >= n or k + 1 >= T or not valid[k + 1, e]:
                    d = g
                    break
                k += 1
            out_t.append(t)
            out_e.append(e)
            ret.append(R)
            disc.append(d)
            nxt_t.append(k)
    ti, ei, ki = (np.array(x, np.int64) for x in (out_t, out_e, nxt_t))
    return ti, ei, ki, np.array(ret, np.float32), np.array(disc, np.float32)


def after(a: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """Column `name` shifted by one step: [t] holds the value after step t (the last
    row from `bootstrap_<name>`)."""
    return np.concatenate([a[name][1:], a[bootstrap(name)][None]], axis=0)


def unroll(a: Mapping[str, np.ndarray], gamma: float, n: int) -> dict[str, np.ndarray]:
    """Transitions from one fragment's arrays (see module doc); columns with a leading N."""
    ti, ei, ki, ret, disc = windows(a, gamma, n)
    out = {"action": a["action"][ti, ei], "reward": ret, "discount": disc}
    # `obs`, or a structured observation's `obs.<key>` columns, and their `next_` twins
    for k in [k for k in a if k == "obs" or k.startswith("obs.")]:
        out[k] = a[k][ti, ei]
        out[f"next_{k}"] = after(a, k)[ki, ei]
    if "priority" in a:  # actor-side initial priorities (Ape-X), one per step
        out["priority"] = a["priority"][ti, ei].astype(np.float32)
    return out
