"""Offline training loop: jitted chunks of updates, progress bar, JSONL/CSV metrics, orbax checkpoints,
exact resume.

Works with any agent exposing ``update(batch) -> (agent, metrics)``: a chunk of ``log_every`` updates,
each on a batch sampled uniformly (with replacement) from ``data``, runs as one compiled ``lax.scan``.
The sampling key is part of the checkpoint, so a resumed run reproduces an uninterrupted one exactly.

CLI (QRL on the discretised MountainCar dataset, presets shared with ``benchmarks.mountaincar``)::

    python -m platonic_rl.qrl.train --scale quick --agent.goal-mode single      # ~1 min; then scored at the end
    python -m platonic_rl.qrl.train --help                                      # every setting of the cpu preset
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from tqdm.auto import tqdm

from platonic_rl.agents.qrl import QRLAgent, QRLConfig


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 20_000
    """Total gradient steps."""
    batch_size: int = 1024
    seed: int = 0
    """Seed of the batch sampler (the agent has its own seed)."""
    log_every: int = 500
    """Updates per metrics row (the row holds their means)."""
    updates_per_call: int = 10
    """Updates per compiled call (a ``lax.scan``); the progress bar moves after each call. Must divide
    log_every. Larger calls save a little dispatch time on small networks; the result is the same."""
    checkpoint_every: int = 5_000
    """Must be a multiple of log_every. 0 disables checkpoints."""
    keep_checkpoints: int = 2
    resume: bool = True
    """Continue from the latest checkpoint in run_dir/checkpoints if there is one."""
    progress: bool = True

    def __post_init__(self):
        for name in ("steps", "batch_size", "log_every", "updates_per_call", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.steps % self.log_every:
            raise ValueError(f"TrainConfig.steps={self.steps} must be a multiple of log_every="
                             f"{self.log_every}")
        if self.log_every % self.updates_per_call:
            raise ValueError(f"TrainConfig.log_every={self.log_every} must be a multiple of updates_per_call="
                             f"{self.updates_per_call}")
        if self.checkpoint_every < 0 or (self.checkpoint_every and self.checkpoint_every % self.log_every):
            raise ValueError(f"TrainConfig.checkpoint_every={self.checkpoint_every} must be 0 or a "
                             f"multiple of log_every={self.log_every}")


def _check_data(data: dict[str, Any]) -> int:
    if not data:
        raise ValueError("data must be a non-empty dict of arrays with a common leading dimension")
    sizes = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in data.items()}
    if len(set(sizes.values())) != 1 or None in sizes.values():
        raise ValueError(f"data arrays must share one leading dimension, got {sizes}")
    n = next(iter(sizes.values()))
    if n == 0:
        raise ValueError("data is empty (leading dimension 0)")
    return n


@functools.partial(jax.jit, static_argnames=("batch_size", "length"))
def _train_chunk(agent, key, data, batch_size: int, length: int):
    n = jax.tree_util.tree_leaves(data)[0].shape[0]

    def body(carry, _):
        agent, key = carry
        key, sample_key = jax.random.split(key)
        idx = jax.random.randint(sample_key, (batch_size,), 0, n)
        agent, metrics = agent.update(jax.tree_util.tree_map(lambda x: x[idx], data))
        return (agent, key), metrics

    (agent, key), metrics = jax.lax.scan(body, (agent, key), None, length=length)
    return agent, key, jax.tree_util.tree_map(jnp.mean, metrics)


class MetricsLog:
    """metrics.jsonl (one row per log point) + metrics.csv written from it; on resume, rows after the
    restored ``resume_step`` (by ``row[step_key]``) are dropped so nothing is logged twice."""

    def __init__(self, run_dir: Path, resume_step: int, step_key: str = "step"):
        self.jsonl, self.csv = run_dir / "metrics.jsonl", run_dir / "metrics.csv"
        rows = self.read(run_dir) if resume_step and self.jsonl.exists() else []
        self.rows = [r for r in rows if r[step_key] <= resume_step]
        self._flush()

    @staticmethod
    def read(run_dir: Path) -> list[dict]:
        """The rows logged in ``run_dir/metrics.jsonl`` (e.g. by a run still in progress)."""
        path = Path(run_dir) / "metrics.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def append(self, row: dict):
        self.rows.append(row)
        with self.jsonl.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def _flush(self):
        self.jsonl.write_text("".join(json.dumps(r) + "\n" for r in self.rows))

    def write_csv(self):
        if not self.rows:
            return
        keys = list(dict.fromkeys(k for r in self.rows for k in r))
        with self.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(self.rows)


def checkpoint_manager(run_dir: Path, keep: int) -> ocp.CheckpointManager:
    """Synchronous orbax manager for ``run_dir/checkpoints`` keeping the ``keep`` latest steps."""
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False)
    return ocp.CheckpointManager((run_dir / "checkpoints").absolute(), options=options,
                                 item_handlers=ocp.StandardCheckpointHandler())  # also reads shapes (metadata)


def restore_checkpoint(manager: ocp.CheckpointManager, target: Any, step: int | None = None):
    """Restore ``target``'s structure from ``step`` (default latest); clear error if unusable."""
    step = manager.latest_step() if step is None else step
    if step is None:
        raise FileNotFoundError(f"no checkpoint found in {manager.directory}")
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, target)
    try:
        return step, manager.restore(step, args=ocp.args.StandardRestore(abstract))
    except Exception as e:  # orbax raises many types for missing/corrupt/mismatched files
        raise RuntimeError(
            f"checkpoint at step {step} in {manager.directory} is corrupt or was written by another agent "
            f"config ({type(e).__name__}: {str(e)[:300]}). If this directory belongs to another run, use another "
            f"run directory; if the checkpoint is damaged, delete the folder {manager.directory / str(step)} to "
            "resume from the previous checkpoint.") from e


