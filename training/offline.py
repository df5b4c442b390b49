"""The offline loop: a dataset -> compiled calls of updates, metrics, checkpoints, exact resume.

    agent, history = train_offline(agent, data, TrainConfig(steps=20_000, batch_size=1024), run_dir="runs/x")

``data`` is a dict of arrays with a common leading dimension holding the keys the agent's ``update`` reads
(goal-conditioned agents: ``observations``, ``actions``, ``next_observations``, ``rewards`` and, for the
continuous agents, ``goals``); :func:`load_dataset` reads one from an ``.npz`` file. Each update draws
``batch_size`` rows uniformly with replacement (:class:`~platonic_rl.envs.replay.DatasetSampler`); the calls
are :func:`~platonic_rl.training.updates.update_steps`, and the run directory is
:class:`~platonic_rl.training.run.RunDirectory`. The sampler's key is part of the checkpoint, so a resumed run
reproduces an uninterrupted one exactly.

QRL on the discretised MountainCar dataset from the command line: ``python -m platonic_rl.benchmarks.mountaincar``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
import zipfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.common.settings import BUDGET, HOST, budget, budget_paths, host_setting, recorded_fields
from platonic_rl.agents.contract import check_agent
from platonic_rl.agents.qrl_continuous import QRLContinuousConfig, uses_online_objective
from platonic_rl.agents.seeds import SeedStack, SeedStackConfig
from platonic_rl.envs import ogbench_maze
from platonic_rl.envs.replay import DatasetSampler, PerSeed, SegmentGoalSampler
from platonic_rl.training.loop import LoopRun
from platonic_rl.training.run import agent_settings
from platonic_rl.training.schedule import checkpoint_due
from platonic_rl.training.updates import chain_keys, check_finite, update_steps


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = budget(20_000)
    """Total gradient steps."""
    batch_size: int = 1024
    """Transitions per gradient step."""
    seed: int = 0
    """Seed of the batch sampler (the agent has its own seed)."""
    log_every: int = 500
    """Updates per metrics row (the row holds their means)."""
    updates_per_call: int | None = host_setting(None)
    """Updates per compiled call (a ``lax.scan``); the progress bar moves after each call. Must divide
    log_every; None: gcd(100, log_every). Any split gives the same result; larger calls save dispatch and
    host-sync time on small networks."""
    checkpoint_every: int = host_setting(5_000)
    """Must be a multiple of log_every. 0 disables checkpoints."""
    keep_checkpoints: int = host_setting(2)
    """Checkpoints kept in run_dir (the newest ones)."""
    resume: bool = host_setting(True)
    """Continue from the latest checkpoint in run_dir if there is one (refused if the run's settings differ)."""
    overwrite: bool = host_setting(False)
    """Clear run_dir first (a fresh run into a directory that holds one is refused otherwise)."""
    progress: bool = host_setting(True)
    """Show a progress bar."""
    tensorboard: bool = host_setting(False)
    """Also write TensorBoard event files to run_dir/tensorboard (needs the tensorboard extra)."""

    def __post_init__(self):
        for name in ("steps", "batch_size", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.steps % self.log_every:
            raise ValueError(f"TrainConfig.steps={self.steps} must be a multiple of log_every="
                             f"{self.log_every}")
        if self.updates_per_call is not None and (self.updates_per_call < 1 or self.log_every % self.updates_per_call):
            raise ValueError(f"TrainConfig.log_every={self.log_every} must be a multiple of updates_per_call="
                             f"{self.updates_per_call}")
        if self.checkpoint_every < 0 or (self.checkpoint_every and self.checkpoint_every % self.log_every):
            raise ValueError(f"TrainConfig.checkpoint_every={self.checkpoint_every} must be 0 or a "
                             f"multiple of log_every={self.log_every}")

    @property
    def call_size(self) -> int:
        """Updates per compiled call: ``updates_per_call``, or gcd(100, log_every)."""
        return self.updates_per_call or math.gcd(100, self.log_every)


def _check_data(data: dict[str, Any]) -> int:
    if not data:
        raise ValueError("data must be a non-empty dict of arrays with a common leading dimension")
    sizes = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in data.items()}
    if len(set(sizes.values())) != 1 or None in sizes.values():
        raise ValueError(f"data arrays must share one leading dimension, got {sizes}")
    n = next(iter(sizes.values()))
    if n == 0:
        raise ValueError("data is empty (leading dimension 0)")
    check_values(data)
    return n


def check_values(data: dict[str, Any]) -> None:
    """Every row of a dataset, before any training: float arrays hold no NaN or infinity, and continuous actions
    (float ``actions``) lie in [-1, 1], integer ones (action ids) are >= -1. Raises ``ValueError`` naming the key,
    the first bad row, its value and how many rows are bad; nothing is clipped or dropped. (During training only
    sampled rows are seen, so a bad row could go unnoticed for thousands of updates, or forever.)"""
    for key, value in data.items():
        array = np.asarray(value)
        if jnp.issubdtype(array.dtype, jnp.floating) and not np.issubdtype(array.dtype, np.inexact):
            array = array.astype(np.float32)  # bfloat16 and other ml_dtypes floats, exactly
        rows = array.reshape(len(array), -1)
        if np.issubdtype(array.dtype, np.inexact):
            bad = ~np.isfinite(rows)
            if bad.any():
                _raise_rows(key, rows, bad, "holds a non-finite value (NaN or infinity)")
        if key == "actions" and np.issubdtype(array.dtype, np.floating):
            bad = (rows < -1) | (rows > 1)
            if bad.any():
                _raise_rows(key, rows, bad, "is outside [-1, 1], the continuous agents' action range (rescale the "
                            "dataset's actions; nothing is clipped)")
        elif key == "actions" and np.issubdtype(array.dtype, np.integer):
            bad = rows < -1
            if bad.any():
                _raise_rows(key, rows, bad, "is below -1 (action ids are >= 0; -1 means no action)")


def _raise_rows(key: str, rows: np.ndarray, bad: np.ndarray, what: str) -> None:
    flagged = np.flatnonzero(bad.any(axis=1))
    row = int(flagged[0])
    column = int(np.flatnonzero(bad[row])[0])
    where = f"[{row}, {column}]" if rows.shape[1] > 1 else f"[{row}]"
    raise ValueError(f"data[{key!r}] row {row} {what}: data[{key!r}]{where} = {rows[row, column].item()!r} "
                     f"({len(flagged)} of {len(rows)} rows are bad)")


def data_fingerprint(data: dict[str, Any]) -> dict[str, dict]:
    """Shape, dtype and a SHA-256 prefix of every array: enough to tell two datasets apart."""
    fingerprint = {}
    for key, value in sorted(data.items()):
        array = np.ascontiguousarray(np.asarray(value))
        fingerprint[key] = dict(shape=list(array.shape), dtype=str(array.dtype),
                                sha256=hashlib.sha256(array.tobytes()).hexdigest()[:16])
    return fingerprint


def sampler_settings(sampler) -> dict:
    """The sampler's class and its static settings (its fields that are not arrays)."""
    static = {f.name: getattr(sampler, f.name) for f in dataclasses.fields(sampler)
              if not f.metadata.get("pytree_node", True)}
    inner = getattr(sampler, "sampler", None)
    if inner is not None and dataclasses.is_dataclass(inner):
        static["sampler"] = sampler_settings(inner)
    return dict(name=type(sampler).__name__, **static)


def run_settings(agent, config: TrainConfig, data: dict[str, Any], sampler=None) -> dict:
    """What defines an offline run (all but the fields a resume may change), as it is stored in ``config.json``."""
    settings = dict(**agent_settings(agent), train_config=recorded_fields(config, BUDGET, HOST),
                    data=data_fingerprint(data))
    if sampler is not None:
        settings["sampler"] = sampler_settings(sampler)
    return settings


DATASET_KEYS = ("observations", "actions", "next_observations", "rewards")


def load_dataset(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """An offline dataset from an ``.npz`` file: arrays with a common leading dimension N, at least
    ``observations [N, D]``, ``actions [N]`` (int ids; -1 = no action) or ``[N, A]`` (in [-1, 1]),
    ``next_observations [N, D]`` and ``rewards [N]`` (-1 per step for goal reaching); ``goals [N, D]`` for
    the goal-conditioned continuous agents; any other key is kept and passed on.

    A file in OGBench's layout (``observations``, ``actions``, ``terminals``, no ``next_observations``: OGBench's
    own downloaded files or ``envs.ogbench_maze.make_dataset``'s) is read as OGBench reads it, each episode's last
    row dropped (:func:`~platonic_rl.envs.ogbench_maze.transitions`): observations, actions, next_observations,
    rewards (-1) and ``segment_end`` (True at each episode's last transition, for ``SegmentGoalSampler``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"load_dataset: no file {path}")
    data = _read_npz(path)
    if ogbench_maze.is_ogbench_layout(data):
        _check_arrays(path, data, ("observations", "actions"))
        data = ogbench_maze.transitions(data)
    missing = [k for k in DATASET_KEYS if k not in data]
    if missing:
        raise ValueError(f"load_dataset: {path} lacks the keys {missing} (has {sorted(data)}); an offline dataset "
                         f"needs {list(DATASET_KEYS)}")
    _check_arrays(path, data, tuple(data))
    try:
        _check_data(data)
    except ValueError as error:
        raise ValueError(f"load_dataset: {path}: {error}") from None
    return data


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` archive at ``path``, read without unpickling anything (object arrays are refused:
    loading them would run code from the file)."""
    try:
        archive = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as error:
        raise ValueError(f"load_dataset: {path} is not a readable .npz archive ({type(error).__name__}: {error}); "
                         "save one with np.savez(path, observations=..., actions=..., ...)") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"load_dataset: {path} holds a single array ({archive.shape}), not an .npz archive of named "
                         "arrays; save one with np.savez(path, observations=..., actions=..., ...)")
    data = {}
    with archive:
        for key in archive.files:
            try:
                data[key] = archive[key]
            except ValueError as error:  # an object array (pickled) or a damaged member
                raise ValueError(f"load_dataset: {path}: array {key!r} cannot be read without unpickling or is "
                                 f"damaged ({error}); store numbers (float or int arrays), not Python objects") from None
            except (zipfile.BadZipFile, OSError, EOFError) as error:
                raise ValueError(f"load_dataset: {path}: array {key!r} is damaged ({type(error).__name__}: {error}); "
                                 "the file is truncated or corrupt") from None
    if not data:
        raise ValueError(f"load_dataset: {path} holds no arrays")
    return data


_RANKS = dict(observations=(2,), next_observations=(2,), goals=(2,), rewards=(1,), actions=(1, 2))
_SHAPES = dict(observations="[N, D]", next_observations="[N, D]", goals="[N, D]", rewards="[N]",
               actions="[N] int ids or [N, A] floats")


def _check_arrays(path: Path, data: dict[str, np.ndarray], keys: tuple[str, ...]) -> None:
    """The dataset's known keys: numeric arrays of the expected rank (observations, next observations and goals
    ``[N, D]`` float with D >= 1, rewards ``[N]`` float, actions ``[N]`` int or ``[N, A]`` float), next observations
    and goals shaped as the observations."""
    for key in keys:
        array = data[key]
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
            raise ValueError(f"load_dataset: {path}: data[{key!r}] has dtype {array.dtype}; datasets hold numbers")
        if key not in _RANKS:
            continue
        if array.ndim not in _RANKS[key]:
            want = " or ".join(f"{r}-d" for r in _RANKS[key])
            raise ValueError(f"load_dataset: {path}: data[{key!r}] has shape {array.shape}; it must be {want} "
                             f"({_SHAPES[key]})")
        if key != "actions" and not np.issubdtype(array.dtype, np.floating):
            raise ValueError(f"load_dataset: {path}: data[{key!r}] has dtype {array.dtype}; it must be floating point "
                             f"(convert it: data[{key!r}].astype(np.float32))")
        if key == "actions" and array.ndim == 2 and not np.issubdtype(array.dtype, np.floating):
            raise ValueError(f"load_dataset: {path}: data['actions'] of shape {array.shape} has dtype {array.dtype}; "
                             "continuous actions [N, A] must be floating point in [-1, 1] (action ids: an int [N])")
        if key == "actions" and array.ndim == 1 and not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"load_dataset: {path}: data['actions'] of shape {array.shape} has dtype {array.dtype}; "
                             "a 1-d actions array holds int action ids (continuous actions: [N, A] floats)")
        if array.ndim == 2 and array.shape[1] == 0:
            raise ValueError(f"load_dataset: {path}: data[{key!r}] has shape {array.shape}: no features")
    if "observations" in keys:
        for key in ("next_observations", "goals"):
            if key in keys and data[key].shape[1:] != data["observations"].shape[1:]:
                raise ValueError(f"load_dataset: {path}: data[{key!r}] has shape {data[key].shape}, the observations "
                                 f"{data['observations'].shape}; each row must be one like them")


