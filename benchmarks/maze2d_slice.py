"""QRL at the paper's scale on one maze2d layout for a wall-clock budget, trained in resumable chunks and
evaluated in the pure-JAX point maze: the run that tells "QRL needs the paper's scale" from "QRL here is
broken" (Table 4.2, appendix C.3.2). It needs only jax, flax, optax, orbax-checkpoint and numpy where it runs
(tqdm and filelock are used where installed): the dataset is generated beforehand (MuJoCo, D4RL's procedure with its action noise)
and carried as one ``.npz``; the episodes run in :class:`~platonic_rl.envs.point_maze.PointMaze`.

    python -m platonic_rl.benchmarks.maze2d_slice --prepare-dataset data/maze2d-medium.npz --layout medium
    python -m platonic_rl.benchmarks.maze2d_slice --dataset data/maze2d-medium.npz --minutes 8 --out-dir DIR
    python -m platonic_rl.benchmarks.maze2d_slice --plot DIR/signals.png DIR/results.json   # where matplotlib is

Training runs in chunks of ``--chunk`` updates into ``<out-dir>/run`` (or ``--run-dir``); a later call with
the same settings continues from the latest checkpoint, up to ``--updates`` in all. A chunk starts only if
the time left (``--minutes`` minus what has run, minus the evaluation's reserve) fits it. After the first
chunk and at the end the agent is evaluated: its actor (the mode action, single and multi goal, D4RL-normalised
score), and its critic alone acting greedily with the *true* dynamics -- the action of a 9x9 grid whose true
next state has the smallest learned distance to the goal (max over critics): the critic-quality check,
independent of the actor and the learned model. ``results.json`` holds the settings, the scale reached
(updates, samples, updates/s), the convergence signals (Lagrange multiplier, constraint violation, mean
goal distance) with their change over the last 20% of updates, and the scores at each evaluation.

Episodes here run in the JAX point maze (equal to MuJoCo's step away from walls, slightly different at wall
contacts: see :mod:`~platonic_rl.envs.point_maze`); its multi-goal goals are never the start's cell.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.agents.qrl_diagnostics import true_dynamics_greedy_actions
from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.maze2d import qrl_config, scales
from platonic_rl.envs import maze2d
from platonic_rl.envs.jax_env import rollout
from platonic_rl.envs.maze2d import normalised_data, normaliser
from platonic_rl.envs.point_maze import PointMaze
from platonic_rl.envs.replay import SegmentGoalSampler
from platonic_rl.training.offline import TrainConfig, train_offline
from platonic_rl.training.run import RunDirectory
from platonic_rl.training.signals import SIGNALS, convergence, signal_value

GRID = 9  # actions per dimension of the critic check's grid over [-1, 1]^2


@dataclasses.dataclass(frozen=True)
class Args:
    layout: str = "medium"
    dataset: str | None = None
    """The ``.npz`` written by ``--prepare-dataset`` (required unless preparing one)."""
    prepare_dataset: str | None = None
    """Generate the layout's D4RL-procedure dataset (MuJoCo; ``--dataset-size`` transitions, action noise 0.5)
    into this ``.npz`` and stop."""
    dataset_size: int | None = None
    """Transitions of a prepared dataset (default: D4RL's size for the layout)."""
    dataset_seed: int = 0
    size: str = "paper"
    """``paper``: C.3.2's QRL (critic 3x1024, IQE-maxmean 64x32, actor 4x1024, batch 4096); ``cpu``: the maze2d
    benchmark's cpu preset (2x128 MLPs, IQE-maxmean 16x16, batch 256, actor lr 3e-4); ``tiny``: a smoke size
    for CPUs and tests (NOT comparable to anything)."""
    width: int | None = None
    """Every hidden layer of the size's critic encoder, dynamics model, projector and actor at this width, their
    depths and the IQE head kept (as the speed report's ``maze2d_qrl_w<W>_b<B>`` cases); default: the size's own."""
    batch_size: int | None = None
    """Transitions per update; default: the size's own."""
    updates: int = 200_000
    """Updates in all (C.3.2: 2e5); a run stops earlier when the time budget ends."""
    chunk: int = 5_000
    """Updates per chunk (a checkpoint after each)."""
    minutes: float = 8.0
    """Wall-clock budget of the whole command, evaluations included."""
    eval_reserve: float = 60.0
    """Seconds kept for the final evaluation and saving."""
    episodes: int = 100
    """Evaluation episodes per setting (single goal, multi goal)."""
    episode_length: int = 0
    """Steps per evaluation episode; 0: the layout's D4RL time limit (shorter: a smoke run, scores not D4RL's)."""
    seed: int = 0
    out_dir: str = "results/maze2d_slice"
    run_dir: str | None = None
    """Default: <out_dir>/run."""
    plot: tuple[str, ...] = ()
    """``OUT.png RESULTS.json [RESULTS.json ...]``: only draw one picture of a run's calls (where matplotlib is)."""

    def __post_init__(self):
        if self.episode_length < 0:
            raise ValueError(f"--episode-length must be >= 0 (0: the layout's limit), got {self.episode_length}")
        for name in ("updates", "chunk", "episodes", "width", "batch_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.updates % self.chunk:
            raise ValueError(f"--updates={self.updates} must be a multiple of --chunk={self.chunk}")
        if self.size not in SIZES:
            raise ValueError(f"--size must be one of {sorted(SIZES)}, got {self.size!r}")
        if not self.minutes > 0:
            raise ValueError(f"--minutes must be > 0, got {self.minutes}")
        if self.plot and len(self.plot) < 2:
            raise ValueError(f"--plot needs OUT.png and at least one results.json, got {list(self.plot)}")
        if self.dataset is None and self.prepare_dataset is None and not self.plot:
            raise ValueError("--dataset (a prepared .npz) or --prepare-dataset PATH is required")
        maze2d.get_layout(self.layout)


def _paper() -> tuple[QRLContinuousConfig, int]:
    scale = scales()["paper"]
    return scale.qrl, scale.qrl_train.batch_size


def _cpu() -> tuple[QRLContinuousConfig, int]:
    scale = scales()["cpu"]
    return scale.qrl, scale.qrl_train.batch_size


def _tiny() -> tuple[QRLContinuousConfig, int]:
    return qrl_config((32, 32), 16, (32,), 4, 4, (32, 32), 3e-4), 64


SIZES = {"paper": _paper, "cpu": _cpu, "tiny": _tiny}


def agent_setting(args: Args) -> tuple[QRLContinuousConfig, int, str]:
    """The QRL config, the batch size and a label of the run's size (``--size``, ``--width``, ``--batch-size``)."""
    config, batch = SIZES[args.size]()
    label = args.size
    if args.width is not None:
        w = args.width
        config = dataclasses.replace(config, encoder_hidden=(w,) * len(config.encoder_hidden),
                                     dynamics_hidden=(w,) * len(config.dynamics_hidden),
                                     projector_hidden=(w,) * len(config.projector_hidden),
                                     actor_hidden=(w,) * len(config.actor_hidden))
        label += f" at width {w}"
    if args.batch_size is not None:
        batch = args.batch_size
        label += f", batch {batch}"
    return config, batch, label


# ---------------------------------------------------------------------------------------------- data


def prepare_dataset(path: str | Path, layout: str, size: int | None = None, seed: int = 0) -> dict:
    """Generate a dataset with :func:`maze2d.generate` (MuJoCo; action noise N(0, 0.5^2)) and save it as one
    ``.npz``: the trajectory's states ``[N + 1, 4]`` (float32, D4RL's coordinates), actions ``[N, 2]`` and
    segment_end ``[N]``, with its layout, size, seed and action noise. Returns that description."""
    start = time.time()
    data = maze2d.generate(layout, size, seed, progress=True)
    states = np.concatenate([data["observations"], data["next_observations"][-1:]]).astype(np.float32)
    info = dict(layout=maze2d.get_layout(layout).name, transitions=len(data["actions"]), seed=seed,
                action_noise=maze2d.ACTION_NOISE, episodes=int(data["segment_end"].sum()),
                generation_seconds=round(time.time() - start, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, states=states, actions=data["actions"].astype(np.float32),
                        segment_end=data["segment_end"], info=json.dumps(info))
    return info


def load_prepared(path: str | Path, layout: str) -> tuple[dict, dict]:
    """A :func:`prepare_dataset` file as (flat arrays in D4RL's coordinates, its description); refused if it
    holds another layout."""
    with np.load(path) as f:
        missing = {"states", "actions", "segment_end", "info"} - set(f.files)
        if missing:
            raise ValueError(f"--dataset {str(path)!r} is not a prepared maze2d file: it lacks {sorted(missing)}")
        info = json.loads(str(f["info"]))
        states, actions, ends = f["states"], f["actions"], f["segment_end"].astype(bool)
        next_states = f["next_states"] if "next_states" in f.files else None
    if info["layout"] != maze2d.get_layout(layout).name:
        raise ValueError(f"--dataset {str(path)!r} holds maze2d-{info['layout']}, not --layout {layout!r}")
    if next_states is not None:  # several trajectories (save_prepared_transitions): each row's own next state
        if not len(states) == len(next_states) == len(actions) == len(ends):
            raise ValueError(f"--dataset {str(path)!r}: states, next_states, actions and segment_end must have as "
                             "many rows")
        return dict(observations=states, next_observations=next_states, actions=actions, segment_end=ends), info
    if len(states) != len(actions) + 1 or len(ends) != len(actions):
        raise ValueError(f"--dataset {str(path)!r}: states must have one row more than actions and segment_end")
    return dict(observations=states[:-1], next_observations=states[1:], actions=actions, segment_end=ends), info


def save_prepared_transitions(path: str | Path, data: dict, info: dict) -> None:
    """Flat transitions of several trajectories (as :func:`platonic_rl.envs.maze2d_jax_data.generate` returns) as a
    file :func:`load_prepared` reads: states and next_states ``[N, 4]``, actions, segment_end and ``info`` (which
    must name the layout and count the episodes)."""
    missing = {"layout", "episodes", "action_noise"} - set(info)
    if missing:
        raise ValueError(f"save_prepared_transitions: info lacks {sorted(missing)}")
    if not str(path).endswith(".npz"):
        raise ValueError(f"save_prepared_transitions: path must end in .npz, got {str(path)!r}")
    ends = np.asarray(data["segment_end"], bool)
    if info["episodes"] != int(ends.sum()) or not ends[-1]:
        raise ValueError(f"save_prepared_transitions: info['episodes']={info['episodes']} but segment_end marks "
                         f"{int(ends.sum())} segment ends (and must mark the last row)")
    inside = ~ends[:-1]  # within a segment, a transition's next state is the following transition's state
    if not np.array_equal(data["next_observations"][:-1][inside], data["observations"][1:][inside]):
        raise ValueError("save_prepared_transitions: within a segment, next_observations[i] must equal "
                         "observations[i + 1]")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, states=data["observations"].astype(np.float32),
             next_states=data["next_observations"].astype(np.float32), actions=data["actions"].astype(np.float32),
             segment_end=data["segment_end"], info=json.dumps(info))


# ---------------------------------------------------------------------------------------- evaluation


@functools.partial(jax.jit, static_argnames=("layout", "mode", "episodes", "policy", "episode_length"))
def episode_returns(agent: QRLContinuousAgent, key: jax.Array, layout: str, mode: str, episodes: int,
                    policy: str, episode_length: int = 0) -> jax.Array:
    """Returns ``[episodes]`` (steps within 0.5 of the goal, D4RL's sparse reward) of ``policy`` ("actor": the
    actor's mode action; "critic": the critic-quality check,
    :func:`~platonic_rl.agents.qrl_diagnostics.true_dynamics_greedy_actions`) in the JAX point maze, episodes of
    ``episode_length`` steps (0: the layout's time limit)."""
    env = PointMaze(layout, goals=mode, episode_length=episode_length)
    norm = normaliser(maze2d.get_layout(layout))
    if policy == "actor":
        act = lambda obs, goals, k: agent.act(norm(obs), norm(goals))  # noqa: E731
    else:
        act = lambda obs, goals, k: true_dynamics_greedy_actions(agent, env, obs, goals, GRID)  # noqa: E731
    out = rollout(env, act, key, episodes)
    reached = jnp.linalg.norm(out["observations"][:, 1:, :2] - out["goals"][:, None, :2], axis=-1) <= maze2d.GOAL_RADIUS
    return reached.sum(1)


def evaluate(agent: QRLContinuousAgent, layout: str, episodes: int, seed: int, episode_length: int = 0) -> dict:
    """Mean D4RL-normalised score of the actor and of the critic check, single and multi goal."""
    out = {}
    for policy in ("actor", "critic"):
        for k, mode in enumerate(("single", "multi")):
            key = jax.random.PRNGKey(10_000 * k + seed)
            returns = np.asarray(episode_returns(agent, key, layout, mode, episodes, policy, episode_length))
            out[f"{policy}_{mode}"] = float(maze2d.normalized_score(layout, returns).mean())
    return out


# ---------------------------------------------------------------------------------------------- run


def run(args: Args) -> dict:
    start = time.time()
    deadline = start + 60.0 * args.minutes
    config, batch, label = agent_setting(args)
    data, info = load_prepared(args.dataset, args.layout)
    layout = maze2d.get_layout(args.layout)
    data = normalised_data(data, layout)
    print(f"maze2d-{layout.name}: {len(data['actions']):,} transitions, {info['episodes']:,} episodes, action noise "
          f"{info['action_noise']}; QRL {label}: critic {config.encoder_hidden}, IQE {config.iqe_components}x"
          f"{config.iqe_dim_per_component}, actor {config.actor_hidden}, batch {batch}; {jax.devices()}", flush=True)
    # Committed to the device as the offline loop's agent is: the evaluations compile once
    agent = jax.device_put(QRLContinuousAgent.create(config, seed=args.seed), jax.local_devices()[0])
    sampler = SegmentGoalSampler.create(data, batch, p_future=0.0, bc_goals=True)
    run_dir = Path(args.run_dir or Path(args.out_dir) / "run")
    evaluations, chunks, history = [], [], []

    def evaluate_at(updates: int) -> None:
        t = time.time()
        evaluations.append(dict(updates=updates, **evaluate(agent, layout.name, args.episodes, args.seed,
                                                            args.episode_length)))
        print(f"evaluation at {updates:,} updates ({time.time() - t:.0f} s): {evaluations[-1]}", flush=True)
    done = RunDirectory.saved_step(run_dir)
    if done:
        print(f"continuing {run_dir} from update {done:,}", flush=True)
    while done < args.updates:
        left = deadline - time.time() - args.eval_reserve
        if chunks:
            per_chunk = min(c["seconds"] for c in chunks)
            if per_chunk > left:
                print(f"stopping at {done:,} updates: a chunk takes {per_chunk:.0f} s, {left:.0f} s left", flush=True)
                break
        target = min(done + args.chunk, args.updates)
        t = time.time()
        train = TrainConfig(steps=target, batch_size=batch, log_every=min(1_000, args.chunk),
                            checkpoint_every=args.chunk, progress=False, seed=args.seed)
        agent, history = train_offline(agent, data, train, run_dir=run_dir, desc="qrl", sampler=sampler)
        jax.block_until_ready(agent)
        seconds = time.time() - t
        chunks.append(dict(updates=target - done, from_update=done, seconds=seconds))
        done = target
        row = history[-1]
        print(f"{done:,} updates in {time.time() - start:.0f} s (this chunk {seconds:.0f} s): "
              + ", ".join(f"{s} {signal_value(row, s):.3g}" for s in SIGNALS),
              flush=True)
        if len(chunks) == 1:
            evaluate_at(done)
            if time.time() > deadline - args.eval_reserve:
                break
    if not evaluations or evaluations[-1]["updates"] != done:
        evaluate_at(done)
    steady = chunks[1:] or chunks  # the first chunk compiles
    updates_per_second = sum(c["updates"] for c in steady) / max(sum(c["seconds"] for c in steady), 1e-9)
    signals = convergence(history)
    record = dict(layout=layout.name, size=args.size, size_label=label, dataset=info,
                  agent_config=dataclasses.asdict(config),
                  batch_size=batch, updates=done, samples=done * batch, paper_samples=200_000 * 4096,
                  fraction_of_paper_samples=done * batch / (200_000 * 4096), chunks=chunks,
                  updates_per_second=updates_per_second, samples_per_second=updates_per_second * batch,
                  matmul_precision=str(jax.config.jax_default_matmul_precision), signals=signals,
                  evaluations=evaluations, history=history)
    table = format_table(record)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:  # where matplotlib is missing (accelerator images), the picture is drawn later with --plot
        import matplotlib  # noqa: F401
        plots = {"signals.png": lambda p: plot(p, [dict(record, jax_devices=[str(d) for d in jax.devices()])])}
    except ImportError:
        plots = None
    return report.save_run(out, "platonic_rl.benchmarks.maze2d_slice", args, record, table, plots=plots,
                           total_seconds=time.time() - start)


def format_table(record: dict) -> str:
    lines = [f"maze2d-{record['layout']} QRL slice, size {record.get('size_label', record['size'])!r}: "
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
    fig.suptitle(f"maze2d-{r['layout']} QRL, size {r.get('size_label', r['size'])}: {r['updates']:,} updates of batch "
                 f"{r['batch_size']} "
                 f"({100 * r['fraction_of_paper_samples']:.0f}% of the paper's samples), 1 seed, "
                 f"{', '.join(r['jax_devices'])}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m platonic_rl.benchmarks.maze2d_slice",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(Args):
        flag = "--" + field.name.replace("_", "-")
        if field.name == "plot":
            parser.add_argument(flag, nargs="+", default=())
        else:
            kind = {"int": int, "float": float}.get(str(field.type).split(" |")[0], str)
            parser.add_argument(flag, type=kind, default=field.default)
    values = vars(parser.parse_args(argv))
    values["plot"] = tuple(values["plot"])
    return Args(**values)


def main(argv=None):
    args = parse_args(argv)
    if args.plot:
        plot(args.plot[0], [json.loads(Path(p).read_text()) for p in args.plot[1:]])
        return None
    if args.prepare_dataset is not None:
        info = prepare_dataset(args.prepare_dataset, args.layout, args.dataset_size, args.dataset_seed)
        print(f"saved {args.prepare_dataset}: {info}")
        return info
    return run(args)


if __name__ == "__main__":
    main()