def open_online_run(run_dir, state: dict, resume: bool, step_key: str = "env_steps"):
    """For the online loops: (checkpoint manager, metrics log, state) of ``run_dir`` (all None but the state
    without a run dir); with ``resume`` and a checkpoint, ``state`` is restored from the latest one.

    A replay buffer (``state["buffer"]``, with ``resized``) saved with a different capacity -- the run is
    resumed with a larger ``env_steps`` budget, which sizes the buffer -- is restored at its saved size and
    then resized to this state's (keeping every episode, or a clear error if they no longer fit)."""
    if run_dir is None:
        return None, None, state
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    manager = checkpoint_manager(run_dir, keep=2)
    if resume and manager.latest_step() is not None:
        buffer = state.get("buffer")
        saved = _saved_capacity(manager) if buffer is not None else None
        if saved is None or saved == buffer.capacity:
            _, state = restore_checkpoint(manager, state)
        else:
            _, state = restore_checkpoint(manager, {**state, "buffer": buffer.resized(saved)})
            try:
                state["buffer"] = state["buffer"].resized(buffer.capacity)
            except ValueError as e:
                raise ValueError(f"cannot resume {run_dir}: its replay buffer does not fit this config's "
                                 f"capacity of {buffer.capacity} episodes ({e}); use a larger budget or "
                                 "buffer_episodes") from e
    return manager, MetricsLog(run_dir, int(state[step_key]), step_key=step_key), state


def _saved_capacity(manager: ocp.CheckpointManager) -> int | None:
    """Episode capacity of the replay buffer in the latest checkpoint (None if its metadata is unreadable:
    the restore then reports the problem)."""
    try:
        return int(manager.item_metadata(manager.latest_step())["buffer"]["observations"].shape[0])
    except Exception:  # noqa: BLE001 -- missing/corrupt metadata: let restore_checkpoint explain
        return None


def close_online_run(manager, log) -> None:
    """Write the CSV log and wait for pending checkpoint writes."""
    if log:
        log.write_csv()
    if manager:
        manager.wait_until_finished()
        manager.close()


# TrainConfig fields that may differ when a run is continued: the budget (a run can be extended) and
# settings that change neither the updates nor the metrics rows.
RESUMABLE_SETTINGS = ("steps", "resume", "progress", "updates_per_call", "checkpoint_every", "keep_checkpoints")