def _sampled_update(agent, sampler, key):
    """One update on a batch drawn from ``sampler``: traced by :func:`train_offline` for its shapes only. A function
    of the module (not a new lambda per call), so that its trace is cached: a second run of the same agent and
    data shapes checks them without tracing the update again."""
    return type(agent).update(agent, sampler.sample(key))


def check_offline_objective(agent) -> None:
    """Refuse a QRL continuous agent (or a seed stack of them) whose objective is the online one
    (:func:`~platonic_rl.agents.qrl_continuous.uses_online_objective`: built without ``preset="offline"``), naming
    the preset: on offline data it fails where the offline objective succeeds."""
    config = getattr(agent, "config", None)
    if isinstance(config, SeedStackConfig):
        config = config.agent
    if isinstance(config, QRLContinuousConfig) and uses_online_objective(config):
        raise ValueError(
            "train_offline: this QRLContinuousAgent has the online objective (the config's defaults, preset \"online\": "
            "C.3.3's Fetch settings, with no behaviour cloning), which fails on offline data (a noisy controller's "
            "point-maze episodes: 0.14 success against 0.99 for the offline objective, docs/results.md). Build it with "
            "agents.make(\"qrl_continuous\", preset=\"offline\", obs_dim=..., action_dim=...) or "
            "QRLContinuousConfig(**PRESETS[\"offline\"], ...); to train the online objective offline all the same, "
            "pass allow_online_objective=True.")


