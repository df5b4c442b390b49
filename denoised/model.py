"""The Denoised MDP world model (dissertation chapter 5): a recurrent state-space model with factored latents.

Factors (section 5.3, Figure 5-2c), each an RSSM factor -- a GRU belief h plus a diagonal Gaussian state
with std = softplus(.) + 0.1:

* x (controllable, reward-relevant): prior p(x_t | x_{t-1}, a_{t-1}); h^x_t = GRU(h^x_{t-1}, [x_{t-1}, a_{t-1}]).
* y (uncontrollable): prior p(y_t | y_{t-1}); h^y_t = GRU(h^y_{t-1}, y_{t-1}) -- never sees an action.
* z (optional, reward-irrelevant): prior p(z_t | x_t, y_t, z_{t-1}, a_{t-1}); h^z_t = GRU(h^z_{t-1},
  [z_{t-1}, a_{t-1}]), prior head on [h^z_t, x_t, y_t].

Posteriors, factorised as in section 5.3: q(x_t | x_{t-1}, y_{t-1}, z_{t-1}, s_t, a) and q(y_t | same) read
every factor's belief (which summarise the previous latents and the action) and the observation
embedding; q(z_t | x_t, y_t, s_t, a) reads h^z_t, x_t, y_t and the embedding. The first step uses zero
previous latents and a zero action (footnote of section 5.3, following Dreamer).

Emission p(s_t | x_t, y_t, z_t) reads every factor's features [h, state]; the reward is
r = r_x(x_t) + r_y(y_t), both unit-variance Gaussians. A factor of size 0 is switched off statically:
Dreamer is this model with y and z off (``WorldModelConfig.dreamer``).

Data convention: sequences ``observations [B, T, ...]``, ``prev_actions [B, T, A]`` (the action that led
to observation t; zero at an episode's first step) and ``rewards [B, T]`` (received on arriving at
observation t). The whole sequence is filtered in one ``lax.scan`` (:func:`observe`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from platonic_rl.common.conv import ConvTranspose, im2col_conv_general_dilated
from platonic_rl.common.networks import MLP, compute_dtype

FACTORS = ("x", "y", "z")
CONV_IMPLS = ("auto", "xla", "im2col")
MIN_STD = 0.1



@dataclasses.dataclass(frozen=True)
class WorldModelConfig:
    """Defaults: the official DMC settings (x and y: GRU belief 120 + state 20; z off; hidden 200)."""

    obs_shape: tuple[int, ...] = (17,)      # (D,) vectors or (64, 64, 3) pixels
    action_dim: int = 6                     # continuous actions in [-1, 1]^action_dim
    x_belief: int = 120                     # x (controllable, reward-relevant): its GRU belief size
    x_state: int = 20                       # and its stochastic state size
    y_belief: int = 120                     # y (uncontrollable: never sees an action): its GRU belief size
    y_state: int = 20                       # and stochastic state
    z_belief: int = 0                       # z (optional, reward-irrelevant): its GRU belief size (0: off)
    z_state: int = 0                        # and stochastic state
    hidden: int = 200                       # prior/posterior/reward MLP width
    embed_dim: int = 1024                   # observation embedding (conv encoder output for pixels)
    mlp_encoder_hidden: tuple[int, ...] = (400, 400)  # the vector encoder's hidden widths
    mlp_decoder_hidden: tuple[int, ...] = (400, 400)  # the vector decoder's hidden widths
    conv_width: int = 32                    # k of the D.2.1 conv encoder/decoder
    # The networks (and the agent's actor and critic) compute in this dtype ("bfloat16" for GPU/TPU);
    # parameters, optimizer state, the recurrent beliefs, the Gaussians' parameters and the losses stay float32.
    compute_dtype: str = "float32"
    # How the conv pair computes its strided convolutions: "xla" (lax.conv), "im2col" (one matmul each,
    # common/conv.py: the same sums, ~2x faster updates on CPU) or "auto" (im2col on the CPU backend, else xla).
    conv_impl: str = "auto"

    def __post_init__(self):
        for f in FACTORS:
            belief, state = getattr(self, f"{f}_belief"), getattr(self, f"{f}_state")
            if belief < 0 or state < 0 or (belief == 0) != (state == 0):
                raise ValueError(f"WorldModelConfig: {f}_belief and {f}_state must both be 0 (factor off) or "
                                 f"both > 0, got {belief} and {state}")
        if self.x_state == 0:
            raise ValueError("WorldModelConfig: the x factor cannot be switched off")
        if self.action_dim < 1 or self.hidden < 1 or self.embed_dim < 1:
            raise ValueError("WorldModelConfig: action_dim, hidden and embed_dim must be >= 1")
        for name in ("mlp_encoder_hidden", "mlp_decoder_hidden"):
            widths = getattr(self, name)
            if any(isinstance(w, bool) or int(w) != w or w < 1 for w in widths):
                raise ValueError(f"WorldModelConfig.{name} must hold layer widths >= 1, got {tuple(widths)}")
        if self.conv_width < 1:
            raise ValueError(f"WorldModelConfig.conv_width must be >= 1, got {self.conv_width}")
        compute_dtype(self)  # a known compute_dtype
        if self.conv_impl not in CONV_IMPLS:
            raise ValueError(f"WorldModelConfig.conv_impl must be one of {CONV_IMPLS}, got {self.conv_impl!r}")
        if len(self.obs_shape) not in (1, 3) or (len(self.obs_shape) == 3 and tuple(self.obs_shape) != (64, 64, 3)):
            raise ValueError(f"WorldModelConfig.obs_shape must be (D,) or (64, 64, 3), got {self.obs_shape}")

    @property
    def im2col(self) -> bool:
        """Whether the conv pair runs as matrix products (``conv_impl``; "auto" decides by the default backend)."""
        return self.conv_impl == "im2col" or (self.conv_impl == "auto" and jax.default_backend() == "cpu")

    @property
    def pixels(self) -> bool:
        return len(self.obs_shape) == 3

    @property
    def factors(self) -> tuple[str, ...]:
        return tuple(f for f in FACTORS if getattr(self, f"{f}_state") > 0)

    def feature_dim(self, factor: str) -> int:
        return getattr(self, f"{factor}_belief") + getattr(self, f"{factor}_state")

    @classmethod
    def dreamer(cls, **kwargs) -> "WorldModelConfig":
        """Dreamer: x only (Table D.4 gives it a 220 + 33 latent to match the parameter count)."""
        return cls(**{"x_belief": 220, "x_state": 33, **kwargs, "y_belief": 0, "y_state": 0, "z_belief": 0,
                      "z_state": 0})


# ------------------------------------------------------------------------------------- networks

ELU = "elu"  # Dreamer's activation for every dense layer of the world model


class ConvEncoder(nn.Module):
    """D.2.1 / Dreamer 64x64 encoder: conv k, 2k, 4k, 8k (4x4, stride 2, ReLU) -> 2x2x8k -> FC ``embed_dim``."""

    width: int = 32
    embed_dim: int = 1024
    dtype: Any = None  # computation dtype (None: float32); the embedding is returned as float32
    im2col: bool = False  # each convolution as one matmul (platonic_rl.common.conv; faster on CPU)

    @nn.compact
    def __call__(self, images):
        x = images.astype(jnp.float32) / 255.0 - 0.5 if images.dtype == jnp.uint8 else images
        batch = x.shape[:-3]
        x = x.reshape((-1, *x.shape[-3:]))
        conv = im2col_conv_general_dilated if self.im2col else None
        for mult in (1, 2, 4, 8):
            x = nn.relu(nn.Conv(mult * self.width, (4, 4), (2, 2), padding="VALID", dtype=self.dtype,
                                conv_general_dilated=conv)(x))
        x = x.reshape((*batch, -1))
        return nn.Dense(self.embed_dim, dtype=self.dtype)(x).astype(jnp.float32)


class ConvDecoder(nn.Module):
    """D.2.1 / Dreamer 64x64 decoder (Table D.3 at 64x64): FC ``embed_dim`` + ReLU -> 1x1 -> transposed convs 4k,
    2k, k, 3 with kernels 5, 5, 6, 6, stride 2 (ReLU after each but the last) -> 64x64x3 (the mean of a
    unit-variance Gaussian on pixels scaled to [-0.5, 0.5])."""

    width: int = 32
    embed_dim: int = 1024
    dtype: Any = None  # computation dtype (None: float32); the image mean is returned as float32
    im2col: bool = False  # each transposed convolution as one matmul (platonic_rl.common.conv; faster on CPU)

    @nn.compact
    def __call__(self, features):
        batch = features.shape[:-1]
        x = nn.relu(nn.Dense(self.embed_dim, dtype=self.dtype)(features)).reshape((-1, 1, 1, self.embed_dim))
        for i, (ch, k) in enumerate(((4 * self.width, 5), (2 * self.width, 5), (self.width, 6), (3, 6))):
            x = ConvTranspose(ch, (k, k), (2, 2), padding="VALID", dtype=self.dtype, im2col=self.im2col)(x)
            x = nn.relu(x) if i < 3 else x
        return x.reshape((*batch, 64, 64, 3)).astype(jnp.float32)


def gaussian_params(out: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(mean, std = softplus(raw) + 0.1) from a head's ``[..., 2 n]`` output."""
    mean, raw = jnp.split(out, 2, axis=-1)
    return mean, jax.nn.softplus(raw) + MIN_STD


