"""The device loop: what it stores, seeds vmapped equal lone seeds, host chunks equal the one program and resume
exactly, 8 devices over 2 processes equal one device, bad input."""
import dataclasses
import os
import shutil
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from platonic_rl.agents import CRLConfig, GCBCConfig, QRLContinuousConfig
from platonic_rl.agents.common import StatelessPolicy
from platonic_rl.agents.qrl_policies import LatentLookahead, PolicySpec
from platonic_rl.envs import jax_env, mountaincar
from platonic_rl.envs.point_maze import PointMaze
from platonic_rl.training.device_loop import EVAL_KEY, DeviceLoopConfig, make_loop, make_train, train_on_device
from platonic_rl.training.run import RunDirectoryError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QRL = QRLContinuousConfig(obs_dim=2, action_dim=1, encoder_hidden=(16,), latent_dim=8, projector_hidden=(16,),
                          iqe_components=2, iqe_dim_per_component=4, dynamics_hidden=(16,), actor_hidden=(16,))
CAR = mountaincar.MountainCarGoal(episode_length=20)
TINY = DeviceLoopConfig(num_envs=4, unroll=10, updates_per_iteration=2, iterations=6, prefill_episodes=4,
                        batch_size=16, eval_every=3, eval_episodes=4, chunk_iterations=2)


def leaves_close(a, b, **tol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), **tol)


def test_buffer_holds_the_envs_episodes_and_counts_steps():
    loop = make_loop(GCBCConfig(obs_dim=2, action_dim=1, hidden=(8,)), CAR, TINY)
    state, metrics = jax.device_get(jax.jit(lambda k: loop.run(loop.init(k), 5))(jax.random.PRNGKey(0)))
    buffer = state.buffer
    # 4 prefill episodes + 2 rounds of 4 (each episode takes 20 / 10 = 2 iterations; the 5th is mid-episode)
    assert int(buffer.size) == 4 + 2 * 4 and int(state.envs.steps[0]) == 10
    np.testing.assert_array_equal(metrics["env_steps"], 80 + 40 * np.arange(1, 6))
    # Every stored transition is the env's dynamics (MountainCar's observation is its whole state).
    obs, actions = buffer.observations[:12], buffer.actions[:12]
    pushes = (jnp.rint(jnp.clip(actions[..., 0], -1, 1)) + 1).astype(jnp.int32)
    np.testing.assert_allclose(mountaincar.step(obs[:, :-1], pushes), obs[:, 1:], rtol=0, atol=1e-6)
    # Prefill actions are uniform in [-1, 1]; exploration actions are clipped there too.
    assert np.all(np.abs(actions) <= 1) and np.asarray(actions[:4]).std() > 0.4
    # Starts are resets (position U(-0.6, -0.4), at rest); explore_success is reported when episodes end.
    assert np.all((obs[:, 0, 0] >= -0.6) & (obs[:, 0, 0] <= -0.4)) and np.all(obs[:, 0, 1] == 0)
    ended = ~np.isnan(metrics["explore_success"])
    np.testing.assert_array_equal(ended, [False, True, False, True, False])
    # Evaluated at iteration 3 only, with success 0 whatever the agent does: from rest at x <= -0.4 the top (0.5)
    # is out of reach in 20 steps (|dv| <= 0.001 + 0.0025 per step, so at most 0.0035 x (1 + ... + 20) = 0.74 < 0.9
    # travelled). The success count itself is tested in test_evaluation_policies_act_on_the_agents_episodes.
    assert np.isnan(metrics["eval_success"][[0, 1, 3, 4]]).all() and metrics["eval_success"][2] == 0.0


def test_host_chunks_equal_the_program_and_resume_exactly(tmp_path):
    config = CRLConfig(obs_dim=2, action_dim=1, hidden=(16,), repr_dim=4, actor_hidden=(8,))
    whole, metrics = jax.jit(make_train(config, CAR, TINY))(jax.random.PRNGKey(5))
    chunked, rows = train_on_device(config, CAR, TINY, seed=5)
    leaves_close(chunked, whole, rtol=1e-6, atol=1e-7)
    assert [r["iteration"] for r in rows] == list(range(1, 7))
    np.testing.assert_allclose([r["critic_loss"] for r in rows], metrics["critic_loss"], rtol=1e-6)
    assert [r["iteration"] for r in rows if "eval_success" in r] == [3, 6]
    # A run stopped after iteration 4 (its last checkpoint removed) continues to 6 with the uninterrupted result.
    run_dir = tmp_path / "run"
    train_on_device(config, CAR, TINY, seed=5, run_dir=run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "6")
    with pytest.warns(UserWarning, match="dropped 2 rows logged after step 4"):  # logged again as it continues
        resumed, resumed_rows = train_on_device(config, CAR, TINY, seed=5, run_dir=run_dir)
    leaves_close(resumed, chunked, rtol=0, atol=0)
    assert [r["iteration"] for r in resumed_rows] == [1, 2, 3, 4, 5, 6]
    with pytest.raises(RunDirectoryError, match="seed"):
        train_on_device(config, CAR, TINY, seed=6, run_dir=run_dir)