def train_offline(agent, data: dict[str, Any], config: TrainConfig, run_dir: str | os.PathLike | None = None,
                  desc: str = "train", sampler=None, allow_online_objective: bool = False):
    """Train ``agent`` on ``data`` for ``config.steps`` updates. Returns ``(agent, history)``.

    ``data``: a dict of arrays sharing their leading dimension, holding the keys the agent's ``update``
    reads (QRL: ``observations``, ``actions``, ``next_observations``, ``rewards``); each update samples
    ``batch_size`` rows uniformly with replacement -- or, with ``sampler`` (a pytree with ``sample(key) ->
    batch`` built from ``data``, e.g. :class:`~platonic_rl.envs.replay.SegmentGoalSampler` for goal relabelling,
    wrapped in :class:`~platonic_rl.envs.replay.PerSeed` for a :class:`~platonic_rl.agents.seeds.SeedStack`),
    its batches (``config.batch_size`` is then the sampler's business; metrics rows average over seeds). A QRL
    continuous agent with the online objective (built without ``preset="offline"``) is refused
    (:func:`check_offline_objective`) unless ``allow_online_objective``. The
    agent must follow
    :class:`~platonic_rl.agents.contract.Agent` (checked first, before anything compiles).

    With ``run_dir``: a :class:`~platonic_rl.training.run.RunDirectory` holding the run's settings (agent
    config, train config, a fingerprint of the data), its metrics and checkpoints of ``{agent, sampler key}``
    every ``checkpoint_every`` steps (and at the end). With ``config.resume`` the latest checkpoint is restored
    first, if the stored settings are the same (only the fields declared ``budget`` or ``host_setting`` may change,
    e.g. a larger ``steps``); a fresh run into a directory holding one needs ``config.overwrite``. A NaN or an infinity in
    any metric or in the agent's state stops the run (:class:`~platonic_rl.training.updates.NonFiniteError`)
    before it is checkpointed.
    """
    check_agent(agent)
    if not allow_online_objective:
        check_offline_objective(agent)
    _check_data(data)
    if hasattr(agent, "validate_dataset"):
        agent.validate_dataset(data)
    state = {"agent": agent, "sampler_key": jax.random.PRNGKey(config.seed)}
    batches = sampler if sampler is not None else DatasetSampler(jax.tree_util.tree_map(jnp.asarray, data),
                                                                 config.batch_size)
    try:  # shapes only, nothing runs: a dataset that does not fit the agent fails here, before any run directory
        jax.eval_shape(_sampled_update, agent, batches, state["sampler_key"])
    except (ValueError, TypeError) as error:
        raise ValueError(f"data does not fit the agent {type(agent).__name__}: {error}") from error
    settings = run_settings(agent, config, data, sampler) if run_dir is not None else None
    with LoopRun.start(state, budget=config.steps, run_dir=run_dir, settings=settings, resume=config.resume,
                       overwrite=config.overwrite, resumable=budget_paths(config, "train_config"), keep=config.keep_checkpoints,
                       tensorboard=config.tensorboard, desc=desc, unit="update", progress=config.progress) as loop:
        # Committed to one device, fresh or restored alike: a later call in this process (the next chunk of a run)
        # then reuses this call's compilations whether or not it restored.
        state, step, bar = jax.device_put(loop.state, jax.local_devices()[0]), loop.start_step, loop.bar
        agent, key = state["agent"], state["sampler_key"]
        calls_per_row = config.log_every // config.call_size
        start = time.time()
        compiling = step < config.steps
        if compiling:
            bar.set_postfix_str("compiling")
        while step < config.steps:
            sums = None
            for call in range(calls_per_row):
                key, keys = chain_keys(key, config.call_size)
                agent, metrics, finite = update_steps(agent, batches, keys)
                check_finite(finite, first_step=step + call * config.call_size + 1)
                sums = metrics if sums is None else jax.tree_util.tree_map(jnp.add, sums, metrics)
                if compiling:
                    bar.set_postfix_str("")
                    compiling = False
                bar.update(config.call_size)
            step += config.log_every
            row = {"step": step, **{k: float(jnp.mean(v)) / calls_per_row for k, v in sums.items()},
                   "wall_time": time.time() - start}
            loop.finish_row(row, step, {"agent": agent, "sampler_key": key},
                            due=checkpoint_due(step, config.checkpoint_every, step == config.steps))
            bar.set_postfix({k: f"{row[k]:.3g}" for k in ("loss", "violation", "lagrange_multiplier") if k in row})
    history = loop.history
    return agent, history


def train_seeds(agent_class, agent_config, seeds, data: dict[str, Any], config: TrainConfig, sampling: dict,
                run_dir: str | os.PathLike | None = None, desc: str = "train", **kwargs):
    """``seeds`` of one agent trained as one stack (:class:`~platonic_rl.agents.seeds.SeedStack`, one
    ``jit(vmap(update))``) on goal-relabelled batches of ``data`` (:class:`~platonic_rl.envs.replay.SegmentGoalSampler`
    with ``sampling``, each seed its own draws): :func:`train_offline`'s ``(stack, history)``; a finished run in
    ``run_dir`` is read back."""
    stack = SeedStack.create(agent_class, agent_config, seeds)
    sampler = PerSeed(SegmentGoalSampler.create(data, config.batch_size, **sampling), len(seeds))
    return train_offline(stack, data, config, run_dir=run_dir, desc=desc, sampler=sampler, **kwargs)
