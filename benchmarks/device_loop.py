"""The device loop against the host loop: throughput, seeds, devices, and learning on the JAX envs.

    python -m platonic_rl.benchmarks.device_loop --scale quick                       # a smoke run (the tests)
    python -m platonic_rl.benchmarks.device_loop --scale cpu --parts throughput seeds devices
    python -m platonic_rl.benchmarks.device_loop --scale cpu --parts learning        # long: resumable
    python -m platonic_rl.benchmarks.device_loop --scale cpu --parts host_learning --envs umaze   # the host loop

Parts (each saved as it finishes; rerunning skips finished parts and resumes learning runs):

* ``envs``: each JAX env's steps/s on this machine with 1, 64 and 1024 envs stepped together (random actions,
  inside one jitted ``lax.scan``), both point-maze backends, and C MuJoCo's PointMaze (``envs.maze2d.Maze2D``,
  one ``mj_step`` per env in a Python loop) as the host reference.

* ``throughput``: whole-training env steps/s (env steps, replay and the updates) of
  :mod:`~platonic_rl.training.device_loop` on the JAX point maze against :func:`~platonic_rl.training.goal_online.
  train_online` on gymnasium-robotics' ``PointMaze_UMaze-v3`` (what a user would otherwise run), same agent, model
  and batch, at equal updates per env step, in two regimes: JaxGCRL's (many envs, few updates: ``regime_few``)
  and one update per env step (the paper's Fetch schedule: ``regime_one``). Steady state: compilation and the
  host loop's first cycle are excluded.
* ``seeds``: seconds per device-loop iteration with 1, 4 and 16 seeds vmapped in one program.
* ``devices``: the same global iteration split over 1, 2, 4 and 8 virtual CPU devices (a subprocess each,
  ``XLA_FLAGS=--xla_force_host_platform_device_count=N``). These devices share the machine's cores, so this
  shows the cost of splitting, not a speed-up.
* ``learning``: QRL, Contrastive RL and GCBC online on the JAX point maze (umaze, medium; observations normalised
  by the layout's extent), the reacher and, with ``--envs brax-reacher``, Brax's reacher through
  :mod:`~platonic_rl.envs.brax_env` (the suite reacher's observation layout, pose goals and success rule on Brax's
  physics, starts and targets: a related task, not the same one), ``seeds`` seeds in one vmapped program per (env, method): evaluation
  success (goal reached at any step of the scale's deterministic evaluation episodes, the same episodes for every
  seed and method at a given iteration) against env steps. The table's number per seed is the mean of its last
  :data:`FINAL_EVALUATIONS` evaluations. For QRL, a **critic check** then acts on the same ``--check-episodes``
  episodes two ways per seed: by the actor's mode, and by QRL's critic alone (the argmin of the learned one-step
  cost max_i d_i(T_i(f_i(s), a), f_i(g)) over a 9x9 action grid, :func:`~platonic_rl.agents.qrl_diagnostics.
  grid_argmin_actions`) and, with ``--check-hold-steps``, by the latent lookahead at each k (the deployable policy of
  :mod:`~platonic_rl.agents.qrl_policies`). Where the critic alone succeeds and the actor does not, the actor is what fails.
  With ``--qrl-eval-policies``, QRL's run also evaluates those deployable policies at the last
  :data:`FINAL_EVALUATIONS` evaluations (the ones the table averages; each costs minutes on CPU), on the same
  episodes, each built from the trained agent and 1,000 states of its replay buffer drawn then (the graph waypoints
  over the replay buffer: Search on the Replay Buffer's own setting); the table gives them as the agent's number is
  given. Each
  finished (env, method) run keeps a ``record.json`` in its run directory; a later call reuses it (checkpoints
  stay on the machine that trained), so runs can be added one env or method at a time.
* ``host_learning``: the same agents and schedule in the host loop (:func:`~platonic_rl.training.goal_online.
  train_online`, one seed after another) on gymnasium-robotics' ``PointMaze_UMaze-v3`` / ``PointMaze_Medium-v3``
  (``--envs umaze medium``; raw observations, as a user's own env): the learning part's env steps per update,
  prefill, batch and evaluation episodes, its updates to within one cycle (:func:`host_learning_config`); QRL's
  ``--qrl-eval-policies`` act at the last :data:`FINAL_EVALUATIONS` evaluations, built from each seed's replay buffer.
  Not part of the default ``--parts``: name it.

Saves ``results.json`` (command, settings, every measurement), ``throughput.png``, ``seeds.png``, ``devices.png``
and ``learning.png`` in ``--out-dir``, and prints the tables. Speeds are ratios measured in one run on one
machine; absolute numbers are this machine's.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.agents import REGISTRY
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent
from platonic_rl.agents.qrl_diagnostics import grid_argmin_actions
from platonic_rl.agents.qrl_policies import LatentLookahead, PolicySpec
from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.presets import (DeviceLoopScale, device_loop_agent_config, device_loop_env,
                                           device_loop_scales, fill_unset)
from platonic_rl.benchmarks.timing import time_device_loop
from platonic_rl.envs import jax_env, maze2d
from platonic_rl.envs.point_maze import PointMaze
from platonic_rl.envs.reacher import GOALS, Reacher
from platonic_rl.common.settings import HOST, fields_on_resume
from platonic_rl.training.device_loop import DeviceLoopConfig, env_settings, train_on_device
from platonic_rl.training.goal_online import OnlineConfig, train_online
from platonic_rl.common.records import read_json, write_json

Part = Literal["envs", "throughput", "seeds", "devices", "learning", "host_learning"]
Method = Literal["qrl", "crl", "gcbc"]
QRLEvalPolicy = Literal["graph_waypoints", "graph_waypoints_rest", "graph_waypoints_lookahead", "lookahead"]
QRL_EVAL_POLICIES = {  # --qrl-eval-policies: make_policy's defaults (the benchmarks' settings), built online
    "graph_waypoints": PolicySpec.of("graph_waypoints"),
    "graph_waypoints_lookahead": PolicySpec.of("graph_waypoints", inner="lookahead"),
    "lookahead": PolicySpec.of("lookahead"),
}
QRL_EVAL_POLICIES_OF_ENV = {  # those whose settings come from the env: targets at rest after a stall (its goal's form)
    "graph_waypoints_rest": lambda env: PolicySpec.of("graph_waypoints", stall_goal_dims=tuple(env.goal_dims)),
}
EnvName = Literal["umaze", "medium", "reacher", "brax-reacher"]
HOST_ENVS = {"umaze": ("PointMaze_UMaze-v3", 300), "medium": ("PointMaze_Medium-v3", 600)}
"""``host_learning``'s envs: gymnasium-robotics' point mazes (id, steps per episode), raw observations, as a user's."""
MODULE = "platonic_rl.benchmarks.device_loop"
NAMES = dict(qrl="QRL", crl="Contrastive RL", gcbc="GCBC")
FINAL_EVALUATIONS = 5  # the table's success per seed: the mean of its last evaluations
CHECK_KEY = 20_000_000  # the critic check's episodes: the same for every seed, method and env
RECORD = "record.json"  # a finished learning run's curves, critic check and settings, in its run directory


