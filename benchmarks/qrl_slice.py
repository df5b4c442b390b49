"""A slice of QRL's maze2d training: the paper's QRL (or a smaller size) trained on a prepared maze2d dataset for a
wall-clock budget, in resumable chunks, and evaluated in the pure-JAX point maze. The part that the maze2d slice
(:mod:`~platonic_rl.benchmarks.maze2d_slice`, its command line) and the accelerator check
(:mod:`~platonic_rl.benchmarks.accelerator`) both run; it needs only jax, flax, optax, orbax-checkpoint and numpy.

    record = train_slice(SliceSetting(config, batch_size=4096, label="paper", layout="medium", updates=200_000,
                                      chunk=5_000, episodes=100), data, info, run_dir="run", deadline=time.time() + 480)

``record`` holds the settings, the scale reached (updates, samples, updates/s), the convergence signals (Lagrange
multiplier, constraint violation, mean goal distance) with their change over the last 20% of updates, the scores
at each evaluation and the logged history; :func:`format_table` prints it and :func:`plot` draws it.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.agents.qrl_diagnostics import action_grid
from platonic_rl.envs import maze2d
from platonic_rl.envs.maze2d import normalised_data, normaliser
from platonic_rl.envs.point_maze import PointMaze, sparse_returns
from platonic_rl.envs.replay import SegmentGoalSampler
from platonic_rl.training.offline import TrainConfig, train_offline
from platonic_rl.training.run import RunDirectory
from platonic_rl.training.signals import SIGNALS, convergence, signal_value

GRID = 9  # actions per dimension of the critic check's grid over [-1, 1]^2
PAPER_SAMPLES = 200_000 * 4096  # C.3.2: 2e5 updates of batch 4096


def true_dynamics_greedy_actions(agent: QRLContinuousAgent, env: PointMaze, observations: jax.Array,
                                  goals: jax.Array, grid_size: int = 9, hold_steps: int = 1) -> jax.Array:
    """The critic-quality check's action: of the grid over [-1, 1]^2, the action whose true next state
    (``env``'s step, the pure-JAX point maze) has the smallest learned distance to the goal, max over the
    critics. With ``hold_steps`` k > 1, the state after holding the action for k steps: the learned distance then
    has to order states k steps apart rather than one (a transition's distance is at most its cost, 1, so one step
    moves the distance by at most 1 out of the hundreds it spans). ``observations``, ``goals``: raw states
    ``[N, 4]`` (normalised here by the layout's extent); returns ``[N, 2]``. Jit-able (``hold_steps`` static).
    No actor and no learned dynamics act, so a failure here is the learned distance's own (its local minima, or
    differences between states one step apart that it does not resolve)."""
    if hold_steps < 1:
        raise ValueError(f"hold_steps must be >= 1, got {hold_steps}")
    grid = action_grid(grid_size, env.action_dim)
    norm = normaliser(env.maze)

    def next_state(observation, action):
        physics = dict(position=observation[:2], velocity=observation[2:])
        for _ in range(hold_steps):
            physics = env.dynamics(physics, action)
        return env.observe(physics)

    nexts = jax.vmap(lambda o: jax.vmap(lambda a: next_state(o, a))(grid))(observations)  # [N, G, 4]
    goals = jnp.broadcast_to(goals[:, None], nexts.shape)
    costs = agent.goal_distances(norm(nexts.reshape(-1, 4)), norm(goals.reshape(-1, 4))).max(0)
    return grid[jnp.argmin(costs.reshape(observations.shape[0], -1), -1)]


@dataclasses.dataclass(frozen=True)
class SliceSetting:
    """What one slice trains and how it is evaluated."""
    config: QRLContinuousConfig
    batch_size: int
    label: str                      # the size's name in tables and titles
    layout: str = "medium"
    updates: int = 200_000          # in all; a run stops earlier when the time budget ends
    chunk: int = 5_000              # updates per chunk (a checkpoint after each)
    eval_reserve: float = 60.0      # seconds kept for the final evaluation and saving
    episodes: int = 100             # evaluation episodes per setting (single goal, multi goal)
    episode_length: int = 0         # steps per evaluation episode; 0: the layout's D4RL time limit
    seed: int = 0

    def __post_init__(self):
        for name in ("batch_size", "updates", "chunk", "episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"SliceSetting.{name} must be >= 1, got {getattr(self, name)}")
        if self.episode_length < 0:
            raise ValueError(f"SliceSetting.episode_length must be >= 0 (0: the layout's limit), "
                             f"got {self.episode_length}")
        if self.eval_reserve < 0:
            raise ValueError(f"SliceSetting.eval_reserve must be >= 0 seconds, got {self.eval_reserve}")


# ---------------------------------------------------------------------------------------- evaluation


@functools.partial(jax.jit, static_argnames=("layout", "mode", "episodes", "policy", "episode_length"))
def episode_returns(agent: QRLContinuousAgent, key: jax.Array, layout: str, mode: str, episodes: int,
                    policy: str, episode_length: int = 0) -> jax.Array:
    """Returns ``[episodes]`` (steps within 0.5 of the goal, D4RL's sparse reward) of ``policy`` ("actor": the
    actor's mode action; "critic": the critic-quality check,
    :func:`true_dynamics_greedy_actions`) in the JAX point maze, episodes of
    ``episode_length`` steps (0: the layout's time limit)."""
    env = PointMaze(layout, goals=mode, episode_length=episode_length)
    norm = normaliser(maze2d.get_layout(layout))
    if policy == "actor":
        act = lambda obs, goals, k: agent.act(norm(obs), norm(goals))  # noqa: E731
    else:
        act = lambda obs, goals, k: true_dynamics_greedy_actions(agent, env, obs, goals, GRID)  # noqa: E731
    return sparse_returns(env, act, key, episodes)


def evaluate(agent: QRLContinuousAgent, layout: str, episodes: int, seed: int, episode_length: int = 0) -> dict:
    """Mean D4RL-normalised score of the actor and of the critic check, single and multi goal."""
    out = {}
    for policy in ("actor", "critic"):
        for k, mode in enumerate(("single", "multi")):
            key = jax.random.PRNGKey(10_000 * k + seed)
            returns = np.asarray(episode_returns(agent, key, layout, mode, episodes, policy, episode_length))
            out[f"{policy}_{mode}"] = float(maze2d.normalized_score(layout, returns).mean())
    return out


# -------------------------------------------------------------------------------------------- training


def train_slice(setting: SliceSetting, data: dict, info: dict, run_dir: str | Path, deadline: float) -> dict:
    """Train ``setting`` on ``data`` (flat arrays in D4RL's coordinates, as
    :func:`~platonic_rl.envs.maze2d.load_prepared` returns them, described by its ``info``) into ``run_dir`` until
    ``setting.updates`` are done or the time left before ``deadline`` (a ``time.time()``), less the evaluation's
    reserve, no longer fits the fastest chunk so far; a later call with the same run directory continues from its
    latest checkpoint. The agent is evaluated after this call's first chunk and at the end. Returns the record."""
    start = time.time()
    s = setting
    layout = maze2d.get_layout(s.layout)
    data = normalised_data(data, layout)
    config = s.config
    print(f"maze2d-{layout.name}: {len(data['actions']):,} transitions, {info['episodes']:,} episodes, action noise "
          f"{info['action_noise']}; QRL {s.label}: critic {config.encoder_hidden}, IQE {config.iqe_components}x"
          f"{config.iqe_dim_per_component}, actor {config.actor_hidden}, batch {s.batch_size}; {jax.devices()}",
          flush=True)
    # Committed to the device as the offline loop's agent is: the evaluations compile once
    agent = jax.device_put(QRLContinuousAgent.create(config, seed=s.seed), jax.local_devices()[0])
    sampler = SegmentGoalSampler.create(data, s.batch_size, p_future=0.0, bc_goals=True)
    run_dir = Path(run_dir)
    evaluations, chunks, history = [], [], []

    def train_to(target: int):
        train = TrainConfig(steps=target, batch_size=s.batch_size, log_every=min(1_000, s.chunk),
                            checkpoint_every=s.chunk, progress=False, seed=s.seed)
        return train_offline(agent, data, train, run_dir=run_dir, desc="qrl", sampler=sampler)

    def evaluate_at(updates: int) -> None:
        t = time.time()
        evaluations.append(dict(updates=updates, **evaluate(agent, layout.name, s.episodes, s.seed, s.episode_length)))
        print(f"evaluation at {updates:,} updates ({time.time() - t:.0f} s): {evaluations[-1]}", flush=True)
    done = RunDirectory.saved_step(run_dir)
    if done:
        print(f"continuing {run_dir} from update {done:,}", flush=True)
    if done >= s.updates:  # nothing left to train: the finished run's agent and log, read back
        agent, history = train_to(done)
    while done < s.updates:
        left = deadline - time.time() - s.eval_reserve
        if chunks:
            per_chunk = min(c["seconds"] for c in chunks)
            if per_chunk > left:
                print(f"stopping at {done:,} updates: a chunk takes {per_chunk:.0f} s, {left:.0f} s left", flush=True)
                break
        target = min(done + s.chunk, s.updates)
        t = time.time()
        agent, history = train_to(target)
        jax.block_until_ready(agent)
        seconds = time.time() - t
        chunks.append(dict(updates=target - done, from_update=done, seconds=seconds))
        done = target
        row = history[-1]
        print(f"{done:,} updates in {time.time() - start:.0f} s (this chunk {seconds:.0f} s): "
              + ", ".join(f"{name} {signal_value(row, name):.3g}" for name in SIGNALS), flush=True)
        if len(chunks) == 1:
            evaluate_at(done)
            if time.time() > deadline - s.eval_reserve:
                break
    if not evaluations or evaluations[-1]["updates"] != done:
        evaluate_at(done)
    steady = chunks[1:] or chunks  # the first chunk compiles
    updates_per_second = sum(c["updates"] for c in steady) / max(sum(c["seconds"] for c in steady), 1e-9)
    return dict(layout=layout.name, size_label=s.label, dataset=info, agent_config=dataclasses.asdict(config),
                batch_size=s.batch_size, updates=done, samples=done * s.batch_size, paper_samples=PAPER_SAMPLES,
                fraction_of_paper_samples=done * s.batch_size / PAPER_SAMPLES, chunks=chunks,
                updates_per_second=updates_per_second, samples_per_second=updates_per_second * s.batch_size,
                matmul_precision=str(jax.config.jax_default_matmul_precision), signals=convergence(history),
                evaluations=evaluations, history=history)


# ---------------------------------------------------------------------------------------------- report


def signal_plots(record: dict) -> dict | None:
    """``report.save_run``'s ``plots`` for a slice record: ``signals.png`` (:func:`plot`), or None where matplotlib is
    missing (accelerator images; ``maze2d_slice --plot`` draws it later from the saved ``results.json``)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    return {"signals.png": lambda path: plot(path, [dict(record, jax_devices=[str(d) for d in jax.devices()])])}


def format_table(record: dict) -> str:
    lines = [f"maze2d-{record['layout']} QRL slice, size {record.get('size_label', record.get('size'))!r}: "
             f"{record['updates']:,} updates of batch "
             f"{record['batch_size']} ({100 * record['fraction_of_paper_samples']:.1f}% of the paper's samples), "
             f"{record['updates_per_second']:.1f} updates/s",
             f"{'updates':>10}{'actor single':>14}{'actor multi':>13}{'critic single':>15}{'critic multi':>14}"]
    for e in record["evaluations"]:
        lines.append(f"{e['updates']:>10,}{e['actor_single']:>14.1f}{e['actor_multi']:>13.1f}"
                     f"{e['critic_single']:>15.1f}{e['critic_multi']:>14.1f}")
    for signal, v in record["signals"].items():
        if signal in SIGNALS:
            lines.append(f"{signal}: {v['first']:.4g} -> {v['last']:.4g} (change over the last 20%: "
                         f"{100 * v['tail_change']:+.1f}%)")
    lines.append("critic: acting greedily on the learned distance with the true dynamics (9x9 action grid); "
                 "scores D4RL-normalised, episodes in the JAX point maze. Paper (Table 4.2, medium): QRL 163.6 "
                 "single, 150.5 multi")
    return "\n".join(lines)


def plot(path: str | Path, records: list[dict]) -> None:
    """The convergence signals (mean over critics) against updates, and the evaluations' scores, of one run
    saved by one or more calls (``records``: their ``results.json``, in order; the last one's history is the
    run's whole log)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = records[-1]["history"]
    evaluations = sorted((e for r in records for e in r["evaluations"]), key=lambda e: e["updates"])
    steps = [row["step"] for row in history]
    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    units = dict(lagrange_multiplier="lambda", violation="E[relu(d(s, s') - 1)^2]", mean_goal_distance="steps")
    for ax, signal in zip(axes, SIGNALS):
        ax.plot(steps, [signal_value(row, signal) for row in history], "o-", ms=3)
        ax.set_xlabel("updates (batch %d)" % records[-1]["batch_size"])
        ax.set_ylabel(units[signal])
        ax.set_title(signal.replace("_", " "))
        if signal == "violation":
            ax.set_yscale("log")
    ax = axes[3]
    for name, marker in (("actor_single", "o-"), ("actor_multi", "s-"), ("critic_single", "o--"),
                         ("critic_multi", "s--")):
        ax.plot([e["updates"] for e in evaluations], [e[name] for e in evaluations], marker,
                label=name.replace("_", ", "))
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("updates")
    ax.set_ylabel("D4RL-normalised score")
    ax.set_title("scores (critic: greedy with true dynamics)")
    ax.legend(fontsize=7)
    r = records[-1]
    fig.suptitle(f"maze2d-{r['layout']} QRL, size {r.get('size_label', r.get('size'))}: {r['updates']:,} updates of batch "
                 f"{r['batch_size']} "
                 f"({100 * r['fraction_of_paper_samples']:.0f}% of the paper's samples), 1 seed, "
                 f"{', '.join(r['jax_devices'])}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


