"""What the sequence family registers into the core (`plugins.py`): prompt files
as a response source (`verl/Prompts-v0`, `envs/families.SOURCES`), the toy
sequence tasks as grouped envs (`envs/families.GROUPED`), the transformer policy
kind and the Hugging Face kind's own algorithm (`policy/kinds.py`). Torch-free:
what imports torch does so only when called."""

from __future__ import annotations

from typing import Any

from ..config import Environment
from ..envs.families import GROUPED, SOURCES, Grouped
from ..envs.spec import EnvSpec
from ..policy.kinds import ALGORITHMS, NETWORKS
from .prompts import PROMPTS_ID, prompt_settings


class PromptFiles:
    """verl-format prompt files answered by a Hugging Face model (`seq/prompts.py`)."""

    def spec(self, cfg: Environment) -> EnvSpec:
        s = prompt_settings(cfg.kwargs)  # ValueError names the setting
        # token ids: the learner checks them against its vocabulary
        return EnvSpec(obs_shape=(0,), discrete=True, n_actions=2**31 - 1, action_shape=(),
                       prompt_len=s.max_prompt_length, observed=bool(s.tool_paths))

    def fit_problem(self, job: Any) -> str:
        S, pol = job.sampling, job.algorithm.policy
        s = prompt_settings(job.environment.kwargs)
        if pol.kind != "hf":
            return ("algorithm.policy.kind: prompt files (verl/Prompts-v0) are answered by a "
                    "Hugging Face model: kind = \"hf\"")
        if S.fragment_length != s.max_response_length or S.num_envs_per_worker % s.group_size:
            return (f"sampling: a prompt job's fragment is one column per response: "
                    f"fragment_length {S.fragment_length} must equal "
                    f"environment.kwargs.max_response_length {s.max_response_length}, and "
                    f"num_envs_per_worker {S.num_envs_per_worker} (responses per fragment) "
                    f"be a multiple of environment.kwargs.group_size {s.group_size}")
        if pol.lora_rank < 0:
            return "algorithm.policy.lora_rank: must be 0 (off) or more"
        return ""

    def file_problems(self, job: Any) -> list[str]:
        """The job's files read whole (a bad row named) and its scorer imported."""
        from .data import DataError, read_prompts
        from .scoring import load_compute_score

        s = prompt_settings(job.environment.kwargs)
        problems = []
        for key in ("train_files", "val_files"):
            path = getattr(s, key)
            if path:
                try:
                    read_prompts(path, s.prompt_key, s.reward_fn_key)
                except DataError as e:
                    problems.append(f"environment.kwargs.{key}: {e}")
        try:
            load_compute_score(s.rule, "environment.kwargs.reward", s.reward_name)
        except ValueError as e:
            problems.append(str(e))
        if problems:
            return problems
        from .hf import load_tokenizer, model_positions
        from .prompts import length_problems

        pol = job.algorithm.policy
        try:
            tok = load_tokenizer(pol)
        except (ValueError, OSError) as e:
            return [f"algorithm.policy.tokenizer: {e}"]
        return length_problems(s, tok, model_positions(pol))

    def budget(self, job: Any) -> int | None:
        s = prompt_settings(job.environment.kwargs)
        if not s.total_epochs:
            return None
        from .hf import load_tokenizer
        from .prompts import epochs_budget

        return epochs_budget(s, load_tokenizer(job.algorithm.policy))

    def collector(self, job: Any, algo: Any, worker: int, workers: int) -> Any:
        from .generate import GenerateCollector

        return GenerateCollector(job, algo, worker, workers)


def _task(default: str, kwargs: dict[str, Any]) -> Any:
    from .tasks import make_task

    return make_task(kwargs.get("task", default))


def _token_policy(spec: EnvSpec, policy: Any) -> Any:
    from .model import TokenActorCritic

    return TokenActorCritic(spec, policy)


def _hf_algorithm(*args: Any, **kw: Any) -> Any:
    from .hf_grpo import HFGRPO

    return HFGRPO(*args, **kw)


def register(ids: dict[str, str]) -> None:
    """Put the family's parts in the core's registries."""
    SOURCES[PROMPTS_ID] = PromptFiles()
    for env_id, task in ids.items():
        GROUPED[env_id] = Grouped(
            round_steps=lambda kw, t=task: _task(t, kw).max_response + 1,
            horizon=lambda kw, t=task: _task(t, kw).max_response)
    NETWORKS["transformer"] = _token_policy
    ALGORITHMS["hf"] = _hf_algorithm