@dataclasses.dataclass(frozen=True)
class Args:
    """The device loop against the host loop (see the module docstring)."""
    scale: Literal["quick", "cpu"] = "cpu"
    parts: tuple[Part, ...] = ("envs", "throughput", "seeds", "devices", "learning")
    envs: tuple[EnvName, ...] | None = None     # default: umaze medium reacher (quick: umaze)
    methods: tuple[Method, ...] | None = None   # default: qrl crl gcbc (quick: qrl)
    seeds: int | None = None                    # default: 5 (quick: 2), vmapped in one program
    iterations: int | None = None     # learning iterations per run (default: the scale's)
    reacher_goal: Literal["pose", "fingertip"] = "pose"  # the reacher's goal state (envs.reacher)
    qrl_entropy_init: float | None = None  # QRL's initial entropy weight (default: the scale's)
    check_episodes: int = 64          # episodes of QRL's critic check per seed
    check_hold_steps: tuple[int, ...] = ()
    """QRL's check also acts with the latent lookahead (agents.qrl_policies.LatentLookahead: 9x9 grid and the actor's
    mode, each held k steps in the learned dynamics) at each of these k, on the same episodes."""
    qrl_eval_policies: tuple[QRLEvalPolicy, ...] = ()
    """QRL's runs also evaluate these deployable policies (agents.qrl_policies, make_policy's defaults) at the last 5
    evaluations, the waypoints over the replay buffer's states (logged as eval_success_<name>); graph_waypoints_rest:
    the graph waypoints with targets in the goal's form (the env's goal_dims) once an episode has stalled."""
    out_dir: str | None = None        # default: results/device_loop/<scale>
    overwrite: bool = False           # measure this call's parts again and retrain its learning runs

    def __post_init__(self):
        fill_unset(self, self.scale == "quick", envs=(("umaze", "medium", "reacher"), ("umaze",)),
                   methods=(("qrl", "crl", "gcbc"), ("qrl",)), seeds=(5, 2))
        if self.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {self.seeds}")
        if any(not isinstance(k, int) or k < 1 for k in self.check_hold_steps):
            raise ValueError(f"--check-hold-steps must be positive ints, got {self.check_hold_steps}")
        for name in ("iterations", "check_episodes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"--{name.replace('_', '-')} must be a positive int, got {value!r}")
        if self.reacher_goal not in GOALS:
            raise ValueError(f"--reacher-goal must be one of {GOALS}, got {self.reacher_goal!r}")
        if self.qrl_entropy_init is not None and not self.qrl_entropy_init > 0:
            raise ValueError(f"--qrl-entropy-init must be > 0, got {self.qrl_entropy_init}")
        for name in ("parts", "envs", "methods"):
            if not getattr(self, name):
                raise ValueError(f"--{name} needs at least one value")


# ---------------------------------------------------------------------------------------- timing


def time_host_loop(agent, rollouts: int, updates_per_cycle: int, cycles: int, batch_size: int) -> dict:
    """Steady-state seconds per cycle of the host loop on gymnasium's PointMaze_UMaze-v3 (300-step episodes):
    the median of the cycles after the first (which compiles), evaluation excluded."""
    episode = 300
    config = OnlineConfig(task="PointMaze_UMaze-v3", env_steps=(rollouts + cycles * rollouts) * episode,
                          prefill_episodes=rollouts, rollouts_per_cycle=rollouts, updates_per_cycle=updates_per_cycle,
                          batch_size=batch_size, eval_every=10 ** 9, eval_episodes=1, checkpoint_every=0)
    _, rows = train_online(agent, config, desc="host loop")
    seconds = [r["cycle_seconds"] for r in rows[1:] if "eval_success" not in r]
    cycle = float(np.median(seconds))
    return dict(cycle_seconds=cycle, env_steps_per_cycle=rollouts * episode, updates_per_cycle=updates_per_cycle,
                env_steps_per_second=rollouts * episode / cycle, updates_per_second=updates_per_cycle / cycle,
                cycles_timed=len(seconds))


def measure_envs(scale_name: str) -> dict:
    """Env steps/s at 1, 64 and 1024 parallel envs (the quick scale: 1 and 64, fewer steps)."""
    counts = (1, 64) if scale_name == "quick" else (1, 64, 1024)
    envs = {"point maze umaze (jax)": (PointMaze("umaze"), 1000), "point maze large (jax)": (PointMaze("large"), 1000),
            "point maze umaze (mjx)": (PointMaze("umaze", backend="mjx"), 50), "reacher (jax)": (Reacher(), 1000)}
    out = {}
    for name, (env, steps) in envs.items():
        steps = steps if scale_name != "quick" else 20
        out[name] = {str(n): jax_env.measure_steps_per_second(env, n, steps) for n in counts}
    out["point maze umaze (C MuJoCo, host loop)"] = {str(n): _host_mujoco_steps_per_second(n, 200 if scale_name != "quick"
                                                                                           else 20) for n in counts}
    return out


def _host_mujoco_steps_per_second(num_envs: int, steps: int) -> float:
    env = maze2d.Maze2D("umaze", num_envs)
    env.reset(seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, num_envs, 2))
    start = time.perf_counter()
    for a in actions:
        env.step(a)
    return num_envs * steps / (time.perf_counter() - start)


