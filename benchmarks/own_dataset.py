"""Which QRL settings to start from on your own offline data, measured: the README's own-dataset path on
gymnasium-robotics' ``PointMaze_Open-v3``, as a new user takes it.

The dataset: ``--episodes`` episodes of ``--steps`` steps of a noisy proportional controller driving the point
towards each episode's goal (action ``clip(gain (goal - position) - damping velocity + N(0, noise^2))``), stored flat
with ``segment_end``. Every method trains offline on it (``training.offline.train_offline`` with
``envs.replay.SegmentGoalSampler``) and is evaluated in the env (``training.goal_online.evaluate``: success = within
0.45 of the goal at any step of ``--steps``, the env's own goals, every episode its own seed):

- ``gcbc``: GCBC, goals = future states of the same episode.
- ``qrl_defaults``: ``QRLContinuousConfig``'s defaults (C.3.3's online Fetch settings: phi offset 15, entropy term,
  no behaviour cloning).
- ``qrl_offline``: C.3.2's offline maze2d settings (phi offset 500, beta 0.01, BC weight 0.05 on the dataset action's
  negative log-likelihood, no entropy term), critic goals random dataset states, BC goals future states.
- ``qrl_offline_scaled``: ``qrl_offline`` with the actor's distance term divided by its batch mean
  (``actor_distance_scale="batch_mean"``, as OGBench's QRL), so the BC weight is relative to a unit-sized critic term.

Every evaluation also records the fraction of episodes at the goal at their last step (a policy that arrives and
stays). At the last budget, each ``qrl_offline_scaled`` agent then acts through ``--policies``, QRL's deployable
policies built by :func:`~platonic_rl.agents.qrl_policies.make_policy` with its defaults (what a user gets), on the
same episodes: ``graph_waypoints`` (over the dataset's states, the actor between waypoints), ``graph_waypoints_gcbc``
(GCBC of the same seed between them; needs ``gcbc`` in ``--methods``) and ``lookahead``.

    python -m platonic_rl.benchmarks.own_dataset --out-dir results/own_dataset
"""
from __future__ import annotations

import dataclasses
import time
from typing import Literal

import numpy as np
import tyro

from platonic_rl import agents
from platonic_rl.agents.contract import host_policy
from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.agents.qrl_policies import make_policy
from platonic_rl.benchmarks import report
from platonic_rl.envs.goal_env import GoalEnvAdapter, make_gymnasium_vector_env
from platonic_rl.envs.replay import SegmentGoalSampler
from platonic_rl.training.goal_online import evaluate_rates
from platonic_rl.training.offline import TrainConfig, train_offline
from platonic_rl.training.schedule import episode_seeds

TASK = "PointMaze_Open-v3"
Method = Literal["gcbc", "qrl_defaults", "qrl_offline", "qrl_offline_scaled"]
METHODS: tuple[Method, ...] = ("gcbc", "qrl_defaults", "qrl_offline", "qrl_offline_scaled")
Policy = Literal["graph_waypoints", "graph_waypoints_gcbc", "lookahead"]
POLICY_AGENT = "qrl_offline_scaled"  # the QRL agent the policies act with: the registry's offline preset