SCRIPT = textwrap.dedent("""
    import sys, jax, numpy as np
    from platonic_rl.training import distributed
    distributed.initialize()
    from platonic_rl.agents import CRLConfig
    from platonic_rl.envs import jax_env, mountaincar
    from platonic_rl.training.device_loop import DeviceLoopConfig, make_loop

    # MountainCar, not the point maze: the same loop in half the compile time (each process compiles for itself).
    env = mountaincar.MountainCarGoal(episode_length=20)
    # Contrastive RL: its critic's logits pair every state with every goal of the batch, across devices.
    agent = CRLConfig(obs_dim=2, action_dim=1, hidden=(16,), repr_dim=8, actor_hidden=(16,))
    config = DeviceLoopConfig(num_envs=8, unroll=10, updates_per_iteration=2, iterations=4, prefill_episodes=8,
                              batch_size=16, eval_every=2, eval_episodes=8)
    key = jax.random.PRNGKey(3)
    if sys.argv[1] == "one":
        out = jax.jit(make_loop(agent, env, config).train)(key)
    else:
        mesh = distributed.data_mesh()
        loop = make_loop(agent, env, config, mesh=mesh)
        key = distributed.replicated(key, mesh)
        state = jax.jit(loop.init)(key)
        assert len(state.envs.observation.sharding.device_set) == jax.device_count() > 1  # the envs are split
        out = distributed.local_values(jax.jit(loop.train)(key))
        try:
            make_loop(agent, env, DeviceLoopConfig(num_envs=5, unroll=10, batch_size=16, eval_episodes=8), mesh=mesh)
            raise SystemExit("num_envs=5 on an uneven mesh was accepted")
        except ValueError as error:
            assert "num_envs=5 must be a multiple" in str(error), error
    if jax.process_index() == 0:
        agent_out, metrics = out
        np.savez(sys.argv[2], *[np.asarray(x) for x in jax.tree.leaves(agent_out)], **metrics)
    print("OK", jax.process_count(), jax.device_count())
""")