def measure_throughput(scale: DeviceLoopScale) -> dict:
    env = device_loop_env("umaze")
    cfg = device_loop_agent_config("qrl", scale, env.obs_dim, env.action_dim)
    out = {}
    # Few updates per env step: the device loop's iteration vs host cycles at the same ratio.
    few = scale.few
    steps_per_update = few.num_envs * few.unroll / few.updates_per_iteration
    seconds = time_device_loop(cfg, env, few, scale.measure_iterations)
    device = dict(env_steps_per_second=few.num_envs * few.unroll / seconds,
                  updates_per_second=few.updates_per_iteration / seconds, iteration_seconds=seconds)
    rollouts = 16
    host = time_host_loop(QRLContinuousAgent.create(cfg, 0), rollouts,
                          max(1, round(rollouts * 300 / steps_per_update)), 4, scale.batch_size)
    out["regime_few"] = dict(env_steps_per_update=steps_per_update, device=device, host=host,
                             ratio=device["env_steps_per_second"] / host["env_steps_per_second"])
    # One update per env step.
    one = dataclasses.replace(few, num_envs=scale.one_envs, updates_per_iteration=scale.one_envs * few.unroll,
                              prefill_episodes=scale.one_envs)
    seconds = time_device_loop(cfg, env, one, 1)
    device = dict(env_steps_per_second=one.num_envs * one.unroll / seconds,
                  updates_per_second=one.updates_per_iteration / seconds, iteration_seconds=seconds)
    host = time_host_loop(QRLContinuousAgent.create(cfg, 0), 2, 2 * 300, 3, scale.batch_size)
    out["regime_one"] = dict(env_steps_per_update=1.0, device=device, host=host,
                             ratio=device["env_steps_per_second"] / host["env_steps_per_second"])
    return out