def gaussian_sample(mean: jax.Array, std: jax.Array, key: jax.Array | None) -> jax.Array:
    """A reparametrised draw mean + std * eps of N(mean, std^2); the mean itself if ``key`` is None."""
    return mean if key is None else mean + std * jax.random.normal(key, mean.shape)


def gaussian_kl(mean_q, std_q, mean_p, std_p) -> jax.Array:
    """KL(N(mean_q, std_q^2) || N(mean_p, std_p^2)) of diagonal Gaussians, summed over the last axis."""
    var_ratio = jnp.square(std_q / std_p)
    return 0.5 * jnp.sum(var_ratio + jnp.square((mean_q - mean_p) / std_p) - 1.0 - jnp.log(var_ratio), -1)


class FactoredRSSM(nn.Module):
    """The factored world model; use the functions below (:func:`observe`, :func:`imagine_x`) to run it."""

    config: WorldModelConfig

    def setup(self):
        c = self.config
        dtype = compute_dtype(c)
        if c.pixels:
            self.encoder = ConvEncoder(c.conv_width, c.embed_dim, dtype=dtype, im2col=c.im2col)
            self.decoder = ConvDecoder(c.conv_width, c.embed_dim, dtype=dtype, im2col=c.im2col)
        else:
            self.encoder = MLP(c.mlp_encoder_hidden, c.embed_dim, ELU, dtype=dtype)
            self.decoder = MLP(c.mlp_decoder_hidden, c.obs_shape[0], ELU, dtype=dtype)
        self.cells = {f: nn.GRUCell(getattr(c, f"{f}_belief"), dtype=dtype) for f in c.factors}
        self.inputs = {f: nn.Dense(c.hidden, dtype=dtype) for f in c.factors}
        self.priors = {f: MLP((c.hidden,), 2 * getattr(c, f"{f}_state"), ELU, dtype=dtype) for f in c.factors}
        self.posteriors = {f: MLP((c.hidden,), 2 * getattr(c, f"{f}_state"), ELU, dtype=dtype)
                           for f in c.factors}
        self.rewards = {f: MLP((c.hidden, c.hidden), 1, ELU, dtype=dtype) for f in ("x", "y") if f in c.factors}

    # -------------------------------------------------------------------------------- pieces
    def encode(self, observations):
        return self.encoder(observations)

    def decode(self, features):
        """Mean of p(s | x, y, z) from the concatenated features of every factor."""
        return self.decoder(features)

    def reward(self, state: dict) -> dict:
        """{'x': r_x(features_x), 'y': r_y(features_y)} (the means of unit-variance Gaussians) for the
        factors present in ``state`` (an imagined x-only state gives only r_x)."""
        return {f: head(features(state, f))[..., 0] for f, head in self.rewards.items() if f in state}

    def _belief(self, factor, state, inputs):
        x = nn.elu(self.inputs[factor](jnp.concatenate(inputs, -1)))
        return self.cells[factor](state[f"h{factor}"], x)[0].astype(jnp.float32)  # beliefs stay float32

    def x_prior_step(self, state: dict, action, key):
        """One step of the x prior alone (imagination): h^x_t, then x_t ~ p(x_t | h^x_t)."""
        hx = self._belief("x", state, [state["x"], action])
        mean, std = gaussian_params(self.priors["x"](hx))
        return dict(hx=hx, x=gaussian_sample(mean, std, key))

    def observe_step(self, state: dict, action, embed, key):
        """One filtering step: beliefs from the previous latents, priors, posteriors, posterior samples.
        Returns (new posterior state, {factor: (prior mean, prior std, posterior mean, posterior std)}). With
        ``key`` None the posterior means stand for the samples (a deterministic filter)."""
        c = self.config
        beliefs = {}
        if "x" in c.factors:
            beliefs["x"] = self._belief("x", state, [state["x"], action])
        if "y" in c.factors:
            beliefs["y"] = self._belief("y", state, [state["y"]])  # y's prior never sees the action
        if "z" in c.factors:
            beliefs["z"] = self._belief("z", state, [state["z"], action])
        context = jnp.concatenate([beliefs[f] for f in c.factors] + [embed], -1)
        keys = {} if key is None else dict(zip(c.factors, jax.random.split(key, len(c.factors))))
        new, stats = {}, {}
        for f in ("x", "y"):
            if f in c.factors:
                prior = gaussian_params(self.priors[f](beliefs[f]))
                post = gaussian_params(self.posteriors[f](context))
                new[f"h{f}"], new[f] = beliefs[f], gaussian_sample(*post, keys.get(f))
                stats[f] = (*prior, *post)
        if "z" in c.factors:
            xy = [new[f] for f in ("x", "y") if f in new]
            prior = gaussian_params(self.priors["z"](jnp.concatenate([beliefs["z"], *xy], -1)))
            post = gaussian_params(self.posteriors["z"](jnp.concatenate([beliefs["z"], *xy, embed], -1)))
            new["hz"], new["z"] = beliefs["z"], gaussian_sample(*post, keys.get("z"))
            stats["z"] = (*prior, *post)
        return new, stats

    def __call__(self, observations, actions, key):  # touches every submodule once (for init)
        state = initial_state(self.config, observations.shape[:-len(self.config.obs_shape)])
        state, _ = self.observe_step(state, actions, self.encode(observations), key)
        self.x_prior_step(state, actions, key)
        return self.decode(all_features(self.config, state)), self.reward(state)


