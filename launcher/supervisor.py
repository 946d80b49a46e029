"""Supervision: start every role, restart what dies by the job's policy, show
progress, stop everything at the end (SIGTERM, a grace period, SIGKILL), and
write summary.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verl_zmq.config import Job
from verl_zmq.config.roles import role_traits
from verl_zmq.ops.runview import RunView
from verl_zmq.ops.tracking import Tracking

from . import early
from .affinity import cpu_specs
from .fate import Fate, restart_delay
from .forking import ForkedProcess, ForkServer, from_zygote, own_cpus, zygote_modules
from .hooks import Hooks
from .lost import SSH_LOST, LostHosts, node_failed
from .memory import reaping_through_pidfds, trim_loop
from .plan import Placement, Plan
from .relay import relay_events
from .remote import RoleProcess, full_argv, last_lines, make_bundle
from .report import CHECKPOINT_EVENTS, Progress, Terminal, best_checkpoints, trainer_ids

# 0 done; 1 a role failed for good; 2 bad input; 3 done, but checkpoints it was
# asked for were skipped or failed (a full disk); 130 interrupted
EXIT_DONE, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_CHECKPOINTS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
SPARE_AFTER_S = 5.0  # a role's warm spare starts once the role has been up this long
# ... and, for a trainer, once it has updated: a spare importing torch beside a learner
# that is still importing its own takes cores from the job's first update; one that
# never updates (a data-parallel rank waiting for its group) gets its spare after this
SPARE_FALLBACK_S = 30.0
SPARES_LOST_MAX = 3  # spares of one member that died unused before we stop making them


class Supervisor:
    """Runs a plan's roles until the job ends, fails, or is interrupted."""

    def __init__(self, job: Job, plan: Plan, run_dir: Path, job_text: str,
                 keys: dict[str, str] | None, log: Any, terminal: Terminal | None = None,
                 callbacks: Sequence[Any] = ()):
        self.job = job
        self.callbacks = list(callbacks)
        self.plan = plan
        self.run_dir = run_dir
        self.log = log
        self.term = terminal or Terminal(sys.stderr)
        self.logs = run_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        bundle = make_bundle(job_text, keys)
        cpus = cpu_specs(job, plan)  # learners' own cores; the rest for everyone else
        self.procs = [
            RoleProcess(p, full_argv(job, plan, p, run_dir), bundle,
                        self.logs / f"{p.member_id}.jsonl", self.logs / f"{p.member_id}.err",
                        env={**self._env(p),
                             **({"VERL_CPUS": cpus[p.member_id]} if p.member_id in cpus else {})},
                        spare_argv=full_argv(job, plan, p, run_dir, standby=True)
                        if p.role in job.launch.standby else None,
                        relay=not plan.host_of(p).is_local,
                        log_events=relay_events(log))
            for p in plan.placements
        ]
        self.view = RunView(run_dir, keep_train=False)  # as long as the job: bounded
        self.view.poll()  # a resumed run's past: its evaluations count in the summary
        # DAPO's peers together: their budget is the group's with share_batch, else each's
        T, peers = job.training, max(1, job.launch.peers) if job.traits.decentralised else 1
        self.progress = Progress(self.view, T.total_timesteps * (
            1 if job.gossip.share_batch else peers), trainer_ids(plan.placements))
        self.stopping = False
        self.interrupts = 0
        self.fate = Fate(job, plan.placements)
        self.failed = self.fate.failed  # one list
        self.errors: dict[str, str] = {}  # member -> what ended its last incarnation
        self.stopped_by = ""  # a callback that ended the job early, and why
        self.hosts = LostHosts(job, plan, run_dir, log, self.term, self.fate, self.fail_job,
                               lambda: self.stopping)
        self.outcome = EXIT_DONE
        self.wake = asyncio.Event()
        self.t0 = time.time()
        # tb/, MLflow and W&B, as logging.backends names them, from the logs
        self.tracking = Tracking(job, run_dir, job_text, self.view, log)
        self.hooks = Hooks(callbacks, self.view, self.stop_early)  # the Python API's

    def _env(self, p: Placement) -> dict[str, str]:
        env = {"PYTHONUNBUFFERED": "1"}
        if role_traits(p.role).trains:  # its own devices (none: no GPU at all)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in p.gpus)
        return env

    def on_signal(self, sig: int) -> None:
        """The stop comes first and nothing here can raise: a console or log on a
        full disk must not keep the launcher from stopping."""
        self.interrupts += 1
        self.outcome = EXIT_INTERRUPTED
        self.stopping = True
        self.wake.set()
        if self.interrupts > 1:
            for rp in self.procs:
                rp.signal(signal.SIGKILL)
            return
        self.term.say(f"{signal.Signals(sig).name}: stopping every role (again to stop at once)")
        self.log.info("launcher_interrupted", signal=signal.Signals(sig).name)

    async def _watch(self, rp: RoleProcess) -> None:
        """Wait for one process; restart it by policy or decide the job's fate."""
        L = self.job.launch
        while True:
            rc = await rp.process.wait()
            await rp.drained()
            rp.exit_code = rc
            if self.stopping:
                return
            p = rp.placement
            host = self.plan.host_of(p)
            if node_failed(rp, host, rc):  # however it exited, it did not finish
                if await self.hosts.move_off(rp, host):
                    continue
                return
            if rc == 0:
                self.log.info("role_exited", member=p.member_id, exit_code=0)
                if role_traits(p.role).ends_job:
                    self.wake.set()  # the job is finishing
                return
            err = rp.last_error()
            self.errors[p.member_id] = err
            self.log.warning("role_died", member=p.member_id, member_role=p.role, exit_code=rc,
                             restarts=rp.restarts, last_error=err)
            if rc == SSH_LOST and host.by_ssh:  # the host went, not the role
                if await self.hosts.host_lost(rp, host):
                    continue  # it answers again: the role was restarted there
                return
            # a trainer that logged its first update since this start had taken over
            worked = self.view.updated_at.get(p.member_id, 0.0) >= rp.started_wall > 0
            delay = restart_delay(L, rp, rc, time.monotonic(), worked)
            if delay is not None:
                await asyncio.sleep(delay)
                if self.stopping:
                    return
                warm = await rp.start()
                self.log.info("role_restarted", member=p.member_id, member_role=p.role,
                              restarts=rp.restarts, after_s=delay, pid=rp.process.pid, warm=warm,
                              forked=isinstance(rp.proc, ForkedProcess))
                continue
            self.failed.append(p.member_id)
            self.log.error("role_failed", member=p.member_id, member_role=p.role, exit_code=rc,
                           last_error=err)
            if self.fate.fails_job(p) or rc == 2:
                self.fail_job()
            return

    def fail_job(self) -> None:
        """The job cannot go on: stop every role, exit as failed."""
        self.outcome = EXIT_FAILED
        self.stopping = True
        self.wake.set()

    async def _spares_loop(self) -> None:
        """Keep a warm spare beside every role of `launch.standby` once the role has
        been up SPARE_AFTER_S and, for a trainer, has updated (its own start comes
        first); give up on a member's spares after SPARES_LOST_MAX died unused."""
        while not self.stopping:
            await asyncio.sleep(1.0)
            for rp in self.procs:
                if rp.spare_argv is None or rp.spares_lost >= SPARES_LOST_MAX:
                    continue
                # none once the job is ending: _stop_all has dropped the spares it knew
                if rp.running and self._spare_due(rp) and not (self.stopping or self._done()):
                    if await rp.keep_spare():
                        self.log.info("spare_started", member=rp.placement.member_id,
                                      pid=rp.spare.pid if rp.spare is not None else 0)
                    if rp.spares_lost >= SPARES_LOST_MAX:
                        self.log.warning("spares_given_up", member=rp.placement.member_id,
                                         lost=rp.spares_lost, last_error=last_lines(
                                             rp.err_path, 3))

    def _spare_due(self, rp: RoleProcess) -> bool:
        up = time.monotonic() - rp.started_at
        if not role_traits(rp.placement.role).trains:
            return up >= SPARE_AFTER_S
        if rp.forks is not None and rp.forks.alive and rp.forks.torch:
            return up >= SPARE_AFTER_S  # a fork of the zygote: nothing to import
        trained = rp.placement.member_id in self.view.trained
        return (up >= SPARE_AFTER_S and trained) or up >= SPARE_FALLBACK_S

    def _judge_the_down(self) -> None:
        """A job whose training ended while roles it needs were down (crashed, their
        restart pending: an evaluator that never evaluated) did not do what it was
        asked: they count as failed for good, and the job as failed if it needs them."""
        down = [rp.placement for rp in self.procs if rp.exit_code not in (None, 0)
                and rp.placement.member_id not in self.failed]
        self.failed += [p.member_id for p in down]
        if any(self.fate.fails_job(p) for p in down):
            self.outcome = EXIT_FAILED
            return
        for p in down:
            self.failed.remove(p.member_id)

    def _done(self) -> bool:
        return self.fate.job_ended({rp.placement.member_id: rp.exit_code for rp in self.procs})

    async def _progress_loop(self) -> None:
        every = 0.5 if self.term.tty else 10.0
        # a plain log (not a terminal) gets its first line early: what the job waits for
        next_print = time.monotonic() + min(every, 2.0)
        while True:
            await asyncio.sleep(0.5)
            new = self.view.poll()
            self.term.role_events(new)
            self.tracking.write(new)
            self.hooks.take(new)
            if time.monotonic() >= next_print:
                next_print = time.monotonic() + every
                self.term.progress(self.progress.line())

    def stop_early(self, reason: str) -> None:
        """End the job cleanly before its end (a callback asked): status "done"."""
        if self.stopping:
            return
        self.stopped_by = reason
        self.log.info("stopped_early", reason=reason)
        self.term.say(f"stopping: {reason}")
        self.stopping = True
        self.wake.set()

    def interrupt(self) -> None:
        """Ctrl-C where no signal handler could be installed (a notebook's interrupt,
        handed over by `looprun.run_loop` in this loop's thread)."""
        self.on_signal(signal.SIGINT)

    async def run(self, signals: bool = True) -> int:
        """Start every role and supervise the job to its end; `signals`: SIGINT and
        SIGTERM stop it (only where handlers can be installed: the main thread)."""
        if signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(sig, self.on_signal, sig)
        # the main thread's loop reaps children through pidfds: no thread per child
        with reaping_through_pidfds() if signals else contextlib.nullcontext():
            return await self._run()

    async def _run(self) -> int:
        trimming = asyncio.create_task(trim_loop())
        zygote = asyncio.create_task(self._fork_server(torch=True))
        light = await self._fork_server()
        servers = [light] if light is not None else []
        watchers, later = [], []
        for rp in sorted(self.procs, key=lambda rp: role_traits(rp.placement.role).start_order):
            if self._from_zygote(rp):  # once the zygote is ready (or gone)
                later.append(rp)
                continue
            watchers.append(await self._start_role(rp))
        if (torch_forks := await zygote) is not None:
            servers.append(torch_forks)
        early.release()  # a server started ahead that this job does not use
        for rp in later:
            rp.forks = torch_forks or rp.forks
            watchers.append(await self._start_role(rp))
        progress = asyncio.create_task(self._progress_loop())
        spares = asyncio.create_task(self._spares_loop())
        while not self.stopping and not self._done():
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.wake.wait()
        if not self.stopping:
            self._judge_the_down()
        spares.cancel()  # no spare starts once the job ends
        await asyncio.gather(spares, return_exceptions=True)
        await self._stop_all(finishing=not self.stopping)
        for forks in servers:
            forks.close()
            with contextlib.suppress(TimeoutError):  # reaped while the loop runs
                async with asyncio.timeout(5):
                    await forks.proc.wait()
        progress.cancel()
        trimming.cancel()
        for w in watchers:
            w.cancel()
        new = self.view.poll()
        self.term.role_events(new)
        self.tracking.write(new, final=True)
        self.hooks.take(new)
        self.term.progress(self.progress.line())  # where it ended, however soon that was
        self.term.end()
        return self.outcome

    async def _start_role(self, rp: RoleProcess) -> asyncio.Task[None]:
        """Start `rp`; the task that watches it."""
        await rp.start()
        self.log.info("role_started", member=rp.placement.member_id,
                      member_role=rp.placement.role,
                      host=self.plan.host_of(rp.placement).address, pid=rp.process.pid,
                      forked=isinstance(rp.proc, ForkedProcess))
        return asyncio.create_task(self._watch(rp))

    def _local(self, torch: bool | None = None) -> list[RoleProcess]:
        """This host's roles (only those forked from the torch zygote, or only the
        others)."""
        return [rp for rp in self.procs if self.plan.host_of(rp.placement).is_local
                and torch in (None, from_zygote(self.job, rp.placement.role))]

    def _from_zygote(self, rp: RoleProcess) -> bool:
        return self.job.launch.fork_server and rp in self._local(torch=True)

    async def _fork_server(self, torch: bool = False) -> ForkServer | None:
        """The fork server for this host's roles (`launch.fork_server`), handed to
        each of them; None (every role exec'd) when it is off or cannot start.
        With `torch`, the torch zygote, handed (in `run`) to the roles that import
        torch at their start and their spares instead: they start with it imported."""
        local = self._local(torch=True) if torch else self._local()
        if not self.job.launch.fork_server or not local:
            return None
        err = self.logs / ("forkserver-torch.err" if torch else "forkserver.err")
        cpus = own_cpus([rp.env.get("VERL_CPUS", "") for rp in local]) if torch else None
        forks = await ForkServer.start(err, torch=torch, cpus=cpus,
                                       modules=zygote_modules(self.job) if torch else ())
        if forks is None:
            self.log.warning("fork_server_unavailable", error=last_lines(err, 3), torch=torch,
                             fallback="they import torch after their fork" if torch
                             else "each role its own interpreter")
            return None
        self.log.info("fork_server_started", pid=forks.proc.pid, roles=len(local), torch=torch,
                      early=forks.ahead is not None, cpus=cpus)
        for rp in [] if torch else local:  # the zygote's are handed it in run()
            rp.forks = forks
        return forks

    async def _stop_all(self, finishing: bool) -> None:
        """Let finishing roles exit on their own, then SIGTERM, grace, SIGKILL."""
        grace = self.job.launch.grace_s
        spares = [s for rp in self.procs if (s := rp.drop_spare()) is not None]
        if finishing:
            deadline = time.monotonic() + grace
            while any(rp.running for rp in self.procs) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
        self.stopping = True
        for rp in self.procs:
            rp.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(rp.running for rp in self.procs) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for rp in self.procs:
            if rp.running:
                self.log.warning("role_killed", member=rp.placement.member_id,
                                 after_grace_s=grace)
                rp.signal(signal.SIGKILL)
        for rp in self.procs:
            if rp.proc is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5):
                        await rp.process.wait()
                await rp.drained()
        for spare in spares:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await spare.wait()

    def summary(self) -> dict[str, Any]:
        v, rets = self.view, self.view.eval_returns
        warnings = self.term.digest.as_list()
        missing = any(w["event"] in CHECKPOINT_EVENTS for w in warnings)
        outcome = EXIT_CHECKPOINTS if missing and self.outcome == EXIT_DONE else self.outcome
        status = {EXIT_DONE: "done", EXIT_FAILED: "failed", EXIT_INTERRUPTED: "interrupted",
                  EXIT_CHECKPOINTS: "done"}
        found = best_checkpoints(self.run_dir, self.job.multiagent)
        return {
            "experiment": self.job.experiment.name,
            "env_id": self.job.environment.id,
            "algorithm": self.job.algorithm.name,
            "status": status.get(outcome, str(outcome)),
            "exit_code": outcome,
            "started": self.t0,
            "wall_s": round(time.time() - self.t0, 3),
            "env_steps": v.env_steps,
            # what best.pt holds (a candidate's confirmed return), and where it came from
            "best_eval_return": v.best_return,
            "best_eval_episodes": v.best[2] if v.best else None,
            "best_eval_env_steps": v.best[1] if v.best else None,
            "final_eval_return": rets[-1] if rets else None,
            "stopped_by": self.stopped_by,
            "evaluations": [{"env_steps": s, "return_mean": r} for s, r, _ in v.evals],
            "restarts": {rp.placement.member_id: rp.restarts for rp in self.procs
                         if rp.restarts},
            "fragments_dropped": v.dropped,
            "lost_hosts": {h: sorted(m) for h, m in self.hosts.lost.items()},
            "failed_roles": {m: self.errors.get(m) or last_lines(self.logs / f"{m}.err", 5)
                             for m in self.failed},
            "best_checkpoint": next(iter(found.values()), None),
            "best_checkpoints": {p: b for p, b in found.items() if p},
            "checkpoints_missing": missing,
            "warnings": warnings,
        }