def measure_seeds(scale: DeviceLoopScale) -> dict:
    env = device_loop_env("umaze")
    cfg = device_loop_agent_config("qrl", scale, env.obs_dim, env.action_dim)
    seconds = {n: time_device_loop(cfg, env, scale.seeds_config, scale.measure_iterations, num_seeds=n)
               for n in scale.seed_counts}
    one = seconds[scale.seed_counts[0]]
    return dict(iteration_seconds={str(n): s for n, s in seconds.items()},
                cost_vs_one={str(n): s / one for n, s in seconds.items()})


_DEVICE_PROBE = """
import json, sys, jax
from platonic_rl.benchmarks.presets import device_loop_agent_config, device_loop_env, device_loop_scales
from platonic_rl.benchmarks.timing import time_device_loop
from platonic_rl.training.distributed import data_mesh
scale = device_loop_scales()[sys.argv[1]]
env = device_loop_env("umaze")
cfg = device_loop_agent_config("qrl", scale, env.obs_dim, env.action_dim)
mesh = data_mesh() if jax.device_count() > 1 else None
print(json.dumps(dict(devices=jax.device_count(),
                      seconds=time_device_loop(cfg, env, scale.few, scale.measure_iterations, mesh=mesh))))
"""


def measure_devices(scale_name: str, scale: DeviceLoopScale) -> dict:
    seconds = {}
    for n in scale.device_counts:
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}", JAX_PLATFORMS="cpu")
        out = subprocess.run([sys.executable, "-c", _DEVICE_PROBE, scale_name], env=env, capture_output=True,
                             text=True, timeout=3600)
        if out.returncode:
            raise RuntimeError(f"the {n}-device probe failed:\n{out.stderr[-2000:]}")
        seconds[str(n)] = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
    one = seconds[str(scale.device_counts[0])]
    return dict(iteration_seconds=seconds, cost_vs_one={n: s / one for n, s in seconds.items()},
                config=dataclasses.asdict(scale.few))


def learning_config(args: Args, scale: DeviceLoopScale) -> DeviceLoopConfig:
    """The scale's learning loop, with ``--iterations`` if given."""
    return scale.learning if args.iterations is None else dataclasses.replace(scale.learning, iterations=args.iterations)


def critic_check(agents, env: jax_env.GoalEnv, episodes: int, hold_steps: tuple[int, ...] = (),
                 grid_size: int = 9) -> dict:
    """QRL's actor against its critic acting alone, per seed (``agents`` with a leading seed axis), on the same
    ``episodes`` deterministic episodes: success of the actor's mode, of the argmin of the learned one-step cost
    over a ``grid_size``^2 action grid and, for each k of ``hold_steps``, of the latent lookahead holding each
    candidate k steps (``lookahead[k]``)."""
    key = jax.random.PRNGKey(CHECK_KEY)

    def one(agent):
        critic = lambda observations, goals, _: grid_argmin_actions(agent, observations, goals, grid_size)  # noqa: E731
        success = lambda policy: jnp.mean(jax_env.rollout_acting(env, policy, key, episodes)["success"])  # noqa: E731
        return (success(agent), jnp.mean(jax_env.rollout(env, critic, key, episodes)["success"]),
                [success(LatentLookahead(agent, hold_steps=k, grid_size=grid_size)) for k in hold_steps])

    actor, critic, lookahead = jax.device_get(jax.jit(jax.vmap(one))(agents))
    check = dict(episodes=episodes, grid=f"{grid_size}x{grid_size}", actor=np.asarray(actor).tolist(),
                 critic_alone=np.asarray(critic).tolist())
    if hold_steps:
        check.update(hold_steps=list(hold_steps),
                     lookahead={str(k): np.asarray(x).tolist() for k, x in zip(hold_steps, lookahead)})
    return check


def learning_settings(agent_cfg, env: jax_env.GoalEnv, config: DeviceLoopConfig, seeds: tuple[int, ...],
                      eval_policies: dict | None = None) -> dict:
    """What identifies a learning run: a record is reused only for the same settings, the loop's host-only fields
    (:data:`LEARNING_HOST_ONLY`) aside. Saved as JSON (``as_json``), compared live (``settings_differences``)."""
    return dict(agent=agent_cfg, env=env_settings(env), seeds=list(seeds), loop=config,
                **({} if not eval_policies else dict(eval_policies={k: v.as_dict() for k, v in eval_policies.items()})))