def compare(reference, other):
    for name in reference.files:  # float32 sums in another order: parameters and metrics within float tolerance
        np.testing.assert_allclose(other[name], reference[name], rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """The script's run on this process's one device."""
    path = tmp_path_factory.mktemp("one") / "one.npz"
    namespace = {"__name__": "one_device"}
    argv = sys.argv
    sys.argv = ["script", "one", str(path)]
    try:
        exec(SCRIPT, namespace)
    finally:
        sys.argv = argv
    return np.load(path)


@pytest.mark.slow  # ~35 s (two processes compile the loop); one process over 8 devices is checked fast in tests/test_multidevice.py
def test_eight_devices_over_two_processes_equal_one_device(one_device, tmp_path):
    """2 processes joined by jax.distributed (gloo CPU collectives), 4 virtual CPU devices each: the envs and
    batches split over 8 devices on two hosts, as a pod run does, give the one-device result."""
    from platonic_rl.training import distributed

    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4")
    results = distributed.launch(2, [sys.executable, "-c", SCRIPT, "mesh", str(tmp_path / "two.npz")], env=env,
                                 timeout=600)
    for r in results:
        assert r.returncode == 0 and "OK 2 8" in r.stdout, r.stderr[-3000:]
    compare(one_device, np.load(tmp_path / "two.npz"))


PREEMPTED_SCRIPT = textwrap.dedent("""
    import os, signal, sys, threading, time
    from pathlib import Path
    import jax, numpy as np
    from platonic_rl.training import distributed
    distributed.initialize()
    from platonic_rl.agents import GCBCConfig
    from platonic_rl.envs import mountaincar
    from platonic_rl.training.device_loop import DeviceLoopConfig, train_on_device

    run_dir, stop_after, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    config = DeviceLoopConfig(num_envs=8, unroll=10, updates_per_iteration=2, iterations=200, prefill_episodes=8,
                              batch_size=16, eval_every=50, eval_episodes=8, chunk_iterations=1, checkpoint_every=1000)
    if stop_after and jax.process_index() == 0:  # a preemption notice to process 0 only, after some rows
        def notice():
            metrics = run_dir / "metrics.jsonl"
            while not (metrics.exists() and metrics.read_text().count("\\n") >= stop_after):
                time.sleep(0.005)
            os.kill(os.getpid(), signal.SIGTERM)
        threading.Thread(target=notice, daemon=True).start()
    agent, rows = train_on_device(GCBCConfig(obs_dim=2, action_dim=1, hidden=(16,)),
                                  mountaincar.MountainCarGoal(episode_length=20), config, seed=seed, run_dir=run_dir,
                                  mesh=distributed.data_mesh())
    if jax.process_index() == 0:
        np.savez(sys.argv[4], *[np.asarray(distributed.local_values(x)) for x in jax.tree.leaves(agent)])
    print("ROWS", jax.process_index(), [r["iteration"] for r in rows] == list(range(1, 201)), flush=True)
""")


@pytest.mark.slow  # ~45 s: four launches of two processes, each compiling the loop
def test_a_preempted_multi_process_run_saves_at_one_step_in_every_process_and_resumes_exactly(tmp_path):
    """2 processes joined by jax.distributed share one run directory: a SIGTERM to process 0 alone (a preemption
    notice) stops both at the same iteration with its checkpoint saved and exit status 75; run again, they continue to
    the uninterrupted run's parameters exactly, and settings that differ are refused in both processes."""
    from platonic_rl.training import distributed
    from platonic_rl.training.loop import PREEMPTED_EXIT_CODE

    env = dict(os.environ, JAX_PLATFORMS="cpu")

    def launch(run_dir, stop_after, seed, out):
        return distributed.launch(2, [sys.executable, "-c", PREEMPTED_SCRIPT, str(run_dir), str(stop_after),
                                      str(seed), str(out)], env=env, timeout=300)

    stopped = launch(tmp_path / "run", 5, 0, tmp_path / "unused.npz")
    assert [r.returncode for r in stopped] == [PREEMPTED_EXIT_CODE] * 2, [r.stderr[-2000:] for r in stopped]
    steps = {int(r.stderr.split("stopped at step ")[1].split()[0]) for r in stopped}
    assert len(steps) == 1, steps  # both processes name the same step
    step = steps.pop()
    assert 5 <= step < 200
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == [str(step)]  # saved there, once
    for r in launch(tmp_path / "run", 0, 0, tmp_path / "resumed.npz"):
        assert r.returncode == 0 and "True" in r.stdout, r.stdout + r.stderr[-2000:]  # every row, both processes
    for r in launch(tmp_path / "whole", 0, 0, tmp_path / "whole.npz"):
        assert r.returncode == 0, r.stderr[-2000:]
    resumed, whole = np.load(tmp_path / "resumed.npz"), np.load(tmp_path / "whole.npz")
    for name in whole.files:
        np.testing.assert_array_equal(resumed[name], whole[name], err_msg=name)
    refused = launch(tmp_path / "run", 0, 1, tmp_path / "unused.npz")  # another seed: another run
    assert "holds a run with other settings" in refused[0].stderr, refused[0].stderr[-2000:]
    assert "process 0 of this run could not open the run directory" in refused[1].stderr, refused[1].stderr[-2000:]
    assert [r.returncode for r in refused] == [1, 1]


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="unroll=7 must divide the env's episode length 20"):
        make_loop(QRL, CAR, dataclasses.replace(TINY, unroll=7))
    with pytest.raises(ValueError, match="obs_dim=2, action_dim=1; the env PointMaze has obs_dim=4, action_dim=2"):
        make_loop(QRL, PointMaze("umaze"), dataclasses.replace(TINY, unroll=50))
    with pytest.raises(ValueError, match="DeviceLoopConfig.num_envs must be a positive int"):
        DeviceLoopConfig(num_envs=0)
    with pytest.raises(ValueError, match="p_future"):
        DeviceLoopConfig(p_future=1.5)
    with pytest.raises(TypeError, match="no registered agent takes a dict"):
        make_loop({"obs_dim": 2}, CAR, TINY)