def data_fingerprint(data: dict[str, Any]) -> dict[str, dict]:
    """Shape, dtype and a SHA-256 prefix of every array: enough to tell two datasets apart."""
    fingerprint = {}
    for key, value in sorted(data.items()):
        array = np.ascontiguousarray(np.asarray(value))
        fingerprint[key] = dict(shape=list(array.shape), dtype=str(array.dtype),
                                sha256=hashlib.sha256(array.tobytes()).hexdigest()[:16])
    return fingerprint


def run_settings(agent, config: TrainConfig, data: dict[str, Any]) -> dict:
    """What defines an offline run (all but RESUMABLE_SETTINGS), as it is stored in ``config.json``."""
    agent_config = getattr(agent, "config", None)
    record = dict(agent=type(agent).__name__,
                  agent_config=dataclasses.asdict(agent_config) if dataclasses.is_dataclass(agent_config) else None,
                  train_config={k: v for k, v in dataclasses.asdict(config).items() if k not in RESUMABLE_SETTINGS},
                  data=data_fingerprint(data))
    return json.loads(json.dumps(record, default=str))  # tuples -> lists, as read back from the file


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flatten(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


def check_run_settings(run_dir: Path, settings: dict) -> None:
    """Compare ``settings`` with those stored in ``run_dir/config.json``; refuse to continue a run with other
    settings (listing the fields that differ). Writes the file if the directory has none."""
    path = run_dir / "config.json"
    if not path.exists():
        path.write_text(json.dumps(dict(command=" ".join(sys.argv), **settings), indent=1))
        return
    saved = json.loads(path.read_text())
    saved.pop("command", None)
    old, new = _flatten(saved), _flatten(settings)
    differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if differ:
        lines = "\n".join(f"  {k}: saved {old.get(k)!r}, now {new.get(k)!r}" for k in differ[:20])
        more = f"\n  ... and {len(differ) - 20} more" if len(differ) > 20 else ""
        raise ValueError(f"{run_dir} holds a run with other settings; continuing it would mix two runs. "
                         f"Differences:\n{lines}{more}\nUse another run directory (the benchmark and CLI defaults "
                         f"name it after the scale and seed), or delete {run_dir} to start this one afresh.")


def train_offline(agent, data: dict[str, Any], config: TrainConfig, run_dir: str | os.PathLike | None = None,
                  desc: str = "train"):
    """Train ``agent`` on ``data`` for ``config.steps`` updates. Returns ``(agent, history)``.

    ``data``: a dict of arrays sharing their leading dimension, holding the keys the agent's ``update``
    reads (QRL: ``observations``, ``actions``, ``next_observations``, ``rewards``); each update samples
    ``batch_size`` rows uniformly with replacement.

    With ``run_dir``: the run's settings go to ``config.json`` (agent config, train config, a fingerprint
    of the data), metrics to ``metrics.jsonl``/``metrics.csv`` and checkpoints of ``{agent, sampler key}``
    to ``checkpoints/`` every ``checkpoint_every`` steps (and at the end); with ``config.resume`` the
    latest checkpoint is restored first, after checking that the stored settings are the same (only
    ``RESUMABLE_SETTINGS``, e.g. a larger ``steps``, may change).
    """
    _check_data(data)
    if hasattr(agent, "validate_dataset"):
        agent.validate_dataset(data)
    state = {"agent": agent, "sampler_key": jax.random.PRNGKey(config.seed)}
    step, manager, log = 0, None, None
    if run_dir is not None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if config.resume:
            check_run_settings(run_dir, run_settings(agent, config, data))
        else:
            (run_dir / "config.json").write_text(json.dumps(
                dict(command=" ".join(sys.argv), **run_settings(agent, config, data)), indent=1))
        if config.checkpoint_every:
            manager = checkpoint_manager(run_dir, config.keep_checkpoints)
            if config.resume and manager.latest_step() is not None:
                step, state = restore_checkpoint(manager, state)
                if step > config.steps:
                    raise ValueError(f"checkpoint step {step} in {run_dir} is beyond steps={config.steps}")
        log = MetricsLog(run_dir, step)
    history = list(log.rows) if log else []
    agent, key = state["agent"], state["sampler_key"]
    data = jax.tree_util.tree_map(jnp.asarray, data)
    calls_per_row = config.log_every // config.updates_per_call

    start = time.time()
    with tqdm(total=config.steps, initial=step, desc=desc, disable=not config.progress, unit="update",
              dynamic_ncols=True) as bar:
        if step < config.steps:
            bar.set_postfix_str("compiling")
        while step < config.steps:
            sums = None
            for _ in range(calls_per_row):
                agent, key, metrics = _train_chunk(agent, key, data, config.batch_size, config.updates_per_call)
                sums = metrics if sums is None else jax.tree_util.tree_map(jnp.add, sums, metrics)
                key.block_until_ready()  # the bar shows finished updates, not dispatched ones
                if bar.n == step:
                    bar.set_postfix_str("")  # compiled
                bar.update(config.updates_per_call)
            step += config.log_every
            row = {"step": step, **{k: float(v) / calls_per_row for k, v in sums.items()},
                   "wall_time": time.time() - start}
            history.append(row)
            if log:
                log.append(row)
            bar.set_postfix({k: f"{row[k]:.3g}" for k in ("loss", "violation", "lagrange_multiplier")
                             if k in row})
            if manager and (step % config.checkpoint_every == 0 or step == config.steps):
                manager.save(step, args=ocp.args.StandardSave({"agent": agent, "sampler_key": key}))
    if manager:
        manager.wait_until_finished()
        manager.close()
    if log:
        log.write_csv()
    return agent, history


# ---------------------------------------------------------------------------------------------- CLI


def _mountaincar_config(width: int, depth: int, latent: int, components: int, dim_per_component: int,
                        steps: int, lr: float) -> QRLConfig:
    """A scale-down of C.3.1 (same objective), observations normalised to about [-1, 1] in the encoder."""
    from platonic_rl.envs import mountaincar as mc

    hidden = (width,) * depth
    return QRLConfig(obs_center=mc.OBS_CENTER, obs_scale=mc.OBS_SCALE, encoder_hidden=hidden, latent_dim=latent,
                     projector_hidden=hidden[:max(depth - 1, 1)], iqe_components=components,
                     iqe_dim_per_component=dim_per_component, l2_dim=components * dim_per_component,
                     dynamics_hidden=hidden, learning_rate=lr, cosine_decay_steps=steps)


def mountaincar_presets() -> dict[str, tuple[QRLConfig, TrainConfig]]:
    """QRL on MountainCar at three scales, shared by this CLI and ``benchmarks.mountaincar``:

    * ``quick``: 2x128 MLPs, latent 64, IQE 8x16, batch 256, 3k steps -- a smoke run (about a minute on 2
      CPU cores), not comparable to the paper;
    * ``cpu``: 2x256 MLPs, latent 128, IQE 8x16, batch 256, 30k steps (8-10 min on 2 CPU cores);
    * ``paper``: C.3.1 -- 3x1024 MLPs, latent 256, IQE 16x32, transition weight 75, lr 5e-4 cosine,
      lambda lr 0.3, batch 4096, 5e5 steps (accelerator-sized).

    Every preset normalises observations (the velocity spans only +-0.07)."""
    from platonic_rl.envs import mountaincar as mc

    paper = QRLConfig(obs_center=mc.OBS_CENTER, obs_scale=mc.OBS_SCALE)
    return {
        "quick": (_mountaincar_config(128, 2, 64, 8, 16, 3_000, lr=1e-3), TrainConfig(steps=3_000, batch_size=256)),
        "cpu": (_mountaincar_config(256, 2, 128, 8, 16, 30_000, lr=1e-3), TrainConfig(steps=30_000, batch_size=256)),
        "paper": (paper, TrainConfig(steps=500_000, batch_size=4096, log_every=1000, checkpoint_every=50_000)),
    }


@dataclasses.dataclass(frozen=True)
class MountainCarTrainArgs:
    """Train QRL on the offline discretised-MountainCar dataset (appendix C.3.1), then score its greedy
    policy towards the top of the hill from all 25,600 states (Table 4.1's first column). ``--scale``
    picks a preset (quick: a smoke run; cpu: the default, ~10 min on 2 CPU cores; paper: C.3.1) and
    ``--help`` after it shows that preset's values; any ``--agent.*``/``--train.*`` flag overrides them.
    The cosine learning-rate schedule follows ``--train.steps`` unless ``--agent.cosine-decay-steps`` is
    given."""

    scale: Literal["quick", "cpu", "paper"] = "cpu"
    seed: int = 0
    """Seeds the dataset, the agent and the batch sampler (``--train.seed`` is set from it)."""
    run_dir: str | None = None
    """Default: runs/qrl_mountaincar/<scale>-<goal mode>-<head>-seed<seed>."""
    train: TrainConfig = TrainConfig()
    agent: QRLConfig = QRLConfig()

    def default_run_dir(self) -> str:
        return f"runs/qrl_mountaincar/{self.scale}-{self.agent.goal_mode}-{self.agent.head}-seed{self.seed}"


def parse_args(argv: list[str] | None = None) -> MountainCarTrainArgs:
    """Parse ``--scale`` first, then every other flag with that preset's values as defaults."""
    import argparse

    import tyro

    argv = sys.argv[1:] if argv is None else list(argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--scale", choices=["quick", "cpu", "paper"], default="cpu")
    known, rest = pre.parse_known_args(argv)
    agent, train = mountaincar_presets()[known.scale]
    args = tyro.cli(MountainCarTrainArgs, args=rest, prog="python -m platonic_rl.qrl.train",
                    default=MountainCarTrainArgs(scale=known.scale, train=train, agent=agent))
    if args.agent.cosine_decay_steps == agent.cosine_decay_steps and args.train.steps != train.steps \
            and agent.cosine_decay_steps is not None:
        args = dataclasses.replace(args, agent=dataclasses.replace(args.agent, cosine_decay_steps=args.train.steps))
    return dataclasses.replace(args, train=dataclasses.replace(args.train, seed=args.seed))


def evaluate_top_of_hill(agent: QRLAgent) -> dict:
    """Greedy episodes towards the top of the hill from all 25,600 discrete states (Table 4.1's score)."""
    from platonic_rl.envs import mountaincar as mc

    obs = mc.to_observation(mc.all_states())
    goals = jnp.broadcast_to(jnp.asarray(mc.GENERAL_GOAL), obs.shape)
    policy = np.asarray(jax.jit(QRLAgent.act)(agent, obs, goals))
    return mc.score_policy(policy, mc.goal_mask())


def main(argv: list[str] | None = None) -> dict:
    from platonic_rl.envs import mountaincar

    args = parse_args(argv)
    run_dir = args.run_dir or args.default_run_dir()
    print(f"scale {args.scale!r}: {args.train.steps:,} steps of batch {args.train.batch_size}, "
          f"encoder {args.agent.encoder_hidden}; run directory {run_dir}")
    dataset = mountaincar.generate_dataset(args.seed)
    agent = QRLAgent.create(args.agent, args.seed)
    agent, history = train_offline(agent, dataset.as_batch(), args.train, run_dir)
    evaluation = evaluate_top_of_hill(agent)
    result = dict(scale=args.scale, steps=args.train.steps, final_metrics=history[-1],
                  top_of_hill=evaluation)
    (Path(run_dir) / "evaluation.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(history[-1], indent=1))
    print(f"top of hill, greedy from all 25,600 states: score {evaluation['score']:.2f} "
          f"(success {evaluation['success_rate']:.3f}); paper Table 4.1: 97.69 single-goal, 95.89 multi-goal. "
          f"Scale {args.scale!r} ran" + (" -- a smoke run; only --scale cpu/paper compare to the paper."
                                         if args.scale == "quick" else "."))
    print(f"saved {Path(run_dir) / 'evaluation.json'}")
    return result


if __name__ == "__main__":
    main()
