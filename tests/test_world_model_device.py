"""The world-model loop on the device: its schedule and what it stores, seeds vmapped equal lone seeds, host chunks
equal the one program and resume exactly, bad input; on a toy reward env (fast to compile) and, marked slow, on
reacher-easy in MJX with its twin."""
import dataclasses
import os
import shutil
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents.denoised_mdp import DenoisedMDPConfig
from platonic_rl.denoised.model import WorldModelConfig
from platonic_rl.envs.dmc_jax import DMCJaxState
from platonic_rl.training.world_model_device import (WorldModelLoopConfig, make_world_model_loop,
                                                     train_world_model_on_device)


@dataclasses.dataclass(frozen=True)
class Drift:
    """A toy reward env of :class:`~platonic_rl.envs.dmc_jax.DMCJaxEnv`'s form: a point on a line pushed by the first
    action (x += 0.1 a), reward 1 - |x| (the task's; ``noisy`` adds 0.5 n, n a random draw per step that no action
    moves), observed as (x, n)."""
    noisy: bool = False
    obs_dim = 2
    action_dim = 2
    episode_length = 10
    action_repeat = 2

    def _state(self, x, n, reward, task_reward, steps, key):
        return DMCJaxState(physics=dict(x=x, n=n), observation=jnp.stack([x, n]), reward=reward,
                           done=steps >= self.episode_length, steps=steps, key=key,
                           info=dict(task_reward=task_reward))

    def reset(self, key):
        key, start, noise = jax.random.split(key, 3)
        zero = jnp.float32(0.0)
        return self._state(jax.random.uniform(start, (), minval=-1, maxval=1), jax.random.normal(noise, ()), zero,
                           zero, jnp.int32(0), key)

    def step(self, state, action):
        key, noise = jax.random.split(state.key)
        x = jnp.clip(state.physics["x"] + 0.1 * action[0], -1, 1)
        n = jax.random.normal(noise, ())
        task_reward = 1.0 - jnp.abs(x)
        reward = task_reward + (0.5 * n if self.noisy else 0.0)
        return self._state(x, n, reward, task_reward, state.steps + 1, key)


MODEL = WorldModelConfig(obs_shape=(2,), action_dim=2, x_belief=8, x_state=2, y_belief=4, y_state=2, hidden=8,
                         embed_dim=8, mlp_encoder_hidden=(8,), mlp_decoder_hidden=(8,))
AGENT = DenoisedMDPConfig(model=MODEL, actor_hidden=(8,), critic_hidden=(8,), policy="sac")
# Episodes of 20 env steps: 2 prefill rounds of 2 envs (80 steps), then 3 iterations of 40 (to 200).
TOY = WorldModelLoopConfig(env_steps=200, num_envs=2, prefill_steps=80, updates_per_collect=2, batch_size=2, chunk=4,
                           eval_every=80, eval_episodes=3, chunk_iterations=3)


def leaves_close(a, b, **tol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **tol)


def test_schedule_buffer_normaliser_and_evaluations():
    loop = make_world_model_loop(AGENT, Drift(), TOY)
    assert (loop.prefill_rounds, loop.iterations, loop.capacity()) == (2, 3, 10)
    state0 = jax.jit(loop.init)(jax.random.PRNGKey(0))
    state, metrics = jax.device_get(jax.jit(lambda s: loop.run(s, 3))(state0))
    buffer = state.buffer
    assert int(buffer.size) == 10 and int(state0.buffer.size) == 4
    np.testing.assert_array_equal(metrics["env_steps"], [120, 160, 200])
    # Evaluated when 80 env steps have passed (at 160) and after the last iteration.
    np.testing.assert_array_equal(np.isnan(metrics["eval_return"]), [True, False, False])
    # The buffer's layout: a zero action and reward first; every reward is 1 - |x| of the observation it reached.
    np.testing.assert_array_equal(buffer.prev_actions[:, 0], 0)
    np.testing.assert_array_equal(buffer.rewards[:, 0], 0)
    np.testing.assert_allclose(buffer.rewards[:, 1:], 1 - np.abs(buffer.observations[:, 1:, 0]), atol=1e-6)
    np.testing.assert_allclose(buffer.observations[:, 1:, 0], np.clip(
        buffer.observations[:, :-1, 0] + 0.1 * buffer.prev_actions[:, 1:, 0], -1, 1), atol=1e-6)
    assert np.all(np.abs(buffer.prev_actions) <= 1) and buffer.prev_actions[:4].std() > 0.4  # the random prefill
    # The normaliser: the prefill's per-dimension statistics.
    prefill = np.asarray(state0.buffer.observations[:4]).reshape(-1, 2)
    np.testing.assert_allclose(state0.agent.obs_mean, prefill.mean(0), rtol=1e-5)
    np.testing.assert_allclose(state0.agent.obs_std, prefill.std(0), rtol=1e-4)
    assert np.all(np.isfinite(metrics["model_loss"])) and np.all(metrics["finite/agent_state"])