def test_vmapped_seeds_equal_lone_seeds_and_the_host_run_logs_each_seed(tmp_path):
    config = GCBCConfig(obs_dim=2, action_dim=1, hidden=(8,))
    short = dataclasses.replace(TINY, iterations=4)  # two chunks of 2 iterations: one compiled chunk
    agents, rows = train_on_device(config, CAR, short, seed=(4, 7), run_dir=tmp_path / "run")
    assert jax.tree.leaves(agents)[0].shape[0] == 2
    # Seed 7 of the vmapped pair is seed 7 alone, run as one program.
    lone, lone_metrics = jax.jit(make_train(config, CAR, short))(jax.random.PRNGKey(7))
    leaves_close(jax.tree.map(lambda x: x[1], agents), lone, rtol=1e-5, atol=1e-6)
    assert not np.allclose(jax.tree.leaves(agents)[0][0], jax.tree.leaves(agents)[0][1])
    evaluated = [r for r in rows if "eval_success" in r]
    assert [r["iteration"] for r in evaluated] == [3, 4]  # every eval_every iterations, and at the end
    r = evaluated[-1]
    assert r["eval_success/7"] == pytest.approx(float(lone_metrics["eval_success"][-1]))
    assert r["eval_success"] == pytest.approx((r["eval_success/4"] + r["eval_success/7"]) / 2)
    with pytest.raises(ValueError, match="seeds must be distinct"):
        train_on_device(config, CAR, short, seed=(1, 1))


def test_a_nan_stops_the_run_naming_the_iteration_before_saving(tmp_path):
    from platonic_rl.agents import GCBCAgent
    from platonic_rl.training.updates import NonFiniteError

    class NaNAfterTwoUpdates(GCBCAgent):
        def update(self, batch):
            agent, metrics = super().update(batch)
            steps = optax.tree_utils.tree_get(agent.policy_state.opt_state, "count")  # Adam's step count
            # NaN from the 3rd update on: the 2nd iteration (2 updates each)
            return agent, dict(metrics, bc_nll=jnp.where(steps > 2, jnp.nan, metrics["bc_nll"]))

    config = GCBCConfig(obs_dim=2, action_dim=1, hidden=(8,))
    run_dir = tmp_path / "run"
    try:
        agent, rows = train_on_device(config, CAR, dataclasses.replace(TINY, chunk_iterations=1), run_dir=run_dir,
                                      agent_class=NaNAfterTwoUpdates)
    except NonFiniteError as error:
        assert "non-finite values at iteration 2: bc_nll" in str(error), str(error)
    else:  # say which link broke: the NaN never made (bc_nll finite in the rows) or made and not caught (absent)
        # and which class acted (once in 32 runs of this file under load the rows equalled a plain GCBC run's to the
        # digit: the subclass's update had not run)
        pytest.fail(f"no NonFiniteError; the agent that ran: {type(agent).__name__}; bc_nll per iteration: "
                    f"{[r.get('bc_nll') for r in rows]}")
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["1"]  # the last good state only


@dataclasses.dataclass(frozen=True)
class Line(jax_env.GoalEnv):
    """A point on a line: start and goal uniform in [-1, 1], each step moves by 0.25 x action, success within 0.1."""
    obs_dim: int = 1
    action_dim: int = 1
    goal_dims: tuple = (0,)
    episode_length: int = 10

    def init(self, key):
        start, goal = jax.random.uniform(key, (2, 1), minval=-1.0, maxval=1.0)
        return start, goal

    def dynamics(self, physics, action):
        return physics + 0.25 * action

    def observe(self, physics):
        return physics

    def reached(self, observation, goal):
        return jnp.abs(observation - goal)[0] < 0.1


class Toward(StatelessPolicy):
    """Full speed towards the goal: on :class:`Line` every episode succeeds (2 apart at most, 2.5 in 10 steps)."""

    def act(self, observations, goals, rng=None):
        return jnp.clip(4.0 * (goals - observations), -1.0, 1.0)