@dataclasses.dataclass(frozen=True)
class Args:
    """QRL settings on a small own offline dataset (see the module docstring)."""
    methods: tuple[Method, ...] = METHODS
    seeds: tuple[int, ...] = (0, 1, 2)
    episodes: int = 200
    """Dataset episodes (the controller's)."""
    steps: int = 100
    """Steps per dataset and evaluation episode."""
    noise: float = 0.5
    """Standard deviation of the controller's Gaussian action noise (before clipping to [-1, 1])."""
    updates: tuple[int, ...] = (1_000, 3_000)
    """Evaluate after each of these numbers of updates (increasing)."""
    batch_size: int = 256
    eval_episodes: int = 50
    width: int = 128
    """Hidden width of every network (2 layers each; QRL's IQE head 16 x 16 on a 64-d latent: the maze2d cpu size)."""
    policies: tuple[Policy, ...] = ("graph_waypoints", "graph_waypoints_gcbc", "lookahead")
    """QRL's deployable policies acting with each qrl_offline_scaled agent at the last budget (make_policy's
    defaults); graph_waypoints_gcbc needs gcbc in --methods."""
    out_dir: str = "results/own_dataset"

    def __post_init__(self):
        for name in ("episodes", "steps", "batch_size", "eval_episodes", "width"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not self.updates or list(self.updates) != sorted(set(self.updates)) or self.updates[0] < 1:
            raise ValueError(f"--updates must be increasing positive numbers, got {self.updates}")
        if self.noise < 0:
            raise ValueError(f"--noise must be >= 0, got {self.noise}")
        if self.episodes % 10:
            raise ValueError(f"--episodes must be a multiple of 10 (the vector env's size), got {self.episodes}")
        if self.policies and POLICY_AGENT not in self.methods:
            raise ValueError(f"--policies act with {POLICY_AGENT}: add it to --methods, or pass --policies with no "
                             f"value")
        if "graph_waypoints_gcbc" in self.policies and "gcbc" not in self.methods:
            raise ValueError("--policies graph_waypoints_gcbc puts GCBC between QRL's waypoints: add gcbc to --methods")


def make_env(num_envs: int, steps: int) -> GoalEnvAdapter:
    return GoalEnvAdapter(make_gymnasium_vector_env(TASK, num_envs, max_episode_steps=steps), episode_length=steps)


def controller(noise: float, rng: np.random.Generator, gain: float = 1.0, damping: float = 0.3):
    """The data's behaviour policy: a proportional controller on the goal's position, damped, with noise."""
    def policy(obs, goals):
        action = gain * (goals[:, :2] - obs[:, :2]) - damping * obs[:, 2:4]
        return np.clip(action + noise * rng.standard_normal(action.shape), -1.0, 1.0)
    return policy


def generate(episodes: int, steps: int, noise: float, seed: int = 0) -> dict[str, np.ndarray]:
    """``episodes`` controller episodes stored flat: observations, actions, next_observations, rewards (-1),
    segment_end (True at each episode's last step) and success (per episode, repeated per step)."""
    env = make_env(10, steps)
    rng = np.random.default_rng(seed)
    policy = controller(noise, rng)
    seeds = episode_seeds(seed, episodes)  # every episode its own reset seed, none an evaluation's
    parts = [env.rollout(policy, seed=seeds[b:b + 10]) for b in range(0, episodes, 10)]
    obs = np.concatenate([p["observations"] for p in parts])            # [E, T + 1, 4]
    actions = np.concatenate([p["actions"] for p in parts])             # [E, T, 2]
    success = np.concatenate([p["success"] for p in parts])
    end = np.zeros(obs[:, 1:].shape[:2], bool)
    end[:, -1] = True
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    return dict(observations=flat(obs[:, :-1]), actions=flat(actions).astype(np.float32),
                next_observations=flat(obs[:, 1:]), rewards=-np.ones(end.size, np.float32), segment_end=flat(end),
                success=np.repeat(success, steps))


def qrl_config(method: str, width: int) -> QRLContinuousConfig:
    """The registry's QRL presets at this width: ``qrl_defaults`` is ``online``, ``qrl_offline_scaled`` is
    ``offline``, ``qrl_offline`` is ``offline`` with the paper's unscaled distance term."""
    sizes = dict(obs_dim=4, action_dim=2, encoder_hidden=(width,) * 2, latent_dim=64, projector_hidden=(width,),
                 iqe_components=16, iqe_dim_per_component=16, dynamics_hidden=(width,) * 2, actor_hidden=(width,) * 2)
    if method == "qrl_defaults":
        return agents.make_config("qrl_continuous", preset="online", **sizes)
    scale = "batch_mean" if method == "qrl_offline_scaled" else "none"
    return agents.make_config("qrl_continuous", preset="offline", actor_distance_scale=scale, **sizes)


def make_agent(method: str, width: int, seed: int, data: dict, batch_size: int):
    """The agent and its batch sampler."""
    if method == "gcbc":
        agent = GCBCAgent.create(GCBCConfig(obs_dim=4, action_dim=2, hidden=(width,) * 2), seed)
        return agent, SegmentGoalSampler.create(data, batch_size, p_future=1.0)
    p_future = 0.5 if method == "qrl_defaults" else 0.0  # the online loop's relabelling; C.3.2: random states
    agent = QRLContinuousAgent.create(qrl_config(method, width), seed)
    return agent, SegmentGoalSampler.create(data, batch_size, p_future=p_future, bc_goals=method != "qrl_defaults")


def run(args: Args) -> dict:
    start = time.time()
    data = generate(args.episodes, args.steps, args.noise)
    keys = ("observations", "actions", "next_observations", "rewards", "segment_end")
    train_data = {k: data[k] for k in keys}
    controller_success = float(data["success"][::args.steps].mean())  # one value per episode
    print(f"{TASK}: {args.episodes} controller episodes x {args.steps} steps (noise {args.noise}): success "
          f"{controller_success:.2f}", flush=True)
    env = make_env(10, args.steps)
    rows, trained = [], {}  # trained: (method, seed) -> the agent at the last budget
    for method in sorted(args.methods, key=lambda m: m != "gcbc"):  # GCBC first: a policy may use it
        for seed in args.seeds:
            agent, sampler = make_agent(method, args.width, seed, train_data, args.batch_size)
            done, t = 0, time.time()
            for target in args.updates:
                config = TrainConfig(steps=target - done, batch_size=args.batch_size, log_every=target - done,
                                     checkpoint_every=0, progress=False, seed=1_000 * seed + target)
                agent, history = train_offline(agent, train_data, config, sampler=sampler,
                                               allow_online_objective=method == "qrl_defaults")  # measured as such
                done = target
                policy = lambda obs, goals, a=agent: np.asarray(a.step(None, obs, goals)[0])  # noqa: E731
                rates = evaluate_rates(policy, env, args.eval_episodes, seed=10_000 + seed)
                rows.append(dict(method=method, seed=seed, updates=target, **rates,
                                 train_seconds=time.time() - t, **{k: float(v) for k, v in history[-1].items()
                                                                   if np.ndim(v) == 0}))
                print(f"{method} seed {seed}: {target:,} updates ({time.time() - t:.0f} s): success "
                      f"{rates['success']:.2f}, at the goal at the end {rates['at_goal_at_end']:.2f}", flush=True)
            trained[method, seed] = agent
    policy_rows = [policy_row(name, trained, seed, train_data["observations"], env, args)
                   for name in args.policies for seed in args.seeds]
    record = dict(task=TASK, dataset=dict(episodes=args.episodes, steps=args.steps, noise=args.noise,
                                          controller_success=controller_success),
                  rows=rows, policy_rows=policy_rows)
    table = format_table(record, args)
    return report.save_run(args.out_dir, "platonic_rl.benchmarks.own_dataset", args, record, table,
                           total_seconds=time.time() - start)


def policy_row(name: str, trained: dict, seed: int, states: np.ndarray, env, args: Args) -> dict:
    """QRL's deployable policy ``name`` built from seed ``seed``'s :data:`POLICY_AGENT` (and the dataset's states, and
    its GCBC), evaluated on that seed's episodes."""
    qrl = trained[POLICY_AGENT, seed]
    if name == "lookahead":
        policy = make_policy("lookahead", qrl)
    else:
        inner = dict(inner=trained["gcbc", seed]) if name == "graph_waypoints_gcbc" else {}
        policy = make_policy("graph_waypoints", qrl, states, **inner)
    t = time.time()
    rates = evaluate_rates(host_policy(policy), env, args.eval_episodes, seed=10_000 + seed)
    print(f"{name} seed {seed}: success {rates['success']:.2f}, at the goal at the end {rates['at_goal_at_end']:.2f}",
          flush=True)
    return dict(policy=name, seed=seed, updates=args.updates[-1], **rates, eval_seconds=time.time() - t)


def format_table(record: dict, args: Args) -> str:
    lines = [f"{record['task']}, {args.episodes} episodes x {args.steps} steps of a noisy controller (noise "
             f"{args.noise}, its own success {record['dataset']['controller_success']:.2f}); success over "
             f"{args.eval_episodes} episodes, mean ± std over seeds {list(args.seeds)}; width {args.width}, batch "
             f"{args.batch_size}",
             f"{'method':<22}" + "".join(f"{f'{u:,} updates':>18}" for u in args.updates) + f"{'seconds':>10}"]
    for method in args.methods:
        cells, seconds = [], []
        for u in args.updates:
            values = [r["success"] for r in record["rows"] if r["method"] == method and r["updates"] == u]
            cells.append(f"{np.mean(values):.2f} ± {np.std(values):.2f}" if values else "--")
            seconds += [r["train_seconds"] for r in record["rows"] if r["method"] == method and r["updates"] == u]
        lines.append(f"{method:<22}" + "".join(f"{c:>18}" for c in cells) + f"{max(seconds, default=0):>10.0f}")
    mean_std = lambda rows, key: f"{np.mean([r[key] for r in rows]):.2f} ± {np.std([r[key] for r in rows]):.2f}"  # noqa: E731
    last = args.updates[-1]
    acting = [(method, [r for r in record["rows"] if r["method"] == method and r["updates"] == last])
              for method in args.methods]
    acting += [(f"{POLICY_AGENT}: {name}", [r for r in record.get("policy_rows", []) if r["policy"] == name])
               for name in args.policies]
    lines += [f"\nAt {last:,} updates, acting with each (QRL's policies: make_policy's defaults on the {POLICY_AGENT} "
              f"agents)", f"{'policy':<44}{'success':>14}{'at the goal at the end':>26}"]
    lines += [f"{label:<44}{mean_std(rows, 'success'):>14}{mean_std(rows, 'at_goal_at_end'):>26}"
              for label, rows in acting if rows and all("at_goal_at_end" in r for r in rows)]
    return "\n".join(lines)


def main(argv=None):
    return run(tyro.cli(Args, args=argv))


if __name__ == "__main__":
    main()
