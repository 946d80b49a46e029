"""A reward file in verl's custom_reward_function shape: GSM8K's strict rule,
the last number after "#### " against the ground truth (1, else 0).
configs/gsm8k_hf_grpo.toml names it: `reward = "configs/gsm8k_reward.py"`."""

import re

_STRICT = re.compile(r"#### (-?[0-9.,]+)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    found = _STRICT.findall(solution_str[-300:])
    if not found:
        return 0.0
    answer = found[-1].replace(",", "").replace("$", "")
    return 1.0 if answer == str(ground_truth).replace(",", "").strip() else 0.0
