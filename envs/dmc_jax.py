"""DeepMind Control tasks in MJX, with the Denoised MDP paper's noisy variants as pure JAX functions.

    env = DMCJaxEnv("cheetah-run", variant="noisy_sensor")        # a frozen dataclass: static under jit
    state = env.reset(key)                                          # jax.vmap(env.reset)(keys) for many envs
    state = env.step(state, action)                                 # jit-, vmap- and scan-able; no host calls
    state.observation, state.reward, state.done, state.info["task_reward"]

The same tasks, variants and observation layout as :class:`~platonic_rl.envs.dmc.DMCEnv` (state observations; its
module docstring says what each variant adds), stepped by MuJoCo XLA (``mujoco.mjx``, the JAX implementation, which
runs on CPUs, GPUs and TPUs) on **dm_control's own models** (the task's XML as ``dm_control.suite`` loads it), so the
physics is the host env's by construction. Observations, rewards and resets are written here from dm_control's task
definitions: cheetah-run (``position`` = qpos[1:], ``velocity``; reward: the torso's subtree speed / 10, clipped to
[0, 1]), walker-walk (``orientations`` = the xx and xz entries of every body's rotation, ``height`` = the torso's z,
``velocity``; reward: standing x moving, dm_control's shapes) and reacher-easy (``position``, ``to_target``,
``velocity``; reward 1 within the target's and finger's radii). MuJoCo Playground reimplements these tasks too; it
is not used because its reacher does not build with the suite's MuJoCo (3.11: a version check compares strings), its
cheetah at its defaults sizes contact buffers for its GPU backend (about 0.5 s a step on CPU), and its models and
observations are its own copies (walker's ``height``, e.g., reads the torso's uprightness, not its height).

Where MJX differs from dm_control: it computes in float32 (MuJoCo in float64) and its constraint solver stops after
a fixed number of iterations; ``tests/test_dmc_jax.py`` compares observations and rewards on the same states, and one
control step from the same state, with the tolerances that follow. Over many steps two trajectories part (contacts
make the dynamics chaotic), so the envs are compared state by state, not episode by episode.

The variants' random processes (the twins' random actions, the sensor's smooth signal, the jitter walk and the point
mass) follow :mod:`~platonic_rl.envs.dmc`'s definitions and order within a control step; their draws come from the
state's key, so they are not the host env's numbers. Only the ``"twin"`` distractor (the host env's default) is
here. Episodes last 1000 control steps (``1000 / action_repeat`` agent steps, rewards summed over the repeat);
``done`` marks the last step, and a loop resets (the env does not).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from platonic_rl.envs.dmc import EPISODE_STEPS, TASKS, VARIANT_PARTS, VARIANTS


# ------------------------------------------------------------------------------------------- dm_control's shapes


def tolerance(x: jax.Array, lower: float, upper: float, margin: float = 0.0, sigmoid: str = "gaussian",
              value_at_margin: float = 0.1) -> jax.Array:
    """dm_control's ``rewards.tolerance`` for the two shapes these tasks use: 1 inside [lower, upper]; outside, with
    d the distance to the bounds in units of ``margin``, exp(-d^2 s^2 / 2) with s^2 = -2 ln(value_at_margin)
    (``"gaussian"``) or max(1 - (1 - value_at_margin) d, 0) (``"linear"``); 0 outside when ``margin`` is 0."""
    inside = (lower <= x) & (x <= upper)
    if margin == 0:
        return inside.astype(jnp.float32)
    d = jnp.where(x < lower, lower - x, x - upper) / margin
    if sigmoid == "gaussian":
        value = jnp.exp(-0.5 * d ** 2 * (-2.0 * np.log(value_at_margin)))
    elif sigmoid == "linear":
        scaled = d * (1.0 - value_at_margin)
        value = jnp.where(jnp.abs(scaled) < 1.0, 1.0 - scaled, 0.0)
    else:
        raise ValueError(f"sigmoid must be 'gaussian' or 'linear', got {sigmoid!r}")
    return jnp.where(inside, 1.0, value).astype(jnp.float32)


@functools.lru_cache(maxsize=None)
def task_model(task: str):
    """``(mj_model, mjx_model, control_substeps)`` for ``task``: dm_control's own model (a copy of the one
    ``suite.load`` builds) on the device, and the physics steps per control step."""
    from dm_control import suite
    from mujoco import mjx

    spec = TASKS[task]
    env = suite.load(spec.domain, spec.name, task_kwargs=dict(random=np.random.RandomState(0)))
    mj_model = env.physics.model.ptr
    substeps = int(round(env.control_timestep() / mj_model.opt.timestep))
    with jax.ensure_compile_time_eval():  # concrete arrays even when first called inside a jit trace (it is cached)
        mjx_model = mjx.put_model(mj_model, impl="jax")
    return mj_model, mjx_model, substeps


def _ids(mj_model, kind: str, *names: str) -> list[int]:
    import mujoco

    enum = dict(body=mujoco.mjtObj.mjOBJ_BODY, geom=mujoco.mjtObj.mjOBJ_GEOM, joint=mujoco.mjtObj.mjOBJ_JOINT,
                sensor=mujoco.mjtObj.mjOBJ_SENSOR)[kind]
    return [mujoco.mj_name2id(mj_model, enum, name) for name in names]


@dataclasses.dataclass(frozen=True)
class JaxTask:
    """A dm_control task read from MJX data: its observation parts (in dm_control's order), the reward-relevant
    sensor the noisy variant perturbs and the reward as a function of that sensor's reading, and its start
    distribution. ``target`` is reacher's target position (x, y), zeros for the others."""
    name: str
    observe: Callable[[Any, jax.Array], dict[str, jax.Array]]   # (data, target) -> {key: [n]}
    sensor: Callable[[Any, jax.Array], jax.Array]               # (data, target) -> reading
    sensor_scale: float
    reward_from_sensor: Callable[[Any, jax.Array], jax.Array]   # (data, reading) -> reward
    init: Callable[[jax.Array], tuple[jax.Array, jax.Array]]     # key -> (qpos, target)
    settle_steps: int = 0                                       # physics steps at zero control after the start
    dropped_qpos: tuple[int, ...] = ()                         # qpos entries info["agent_state"] leaves out


def _random_joints(mj_model, key: jax.Array) -> jax.Array:
    """dm_control's ``randomize_limited_and_rotational_joints`` for one-DOF joints: a limited hinge or slide
    uniform in its range, an unlimited hinge uniform in [-pi, pi), every other entry at the model's qpos0."""
    qpos = np.asarray(mj_model.qpos0, np.float32)
    low, high, draw = qpos.copy(), qpos.copy(), np.zeros(len(qpos), bool)
    for j in range(mj_model.njnt):
        adr, kind, limited = mj_model.jnt_qposadr[j], mj_model.jnt_type[j], mj_model.jnt_limited[j]
        if kind not in (2, 3):  # slide, hinge
            raise NotImplementedError("only slide and hinge joints are randomised here")
        if limited:
            low[adr], high[adr], draw[adr] = *mj_model.jnt_range[j], True
        elif kind == 3:
            low[adr], high[adr], draw[adr] = -np.pi, np.pi, True
    u = jax.random.uniform(key, qpos.shape, minval=low, maxval=high)
    return jnp.where(draw, u, qpos)


def _cheetah() -> JaxTask:
    mj_model, _, _ = task_model("cheetah-run")
    limited = np.asarray(mj_model.jnt_limited, bool)
    low, high = np.asarray(mj_model.jnt_range, np.float32).T

    def init(key):  # dm_control: only the limited joints drawn in their ranges, then 200 steps to settle
        qpos = jnp.asarray(mj_model.qpos0, jnp.float32)
        return jnp.where(limited, jax.random.uniform(key, qpos.shape, minval=low, maxval=high), qpos), jnp.zeros(2)

    speed = lambda data, target: data.sensordata[0]  # noqa: E731 -- torso_subtreelinvel, x
    return JaxTask("cheetah-run", lambda data, target: dict(position=data.qpos[1:], velocity=data.qvel), speed, 10.0,
                   lambda data, s: tolerance(s, 10.0, np.inf, margin=10.0, sigmoid="linear", value_at_margin=0.0),
                   init, settle_steps=200, dropped_qpos=(0,))


def _walker() -> JaxTask:
    mj_model, _, _ = task_model("walker-walk")
    torso, = _ids(mj_model, "body", "torso")
    rootx, = _ids(mj_model, "joint", "rootx")

    def observe(data, target):
        return dict(orientations=data.xmat[1:].reshape(-1, 9)[:, [0, 2]].ravel(), height=data.xpos[torso, 2:3],
                    velocity=data.qvel)

    def reward(data, height):  # dm_control's walk: standing (height and uprightness) x moving at >= 1 m/s
        standing = tolerance(height, 1.2, np.inf, margin=0.6)
        upright = (1.0 + data.xmat[torso].reshape(9)[8]) / 2.0
        stand = (3.0 * standing + upright) / 4.0
        move = tolerance(data.sensordata[0], 1.0, np.inf, margin=0.5, sigmoid="linear", value_at_margin=0.5)
        return stand * (5.0 * move + 1.0) / 6.0

    return JaxTask("walker-walk", observe, lambda data, target: data.xpos[torso, 2], 1.2, reward,
                   lambda key: (_random_joints(mj_model, key), jnp.zeros(2)),
                   dropped_qpos=(int(mj_model.jnt_qposadr[rootx]),))


def _reacher() -> JaxTask:
    mj_model, _, _ = task_model("reacher-easy")
    target_geom, finger = _ids(mj_model, "geom", "target", "finger")
    target_size = 0.05  # dm_control's reacher-easy target radius (its task sets it on every episode)
    radii = target_size + float(mj_model.geom_size[finger, 0])

    def to_target(data, target):  # the target is a world geom that touches nothing (contacts are off)
        return target - data.geom_xpos[finger, :2]

    def init(key):  # dm_control: random joints, the target at angle U(0, 2 pi), radius U(0.05, 0.2)
        joints, angle, radius = jax.random.split(key, 3)
        angle = jax.random.uniform(angle, (), maxval=2 * np.pi)
        radius = jax.random.uniform(radius, (), minval=0.05, maxval=0.2)
        return _random_joints(mj_model, joints), radius * jnp.stack([jnp.sin(angle), jnp.cos(angle)])

    return JaxTask("reacher-easy",
                   lambda data, target: dict(position=data.qpos, to_target=to_target(data, target),
                                             velocity=data.qvel),
                   lambda data, target: jnp.linalg.norm(to_target(data, target)), target_size,
                   lambda data, distance: tolerance(distance, 0.0, radii), init)


JAX_TASKS: dict[str, Callable[[], JaxTask]] = {"cheetah-run": _cheetah, "walker-walk": _walker,
                                              "reacher-easy": _reacher}


@functools.lru_cache(maxsize=None)
def jax_task(task: str) -> JaxTask:
    if task not in JAX_TASKS:
        raise ValueError(f"task must be one of {sorted(JAX_TASKS)}, got {task!r}")
    return JAX_TASKS[task]()


# ------------------------------------------------------------------------------------- the variants' processes


def smooth_signal_step(signal: dict[str, jax.Array], key: jax.Array, theta: float = 1.0, sigma: float = 1.5,
                       dt: float = 0.02, smoothing: float = 0.1) -> dict[str, jax.Array]:
    """One step of :class:`~platonic_rl.envs.dmc.SmoothSignals`: u += -theta u dt + sigma sqrt(dt) eps,
    s += smoothing (u - s); the signal is 0.5 tanh(s)."""
    u = signal["u"] + (-theta * signal["u"] * dt + sigma * np.sqrt(dt) * jax.random.normal(key, signal["u"].shape))
    return dict(u=u, s=signal["s"] + smoothing * (u - signal["s"]))


def jitter_walk_step(walk: dict[str, jax.Array], key: jax.Array) -> dict[str, jax.Array]:
    """One step of :class:`~platonic_rl.envs.dmc.JitterWalk`: a ~ N(0, 0.005^2) - 0.1 d where |d| >= 0.075;
    v = (v + a / 2) 0.9^0.5; d += v / 2 (the offset is 10 d)."""
    a = 0.005 * jax.random.normal(key, walk["d"].shape) - 0.1 * walk["d"] * (jnp.abs(walk["d"]) >= 0.075)
    v = (walk["v"] + 0.5 * a) * 0.9 ** 0.5
    return dict(v=v, d=walk["d"] + 0.5 * v)


class DMCJaxState(struct.PyTreeNode):
    physics: dict[str, Any]   # data (mjx.Data), target, and the variant's: twins, signal, jitter, mass
    observation: jax.Array    # [obs_dim] float32
    reward: jax.Array         # float32: this agent step's reward (summed over the action repeat)
    done: jax.Array           # bool: the episode's last step
    steps: jax.Array          # int32: agent steps taken in this episode
    key: jax.Array            # the variants' randomness
    info: dict[str, jax.Array]  # task_reward, agent_state, distractor_state, task_state (as DMCEnv's info)


@dataclasses.dataclass(frozen=True)
class DMCJaxEnv:
    """A dm_control task in MJX with one of :data:`~platonic_rl.envs.dmc.VARIANTS` (see the module docstring):
    the host :class:`~platonic_rl.envs.dmc.DMCEnv`'s state observations with ``distractor="twin"``."""
    task: str = "cheetah-run"
    variant: str = "noiseless"
    action_repeat: int = 2
    distractor_scale: float = 4.0
    num_twins: int = 1

    def __post_init__(self):
        if self.task not in JAX_TASKS:
            raise ValueError(f"task must be one of {sorted(JAX_TASKS)}, got {self.task!r}")
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if isinstance(self.action_repeat, bool) or not isinstance(self.action_repeat, int) or self.action_repeat < 1 \
                or EPISODE_STEPS % self.action_repeat:
            raise ValueError(f"action_repeat must be an int >= 1 dividing {EPISODE_STEPS}, got {self.action_repeat!r}")
        if isinstance(self.num_twins, bool) or not isinstance(self.num_twins, int) or self.num_twins < 1:
            raise ValueError(f"num_twins must be an int >= 1, got {self.num_twins!r}")

    # ------------------------------------------------------------------------------------------- sizes
    @property
    def parts(self) -> frozenset[str]:
        return VARIANT_PARTS[self.variant]

    @property
    def twins(self) -> int:
        return self.num_twins if "distractors" in self.parts else 0

    @property
    def task_obs_dim(self) -> int:
        mj_model = task_model(self.task)[0]
        return {"cheetah-run": mj_model.nq - 1 + mj_model.nv, "walker-walk": 2 * (mj_model.nbody - 1) + 1 + mj_model.nv,
                "reacher-easy": mj_model.nq + 2 + mj_model.nv}[self.task]

    @property
    def jitter_dims(self) -> int:
        mj_model = task_model(self.task)[0]
        return {"cheetah-run": mj_model.nq - 1, "walker-walk": 2 * (mj_model.nbody - 1) + 1,
                "reacher-easy": mj_model.nq}[self.task]

    @property
    def obs_dim(self) -> int:
        return (self.task_obs_dim * (1 + self.twins) + 2 * ("noisy_sensor" in self.parts)
                + 4 * ("jitter" in self.parts))

    @property
    def action_dim(self) -> int:
        return int(task_model(self.task)[0].nu)

    @property
    def episode_length(self) -> int:
        """Agent steps per episode."""
        return EPISODE_STEPS // self.action_repeat

    # ------------------------------------------------------------------------------------------- physics
    def _start(self, key: jax.Array) -> dict[str, Any]:
        """One body's start: dm_control's initial state for the task (and reacher's target)."""
        from mujoco import mjx

        _, model, _ = task_model(self.task)
        spec = jax_task(self.task)
        qpos, target = spec.init(key)
        data = mjx.make_data(model).replace(qpos=qpos)
        if spec.settle_steps:
            data = jax.lax.fori_loop(0, spec.settle_steps, lambda _, d: mjx.step(model, d), data)
            data = data.replace(time=jnp.zeros_like(data.time))
        return dict(data=mjx.forward(model, data), target=target)

    def _control_step(self, body: dict[str, Any], action: jax.Array) -> dict[str, Any]:
        """One control step (dm_control's: ``control_substeps`` physics steps with ``action``), then the derived
        quantities of the new state (dm_control's step ends with them, so observations and rewards read them)."""
        from mujoco import mjx

        _, model, substeps = task_model(self.task)
        data = body["data"].replace(ctrl=action)
        data = jax.lax.fori_loop(0, substeps, lambda _, d: mjx.step(model, d), data)
        return dict(body, data=mjx.forward(model, data))

    def task_observation(self, body: dict[str, Any]) -> jax.Array:
        """The task's own observation vector (dm_control's dict flattened in its order)."""
        parts = jax_task(self.task).observe(body["data"], body["target"])
        return jnp.concatenate([jnp.ravel(v) for v in parts.values()]).astype(jnp.float32)

    # ------------------------------------------------------------------------------------------- the env
    def reset(self, key: jax.Array) -> DMCJaxState:
        key, body_key, twin_key, signal_key, mass_key = jax.random.split(key, 5)
        physics = dict(self._start(body_key))
        if self.twins:
            physics["twins"] = jax.vmap(self._start)(jax.random.split(twin_key, self.twins))
        if "noisy_sensor" in self.parts:
            u = jax.random.normal(signal_key, (1,))
            physics["signal"] = dict(u=u, s=u)
        if "jitter" in self.parts:
            physics["jitter"] = dict(v=jnp.zeros(self.jitter_dims), d=jnp.zeros(self.jitter_dims))
            physics["mass"] = dict(pos=jax.random.uniform(mass_key, (2,), minval=-0.5, maxval=0.5), vel=jnp.zeros(2))
        zero = jnp.float32(0.0)
        return DMCJaxState(physics=physics, observation=self._observe(physics), reward=zero, done=jnp.bool_(False),
                           steps=jnp.int32(0), key=key, info=self._info(physics, zero))

    def step(self, state: DMCJaxState, action: jax.Array) -> DMCJaxState:
        action = jnp.asarray(action, jnp.float32)
        if action.shape != (self.action_dim,):
            raise ValueError(f"DMCJaxEnv.step: action must have shape ({self.action_dim},) (vmap over a batch), got "
                             f"{action.shape}")
        action = jnp.clip(action, -1.0, 1.0)
        key, twin_key, step_key = jax.random.split(state.key, 3)
        twin_actions = jax.random.uniform(twin_key, (self.twins, self.action_dim), minval=-1.0, maxval=1.0)
        spec = jax_task(self.task)

        def control_step(carry, k):
            physics, reward, task_reward = carry
            physics = dict(physics, **self._control_step(physics, action))
            if self.twins:
                physics["twins"] = jax.vmap(self._control_step)(physics["twins"], twin_actions)
            signal_key, jitter_key = jax.random.split(k)
            if "noisy_sensor" in self.parts:
                physics["signal"] = smooth_signal_step(physics["signal"], signal_key)
            if "jitter" in self.parts:
                physics["jitter"] = jitter_walk_step(physics["jitter"], jitter_key)
                vel = 0.8 * physics["mass"]["vel"] + 0.2 * action[:2]
                physics["mass"] = dict(vel=vel, pos=jnp.clip(physics["mass"]["pos"] + 0.1 * vel, -1.0, 1.0))
            paid = spec.reward_from_sensor(physics["data"], spec.sensor(physics["data"], physics["target"]))
            if "noisy_sensor" in self.parts:
                reward = reward + spec.reward_from_sensor(physics["data"], self._perturbed_sensor(physics))
            else:
                reward = reward + paid
            return (physics, reward, task_reward + paid), None

        zero = jnp.float32(0.0)
        (physics, reward, task_reward), _ = jax.lax.scan(control_step, (state.physics, zero, zero),
                                                         jax.random.split(step_key, self.action_repeat))
        steps = state.steps + 1
        return DMCJaxState(physics=physics, observation=self._observe(physics), reward=reward,
                           done=steps >= self.episode_length, steps=steps, key=key,
                           info=self._info(physics, task_reward))

    # ------------------------------------------------------------------------------------------- observations
    def _noise(self, physics) -> jax.Array:
        return 0.5 * jnp.tanh(physics["signal"]["s"][0])

    def _perturbed_sensor(self, physics) -> jax.Array:
        spec = jax_task(self.task)
        return spec.sensor(physics["data"], physics["target"]) + spec.sensor_scale * self._noise(physics)

    def _observe(self, physics: dict[str, Any]) -> jax.Array:
        spec, host = jax_task(self.task), TASKS[self.task]
        parts, offsets = [], physics["jitter"]["d"] * 10.0 if "jitter" in self.parts else None
        start = 0
        for key, value in spec.observe(physics["data"], physics["target"]).items():
            value = jnp.ravel(value)
            if "noisy_sensor" in self.parts and key == host.observed_sensor:
                value = value + spec.sensor_scale * self._noise(physics)
            if "jitter" in self.parts and key in host.position_keys:
                value = value + offsets[start:start + value.shape[0]]
                start += value.shape[0]
            parts.append(value)
        if self.twins:
            parts.append(jax.vmap(self.task_observation)(physics["twins"]).ravel())
        if "noisy_sensor" in self.parts:  # the noise's own signal, observed, then the perturbed sensor
            parts += [self.distractor_scale * self._noise(physics)[None], self._perturbed_sensor(physics)[None]]
        if "jitter" in self.parts:
            parts += [physics["mass"]["pos"], physics["mass"]["vel"]]
        return jnp.concatenate(parts).astype(jnp.float32)

    def _info(self, physics: dict[str, Any], task_reward: jax.Array) -> dict[str, jax.Array]:
        """As :class:`~platonic_rl.envs.dmc.DMCEnv`'s ``info``: the agent's qpos (without the unobservable
        horizontal root of cheetah and walker) and qvel, the variant's distractor variables, the task's own
        variables no action moves (reacher's target), and what the task itself paid for the step."""
        data, spec = physics["data"], jax_task(self.task)
        keep = np.setdiff1d(np.arange(data.qpos.shape[0]), spec.dropped_qpos)
        distractor = []
        if self.twins:
            distractor.append(jax.vmap(self.task_observation)(physics["twins"]).ravel())
        if "noisy_sensor" in self.parts:
            distractor.append(self._noise(physics)[None])
        if "jitter" in self.parts:
            distractor += [physics["mass"]["pos"], physics["mass"]["vel"], 10.0 * physics["jitter"]["d"]]
        return dict(agent_state=jnp.concatenate([data.qpos[keep], data.qvel]).astype(jnp.float32),
                    distractor_state=(jnp.concatenate(distractor) if distractor else jnp.zeros(0)).astype(jnp.float32),
                    task_state=physics["target"] if self.task == "reacher-easy" else jnp.zeros(0),
                    task_reward=jnp.asarray(task_reward, jnp.float32))