def test_episodes_return_their_rewards_and_the_task_return_leaves_out_the_noise():
    loop = make_world_model_loop(AGENT, Drift(noisy=True), TOY)
    agent = jax.jit(loop.init)(jax.random.PRNGKey(1)).agent
    episodes = jax.device_get(loop.episodes(agent, jax.random.PRNGKey(2), 4, "greedy"))
    np.testing.assert_allclose(episodes["returns"], episodes["rewards"].sum(1), rtol=1e-6)
    x = episodes["observations"][:, 1:, 0]
    np.testing.assert_allclose(episodes["task_returns"], (1 - np.abs(x)).sum(1), rtol=1e-5)
    assert np.abs(episodes["returns"] - episodes["task_returns"]).max() > 0.1
    again = jax.device_get(loop.episodes(agent, jax.random.PRNGKey(2), 4, "greedy"))
    np.testing.assert_array_equal(episodes["prev_actions"], again["prev_actions"])  # greedy: deterministic


@pytest.mark.slow  # ~10 s of compilation; the host chunks of the same loop machinery: tests/test_device_loop.py
def test_host_chunks_equal_the_whole_program():
    lone, _ = train_world_model_on_device(AGENT, Drift(), TOY, seed=7)
    whole, metrics = jax.jit(make_world_model_loop(AGENT, Drift(), TOY).train)(jax.random.PRNGKey(7))
    leaves_close(lone, whole, rtol=1e-5, atol=1e-6)


def test_vmapped_seeds_equal_lone_runs_and_chunks_resume_exactly(tmp_path):
    lone, rows = train_world_model_on_device(AGENT, Drift(), TOY, seed=7)
    assert [r["iteration"] for r in rows] == [1, 2, 3] and [r["env_steps"] for r in rows] == [120, 160, 200]
    assert [r["iteration"] for r in rows if "eval_return" in r] == [2, 3]
    # Two seeds in one program, one iteration per chunk, stopped after iteration 2 (its last checkpoint removed):
    # the run continues to the uninterrupted result, whose seed 7 is the lone run's. (Two programs compiled, not
    # three: the whole lone program against the chunked pair also checks chunks against the whole program.)
    one_by_one = dataclasses.replace(TOY, chunk_iterations=1)
    run_dir = tmp_path / "run"
    pair, pair_rows = train_world_model_on_device(AGENT, Drift(), one_by_one, seed=(4, 7), run_dir=run_dir)
    leaves_close(jax.tree.map(lambda x: x[1], pair), lone, rtol=1e-4, atol=1e-5)
    assert pair_rows[-1]["eval_return/7"] == pytest.approx(rows[-1]["eval_return"], rel=1e-4)
    shutil.rmtree(run_dir / "checkpoints" / "3")
    with pytest.warns(UserWarning, match="dropped 1 rows logged after step 2"):
        resumed, resumed_rows = train_world_model_on_device(AGENT, Drift(), one_by_one, seed=(4, 7), run_dir=run_dir)
    leaves_close(resumed, pair, rtol=0, atol=0)
    assert [r["iteration"] for r in resumed_rows] == [1, 2, 3]
    assert resumed_rows[-1]["eval_return/4"] == pair_rows[-1]["eval_return/4"]


