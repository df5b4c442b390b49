"""Offline training loop: jitted chunks of updates, progress bar, JSONL/CSV metrics, orbax checkpoints,
exact resume.

Works with any agent exposing ``update(batch) -> (agent, metrics)``: a chunk of ``log_every`` updates,
each on a batch sampled uniformly (with replacement) from ``data``, runs as one compiled ``lax.scan``.
The sampling key is part of the checkpoint, so a resumed run reproduces an uninterrupted one exactly.

CLI (QRL on the discretised MountainCar dataset)::

    python -m qrl.train --run-dir runs/qrl_mc --train.steps 20000 --agent.goal-mode single
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from tqdm.auto import tqdm

from agents.qrl import QRLAgent, QRLConfig


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 20_000
    """Total gradient steps."""
    batch_size: int = 1024
    seed: int = 0
    """Seed of the batch sampler (the agent has its own seed)."""
    log_every: int = 500
    """Updates per compiled chunk; one metrics row (chunk means) per chunk."""
    checkpoint_every: int = 5_000
    """Must be a multiple of log_every. 0 disables checkpoints."""
    keep_checkpoints: int = 2
    resume: bool = True
    """Continue from the latest checkpoint in run_dir/checkpoints if there is one."""
    progress: bool = True

    def __post_init__(self):
        for name in ("steps", "batch_size", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.steps % self.log_every:
            raise ValueError(f"TrainConfig.steps={self.steps} must be a multiple of log_every="
                             f"{self.log_every}")
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
        raise RuntimeError(f"checkpoint at step {step} in {manager.directory} is corrupt or does not "
                           f"match this agent/config ({type(e).__name__}: {e})") from e


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


def train_offline(agent, data: dict[str, Any], config: TrainConfig, run_dir: str | os.PathLike | None = None,
                  desc: str = "train"):
    """Train ``agent`` on ``data`` for ``config.steps`` updates. Returns ``(agent, history)``.

    With ``run_dir``: metrics go to ``metrics.jsonl``/``metrics.csv`` and checkpoints of
    ``{agent, sampler key}`` to ``checkpoints/`` every ``checkpoint_every`` steps (and at the end);
    with ``config.resume`` the latest checkpoint is restored first.
    """
    _check_data(data)
    data = jax.tree_util.tree_map(jnp.asarray, data)
    state = {"agent": agent, "sampler_key": jax.random.PRNGKey(config.seed)}
    step, manager, log = 0, None, None
    if run_dir is not None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if config.checkpoint_every:
            manager = checkpoint_manager(run_dir, config.keep_checkpoints)
            if config.resume and manager.latest_step() is not None:
                step, state = restore_checkpoint(manager, state)
                if step > config.steps:
                    raise ValueError(f"checkpoint step {step} in {run_dir} is beyond steps={config.steps}")
        log = MetricsLog(run_dir, step)
    history = list(log.rows) if log else []
    agent, key = state["agent"], state["sampler_key"]

    start = time.time()
    with tqdm(total=config.steps, initial=step, desc=desc, disable=not config.progress,
              dynamic_ncols=True) as bar:
        while step < config.steps:
            agent, key, metrics = _train_chunk(agent, key, data, config.batch_size, config.log_every)
            step += config.log_every
            row = {"step": step, **{k: float(v) for k, v in metrics.items()},
                   "wall_time": time.time() - start}
            history.append(row)
            if log:
                log.append(row)
            bar.update(config.log_every)
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


@dataclasses.dataclass(frozen=True)
class MountainCarTrainArgs:
    """Train QRL on the offline discretised-MountainCar dataset (appendix C.3.1)."""

    run_dir: str = "runs/qrl_mountaincar"
    dataset_seed: int = 0
    agent_seed: int = 0
    train: TrainConfig = TrainConfig()
    agent: QRLConfig = QRLConfig()


def main():
    import tyro

    from envs import mountaincar

    args = tyro.cli(MountainCarTrainArgs)
    dataset = mountaincar.generate_dataset(args.dataset_seed)
    agent = QRLAgent.create(args.agent, args.agent_seed)
    agent, history = train_offline(agent, dataset.as_batch(), args.train, args.run_dir)
    print(json.dumps(history[-1], indent=1))


if __name__ == "__main__":
    main()