# ------------------------------------------------------------------------------------ functions


def initial_state(config: WorldModelConfig, batch_shape=()) -> dict:
    """Zero beliefs and states for every active factor."""
    state = {}
    for f in config.factors:
        state[f"h{f}"] = jnp.zeros((*batch_shape, getattr(config, f"{f}_belief")))
        state[f] = jnp.zeros((*batch_shape, getattr(config, f"{f}_state")))
    return state


def features(state: dict, factor: str) -> jax.Array:
    """A factor's features [belief, state] (what the policy reads for x)."""
    return jnp.concatenate([state[f"h{factor}"], state[factor]], -1)


def all_features(config: WorldModelConfig, state: dict) -> jax.Array:
    return jnp.concatenate([features(state, f) for f in config.factors], -1)


def init_params(config: WorldModelConfig, key) -> dict:
    obs = jnp.zeros((1, *config.obs_shape), jnp.uint8 if config.pixels else jnp.float32)
    return FactoredRSSM(config).init(key, obs, jnp.zeros((1, config.action_dim)), key)


def observe(config: WorldModelConfig, params, observations, prev_actions, key, state: dict | None = None):
    """Filter sequences ``[B, T, ...]`` with the posterior in one ``lax.scan``.

    Returns (states: dict of ``[B, T, ...]`` posterior beliefs and samples, stats: {factor: (prior mean,
    prior std, posterior mean, posterior std)} each ``[B, T, n]``). ``state`` continues from a previous
    filter state (default: the zero initial state).
    """
    model = FactoredRSSM(config)
    b, t = prev_actions.shape[:2]
    if observations.shape[:2] != (b, t) or tuple(observations.shape[2:]) != tuple(config.obs_shape):
        raise ValueError(f"observations must be [B, T, {', '.join(map(str, config.obs_shape))}] with "
                         f"B, T = {b}, {t} (from prev_actions), got {observations.shape}")
    if prev_actions.shape[2:] != (config.action_dim,):
        raise ValueError(f"prev_actions must be [B, T, {config.action_dim}], got {prev_actions.shape}")
    embeds = model.apply(params, observations, method="encode")
    state = initial_state(config, (b,)) if state is None else state

    def step(state, inputs):
        embed, action, step_key = inputs
        state, stats = model.apply(params, state, action, embed, step_key, method="observe_step")
        return state, (state, stats)

    time_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731
    _, (states, stats) = jax.lax.scan(step, state, (time_major(embeds), time_major(prev_actions),
                                                    jax.random.split(key, t)))
    return jax.tree.map(time_major, states), jax.tree.map(time_major, stats)