def test_evaluation_policies_act_on_the_agents_episodes(tmp_path):
    line = Line()
    qrl = dataclasses.replace(QRL, obs_dim=1)
    short = dataclasses.replace(TINY, iterations=2, unroll=5, eval_every=2, eval_episodes=16)
    lookahead = PolicySpec.of("lookahead", hold_steps=2, grid_size=3)
    policies = {"actor": lambda agent: agent, "toward": lambda agent: Toward(), "lookahead": lookahead}
    agents, rows = train_on_device(qrl, line, short, seed=(0, 1), run_dir=tmp_path / "run", eval_policies=policies)
    (r,) = [r for r in rows if "eval_success" in r]
    assert r["eval_success_toward"] == 1.0 and r["eval_success"] < 1.0
    key = jax.random.fold_in(jax.random.PRNGKey(EVAL_KEY), 2)
    for seed in (0, 1):
        assert r[f"eval_success_actor/{seed}"] == r[f"eval_success/{seed}"]  # the same episodes
        agent = jax.tree.map(lambda x: x[seed], agents)
        act = lambda o, g, _: LatentLookahead(agent, hold_steps=2, grid_size=3).act(o, g)  # noqa: E731
        expected = jnp.mean(jax.jit(lambda: jax_env.rollout(line, act, key, short.eval_episodes)["success"])())
        assert r[f"eval_success_lookahead/{seed}"] == pytest.approx(float(expected))
    with pytest.raises(RunDirectoryError, match="eval_policies"):  # what is evaluated is part of the run
        train_on_device(qrl, line, short, seed=(0, 1), run_dir=tmp_path / "run", eval_policies={"actor": lookahead})
    with pytest.raises(TypeError, match=r"eval_policies\['x'\] must be callable"):
        make_loop(qrl, line, short, eval_policies={"x": 1})


def test_a_policy_over_states_is_built_from_the_replay_buffer():
    """A waypoint policy's spec gets its waypoints from the loop's replay buffer at each evaluation: the loop's
    number is the policy built from the buffer's states drawn with the evaluation's key, on its episodes."""
    line = Line()
    qrl = dataclasses.replace(QRL, obs_dim=1)
    short = dataclasses.replace(TINY, iterations=4, unroll=5, eval_every=2, eval_episodes=16, eval_policies_after=2)
    graph = PolicySpec.of("graph_waypoints", num_waypoints=12, reach=3.0, hold_steps=2, grid_size=3)
    assert graph.dataset_states_wanted == 12 and PolicySpec.of("lookahead").dataset_states_wanted == 0
    loop = make_loop(qrl, line, short, eval_policies={"graph": graph})
    state, metrics = jax.jit(lambda k: loop.run(loop.init(k), 4))(jax.random.PRNGKey(3))
    key = jax.random.fold_in(jax.random.PRNGKey(EVAL_KEY), 4)
    states = state.buffer.sample_states(jax.random.fold_in(key, 1), 12)
    assert set(np.round(np.asarray(states).ravel(), 5)) <= set(np.round(np.asarray(
        state.buffer.observations[:int(state.buffer.size)]).ravel(), 5))
    policy = graph(state.agent, states)
    expected = jnp.mean(jax.jit(lambda: jax_env.rollout_acting(line, policy, key, short.eval_episodes)["success"])())
    # Evaluated at iterations 2 and 4; the policy only after iteration 2 (eval_policies_after).
    assert float(metrics["eval_success_graph"][3]) == pytest.approx(float(expected))
    assert np.isnan(np.asarray(metrics["eval_success_graph"])[:3]).all() and not np.isnan(metrics["eval_success"][1])
    with pytest.raises(ValueError, match="dataset_states_wanted must be an int >= 0"):
        make_loop(qrl, line, short, eval_policies={"x": type("Build", (), dict(
            dataset_states_wanted=-1, __call__=lambda self, agent: agent))()})


def test_vmapped_seeds_evaluate_only_when_due():
    """Under vmap a batched predicate turns lax.cond into both branches and a select: the loop keeps the iteration
    count unbatched, so the evaluation episodes run only at evaluations (counted by a callback in a policy)."""
    calls = []

    class Counted(StatelessPolicy):
        def act(self, observations, goals, rng=None):
            return jnp.zeros((observations.shape[0], 1))

        def initial_policy_state(self, batch_size):
            jax.debug.callback(lambda: calls.append(1))
            return None

    config = GCBCConfig(obs_dim=2, action_dim=1, hidden=(8,))
    _, rows = train_on_device(config, CAR, TINY, seed=(0, 1), eval_policies={"counted": lambda agent: Counted()})
    assert [r["iteration"] for r in rows if "eval_success_counted" in r] == [3, 6]
    assert 0 < len(calls) <= 2 * 2  # two evaluations of (at most) two seeds; every iteration would make 12
    calls.clear()
    jax.jit(jax.vmap(make_train(config, CAR, TINY, eval_policies={"counted": lambda agent: Counted()})))(
        jnp.stack([jax.random.PRNGKey(0), jax.random.PRNGKey(1)]))
    jax.effects_barrier()
    assert 0 < len(calls) <= 2 * 2
