"""Speed report: every agent's update (ms, samples/s, matmul FLOPs, share of this machine's matmul peak) and
the IQE head alone, measured in one run on one machine.

    python -m platonic_rl.benchmarks.speed                      # ~5 min on 2 CPU cores
    python -m platonic_rl.benchmarks.speed --scale quick        # tiny sizes, seconds (the tests run this)

For each case the update is timed as one jitted call (``jax.jit(Agent.update)``) and inside a ``lax.scan`` of
``--scan-length`` updates (the training layer's ``update_steps``, which every loop uses), each as the median of
``--repeats`` timed calls after compiling. Matmul FLOPs are counted from the update's jaxpr (``dot_general`` and
convolutions, scans multiplied by their length), and divided by the time and by this machine's float32 matmul
peak, measured in the same run as the best of large square matmuls. The IQE head alone is timed forward +
backward on ``--iqe-pairs`` pairs for each exact kernel (the library's, and the alternatives it was chosen
over), and its share of the QRL update is the update's time minus the same update with an l2 head on the same
projector. Absolute times depend on the machine; the ratios (share of peak, speed-ups, shares of the update)
are what compare across machines.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from pathlib import Path
from typing import Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.agents import (CRLAgent, CRLConfig, DDPGHERAgent, DDPGHERConfig, DenoisedMDPAgent,
                                DenoisedMDPConfig, GCBCAgent, GCBCConfig, QRLAgent, QRLConfig,
                                QRLContinuousAgent, QRLContinuousConfig)
from platonic_rl.agents.denoised_mdp import POLICY_LEARNERS
from platonic_rl.agents.seeds import SeedStack
from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.presets import (DMC_PIXEL_MODEL, DMC_PRESETS, FETCH_QRL_PRESETS, device_loop_agent_config,
                                            device_loop_env, device_loop_scales, maze2d_scales)
from platonic_rl.benchmarks.timing import (FixedBatch, compiled_groups, discrete_batch, goal_batch, matmul_peak,
                                           profile_compiled, sequence_batch, time_call, time_loop_iterations,
                                           time_matmuls_alone, time_update)
from platonic_rl.common.train_state import TrainState
from platonic_rl.denoised.model import FactoredRSSM, WorldModelConfig, all_features, observe
from platonic_rl.envs.replay import PerSeed, SegmentGoalSampler
from platonic_rl.qrl import quasimetrics as qm
from platonic_rl.training.device_loop import make_loop
from platonic_rl.training.offline import train_offline
from platonic_rl.training.updates import update_steps

Scale = Literal["quick", "full"]


@dataclasses.dataclass(frozen=True)
class Args:
    scale: Scale = "full"
    """full: the agents at their default and CPU-preset sizes; quick: tiny networks (seconds; for the tests)."""
    cases: tuple[str, ...] = ()
    """Only these cases (names as printed; default: all of the scale)."""
    repeats: int = 5
    """Timed calls per measurement (the median is reported), after one call that compiles."""
    scan_length: int = 10
    """Updates per scanned call."""
    iqe_pairs: int = 4096
    """Pairs for the IQE head alone (latent 64 x 32 at full scale)."""
    parts: tuple[Literal["updates", "loops", "graph"], ...] = ("updates",)
    """updates: every case's update and the IQE head alone; loops: the offline loop and the device loop's iteration
    against their updates alone (the training loops' share of their update's rate; a few minutes at full scale);
    graph: the graph waypoints' graph (agents.qrl_policies.waypoint_graph: learned distances between every two
    waypoints, then all-pairs shortest paths) built over --graph-sizes waypoints with OGBench's cpu-size QRL."""
    graph_sizes: tuple[int, ...] = (500, 1000, 2000, 4000)
    """Waypoints per graph for the graph part (quick: 50 and 100)."""
    out_dir: str = "docs/results/speed"

    def __post_init__(self):
        for name in ("repeats", "scan_length", "iqe_pairs"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not self.parts or set(self.parts) - {"updates", "loops", "graph"}:
            raise ValueError(f"--parts must name some of updates, loops, graph; got {self.parts}")
        if not self.graph_sizes or min(self.graph_sizes) < 2:
            raise ValueError(f"--graph-sizes must be waypoint counts >= 2, got {self.graph_sizes}")


# ----------------------------------------------------------------------------------------------- cases


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    size: str         # what the sizes are, for the table
    build: Callable   # () -> (agent, batch)
    samples: int      # samples per update (transitions, or sequence steps)
    iqe_kernel: str = "int keys + custom JVP (library)"  # the IQE kernel the update is traced with
    profile: bool = False  # also time the update's parts (:func:`profile_update`)


def _fetch_qrl(**overrides) -> Callable:
    # Fetch: 10-d state observations and goals, 4-d actions (FetchReach), batch 256 (C.3.3).
    return lambda: (QRLContinuousAgent.create(QRLContinuousConfig(**overrides), 0), goal_batch(256, 10, 4))


def _world_model(dreamer: bool, preset: str, compute_dtype: str = "float32", pixels: bool = False,
                 conv_impl: str = "auto") -> Callable:
    # cheetah-run: 17-d states, 6-d actions

    def build():
        p = DMC_PRESETS[preset]
        shape, extra = ((64, 64, 3), dict(DMC_PIXEL_MODEL[preset], conv_impl=conv_impl)) if pixels else ((17,), {})
        model = WorldModelConfig(obs_shape=shape, action_dim=6, compute_dtype=compute_dtype, **{**p["model"], **extra})
        config = (DenoisedMDPConfig.dreamer(dataclasses.replace(model, **p["dreamer"]), **p["agent"]) if dreamer
                  else DenoisedMDPConfig(model=model, **p["agent"]))
        batch = sequence_batch(p["batch_size"], p["chunk"], 17, 6)
        if pixels:  # uint8 frames, as the sequence buffer stores them
            batch["observations"] = np.random.default_rng(0).integers(
                0, 256, (p["batch_size"], p["chunk"], *shape), dtype=np.uint8)
        return DenoisedMDPAgent.create(config, 0), batch
    return build


# The maze2d width x batch ladder: QRL's ``cpu`` maze2d preset (latent 64, IQE-maxmean 16 x 16, 2 critics) with
# every MLP at the width (2 layers, the projector 1), on 4-d states and 2-d actions.
MAZE2D_LADDER = ((128, 256), (128, 1024), (128, 4096), (256, 256), (256, 1024), (512, 256), (512, 1024))


def _maze2d_qrl(width: int, batch: int) -> Callable:
    def build():

        config = dataclasses.replace(maze2d_scales()["cpu"].qrl, encoder_hidden=(width,) * 2, dynamics_hidden=(width,) * 2,
                                     actor_hidden=(width,) * 2, projector_hidden=(width,))
        return QRLContinuousAgent.create(config, 0), goal_batch(batch, 4, 2)
    return build


def maze2d_cases() -> list[Case]:
    cpu = maze2d_scales()["cpu"]  # the preset's own size is profiled
    own = (cpu.qrl.encoder_hidden[0], cpu.qrl_train.batch_size)
    return [Case(f"maze2d_qrl_w{w}_b{b}", f"maze2d, cpu preset at width {w}, batch {b}", _maze2d_qrl(w, b), b,
                 profile=(w, b) == own) for w, b in MAZE2D_LADDER]


def full_cases() -> list[Case]:

    seq = {p: DMC_PRESETS[p]["batch_size"] * DMC_PRESETS[p]["chunk"] for p in DMC_PRESETS}
    return [
        Case("qrl_continuous", "Fetch, C.3.3 (IQE 64x32, 2 critics)", _fetch_qrl(), 256, profile=True),
        Case("qrl_continuous_l2", "Fetch, C.3.3 with an l2 head", _fetch_qrl(head="l2"), 256),
        Case("qrl_continuous_previous_iqe", "Fetch, C.3.3 with the previous IQE kernel", _fetch_qrl(), 256,
             iqe_kernel="float pairs + autodiff (previous)"),
        Case("qrl_continuous_bf16", "Fetch, C.3.3, compute_dtype bfloat16", _fetch_qrl(compute_dtype="bfloat16"),
             256),
        Case("qrl_continuous_cpu", "Fetch, cpu preset (IQE 16x32)", _fetch_qrl(**FETCH_QRL_PRESETS["cpu"]), 256,
             profile=True),
        Case("qrl", "MountainCar, C.3.1 (batch 1024)",
             lambda: (QRLAgent.create(QRLConfig(), 0), discrete_batch(1024, 3, 3)), 1024, profile=True),
        Case("crl", "Fetch, default (batch 256)",
             lambda: (CRLAgent.create(CRLConfig(), 0), goal_batch(256, 10, 4)), 256, profile=True),
        Case("gcbc", "Fetch, default (batch 256)",
             lambda: (GCBCAgent.create(GCBCConfig(), 0), goal_batch(256, 10, 4)), 256, profile=True),
        Case("ddpg_her", "Fetch, default MLP critic (batch 256)",
             lambda: (DDPGHERAgent.create(DDPGHERConfig(), 0), goal_batch(256, 10, 4)), 256),
        Case("denoised_mdp_cpu", "cheetah states, cpu preset (16 x 32 steps)", _world_model(False, "cpu"), seq["cpu"],
             profile=True),
        Case("denoised_mdp_cpu_bf16", "cheetah states, cpu preset, compute_dtype bfloat16",
             _world_model(False, "cpu", "bfloat16"), seq["cpu"]),
        Case("dreamer_cpu", "cheetah states, cpu preset (16 x 32 steps)", _world_model(True, "cpu"), seq["cpu"],
             profile=True),
        Case("dreamer_cpu_pixels_xla", "cheetah 64x64 pixels, cpu preset, conv_impl xla (lax convolutions)",
             _world_model(True, "cpu", pixels=True, conv_impl="xla"), seq["cpu"]),
        Case("dreamer_cpu_pixels", "cheetah 64x64 pixels, cpu preset, conv_impl im2col (one matmul per layer)",
             _world_model(True, "cpu", pixels=True, conv_impl="im2col"), seq["cpu"]),
        Case("denoised_mdp_cpu_pixels_xla", "cheetah 64x64 pixels, cpu preset, conv_impl xla (lax convolutions)",
             _world_model(False, "cpu", pixels=True, conv_impl="xla"), seq["cpu"]),
        Case("denoised_mdp_cpu_pixels", "cheetah 64x64 pixels, cpu preset, conv_impl im2col (one matmul per layer)",
             _world_model(False, "cpu", pixels=True, conv_impl="im2col"), seq["cpu"]),
        Case("denoised_mdp", "cheetah states, Table D.4 (50 x 50 steps)", _world_model(False, "paper"),
             seq["paper"], profile=True),
    ] + maze2d_cases()


def quick_cases() -> list[Case]:
    tiny = dict(encoder_hidden=(32,), latent_dim=16, projector_hidden=(32,), iqe_components=4,
                iqe_dim_per_component=8, dynamics_hidden=(32,), actor_hidden=(32,))
    small_model = WorldModelConfig(obs_shape=(5,), action_dim=2, x_belief=16, x_state=4, y_belief=8, y_state=2,
                                   hidden=16, embed_dim=16, mlp_encoder_hidden=(16,), mlp_decoder_hidden=(16,))
    return [
        Case("qrl_continuous", "tiny", _fetch_qrl(**tiny), 256, profile=True),
        Case("qrl_continuous_l2", "tiny, l2 head", _fetch_qrl(**tiny, head="l2", l2_dim=32), 256),
        Case("gcbc", "tiny", lambda: (GCBCAgent.create(GCBCConfig(hidden=(32,)), 0), goal_batch(64, 10, 4)), 64),
        Case("denoised_mdp", "tiny", lambda: (DenoisedMDPAgent.create(DenoisedMDPConfig(
            model=small_model, actor_hidden=(16,), critic_hidden=(16,), horizon=3, imagine_starts=8), 0),
            sequence_batch(4, 6, 5, 2)), 24, profile=True),
    ]


# ----------------------------------------------------------------------------------------------- IQE kernels


def iqe_float_pairs(x: jax.Array, y: jax.Array, dim_per_component: int) -> jax.Array:
    """The previous kernel: the same boundary rule, floats compared with the index tie-break inside the pair loop,
    gradient by autodiff through the boundary selects."""
    shape = x.shape[:-1] + (x.shape[-1] // dim_per_component, dim_per_component)
    starts = x.reshape(shape)
    ends = jnp.maximum(starts, y.reshape(shape))
    s, e = jax.lax.stop_gradient(starts), jax.lax.stop_gradient(ends)
    nonempty = e > s
    lower = np.tril(np.ones((dim_per_component,) * 2, bool), -1)  # [k, j]: j < k
    s_k, s_j, e_k, e_j = s[..., :, None], s[..., None, :], e[..., :, None], e[..., None, :]
    other = nonempty[..., None, :]
    start_covered = other & (((s_j < s_k) & (s_k <= e_j)) | ((s_j == s_k) & lower))
    end_covered = other & (((s_j <= e_k) & (e_k < e_j)) | ((e_j == e_k) & lower))
    left = nonempty & ~jnp.any(start_covered, -1)
    right = nonempty & ~jnp.any(end_covered, -1)
    return jnp.sum(jnp.where(right, ends, 0.0) - jnp.where(left, starts, 0.0), -1)


def iqe_sort(x: jax.Array, y: jax.Array, dim_per_component: int) -> jax.Array:
    """Sort the intervals by start; each adds what reaches past the farthest end before it (autodiff)."""
    shape = x.shape[:-1] + (x.shape[-1] // dim_per_component, dim_per_component)
    starts = x.reshape(shape)
    starts, ends = jax.lax.sort((starts, jnp.maximum(starts, y.reshape(shape))), dimension=len(shape) - 1,
                                num_keys=1)
    reach = jax.lax.cummax(ends, axis=len(shape) - 1)
    before = jnp.concatenate([jnp.full_like(reach[..., :1], -jnp.inf), reach[..., :-1]], -1)
    return jnp.sum(jnp.maximum(ends - jnp.maximum(starts, before), 0.0), -1)


def iqe_no_union(x: jax.Array, y: jax.Array, dim_per_component: int) -> jax.Array:
    """A stand-in for the IQE head's interval union, for timing only: the intervals' lengths summed (overlaps
    counted twice), the same inputs and outputs at about the cost of one elementwise pass."""
    shape = x.shape[:-1] + (x.shape[-1] // dim_per_component, dim_per_component)
    starts = x.reshape(shape)
    return jnp.sum(jnp.maximum(starts, y.reshape(shape)) - starts, -1)


IQE_KERNELS = {"int keys + custom JVP (library)": qm.iqe_components,
               "float pairs + autodiff (previous)": iqe_float_pairs,
               "sort + cummax": iqe_sort}


def time_iqe(pairs: int, components: int, dim: int, repeats: int) -> dict:
    x, y = (jax.random.normal(jax.random.PRNGKey(i), (pairs, components * dim)) for i in range(2))
    reference = np.asarray(qm.iqe_components(x, y, dim))
    out = {}
    for name, kernel in IQE_KERNELS.items():
        value = np.asarray(jax.jit(kernel, static_argnums=2)(x, y, dim))
        forward = jax.jit(lambda a, b, k=kernel: k(a, b, dim).mean(-1))
        both = jax.jit(jax.value_and_grad(lambda a, b, k=kernel: k(a, b, dim).mean(), argnums=(0, 1)))
        out[name] = dict(forward_ms=1e3 * time_call(forward, (x, y), repeats),
                         forward_backward_ms=1e3 * time_call(both, (x, y), repeats),
                         max_abs_difference=float(np.abs(value - reference).max()))
    return out


# ----------------------------------------------------------------------------------------------- run


@contextlib.contextmanager
def iqe_kernel(name: str):
    """Trace IQE heads with the kernel ``name`` of :data:`IQE_KERNELS` (or ``"no union"``: :func:`iqe_no_union`)
    inside this block, for comparing kernels inside an update; the library's is restored after."""
    library = qm.iqe_components
    qm.iqe_components = iqe_no_union if name == "no union" else IQE_KERNELS[name]
    try:
        yield
    finally:
        qm.iqe_components = library


def time_case(case: Case, args: Args, peak: float) -> dict:
    """:func:`~platonic_rl.benchmarks.timing.time_update` of the case, traced with its IQE kernel; a world-model
    agent's row also times the parts of its update."""
    with iqe_kernel(case.iqe_kernel):
        agent, batch = case.build()
        out = dict(size=case.size, samples=case.samples,
                   **time_update(agent, batch, case.samples, args.repeats, args.scan_length, peak))
        if isinstance(agent, DenoisedMDPAgent):
            out["parts_ms"] = world_model_parts(agent, jax.tree.map(jnp.asarray, batch), args.repeats)
        if case.profile:
            out["profile"] = profile_update(agent, batch, args.repeats)
        return out


def profile_update(agent, batch: dict, repeats: int) -> dict:
    """Where one update's time goes (ms, each measured alone; XLA's CPU profiler reports only fused regions, not
    operations, so the parts are timed by replay and ablation): the whole update (one jitted call); its matrix
    products replayed alone at their shapes and counts (:func:`~platonic_rl.benchmarks.timing.time_matmuls_alone`);
    the optimiser steps of its train states alone; for IQE heads, the interval union: the update minus the same
    update with the union replaced by :func:`iqe_no_union`; the rest (elementwise work, reductions, data movement
    between fused regions) is the whole minus those. Also XLA's own count of the compiled update's FLOPs (all
    operations) and bytes accessed. Traced with the IQE kernel in force where it is called (:func:`iqe_kernel`)."""
    batch = jax.tree.map(jnp.asarray, batch)
    update = jax.jit(type(agent).update)
    whole = time_call(update, (agent, batch), repeats)
    jaxpr = jax.make_jaxpr(type(agent).update)(agent, batch)
    cost = update.lower(agent, batch).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    states = {f.name: getattr(agent, f.name) for f in dataclasses.fields(agent)
              if isinstance(getattr(agent, f.name), TrainState)}
    parts = dict(matmuls=time_matmuls_alone(jaxpr, repeats),
                 optimiser=time_call(jax.jit(lambda s: {k: v.apply_gradients(v.params) for k, v in s.items()}),
                                     (states,), repeats))
    if _has_iqe(agent):
        with iqe_kernel("no union"):
            parts["iqe_union"] = whole - time_call(jax.jit(type(agent).update), (agent, batch), repeats)
    parts["rest"] = whole - sum(parts.values())
    compiled = profile_compiled(type(agent).update, (agent, batch), repeats)
    return dict(whole_ms=1e3 * whole, parts_ms={k: 1e3 * v for k, v in parts.items()},
                xla_gflop=float(cost.get("flops", float("nan"))) / 1e9,
                xla_mb_accessed=float(cost.get("bytes accessed", float("nan"))) / 1e6,
                compiled=dict({k: v for k, v in compiled.items() if k != "instructions"},
                              groups=compiled_groups(compiled), instructions=len(compiled["instructions"])))


def _has_iqe(agent) -> bool:
    """Whether the agent's critic has an IQE head (its config's ``head``)."""
    config = agent.config
    return getattr(getattr(config, "critic_config", config), "head", None) == "iqe"


def world_model_parts(agent: DenoisedMDPAgent, batch: dict, repeats: int) -> dict:
    """ms of the parts of a world-model agent's update, each jitted alone: the model loss (eq. 5.4) with its
    gradient, the filtering ``lax.scan`` forward alone (part of the model's), and the imagination actor + value
    losses with their gradient; what is not listed is the optimizer steps. With pixels, also the conv encoder and
    the conv decoder on the batch's frames, each forward + parameter gradient alone (parts of the model's)."""
    key, m, params = jax.random.PRNGKey(0), agent.config.model, agent.model_params
    model_grad = jax.jit(jax.value_and_grad(agent.model_loss_fn, has_aux=True))
    (_, (states, _)), _ = model_grad(params, batch, key)
    out = dict(model_loss_and_gradient=time_call(model_grad, (params, batch, key), repeats),
               filtering_forward=time_call(jax.jit(lambda o, a: observe(m, params, o, a, key)[0]),
                                           (agent.normalise(batch["observations"]), batch["prev_actions"]), repeats),
               imagination_loss_and_gradient=time_call(
                   jax.jit(jax.grad(functools.partial(POLICY_LEARNERS["imagine"].loss, agent), has_aux=True)),
                   ((agent.actor_params, agent.critic_params), params, states, key), repeats))
    if m.pixels:
        rssm = FactoredRSSM(m)
        feats = all_features(m, states)  # [B, T, features] of the posterior

        def encoder(p, frames):
            return jnp.sum(rssm.apply(p, frames, method=FactoredRSSM.encode))

        def decoder(p, features):
            return jnp.sum(rssm.apply(p, features, method=FactoredRSSM.decode))

        out["encoder_forward_and_gradient"] = time_call(jax.jit(jax.grad(encoder)), (params, batch["observations"]),
                                                        repeats)
        out["decoder_forward_and_gradient"] = time_call(jax.jit(jax.grad(decoder)), (params, feats), repeats)
    return {name: 1e3 * seconds for name, seconds in out.items()}


# ----------------------------------------------------------------------------------------------- loops


def segment_dataset(rows: int, episode_length: int, obs_dim: int, action_dim: int, seed: int = 0) -> dict:
    """Random-walk episodes of ``episode_length`` steps laid out as the offline datasets are (what the offline
    loop's goal sampler reads; the loop's speed does not depend on the values)."""
    rng = np.random.default_rng(seed)
    states = np.cumsum(rng.normal(scale=0.1, size=(rows + 1, obs_dim)), axis=0).astype(np.float32)
    ends = (np.arange(rows) % episode_length == episode_length - 1) | (np.arange(rows) == rows - 1)
    return dict(observations=states[:-1], next_observations=states[1:], segment_end=ends,
                actions=rng.uniform(-1, 1, (rows, action_dim)).astype(np.float32))


def _updates_per_second(agent, sampler, updates: int, repeats: int) -> float:
    keys = jax.random.split(jax.random.PRNGKey(1), updates)
    return updates / time_call(update_steps, (agent, sampler, keys), repeats)


def offline_loop_share(scale: Scale, repeats: int, rows: int | None = None) -> dict:
    """Updates/s of :func:`~platonic_rl.training.offline.train_offline` (the whole call, host loop included, after
    a compiling call of the same length; no run directory) for maze2d's QRL with its seeds stacked as the maze2d
    benchmark trains them (its ``cpu`` preset; quick: its ``quick`` one), against the same updates alone: calls of
    ``update_steps`` of the loop's size on the same sampler, and on a fixed batch (sampling left out)."""
    maze = maze2d_scales()["cpu" if scale == "full" else "quick"]
    agent_class, config, train, sampling = maze.method("qrl")
    seeds = (0, 1, 2)
    rows = rows or (maze.dataset_size or 1_000_000)  # umaze's D4RL size
    data = segment_dataset(rows, 300, config.obs_dim, config.action_dim)
    stack = SeedStack.create(agent_class, config, seeds)
    sampler = PerSeed(SegmentGoalSampler.create(data, train.batch_size, **sampling), len(seeds))
    steps = train.call_size * (4 if scale == "full" else 2)
    train = dataclasses.replace(train, steps=steps, log_every=steps, checkpoint_every=0, progress=False)
    train_offline(stack, data, train, sampler=sampler)  # compiles
    start = time.perf_counter()
    train_offline(stack, data, train, sampler=sampler)
    loop = steps / (time.perf_counter() - start)
    sampled = _updates_per_second(stack, sampler, train.call_size, repeats)
    fixed = _updates_per_second(stack, FixedBatch(sampler.sample(jax.random.PRNGKey(0))), train.call_size, repeats)
    return dict(what=f"maze2d QRL, {len(seeds)} seeds stacked, {steps} updates in calls of {train.call_size}",
                loop_updates_per_s=loop, updates_alone_per_s=sampled, fixed_batch_updates_per_s=fixed,
                share_of_updates=loop / sampled, share_of_fixed_batch=loop / fixed)


def device_loop_share(scale: Scale, repeats: int) -> dict:
    """Updates/s of the goal-conditioned device loop's iteration (collect + updates; QRL on the umaze point maze at
    the device loop benchmark's learning settings, ``cpu``; quick: ``quick``) against its updates alone on its own
    sampler and buffer after the prefill: the loop's share of its update's rate, and what one iteration's env steps
    cost besides."""
    loop_scale = device_loop_scales()["cpu" if scale == "full" else "quick"]
    env = device_loop_env("umaze")
    config = loop_scale.learning
    loop = make_loop(device_loop_agent_config("qrl", loop_scale, env.obs_dim, env.action_dim), env, config)
    iteration = time_loop_iterations(loop, loop_scale.measure_iterations)
    state = jax.jit(loop.init)(jax.random.PRNGKey(0))
    updates = config.updates_per_iteration
    alone = _updates_per_second(state.agent, loop.sampler(state.buffer), updates, repeats)
    return dict(what=f"QRL on umaze, {config.num_envs} envs x {config.unroll} steps and {updates} updates per "
                     f"iteration", iteration_ms=1e3 * iteration, loop_updates_per_s=updates / iteration,
                updates_alone_per_s=alone, share_of_updates=updates / iteration / alone,
                env_steps_per_iteration=config.num_envs * config.unroll)


def table(record: dict) -> str:
    lines = [f"float32 matmul peak measured here: {record['matmul_peak_gflops']:.1f} GFLOP/s "
             f"({record['devices']}; scale {record['scale']})"]
    if record["updates"]:
        lines += ["", "| update | sizes | ms (one call) | ms (in scan) | samples/s | matmul GFLOP | "
                      "% of peak (one call / scan) |", "|---|---|---|---|---|---|---|"]
    for name, r in record["updates"].items():
        lines.append(f"| {name} | {r['size']} | {r['ms_one_call']:.3g} | {r['ms_in_scan']:.3g} | "
                     f"{r['samples_per_s']:,.0f} | {r['matmul_gflops']:.3g} | "
                     f"{100 * r['peak_fraction_one_call']:.0f} / {100 * r['peak_fraction_in_scan']:.0f} |")
    parts = {name: r["parts_ms"] for name, r in record["updates"].items() if "parts_ms" in r}
    if parts:
        lines += ["", "World-model updates by part (ms, each part jitted alone; the model gradient includes the "
                      "filtering and, with pixels, the conv encoder's and decoder's):", ""]
        for name, p in parts.items():
            total = record["updates"][name]["ms_one_call"]
            lines.append(f"- {name} ({total:.3g} ms): " + ", ".join(
                f"{part.replace('_', ' ')} {ms:.3g} ({100 * ms / total:.0f}%)" for part, ms in p.items()))
    profiles = {name: r["profile"] for name, r in record["updates"].items() if "profile" in r}
    if profiles:
        lines += ["", "Where an update's time goes (ms and share of the whole; each part timed alone: the matrix "
                      "products replayed at their shapes, the optimiser steps, the IQE union as the update minus the "
                      "update without it; the rest is elementwise work, reductions and data movement):", "",
                  "| update | whole ms | matmuls | IQE union | optimiser | rest | XLA GFLOP | XLA MB accessed |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, p in profiles.items():
            whole = p["whole_ms"]
            cell = lambda part: (f"{p['parts_ms'][part]:.3g} ({100 * p['parts_ms'][part] / whole:.0f}%)"  # noqa: E731
                                 if part in p["parts_ms"] else "-")
            lines.append(f"| {name} | {whole:.3g} | {cell('matmuls')} | {cell('iqe_union')} | {cell('optimiser')} | "
                         f"{cell('rest')} | {p['xla_gflop']:.3g} | {p['xla_mb_accessed']:.3g} |")
    compiled = {name: p["compiled"] for name, p in profiles.items() if "compiled" in p}
    if compiled:
        lines += ["", "The compiled update instruction by instruction (JAX's profiler: XLA runs each fusion, product "
                      "and copy as its own step and times it; per call; products: the instructions that run a matrix "
                      "product, with what XLA fused into them; traced above wall where steps ran at once on both "
                      "cores):", "",
                  "| update | wall ms | traced ms | products ms (share) | other ms | largest other parts (ms) |",
                  "|---|---|---|---|---|---|"]
        for name, c in compiled.items():
            groups = "; ".join(f"{group} {ms:.2g}" for group, ms in c["groups"][:4])
            lines.append(f"| {name} | {c['wall_ms']:.3g} | {c['traced_ms']:.3g} | {c['products_ms']:.3g} "
                         f"({100 * c['products_ms'] / c['traced_ms']:.0f}%) | {c['other_ms']:.3g} | {groups} |")
    for base, share in record.get("iqe_share", {}).items():
        lines += ["", f"IQE share of the {base} update (one call; the update with an l2 head on the same projector "
                      f"as the baseline): {share['iqe_ms']:.1f} of {share['update_ms']:.1f} ms = "
                      f"{100 * share['fraction']:.0f}%"]
    if "iqe" in record:
        iqe = record["iqe"]
        base = iqe["float pairs + autodiff (previous)"]["forward_backward_ms"]
        lines += ["", f"IQE head alone, {record['iqe_shape']}:", "",
                  "| kernel | forward ms | forward+backward ms | speed-up (fwd+bwd) vs previous | max abs diff |",
                  "|---|---|---|---|---|"]
        for name, r in iqe.items():
            lines.append(f"| {name} | {r['forward_ms']:.1f} | {r['forward_backward_ms']:.1f} | "
                         f"{base / r['forward_backward_ms']:.2f}x | {r['max_abs_difference']:.1e} |")
    if "loops" in record:
        lines += ["", "The training loops against their updates alone (updates/s; the share is the loop's rate over "
                      "the updates' rate on the same sampler):", "",
                  "| loop | what | loop updates/s | updates alone /s | share | updates on a fixed batch /s |",
                  "|---|---|---|---|---|---|"]
        for name, r in record["loops"].items():
            fixed = f"{r['fixed_batch_updates_per_s']:.3g}" if "fixed_batch_updates_per_s" in r else "-"
            lines.append(f"| {name} | {r['what']} | {r['loop_updates_per_s']:.3g} | {r['updates_alone_per_s']:.3g} | "
                         f"{r['share_of_updates']:.2f} | {fixed} |")
    if "graph" in record:
        lines += ["", "The graph waypoints' graph (seconds to build it; Floyd-Warshall's time grows as M^3, its "
                      "memory as M^2):", "", "| waypoints | learned distances s | shortest paths s | paths MB |",
                  "|---|---|---|---|"]
        lines += [f"| {r['waypoints']:,} | {r['distances_s']:.2f} | {r['paths_s']:.2f} | {r['paths_mb']:.0f} |"
                  for r in record["graph"]]
    return "\n".join(lines)


def plot(path: Path, record: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    updates = record["updates"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 0.5 * max(len(updates), 4) + 1.5),
                                 gridspec_kw=dict(width_ratios=(3, 2)))
    names = list(updates)[::-1]
    y = np.arange(len(names))
    ax.barh(y - 0.2, [updates[n]["ms_one_call"] for n in names], 0.4, label="one jitted call")
    ax.barh(y + 0.2, [updates[n]["ms_in_scan"] for n in names], 0.4, label=f"in a scan of {record['scan_length']}")
    for i, n in enumerate(names):
        ax.text(max(updates[n]["ms_one_call"], updates[n]["ms_in_scan"]), i,
                f"  {100 * updates[n]['peak_fraction_in_scan']:.0f}% of peak in scan", va="center", fontsize=8)
    ax.set_yticks(y, names)
    ax.set_xlabel("ms per update")
    ax.set_xscale("log")
    ax.set_xlim(right=30 * max(max(r["ms_one_call"], r["ms_in_scan"]) for r in updates.values()))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=8)
    ax.set_title(f"updates (peak {record['matmul_peak_gflops']:.0f} GFLOP/s f32 matmul)")
    kernels = list(record["iqe"])
    ms = [record["iqe"][k]["forward_backward_ms"] for k in kernels]
    bx.barh(np.arange(len(kernels)), ms, color="C2")
    for i, value in enumerate(ms):
        bx.text(value, i, f" {value:.0f} ms", va="center", fontsize=8)
    bx.set_yticks(np.arange(len(kernels)), [k.replace(" (", "\n(") for k in kernels], fontsize=8)
    bx.set_xscale("log")
    bx.set_xlim(min(ms) / 10, 10 * max(ms))
    bx.set_xlabel("ms, forward + backward (log scale)")
    bx.set_title(f"IQE head alone, {record['iqe_shape']}")
    fig.suptitle(f"speed report, scale {record['scale']}, {record['devices']} (median of {record['repeats']} calls)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: Args) -> dict:
    start = time.perf_counter()
    cases = {c.name: c for c in (full_cases() if args.scale == "full" else quick_cases())}
    unknown = sorted(set(args.cases) - set(cases))
    if unknown:
        raise ValueError(f"--cases: unknown {unknown}; known at scale {args.scale!r}: {sorted(cases)}")
    peak = matmul_peak("float32", (1024, 2048) if args.scale == "full" else (256,), args.repeats)
    print(f"float32 matmul peak: {peak / 1e9:.1f} GFLOP/s", flush=True)
    record = dict(scale=args.scale, devices=f"{jax.device_count()} x {jax.devices()[0].device_kind}",
                  repeats=args.repeats, scan_length=args.scan_length, matmul_peak_gflops=peak / 1e9, updates={})
    if "updates" in args.parts:
        record.update(time_updates([cases[n] for n in (args.cases or cases)], args, peak))
    if "loops" in args.parts:
        record["loops"] = dict(offline=offline_loop_share(args.scale, args.repeats),
                               device=device_loop_share(args.scale, args.repeats))
        for name, r in record["loops"].items():
            print(f"{name} loop: {r['loop_updates_per_s']:.1f} updates/s, {r['share_of_updates']:.2f} of its "
                  f"updates alone", flush=True)
    if "graph" in args.parts:
        sizes = args.graph_sizes if args.scale == "full" else (50, 100)
        record["graph"] = time_waypoint_graph(sizes, args.repeats if args.scale == "quick" else 1)
        for r in record["graph"]:
            print(f"graph over {r['waypoints']} waypoints: {r['distances_s']:.2f} s distances, {r['paths_s']:.2f} s "
                  f"shortest paths, {r['paths_mb']:.0f} MB of paths", flush=True)
    return report.save_run(args.out_dir, "platonic_rl.benchmarks.speed", args, record, table(record),
                           plots={"speed.png": lambda path: plot(path, record)} if "updates" in args.parts else {},
                           total_seconds=time.perf_counter() - start)


def time_waypoint_graph(sizes: tuple[int, ...], repeats: int) -> list[dict]:
    """Seconds to build the graph waypoints' graph over each number of waypoints, in its two steps as
    :func:`~platonic_rl.agents.qrl_policies.waypoint_graph` runs them: the learned distance between every two
    waypoints (max over critics, 50 rows per call), then Floyd-Warshall over the edges within reach (M steps over the
    [M, M] matrix: its time grows as M^3, its memory as M^2). Waypoints: uniform states of OGBench's medium maze's
    extent; the agent: OGBench's cpu-size QRL, untrained (the work does not depend on the weights; reach 20 with
    untrained distances keeps most edges)."""
    from platonic_rl.agents import make
    from platonic_rl.agents import qrl_policies as qp

    agent = make("qrl_continuous", preset="offline", obs_dim=2, action_dim=2, encoder_hidden=(128, 128),
                 latent_dim=32, projector_hidden=(128,), dynamics_hidden=(128, 128), actor_hidden=(128, 128))
    distances = jax.jit(qp.waypoint_distances)
    shortest = jax.jit(lambda d, reach: qp.shortest_paths(jnp.where(d <= reach, d, jnp.inf)))
    out = []
    for m in sizes:
        states = jax.random.uniform(jax.random.PRNGKey(m), (m, 2), minval=-2.0, maxval=26.0)
        projections = qp.WaypointPolicy.create(agent, states, 20.0).waypoint_projections  # greedy: no graph built
        d = distances(agent, projections)
        out.append(dict(waypoints=m, distances_s=time_call(distances, (agent, projections), repeats),
                        paths_s=time_call(shortest, (d, jnp.float32(20.0)), repeats), paths_mb=4 * m * m / 1e6,
                        edges_fraction=float(jnp.mean(d <= 20.0))))
    return out


def time_updates(chosen: list[Case], args: Args, peak: float) -> dict:
    """The update part: each case's update, the IQE head alone and its share of the QRL update."""
    updates = {}
    for case in chosen:
        updates[case.name] = time_case(case, args, peak)
        r = updates[case.name]
        print(f"{case.name}: {r['ms_one_call']:.1f} ms one call, {r['ms_in_scan']:.1f} ms in scan, "
              f"{100 * r['peak_fraction_one_call']:.0f}% of peak", flush=True)
    components, dim = (64, 32) if args.scale == "full" else (4, 8)
    record = dict(updates=updates, iqe_shape=f"{args.iqe_pairs} pairs, {components} x {dim}",
                  iqe=time_iqe(args.iqe_pairs, components, dim, args.repeats))
    shares = {base: updates[base]["ms_one_call"] - updates["qrl_continuous_l2"]["ms_one_call"]
              for base in ("qrl_continuous", "qrl_continuous_previous_iqe")
              if base in updates and "qrl_continuous_l2" in updates}
    if shares:
        record["iqe_share"] = {base: dict(update_ms=updates[base]["ms_one_call"], iqe_ms=ms,
                                          fraction=ms / updates[base]["ms_one_call"]) for base, ms in shares.items()}
    return record


def main() -> None:
    import tyro  # here, not above: the speed functions run where only JAX and its kin are installed

    run(tyro.cli(Args))


if __name__ == "__main__":
    main()