def rollout_x(config: WorldModelConfig, params, start: dict, actions, key):
    """Roll the x prior forward open loop from ``start`` ({'hx', 'x'} [N, ...]) with given ``actions``
    ``[H, N, A]`` (e.g. the ones an episode took), sampling x at each step as imagination does. Returns states
    {'hx', 'x'} ``[H + 1, N, ...]`` (start included): how far the model's own dynamics carry what the posterior
    knew at the start."""
    model = FactoredRSSM(config)
    if actions.ndim != 3 or actions.shape[1:] != (start["x"].shape[0], config.action_dim):
        raise ValueError(f"actions must be [H, N, A] with N = {start['x'].shape[0]} starts and A = "
                         f"{config.action_dim}, got {actions.shape}")

    def step(state, inputs):
        action, step_key = inputs
        nxt = model.apply(params, state, action, step_key, method="x_prior_step")
        return nxt, nxt

    start = {"hx": start["hx"], "x": start["x"]}
    _, states = jax.lax.scan(step, start, (actions, jax.random.split(key, actions.shape[0])))
    return jax.tree.map(lambda s, s0: jnp.concatenate([s0[None], s]), states, start)


def imagine_x(config: WorldModelConfig, params, start: dict, policy, horizon: int, key):
    """Roll the x prior forward ``horizon`` steps from ``start`` ({'hx', 'x'} [N, ...]) with actions from
    ``policy(features_x, key)``. Returns states {'hx', 'x'} ``[horizon + 1, N, ...]`` (start included)
    and the actions ``[horizon, N, A]``."""
    model = FactoredRSSM(config)

    def step(state, step_key):
        policy_key, prior_key = jax.random.split(step_key)
        action = policy(features(state, "x"), policy_key)
        nxt = model.apply(params, state, action, prior_key, method="x_prior_step")
        return nxt, (nxt, action)

    start = {"hx": start["hx"], "x": start["x"]}
    _, (states, actions) = jax.lax.scan(step, start, jax.random.split(key, horizon))
    return jax.tree.map(lambda s, s0: jnp.concatenate([s0[None], s]), states, start), actions
