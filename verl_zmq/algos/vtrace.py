"""V-trace (Espeholt et al. 2018, "IMPALA"): off-policy targets and advantages
for experience that an older policy collected. Numpy, over [T, E] columns in
NEXT_STEP autoreset layout, like `ppo.compute_gae`.

With rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)) and c_t = lam *
min(c_bar, pi / mu), the targets follow the paper's recursion

    v_s - V(x_s) = delta_s + gamma c_s (v_{s+1} - V(x_{s+1})),
    delta_s = rho_s (r_s + gamma V(x_{s+1}) - V(x_s)),

and the policy-gradient advantage is

    A_s = rho_s (r_s + gamma ((1 - lam) V(x_{s+1}) + lam v_{s+1}) - V(x_s)),

the paper's `rho_s (r_s + gamma v_{s+1} - V(x_s))` at lam = 1. On-policy
(pi = mu, bars >= 1) the targets are GAE(lam)'s returns and A its advantages,
so PPO with V-trace on fresh data is PPO. Episode ends as in GAE: a terminated
step does not bootstrap, a truncated one bootstraps from V(final observation)
(the value of the invalid step after it), and an invalid step cuts the
recursion with zero advantage.
"""

from __future__ import annotations

import numpy as np


def vtrace(reward: np.ndarray, value: np.ndarray, terminated: np.ndarray,
           truncated: np.ndarray, valid: np.ndarray, bootstrap_value: np.ndarray,
           log_rho: np.ndarray, gamma: float, lam: float = 1.0, rho_bar: float = 1.0,
           c_bar: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, value targets), both [T, E] float32. `value` are the learner's
    V(x_t) now, `log_rho` = log pi(a_t|x_t) - log mu(a_t|x_t)."""
    T = reward.shape[0]
    ratio = np.exp(np.minimum(log_rho, 50.0))  # no overflow; the bars clip it anyway
    rho = np.minimum(rho_bar, ratio).astype(np.float32)
    c = (lam * np.minimum(c_bar, ratio)).astype(np.float32)
    vs = np.zeros_like(reward, dtype=np.float32)
    adv = np.zeros_like(reward, dtype=np.float32)
    acc = np.zeros(reward.shape[1], np.float32)  # v_{t+1} - V(x_{t+1})
    for t in reversed(range(T)):
        last = t + 1 == T
        next_value = bootstrap_value if last else value[t + 1]
        next_vs = bootstrap_value if last else vs[t + 1]
        nonterminal = 1.0 - terminated[t].astype(np.float32)
        cont = nonterminal * (1.0 - truncated[t].astype(np.float32))
        delta = rho[t] * (reward[t] + gamma * next_value * nonterminal - value[t])
        acc = np.where(valid[t], delta + gamma * c[t] * cont * acc, 0.0).astype(np.float32)
        vs[t] = value[t] + acc
        target = (1.0 - lam) * next_value + lam * next_vs
        a = rho[t] * (reward[t] + gamma * nonterminal * target - value[t])
        adv[t] = np.where(valid[t], a, 0.0)
    return adv, vs