LEARNING_HOST_ONLY = tuple(f"loop.{k}" for k in fields_on_resume(DeviceLoopConfig, HOST))


def run_learning(args: Args, scale: DeviceLoopScale, out: Path) -> dict:
    """Each (env, method) of ``args``: its record if it finished with these settings, else trained (resuming its
    checkpoint if any), checked (QRL) and recorded (:func:`learning_run`)."""
    return {f"{name}/{method}": learning_run(args, scale, name, method, out / "runs" / f"{name}-{method}")
            for name in args.envs for method in args.methods}


def learning_run(args: Args, scale: DeviceLoopScale, name: str, method: str, run_dir: Path) -> dict:
    """One (env, method)'s record in ``run_dir``: success per evaluation and seed, and for QRL the critic check
    (:func:`critic_check`); reused where it finished with these settings (:func:`report.finished_run`)."""
    seeds = tuple(range(args.seeds))
    config = learning_config(args, scale)
    env = device_loop_env(name, args.reacher_goal)
    cfg = device_loop_agent_config(method, scale, env.obs_dim, env.action_dim, args.qrl_entropy_init)
    policies = {p: QRL_EVAL_POLICIES[p] if p in QRL_EVAL_POLICIES else QRL_EVAL_POLICIES_OF_ENV[p](env)
                for p in args.qrl_eval_policies} if method == "qrl" else {}
    if policies:  # the policies act at the evaluations the table averages (each may cost minutes)
        config = dataclasses.replace(config, eval_policies_after=max(
            0, config.iterations - FINAL_EVALUATIONS * config.eval_every))

    def train() -> dict:
        start = time.perf_counter()
        agents, rows = train_on_device(cfg, env, config, seed=seeds, run_dir=run_dir, overwrite=args.overwrite,
                                       desc=f"{name}-{method} x{len(seeds)} seeds", eval_policies=policies or None)
        evaluated = [r for r in rows if "eval_success" in r]
        record = dict(env_steps=[r["env_steps"] for r in evaluated],
                      success=[[r[f"eval_success/{s}"] for s in seeds] for r in evaluated],
                      seconds=time.perf_counter() - start)
        if policies:  # at the evaluations where they acted (all of them at the same ones)
            acted = [r for r in evaluated if f"eval_success_{next(iter(policies))}" in r]
            record["policy_success"] = {p: [[r[f"eval_success_{p}/{s}"] for s in seeds] for r in acted]
                                        for p in policies}
            record["policy_env_steps"] = [r["env_steps"] for r in acted]
        if method == "qrl":
            record["critic_check"] = critic_check(agents, env, args.check_episodes, args.check_hold_steps)
        return record

    def check_settings(record: dict) -> dict:
        """The critic check's settings, where the record has one (QRL's)."""
        check, asked = record.get("critic_check", {}), dict(episodes=args.check_episodes,
                                                            hold_steps=list(args.check_hold_steps))
        recorded = dict(episodes=check.get("episodes"), hold_steps=check.get("hold_steps", []))
        return {} if method != "qrl" else {f"check_{k}": (recorded[k], asked[k]) for k in asked
                                           if recorded[k] != asked[k]}

    return report.finished_run(run_dir / RECORD, learning_settings(cfg, env, config, seeds, policies), train,
                               overwrite=args.overwrite, ignore=LEARNING_HOST_ONLY, checked=check_settings)


