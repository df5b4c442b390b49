"""The benchmarks' agent sizes and schedules: what each benchmark calls its scales or presets, kept here so that
the benchmarks that run or time another's agents (the speed report, the accelerator check, the QRL slice, the
convergence probe) read them without importing that benchmark. Each section names the benchmark it belongs to;
nothing here runs anything.

    from platonic_rl.benchmarks.presets import maze2d_scales
    paper_qrl = maze2d_scales()["paper"].qrl          # C.3.2's QRL for maze2d: critic 3 x 1024, IQE 64 x 32
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Literal

import numpy as np

from platonic_rl.agents.crl import CRLAgent, CRLConfig
from platonic_rl.agents.denoised_mdp import ActorKind, DenoisedMDPConfig
from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.agents.qrl import QRLConfig
from platonic_rl.agents.qrl_continuous import OFFLINE_OBJECTIVE, QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.agents.qrl_policies import QRLPolicySettings  # noqa: F401  (the deployable policies' settings)
from platonic_rl.denoised.model import WorldModelConfig
from platonic_rl.envs import jax_env, maze2d, mountaincar
from platonic_rl.envs.point_maze import PointMaze
from platonic_rl.envs.reacher import Reacher
from platonic_rl.training.device_loop import DeviceLoopConfig
from platonic_rl.training.offline import TrainConfig

# ------------------------------------------------------------------------------ the benchmarks' Args


def fill_unset(args, quick: bool, **defaults: tuple) -> None:
    """Each field of the frozen dataclass ``args`` named in ``defaults`` and still None set to its ``(default,
    smoke)`` value: the smoke value where ``quick`` (the benchmark's ``--scale quick``, a run of about two minutes)."""
    for name, (default, smoke) in defaults.items():
        if getattr(args, name) is None:
            object.__setattr__(args, name, smoke if quick else default)


# ------------------------------------------------------------------------------ MountainCar (Table 4.1)


def mountaincar_qrl_config(width: int, depth: int, latent: int, components: int, dim_per_component: int,
                           steps: int, lr: float) -> QRLConfig:
    """A scale-down of C.3.1 (same objective), observations normalised to about [-1, 1] in the encoder."""
    hidden = (width,) * depth
    return QRLConfig(obs_center=mountaincar.OBS_CENTER, obs_scale=mountaincar.OBS_SCALE, encoder_hidden=hidden,
                     latent_dim=latent, projector_hidden=hidden[:max(depth - 1, 1)], iqe_components=components,
                     iqe_dim_per_component=dim_per_component, l2_dim=components * dim_per_component,
                     dynamics_hidden=hidden, learning_rate=lr, cosine_decay_steps=steps)


def mountaincar_presets() -> dict[str, tuple[QRLConfig, TrainConfig]]:
    """QRL on MountainCar (``benchmarks.mountaincar``) at three scales:

    * ``quick``: 2x128 MLPs, latent 64, IQE 8x16, batch 256, 3k steps -- a smoke run, not comparable to the paper;
    * ``cpu``: 2x256 MLPs, latent 128, IQE 8x16, batch 256, 30k steps (8-10 min per method on 2 CPU cores);
    * ``paper``: C.3.1 -- 3x1024 MLPs, latent 256, IQE 16x32, transition weight 75, lr 5e-4 cosine,
      lambda lr 0.3, batch 4096, 5e5 steps (accelerator-sized).

    Every preset normalises observations (the velocity spans only +-0.07)."""
    paper = QRLConfig(obs_center=mountaincar.OBS_CENTER, obs_scale=mountaincar.OBS_SCALE)
    return {
        "quick": (mountaincar_qrl_config(128, 2, 64, 8, 16, 3_000, lr=1e-3), TrainConfig(steps=3_000, batch_size=256)),
        "cpu": (mountaincar_qrl_config(256, 2, 128, 8, 16, 30_000, lr=1e-3), TrainConfig(steps=30_000, batch_size=256)),
        "paper": (paper, TrainConfig(steps=500_000, batch_size=4096, log_every=1000, checkpoint_every=50_000)),
    }


# ------------------------------------------------------------------------------------ maze2d (Table 4.2)


@dataclasses.dataclass(frozen=True)
class Maze2dScale:
    """Everything a scale sets (the objective is C.3.2's at every scale)."""
    dataset_size: int | None        # None: D4RL's (umaze 1M, medium 2M, large 4M)
    qrl: QRLContinuousConfig
    crl: CRLConfig
    gcbc: GCBCConfig
    qrl_train: TrainConfig
    crl_train: TrainConfig
    gcbc_train: TrainConfig
    episodes: int                   # evaluation episodes per (layout, method, seed, setting)
    mppi_samples: int
    mppi_episodes: int
    note: str
    critic_hold_steps: int = 20     # qrl_true_hold: each grid action held this many steps (0.2 s) in the lookahead
    policies: QRLPolicySettings = QRLPolicySettings()

    def method(self, name: str):
        """(agent class, config, train config, goal sampler settings) of one trained method at this scale: QRL's
        goals are random dataset states with behaviour-cloning goals from the future (C.3.2), the others' future
        states."""
        if name == "qrl":
            return QRLContinuousAgent, self.qrl, self.qrl_train, dict(p_future=0.0, bc_goals=True)
        if name == "crl":
            return CRLAgent, self.crl, self.crl_train, dict(p_future=1.0)
        if name == "gcbc":
            return GCBCAgent, self.gcbc, self.gcbc_train, dict(p_future=1.0)
        raise ValueError(f"method must be one of qrl, crl, gcbc (mppi plans with qrl), got {name!r}")


def maze2d_qrl_config(hidden: tuple[int, ...], latent: int, projector: tuple[int, ...], components: int, dims: int,
               actor: tuple[int, ...], actor_lr: float) -> QRLContinuousConfig:
    """C.3.2's QRL: 2 critics, residual T, IQE-maxmean, transition weight 1, lr 0.01 (lambda) / 5e-4 (critic),
    BC weight 0.05 on the dataset action's negative log-likelihood, phi(x) = -softplus(500 - x, beta=0.01)
    (C.24); as the official code's offline maze2d setting, no entropy term in the actor loss."""
    return QRLContinuousConfig(obs_dim=4, action_dim=2, encoder_hidden=hidden, latent_dim=latent,
                               projector_hidden=projector, iqe_components=components, iqe_dim_per_component=dims,
                               dynamics_hidden=hidden, actor_hidden=actor, num_critics=2,
                               actor_learning_rate=actor_lr, **OFFLINE_OBJECTIVE)


def _maze2d_train(steps: int, batch: int, log_every: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=batch, log_every=log_every, checkpoint_every=5 * log_every,
                       progress=True)


def maze2d_scales() -> dict[str, Maze2dScale]:
    """``quick``: a smoke run in minutes (tiny networks, 20k-step datasets, 1.5k updates): NOT comparable to
    the paper. ``cpu``: D4RL-size datasets; QRL 2x128 MLPs, latent 64, IQE-maxmean 16 x 16, batch 256, 60k
    updates (its signals are flat from about 50k at this width: docs/results.md, the width ladder), actor lr 3e-4
    (the paper's 3e-5 is for 2e5 updates of batch 4096); Contrastive RL and GCBC 2x256, batch 256, 30k updates;
    100 episodes; MPPI with 64 samples (the paper: 10,000) over 50 episodes. ``paper``: C.3.2 (accelerator-sized;
    QRL's actor 4 x 1024, its critic 3 x 1024)."""
    d = 4 * 1024
    train = _maze2d_train
    return {
        "quick": Maze2dScale(
            20_000, maze2d_qrl_config((64, 64), 32, (64,), 8, 8, (64, 64), 1e-4),
            CRLConfig(obs_dim=4, action_dim=2, hidden=(64, 64), repr_dim=16, actor_hidden=(64, 64), bc_weight=0.05),
            GCBCConfig(obs_dim=4, action_dim=2, hidden=(64, 64)),
            train(1_500, 128, 500), train(1_500, 128, 500), train(1_500, 128, 500),
            episodes=10, mppi_samples=32, mppi_episodes=10,
            policies=QRLPolicySettings(hold_steps=10, num_waypoints=200, mppi_samples=256, mppi_episodes=4),
            note="quick: a smoke run, NOT comparable to the paper's numbers"),
        "cpu": Maze2dScale(
            None, maze2d_qrl_config((128, 128), 64, (128,), 16, 16, (128, 128), 3e-4),
            CRLConfig(obs_dim=4, action_dim=2, hidden=(256, 256), repr_dim=16, actor_hidden=(256, 256),
                      bc_weight=0.05),
            GCBCConfig(obs_dim=4, action_dim=2, hidden=(256, 256)),
            train(60_000, 256, 1_000), train(30_000, 256, 1_000), train(30_000, 256, 1_000),
            episodes=100, mppi_samples=64, mppi_episodes=50,
            note="cpu: small networks and ~1/50 of the paper's samples (see --help); the paper's numbers "
                 "are at the paper scale"),
        "paper": Maze2dScale(
            None, maze2d_qrl_config((1024, 1024, 1024), 256, (1024, 1024), 64, 32, (1024,) * 4, 3e-5),
            CRLConfig(obs_dim=4, action_dim=2, hidden=(1024, 1024, 1024), repr_dim=16,
                      actor_hidden=(1024, 1024, 1024), bc_weight=0.05),
            GCBCConfig(obs_dim=4, action_dim=2, hidden=(1024, 1024, 1024)),
            train(200_000, d, 1_000), train(150_000, 1024, 1_000), train(150_000, 1024, 1_000),
            episodes=100, mppi_samples=10_000, mppi_episodes=100, note="paper: C.3.2's settings"),
    }




def maze2d_slice_sizes() -> dict[str, tuple[QRLContinuousConfig, int]]:
    """The QRL slice's sizes, (QRL config, batch size): ``paper`` and ``cpu`` are :func:`maze2d_scales`' QRL;
    ``tiny`` is a smoke size for CPUs and tests (NOT comparable to anything)."""
    scales = maze2d_scales()
    return dict(paper=(scales["paper"].qrl, scales["paper"].qrl_train.batch_size),
                cpu=(scales["cpu"].qrl, scales["cpu"].qrl_train.batch_size),
                tiny=(maze2d_qrl_config((32, 32), 16, (32,), 4, 4, (32, 32), 3e-4), 64))

# ------------------------------------------------------------------------------ the device loop


@dataclasses.dataclass(frozen=True)
class DeviceLoopScale:
    """The device loop benchmark's sizes and loops per part."""
    hidden: tuple[int, ...]           # every MLP's hidden layers
    latent: int                       # QRL's latent; IQE components x dims below
    iqe: tuple[int, int]
    batch_size: int
    few: DeviceLoopConfig             # the throughput regime with few updates per env step (JaxGCRL's)
    one_envs: int                     # envs of the one-update-per-env-step regime (unroll 50)
    seeds_config: DeviceLoopConfig
    seed_counts: tuple[int, ...]
    device_counts: tuple[int, ...]
    learning: DeviceLoopConfig
    measure_iterations: int           # iterations per timed call
    note: str
    qrl_entropy_init: float = 1.0     # QRL's initial entropy weight (the agent's default: 1)


def device_loop_scales() -> dict[str, DeviceLoopScale]:
    """``quick``: tiny networks and budgets, a smoke run NOT meant to learn. ``cpu``: the agents at the size used
    on CPU elsewhere (2 x 256 MLPs, batch 256); learning: 128 envs x 50-step unrolls per 16 updates (400 env steps
    per update), 500 iterations (3.2M env steps, 8,000 updates per seed after a 128-episode prefill): about 30 min per
    (env, method) on 2 CPU cores for QRL with 5 seeds vmapped (3.2 s per iteration measured; Contrastive RL 1.0 s).

    The cpu scale starts QRL's entropy weight at 0.01, not the agent's 1. The weight adapts by about one learning
    rate (3e-4) in log space per update; the paper's schedule makes one update per env step, this one one per 400, so
    8,000 updates cannot bring it down from 1. At 1 the entropy term outweighs the actor's distance objective on
    the reacher, where one action changes the learned distance by well under a step, and the actor stays near its
    maximum-entropy policy (``docs/results/device_loop_reacher_checks``)."""
    few = dict(unroll=50, eval_every=10_000, eval_episodes=8, prefill_episodes=256)
    return {
        "quick": DeviceLoopScale(
            (32,), 16, (4, 4), 64,
            DeviceLoopConfig(num_envs=32, updates_per_iteration=2, batch_size=64, iterations=4,
                             **{**few, "prefill_episodes": 32}),
            4, DeviceLoopConfig(num_envs=8, unroll=50, updates_per_iteration=2, batch_size=64, iterations=4,
                                prefill_episodes=8, eval_every=10_000, eval_episodes=8),
            (1, 2), (1, 2),
            DeviceLoopConfig(num_envs=16, unroll=50, updates_per_iteration=4, iterations=12, prefill_episodes=16,
                             batch_size=64, eval_every=6, eval_episodes=16, chunk_iterations=6),
            2, note="quick: tiny networks and budgets, a smoke run NOT meant to learn"),
        "cpu": DeviceLoopScale(
            (256, 256), 64, (16, 16), 256,
            DeviceLoopConfig(num_envs=256, updates_per_iteration=8, batch_size=256, iterations=10, **few),
            16, DeviceLoopConfig(num_envs=64, unroll=50, updates_per_iteration=8, batch_size=256, iterations=10,
                                 prefill_episodes=64, eval_every=10_000, eval_episodes=8),
            (1, 4, 16), (1, 2, 4, 8),
            DeviceLoopConfig(num_envs=128, unroll=50, updates_per_iteration=16, iterations=500, prefill_episodes=128,
                             batch_size=256, eval_every=25, eval_episodes=64, chunk_iterations=25),
            5, note="cpu: 2 x 256 MLPs, batch 256; QRL's entropy weight starts at 0.01", qrl_entropy_init=0.01),
    }


def _qrl_device_config(scale: DeviceLoopScale, obs_dim: int, action_dim: int, qrl_entropy_init: float | None):
    h = scale.hidden
    return QRLContinuousConfig(obs_dim=obs_dim, action_dim=action_dim, encoder_hidden=h, latent_dim=scale.latent,
                               projector_hidden=h[:1], iqe_components=scale.iqe[0], iqe_dim_per_component=scale.iqe[1],
                               dynamics_hidden=h, actor_hidden=h,
                               entropy_init=scale.qrl_entropy_init if qrl_entropy_init is None else qrl_entropy_init)


DEVICE_LOOP_METHODS: dict[str, Callable] = {
    "qrl": _qrl_device_config,
    "crl": lambda scale, obs_dim, action_dim, _: CRLConfig(obs_dim=obs_dim, action_dim=action_dim, hidden=scale.hidden,
                                                           repr_dim=64, actor_hidden=scale.hidden),
    "gcbc": lambda scale, obs_dim, action_dim, _: GCBCConfig(obs_dim=obs_dim, action_dim=action_dim,
                                                             hidden=scale.hidden),
}
"""The device loop's methods: name -> ``(scale, obs_dim, action_dim, qrl_entropy_init) -> agent config``; a new
method is one entry (the loop makes the agent of its config's class)."""


def device_loop_agent_config(method: str, scale: DeviceLoopScale, obs_dim: int, action_dim: int,
                             qrl_entropy_init: float | None = None):
    """The agent of ``method`` (:data:`DEVICE_LOOP_METHODS`) at ``scale``; QRL's entropy weight starts at
    ``qrl_entropy_init`` (None: the scale's)."""
    if method not in DEVICE_LOOP_METHODS:
        raise ValueError(f"method must be one of {list(DEVICE_LOOP_METHODS)}, got {method!r}")
    return DEVICE_LOOP_METHODS[method](scale, obs_dim, action_dim, qrl_entropy_init)


def device_loop_env(name: str, reacher_goal: str = "pose") -> jax_env.GoalEnv:
    """The device loop's env of that name: the reacher, Brax's reacher, or a point-maze layout normalised by its
    extent."""
    if name == "reacher":
        return Reacher(goal=reacher_goal)
    if name == "brax-reacher":  # Brax's reacher through the adapter (pip install -e ".[brax]")
        from platonic_rl.envs import brax_env
        return brax_env.reacher(goal=reacher_goal)
    layout = maze2d.get_layout(name)
    return jax_env.Normalized(PointMaze(name), tuple(layout.obs_center), tuple(layout.obs_scale))


# ------------------------------------------------------------------------------------- Fetch (C.3.3)

# QRL network sizes. "paper": C.3.3 (f 512-512-128, projector 512-2048, IQE-maxmean 64 x 32, T 512-512,
# actor 512-512): ~0.32 s per update on 2 CPU cores, i.e. ~55 min per seed for FetchReach's 10k updates.
# "cpu": every hidden layer 256 wide and IQE-maxmean 16 x 32 (a 512-d head): ~0.075 s per update.
# Everything else (objective, phi, learning rates, two critics, schedule) is the paper's in both.
FETCH_QRL_PRESETS = {
    "paper": {},
    "cpu": dict(encoder_hidden=(256, 256), projector_hidden=(256,), iqe_components=16, dynamics_hidden=(256, 256),
                actor_hidden=(256, 256)),
}


# --------------------------------------------------------------------- DeepMind Control (Table D.4)

DMC_PRESETS = {
    # Table D.4's DMC sizes: x, y = 120 + 20 each vs Dreamer's 220 + 33; MLP encoder/decoder for states.
    "paper": dict(model={}, dreamer=dict(x_belief=220, x_state=33), agent={}, batch_size=50, chunk=50),
    # ~1/2 the widths, Dreamer's latent enlarged in the same proportion; 16 sequences x 32 steps; imagination
    # from 128 random posterior states of the 512 (the imagined rollouts dominate the cost on CPU).
    "cpu": dict(model=dict(x_belief=64, x_state=16, y_belief=64, y_state=16, hidden=128, embed_dim=128,
                           mlp_encoder_hidden=(128,), mlp_decoder_hidden=(128,)),
                dreamer=dict(x_belief=117, x_state=26),
                agent=dict(actor_hidden=(128, 128), critic_hidden=(128, 128), imagine_starts=128),
                batch_size=16, chunk=32),
}
# Table D.5 (backprop via dynamics): beta per task and variant; 1 = no regularisation (noiseless).
DMC_BETAS = {"cheetah-run": dict(noiseless=1.0, distractors=0.125, noisy_sensor=0.25, jitter=0.25),
             "walker-walk": dict(noiseless=1.0, distractors=0.25, noisy_sensor=0.25, jitter=0.5),
             "reacher-easy": dict(noiseless=1.0, distractors=0.25, noisy_sensor=0.25, jitter=0.25)}
# Pixels (64x64 RGB): D.2.1's conv encoder/decoder, width k (paper 32); the cpu preset halves it.
DMC_PIXEL_MODEL = {"paper": dict(conv_width=32, embed_dim=1024), "cpu": dict(conv_width=16, embed_dim=256)}


def _setting(default, label: str | None = None):
    """A field of :class:`DMCMethodSettings`; ``label`` names it in the benchmark's titles where it is not its
    default (None: never named there)."""
    return dataclasses.field(default=default, metadata=dict(label=label))


@dataclasses.dataclass(frozen=True)
class DMCMethodSettings:
    """The DMC benchmark's settings of the two methods' configs (:func:`make_config`), each a flag of its own
    (``--free-nats``, ...). A field named like a :class:`DenoisedMDPConfig` field sets that field where it is not
    None: on Denoised MDP, and on Dreamer unless a ``dreamer_<name>`` field here is Dreamer's own or the name is in
    :data:`DENOISED_ONLY`. A new setting of the configs is one field here."""

    policy: Literal["imagine", "sac"] = _setting("imagine")
    """How the policy learns in the latent (``DenoisedMDPConfig.policy``)."""
    actor: ActorKind = _setting(DenoisedMDPConfig.actor)
    """The actor's parametrisation (``DenoisedMDPConfig.actor``): ``dreamer`` is DreamerV1's and the official Denoised
    MDP code's; ``clipped`` (log sigma clipped, unbounded mean) is the one results recorded before 2026-11-25 used."""
    free_nats: float = _setting(3.0, "Denoised MDP free nats")
    """Free nats on Denoised MDP's KL_x (Dreamer's are ``dreamer_free_nats``)."""
    dreamer_free_nats: float = _setting(3.0, "Dreamer free nats")
    """Free nats on Dreamer's KL (DreamerV1's 3; on small state vectors the KL can sit below them on most steps,
    where the prior then gets no gradient)."""
    kl_split: bool = _setting(False, "KL-x split")
    """Denoised MDP with D.2.1's KL-x split: free nats only on beta KL_x, (1 - beta) KL_x always paid."""
    imagine_starts: int | None = _setting(None)
    """Posterior states the policy imagines from, drawn from the batch's batch_size x chunk (default: the preset's;
    cpu 128; batch_size x chunk or more: all of them, as Dreamer)."""
    beta: float | None = _setting(None, "Denoised MDP beta")
    """Denoised MDP's beta (eq. 5.4's weight on KL_y and KL_z) for every run (default: Table D.5's per task and
    variant, ``DMC_BETAS``)."""
    alpha: float | None = _setting(None, "Denoised MDP alpha")
    """Denoised MDP's alpha (eq. 5.4's weight on every KL term) for every run (default: the thesis' rule,
    :func:`observation_alpha`: 1 for 64x64x3 pixels, the observation's size / 12288 for states). Dreamer's is
    ``dreamer_alpha``."""
    dreamer_alpha: float = _setting(1.0, "Dreamer alpha")
    """Dreamer's weight on its KL (its own 1). For diagnosis: Denoised MDP at beta 1 with y nearly empty is Dreamer
    with ``alpha``'s weight, so a gap between them may come from alpha rather than from the split latent."""
    x_size: tuple[int, int] | None = _setting(None, "x size")
    """x's sizes, deterministic and stochastic (``x_belief x_state``), for both methods (Dreamer's latent is its x),
    replacing the preset's (cpu: Denoised MDP 64 16, Dreamer 117 26; Table D.4 sizes Dreamer's latent to match
    Denoised MDP's x and y together). For diagnosis: whether a gap between the methods follows x's size."""

    def __post_init__(self):
        for name in ("free_nats", "dreamer_free_nats"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.alpha is not None and not self.alpha > 0:
            raise ValueError(f"--alpha must be > 0, got {self.alpha}")
        if not self.dreamer_alpha > 0:
            raise ValueError(f"--dreamer-alpha must be > 0, got {self.dreamer_alpha}")
        if self.beta is not None and not self.beta > 0:
            raise ValueError(f"--beta must be > 0 (Table D.5 uses 0.125 to 1), got {self.beta}")
        if self.imagine_starts is not None and self.imagine_starts < 1:
            raise ValueError(f"--imagine-starts must be >= 1, got {self.imagine_starts}")
        if self.x_size is not None and (len(self.x_size) != 2 or min(self.x_size) < 1):
            raise ValueError(f"--x-size takes two sizes >= 1 (x_belief x_state), got {self.x_size}")

    def changed(self) -> list[str]:
        """The labelled settings that differ from their defaults, as ``"<label> <value>"``."""
        said = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata["label"] is not None and value != f.default:
                shown = " + ".join(map(str, value)) if isinstance(value, tuple) else value
                said.append(f"{f.metadata['label']} {shown}")
        return said


DENOISED_ONLY = ("beta", "kl_split")
"""Settings of Denoised MDP's config that Dreamer's keeps at :meth:`DenoisedMDPConfig.dreamer`'s values."""


def make_config(method: str, task: str, variant: str, obs_shape: tuple[int, ...], action_dim: int, preset: str,
                settings: DMCMethodSettings = DMCMethodSettings()) -> DenoisedMDPConfig:
    """The config of ``method`` (``denoised`` or ``dreamer``) at ``preset`` for an observation of ``obs_shape``, with
    ``settings`` (:class:`DMCMethodSettings`) over the preset's: Denoised MDP's beta is Table D.5's and its alpha
    :func:`observation_alpha` of the observation where ``settings`` leave them None."""
    p = DMC_PRESETS[preset]
    pixels = len(obs_shape) == 3
    model = WorldModelConfig(obs_shape=tuple(obs_shape), action_dim=action_dim,
                             **{**p["model"], **(DMC_PIXEL_MODEL[preset] if pixels else {})})
    x = {} if settings.x_size is None else dict(x_belief=int(settings.x_size[0]), x_state=int(settings.x_size[1]))
    chosen = dataclasses.asdict(settings)
    fields = [f.name for f in dataclasses.fields(DenoisedMDPConfig) if f.name in chosen]
    if method == "denoised":
        own = {name: chosen[name] for name in fields if chosen[name] is not None}
        return DenoisedMDPConfig(model=dataclasses.replace(model, **x),
                                 **{**p["agent"], "beta": DMC_BETAS[task][variant],
                                    "alpha": observation_alpha(obs_shape), **own})
    if method == "dreamer":
        own = {name: chosen.get(f"dreamer_{name}", chosen[name]) for name in fields if name not in DENOISED_ONLY}
        return DenoisedMDPConfig.dreamer(dataclasses.replace(model, **{**p["dreamer"], **x}),
                                         **{**p["agent"], **{k: v for k, v in own.items() if v is not None}})
    raise ValueError(f"unknown method {method!r}; expected 'denoised' or 'dreamer'")


PAPER_PIXELS = 64 * 64 * 3  # the observation size at which the paper's alpha is 1 (DMC's pixels)


def observation_alpha(obs_shape: tuple[int, ...]) -> float:
    """Eq. 5.4's alpha for an observation of ``obs_shape``, by the thesis' rule (Section 5.3: alpha roughly
    proportional to the observation's dimensionality, to keep its ratio to the reconstruction loss; 1 for DMC's
    64x64x3 pixels, 2 for RoboDesk's twice as many): ``size / (64 * 64 * 3)``, so 1 for the paper's pixels and about
    0.003 for cheetah-run's 34-dimensional state with one twin."""
    return float(np.prod(obs_shape)) / PAPER_PIXELS