MESH_SCRIPT = textwrap.dedent("""
    import dataclasses, sys, jax, numpy as np
    from jax.sharding import Mesh
    sys.path.insert(0, sys.argv[1])
    from test_world_model_device import AGENT, TOY, Drift
    from platonic_rl.training.world_model_device import make_world_model_loop

    assert jax.device_count() == 2, jax.devices()
    config = dataclasses.replace(TOY, eval_episodes=2)
    alone = jax.jit(make_world_model_loop(AGENT, Drift(), config).train)(jax.random.PRNGKey(3))
    mesh = Mesh(np.array(jax.devices()), ("data",))
    split = jax.jit(make_world_model_loop(AGENT, Drift(), config, mesh=mesh).train)(jax.random.PRNGKey(3))
    for a, b in zip(jax.tree.leaves(alone), jax.tree.leaves(split), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
    try:
        make_world_model_loop(AGENT, Drift(), dataclasses.replace(config, eval_episodes=3), mesh=mesh)
        raise SystemExit("eval_episodes=3 on 2 devices was accepted")
    except ValueError as error:
        assert "eval_episodes=3 must be a multiple of the mesh's 2 devices" in str(error), error
    print("OK")
""")


@pytest.mark.slow  # ~20 s (a subprocess compiles the loop twice); the goal-conditioned loop's split is tested fast
def test_envs_and_batches_split_over_two_devices_give_the_one_device_run():
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    tests = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", MESH_SCRIPT, tests], env=env, cwd=os.path.dirname(tests),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_bad_settings_name_themselves():
    with pytest.raises(ValueError, match="WorldModelLoopConfig.num_envs must be a positive int"):
        WorldModelLoopConfig(num_envs=0)
    with pytest.raises(ValueError, match="prefill_steps must be a positive int"):
        WorldModelLoopConfig(prefill_steps=0)
    with pytest.raises(ValueError, match="leaves no iteration after the prefill"):
        make_world_model_loop(AGENT, Drift(), dataclasses.replace(TOY, env_steps=80))
    with pytest.raises(ValueError, match="chunk must be <= 11"):
        make_world_model_loop(AGENT, Drift(), dataclasses.replace(TOY, chunk=12))
    with pytest.raises(ValueError, match="buffer_episodes must hold at least the prefill's 4 episodes"):
        make_world_model_loop(AGENT, Drift(), dataclasses.replace(TOY, buffer_episodes=3))
    wrong = dataclasses.replace(AGENT, model=dataclasses.replace(MODEL, obs_shape=(3,)))
    with pytest.raises(ValueError, match=r"takes observations \(3,\).*the env has state observations \(2,\)"):
        make_world_model_loop(wrong, Drift(), TOY)


@pytest.mark.slow  # ~3 min on 2 cores: compiles MJX's reacher (and its twin) inside the loop
def test_reacher_with_its_twin_in_mjx_trains_in_the_loop():
    from platonic_rl.envs.dmc_jax import DMCJaxEnv

    env = DMCJaxEnv("reacher-easy", "distractors", action_repeat=50)  # episodes of 20 agent steps
    model = dataclasses.replace(MODEL, obs_shape=(env.obs_dim,))
    config = WorldModelLoopConfig(env_steps=4000, prefill_steps=2000, updates_per_collect=2, batch_size=2, chunk=8,
                                  eval_every=2000, eval_episodes=2, chunk_iterations=2)
    agent, rows = train_world_model_on_device(dataclasses.replace(AGENT, model=model), env, config, seed=0)
    assert [r["env_steps"] for r in rows] == [3000, 4000]
    assert np.isfinite(rows[-1]["model_loss"]) and 0 <= rows[-1]["eval_return"] <= 1000