def host_learning_config(args: Args, scale: DeviceLoopScale, name: str, seed: int, policies: bool) -> OnlineConfig:
    """The learning part's schedule in the host loop (:func:`train_online`) on ``name``'s gymnasium point maze: the
    same env steps per update (episodes per cycle x episode length / updates per cycle), prefill episodes, batch,
    exploration noise, goal relabelling, evaluation episodes and spacing, and the same updates to within one cycle;
    the evaluation policies (``policies``) act at the last :data:`FINAL_EVALUATIONS` evaluations."""
    loop, (task, length) = learning_config(args, scale), HOST_ENVS[name]
    per_update = loop.num_envs * loop.unroll // loop.updates_per_iteration
    episodes, updates = per_update // math.gcd(per_update, length), length // math.gcd(per_update, length)
    k = max(1, 16 // episodes)  # about 16 episodes per cycle, so the vector env steps several at once
    episodes, updates = episodes * k, updates * k
    cycles = max(1, round(loop.iterations * loop.updates_per_iteration / updates))
    env_steps = (loop.prefill_episodes + cycles * episodes) * length
    eval_every = loop.eval_every * loop.num_envs * loop.unroll
    return OnlineConfig(task=task, env_steps=env_steps, prefill_episodes=loop.prefill_episodes,
                        rollouts_per_cycle=episodes, updates_per_cycle=updates, batch_size=loop.batch_size,
                        exploration_noise=loop.exploration_noise, eval_every=eval_every,
                        eval_episodes=loop.eval_episodes, p_future=loop.p_future, discount=loop.discount, seed=seed,
                        eval_policies_after=max(0, env_steps - FINAL_EVALUATIONS * eval_every) if policies else 0,
                        checkpoint_every=max(1, cycles // 20))


def run_host_learning(args: Args, scale: DeviceLoopScale, out: Path) -> dict:
    """Each (point maze, method) of ``args`` in the host loop on gymnasium's env: its record if it finished with
    these settings, else trained seed by seed (each resuming its checkpoint if any) and recorded."""
    unknown = [name for name in args.envs if name not in HOST_ENVS]
    if unknown:
        raise ValueError(f"--parts host_learning runs on the point mazes {list(HOST_ENVS)}; drop --envs {unknown}")
    return {f"{name}/{method}": host_learning_run(args, scale, name, method, out / "host_runs" / f"{name}-{method}")
            for name in args.envs for method in args.methods}


def host_learning_run(args: Args, scale: DeviceLoopScale, name: str, method: str, run_dir: Path) -> dict:
    """One (point maze, method) in the host loop, every seed one after another: success per evaluation and seed, and
    QRL's evaluation policies' (built from each seed's replay buffer), in :func:`learning_run`'s form."""
    seeds = tuple(range(args.seeds))
    cfg = device_loop_agent_config(method, scale, 4, 2, args.qrl_entropy_init)  # (x, y, vx, vy); a force in 2-D
    env = PointMaze(name)  # the JAX twin, for the policies whose settings come from the env (its goal dims)
    policies = {p: QRL_EVAL_POLICIES[p] if p in QRL_EVAL_POLICIES else QRL_EVAL_POLICIES_OF_ENV[p](env)
                for p in args.qrl_eval_policies} if method == "qrl" else {}
    configs = {seed: host_learning_config(args, scale, name, seed, bool(policies)) for seed in seeds}
    agent_class = next(entry.agent for entry in REGISTRY.values() if entry.config is type(cfg))

    def train() -> dict:
        start, runs = time.perf_counter(), []
        for seed in seeds:
            _, rows = train_online(agent_class.create(cfg, seed), configs[seed], run_dir / f"seed{seed}",
                                   desc=f"host {name}-{method} seed {seed}", eval_policies=policies or None)
            runs.append([r for r in rows if "eval_success" in r])
        record = dict(env_steps=[r["env_steps"] for r in runs[0]],
                      success=[[run[i]["eval_success"] for run in runs] for i in range(len(runs[0]))],
                      seconds=time.perf_counter() - start)
        if policies:
            acted = [i for i, r in enumerate(runs[0]) if f"eval_success_{next(iter(policies))}" in r]
            record["policy_success"] = {p: [[run[i][f"eval_success_{p}"] for run in runs] for i in acted]
                                        for p in policies}
            record["policy_env_steps"] = [runs[0][i]["env_steps"] for i in acted]
        return record

    settings = dict(agent=cfg, env=HOST_ENVS[name][0], seeds=list(seeds), loop=configs[seeds[0]],
                    **({} if not policies else dict(eval_policies={k: v.as_dict() for k, v in policies.items()})))
    return report.finished_run(run_dir / RECORD, settings, train, overwrite=args.overwrite,
                               ignore=("loop.seed", *HOST_ONLINE_HOST_ONLY))


HOST_ONLINE_HOST_ONLY = tuple(f"loop.{k}" for k in fields_on_resume(OnlineConfig, HOST))


def final_success(run: dict) -> np.ndarray:
    """Per seed: the mean success of the last :data:`FINAL_EVALUATIONS` evaluations."""
    return np.asarray(run["success"][-FINAL_EVALUATIONS:], float).mean(0)


# -------------------------------------------------------------------------------------- reporting


def format_tables(record: dict, scale: DeviceLoopScale, args: Args) -> str:
    lines = [f"Device loop vs host loop -- scale {args.scale} ({scale.note}); {jax.device_count()} "
             f"{jax.default_backend()} device(s)"]
    if "envs" in record:
        counts = list(next(iter(record["envs"].values())))
        lines.append("\nEnv steps/s (random actions; JAX envs inside one jitted scan)")
        lines.append(f"{'env':<42}" + "".join(f"{n + ' envs':>14}" for n in counts))
        for name, rates in record["envs"].items():
            lines.append(f"{name:<42}" + "".join(f"{rates[n]:>14,.0f}" for n in counts))
    if "throughput" in record:
        lines.append("\nThroughput (QRL, whole training: env steps/s including replay and updates)")
        lines.append(f"{'regime':<42}{'device loop':>14}{'host loop':>14}{'ratio':>8}")
        for key, label in (("regime_few", "few updates"), ("regime_one", "one update per env step")):
            r = record["throughput"][key]
            label = f"{label} ({r['env_steps_per_update']:.0f} env steps/update)"
            lines.append(f"{label:<42}{r['device']['env_steps_per_second']:>14,.0f}"
                         f"{r['host']['env_steps_per_second']:>14,.0f}{r['ratio']:>7.1f}x")
    for part, label in (("seeds", "vmapped seeds"), ("devices", "virtual CPU devices")):
        if part in record:
            costs = record[part]["cost_vs_one"]
            lines.append(f"\nCost per iteration vs 1, by {label}: "
                         + ", ".join(f"{n}: {c:.2f}x" for n, c in costs.items()))
    if "learning" in record:
        cfg = learning_config(args, scale)
        lines.append(f"\nLearning: success (per seed the mean of its last {FINAL_EVALUATIONS} evaluations), mean +- std "
                     f"over seeds ({cfg.num_envs} envs x {cfg.unroll}-step unrolls per {cfg.updates_per_iteration} "
                     f"updates); QRL's critic check: the actor / the critic alone (9x9 grid argmin), same episodes")
        lines += learning_lines(record["learning"])
    if "host_learning" in record:
        lines.append(f"\nThe host loop on gymnasium's point mazes (raw observations), the learning part's schedule: "
                     f"success (per seed the mean of its last {FINAL_EVALUATIONS} evaluations), mean +- std over seeds")
        lines += learning_lines(record["host_learning"])
    return "\n".join(lines)


def learning_lines(results: dict) -> list[str]:
    """One line per (env, method) run of ``results`` and one per evaluation policy of its."""
    lines = []
    for key, r in results.items():
        if r["success"]:
            final = final_success(r)
            line = (f"  {key:<20} {final.mean():.2f} +- {final.std():.2f}  over {final.size} seeds, at "
                    f"{r['env_steps'][-1]:,} env steps")
            if "critic_check" in r:
                check = r["critic_check"]
                line += (f"   check ({check['episodes']} episodes): actor {np.mean(check['actor']):.2f} / "
                         f"critic alone {np.mean(check['critic_alone']):.2f}")
                line += "".join(f" / lookahead k={k} {np.mean(v):.2f}" for k, v in check.get("lookahead", {}).items())
            lines.append(line)
            for policy, success in r.get("policy_success", {}).items():
                final = final_success(dict(success=success))
                lines.append(f"  {key + ' ' + policy:<20} {final.mean():.2f} +- {final.std():.2f}  (evaluated on "
                             f"the same episodes, built from the replay buffer's states)")
    return lines


def plot(path: Path, record: dict, scale_name: str, part: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if part in ("learning", "host_learning"):
        results = record[part]
        envs = sorted({k.split("/")[0] for k in results}, key=list(get_args(EnvName)).index)
        fig, axes = plt.subplots(1, len(envs), figsize=(5 * len(envs), 3.8), squeeze=False)
        for ax, name in zip(axes[0], envs):
            for color, method in enumerate(NAMES):  # one colour per method in every panel
                r = results.get(f"{name}/{method}")
                if r and r["success"]:
                    s = np.asarray(r["success"])
                    x = np.asarray(r["env_steps"]) / 1e6
                    ax.plot(x, s.mean(1), marker="o", markersize=3, color=f"C{color}",
                            label=f"{NAMES[method]} ({s.shape[1]} seeds)")
                    ax.fill_between(x, s.mean(1) - s.std(1), s.mean(1) + s.std(1), color=f"C{color}", alpha=0.2)
                    for style, (policy, success) in zip(("--", ":", "-."), r.get("policy_success", {}).items()):
                        ax.plot(np.asarray(r["policy_env_steps"]) / 1e6, np.asarray(success).mean(1), style,
                                color=f"C{color}", marker="s", markersize=3,
                                label=f"{NAMES[method]}, {policy.replace('_', ' ')} (replay states)")
            ax.set(xlabel="env steps (millions)", ylabel="evaluation success rate", ylim=(-0.02, 1.02),
                   title=f"{name} (mean +- std over seeds)")
            ax.legend()
        if part == "host_learning":
            first = next(iter(results))
            loop = results[first]["settings"]["loop"]
            cycles = (loop["env_steps"] // HOST_ENVS[first.split("/")[0]][1] - loop["prefill_episodes"]) // loop[
                "rollouts_per_cycle"]
            title = (f"Host loop on gymnasium's point mazes, online goal reaching -- scale {scale_name}: "
                     f"{loop['rollouts_per_cycle']} episodes per {loop['updates_per_cycle']} updates, "
                     f"{cycles * loop['updates_per_cycle']:,} updates per seed; {loop['eval_episodes']} evaluation "
                     "episodes per point")
        else:
            cfg = DeviceLoopConfig(**record["learning"][next(iter(results))]["settings"]["loop"]) if all(
                "settings" in r for r in results.values()) else device_loop_scales()[scale_name].learning
            title = (f"Device loop, online goal reaching -- scale {scale_name}: {cfg.num_envs} envs x {cfg.unroll}-step "
                     f"unrolls per {cfg.updates_per_iteration} updates, {cfg.iterations * cfg.updates_per_iteration:,} "
                     f"updates per seed; {cfg.eval_episodes} evaluation episodes per point")
        report.suptitle(fig, title)
    elif part == "envs":
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for name, rates in record["envs"].items():
            n = [int(k) for k in rates]
            ax.plot(n, list(rates.values()), marker="o", label=name)
        ax.set(xscale="log", yscale="log", xlabel="envs stepped together", ylabel="env steps per second",
               title=f"Env throughput on {jax.default_backend()} -- scale {scale_name}")
        ax.legend(fontsize=8)
    elif part == "throughput":
        r = record["throughput"]
        fig, ax = plt.subplots(figsize=(6, 4))
        keys = ["regime_few", "regime_one"]
        x = np.arange(2)
        ax.bar(x - 0.2, [r[k]["device"]["env_steps_per_second"] for k in keys], 0.4, label="device loop (JAX point maze)")
        ax.bar(x + 0.2, [r[k]["host"]["env_steps_per_second"] for k in keys], 0.4,
               label="host loop (gymnasium PointMaze)")
        ax.set_xticks(x, [f"{r[k]['env_steps_per_update']:.0f} env steps / update" for k in keys])
        ax.set(yscale="log", ylabel="env steps per second (incl. updates)",
               title=f"QRL whole-training throughput -- scale {scale_name}")
        ax.legend()
    else:
        costs = record[part]["cost_vs_one"]
        n = np.asarray([int(k) for k in costs])
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.plot(n, list(costs.values()), marker="o", label="measured")
        if part == "seeds":
            ax.plot(n, n, "--", color="gray", label="seeds run one after another")
        ax.set(xscale="log", xlabel="vmapped seeds" if part == "seeds" else "virtual CPU devices (same 2 cores)",
               ylabel="seconds per iteration / with 1", title=f"{part} -- scale {scale_name}")
        ax.set_xticks(n, [str(v) for v in n])
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: Args) -> dict:
    scale = device_loop_scales()[args.scale]
    out = Path(args.out_dir or f"results/device_loop/{args.scale}")
    saved = out / "parts.json"
    record = read_json(saved, "the parts measured so far") if saved.exists() else {}  # other parts are kept
    start = time.perf_counter()
    for part in args.parts:
        if part in record and part not in ("learning", "host_learning") and not args.overwrite:
            print(f"{part}: already measured in {saved} (--overwrite to measure again)")
            continue
        if part == "envs":
            record[part] = measure_envs(args.scale)
        elif part == "throughput":
            record[part] = measure_throughput(scale)
        elif part == "seeds":
            record[part] = measure_seeds(scale)
        elif part == "devices":
            record[part] = measure_devices(args.scale, scale)
        elif part == "host_learning":
            record[part] = {**record.get(part, {}), **run_host_learning(args, scale, out)}
        else:  # added to the runs already recorded (other envs or methods)
            record[part] = {**record.get(part, {}), **run_learning(args, scale, out)}
        out.mkdir(parents=True, exist_ok=True)
        write_json(saved, record)
    table = format_tables(record, scale, args)
    plots = {f"{part}.png": (lambda p, part=part: plot(p, record, args.scale, part)) for part in record}
    return report.save_run(out, MODULE, args, dict(scale=dataclasses.asdict(scale), **record), table, plots=plots,
                           total_seconds=time.perf_counter() - start)


def main():
    import tyro  # here, not above: the measuring functions run where only JAX and its kin are installed

    return run(tyro.cli(Args))


if __name__ == "__main__":
    main()
