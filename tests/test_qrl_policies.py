"""The deployable QRL policies (agents/qrl_policies.py): held-action costs against a step-by-step reference and a
hand value, the waypoint choice against brute force, MPPI against the planning step it wraps, one signature for
all, vmapped seeds equal to lone ones, and bad settings named."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents import qrl_policies as P
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.agents.qrl_diagnostics import action_grid, grid_argmin_actions
from platonic_rl.agents.seeds import SeedStack
from platonic_rl.common.planning import mppi_step

CONFIG = QRLContinuousConfig(obs_dim=4, action_dim=2, encoder_hidden=(16,), latent_dim=8, projector_hidden=(16,),
                             iqe_components=2, iqe_dim_per_component=4, dynamics_hidden=(16,), actor_hidden=(16,))


def perturbed(agent: QRLContinuousAgent, seed: int = 1, scale: float = 0.3) -> QRLContinuousAgent:
    """The agent with every critic parameter moved at random: its latent dynamics no longer the identity (the
    residual's last layer starts at zero)."""
    leaves, tree = jax.tree_util.tree_flatten(agent.critic_params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    leaves = [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)]
    return agent.replace(critic_state=agent.critic_state.replace(params=jax.tree_util.tree_unflatten(tree, leaves)))


@pytest.fixture(scope="module")
def agent():
    return perturbed(QRLContinuousAgent.create(CONFIG, seed=0))


def states(n: int, seed: int) -> jax.Array:
    return jax.random.uniform(jax.random.PRNGKey(seed), (n, 4), minval=-1.0, maxval=1.0)


def test_held_costs_equal_the_dynamics_applied_k_times_by_hand(agent):
    obs, goals = states(3, 0), states(3, 1)
    candidates = jnp.broadcast_to(action_grid(3, 2), (3, 9, 2))
    critic = agent.critic
    expected = []
    for i in range(CONFIG.num_critics):
        params = jax.tree_util.tree_map(lambda x: x[i], agent.critic_params)
        z = critic.apply(params, obs, method="encode")[:, None].repeat(9, 1)
        for _ in range(4):
            z = critic.apply(params, z, candidates, method="dynamics")
        z_goal = critic.apply(params, goals, method="encode")[:, None].repeat(9, 1)
        expected.append(critic.apply(params, z, z_goal, method="distance"))
    costs = P.held_action_costs(agent, obs, goals, candidates, hold_steps=4)
    np.testing.assert_allclose(costs, np.max(expected, 0), rtol=1e-5, atol=1e-5)
    # k = 1 is the learned one-step cost the actor is trained on
    one = P.held_action_costs(agent, obs, goals, candidates, hold_steps=1)
    np.testing.assert_allclose(one[:, 4], agent.goal_distances_after(agent.critic_params, obs, candidates[:, 4], goals)
                               .max(0), rtol=1e-5, atol=1e-5)


def test_dwell_costs_are_the_mean_of_the_held_costs_over_the_hold(agent):
    """score="dwell": (1/k) sum_{t=1..k} of the k = t held costs, each computed alone; capped, the mean over each
    state's own k_s steps; the lookahead acts on it."""
    obs, goals = states(4, 2), states(4, 3)
    candidates = jnp.broadcast_to(action_grid(3, 2), (4, 9, 2))
    k = 5
    by_hold = np.stack([P.held_action_costs(agent, obs, goals, candidates, hold_steps=t) for t in range(1, k + 1)])
    dwell = P.held_action_costs(agent, obs, goals, candidates, hold_steps=k, score="dwell")
    np.testing.assert_allclose(dwell, by_hold.mean(0), rtol=1e-5, atol=1e-5)
    assert not np.allclose(dwell, by_hold[-1])
    near = obs + 0.02 * states(4, 4)  # goals near the states: held fewer steps than k
    own_k = np.clip(np.ceil(np.asarray(agent.goal_distances(obs, near).max(0))), 1, k).astype(int)
    assert (own_k < k).any(), own_k
    capped = P.held_action_costs(agent, obs, near, candidates, hold_steps=k, cap_to_goal_distance=True, score="dwell")
    for i, k_i in enumerate(own_k):
        np.testing.assert_allclose(capped[i], P.held_action_costs(agent, obs[i:i + 1], near[i:i + 1],
                                                                  candidates[i:i + 1], hold_steps=int(k_i),
                                                                  score="dwell")[0], rtol=1e-5, atol=1e-5)
    policy = P.LatentLookahead(agent, hold_steps=k, grid_size=3, score="dwell")
    candidates = policy.candidates(obs, goals)
    best = jnp.argmin(P.held_action_costs(agent, obs, goals, candidates, k, score="dwell"), 1)
    np.testing.assert_allclose(policy.act(obs, goals), jnp.take_along_axis(candidates, best[:, None, None], 1)[:, 0])
    with pytest.raises(ValueError, match=r"score must be one of \('final', 'dwell'\), got 'sum'"):
        P.held_action_costs(agent, obs, goals, candidates, hold_steps=k, score="sum")
    with pytest.raises(ValueError, match="LatentLookahead.score must be one of"):
        P.LatentLookahead(agent, score="sum")


def test_capped_holds_last_at_most_the_learned_distance_to_the_goal(agent):
    """With cap_to_goal_distance a state's actions are held k_s = min(k, ceil d(s, g)) steps, at least 1: per
    state, the uncapped costs at its own k_s. The goals mix near ones (k_s < k) and far ones (k_s = k)."""
    obs = states(8, 6)
    goals = jnp.concatenate([obs[:4] + 0.02 * states(4, 7), states(4, 8)])
    distances = np.asarray(agent.goal_distances(obs, goals).max(0))
    k = max(2, int(np.ceil(np.median(distances))))
    own_k = np.clip(np.ceil(distances), 1, k).astype(int)
    assert (own_k < k).any() and (own_k == k).any(), (distances, k)
    candidates = jnp.broadcast_to(action_grid(3, 2), (8, 9, 2))
    capped = P.held_action_costs(agent, obs, goals, candidates, hold_steps=k, cap_to_goal_distance=True)
    for i, k_i in enumerate(own_k):
        np.testing.assert_allclose(capped[i], P.held_action_costs(agent, obs[i:i + 1], goals[i:i + 1],
                                                                  candidates[i:i + 1], hold_steps=int(k_i))[0],
                                   rtol=1e-5, atol=1e-5)
    uncapped = P.held_action_costs(agent, obs, goals, candidates, hold_steps=k)
    assert not np.allclose(capped[own_k < k], uncapped[own_k < k])
    policy = P.LatentLookahead(agent, hold_steps=k, grid_size=3, cap_to_goal_distance=True)
    chosen = policy.act(obs, goals)
    costs = P.held_action_costs(agent, obs, goals, policy.candidates(obs, goals), k, cap_to_goal_distance=True)
    np.testing.assert_allclose(chosen, jnp.take_along_axis(policy.candidates(obs, goals),
                                                           jnp.argmin(costs, 1)[:, None, None], 1)[:, 0])


def test_identity_dynamics_make_every_candidate_cost_the_current_distance():
    """A fresh agent's residual dynamics are zero (T(z, a) = z), so holding any action any number of steps leaves
    d(f(s), f(g)): by hand, every candidate's cost is the state's own distance to the goal."""
    fresh = QRLContinuousAgent.create(CONFIG, seed=3)
    obs, goals = states(4, 2), states(4, 3)
    candidates = jnp.broadcast_to(action_grid(5, 2), (4, 25, 2))
    costs = P.held_action_costs(fresh, obs, goals, candidates, hold_steps=7)
    np.testing.assert_allclose(costs, np.repeat(np.asarray(fresh.goal_distances(obs, goals).max(0))[:, None], 25, 1),
                               rtol=1e-6)


def test_lookahead_picks_the_cheapest_candidate_and_one_step_matches_the_grid_argmin(agent):
    obs, goals = states(6, 4), states(6, 5)
    policy = P.LatentLookahead(agent, hold_steps=3, grid_size=5)
    candidates = policy.candidates(obs, goals)
    assert candidates.shape == (6, 26, 2)  # the grid and the actor's mode
    np.testing.assert_allclose(candidates[:, -1], agent.act(obs, goals))
    costs = np.asarray(P.held_action_costs(agent, obs, goals, candidates, 3))
    actions = np.asarray(policy.act(obs, goals))
    np.testing.assert_array_equal(actions, np.asarray(candidates)[np.arange(6), costs.argmin(1)])
    # one step ahead, it never does worse by its own cost than the critic's grid argmin (its candidates include the grid)
    one = P.LatentLookahead(agent, hold_steps=1, grid_size=9)
    cost = lambda a: agent.goal_distances_after(agent.critic_params, obs, a, goals).max(0)  # noqa: E731
    assert np.all(np.asarray(cost(one.act(obs, goals))) <= np.asarray(cost(grid_argmin_actions(agent, obs, goals))) + 1e-6)
    # with a key, the actor's samples join the candidates; the same key, the same action
    sampled = P.LatentLookahead(agent, hold_steps=3, grid_size=5, actor_samples=4)
    assert sampled.candidates(obs, goals, jax.random.PRNGKey(0)).shape == (6, 30, 2)
    np.testing.assert_array_equal(sampled.act(obs, goals, jax.random.PRNGKey(0)),
                                  jax.jit(type(sampled).act)(sampled, obs, goals, jax.random.PRNGKey(0)))


def test_the_lookahead_over_the_actors_samples_ranks_its_mode_and_fixed_paired_draws(agent):
    """grid_size 0: the candidates are the actor's mode and its samples only; without a key the draws are one fixed
    set in +- pairs around the mode (the same for every state and call: a deterministic policy), with a key fresh
    ones; the choice is the cheapest of them."""
    obs, goals = states(5, 20), states(5, 21)
    policy = P.LatentLookahead(agent, hold_steps=3, grid_size=0, actor_samples=6)
    candidates = np.asarray(policy.candidates(obs, goals))
    assert candidates.shape == (5, 7, 2)
    mean, log_std = agent.policy.apply(agent.actor_params, obs, goals)
    np.testing.assert_allclose(candidates[:, 0], np.tanh(mean), rtol=1e-6)
    draws = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (3, 2)))
    noise = np.concatenate([draws, -draws])                    # one set for every state, in +- pairs
    mean, std = np.asarray(mean)[:, None], np.exp(np.asarray(log_std))[:, None]
    np.testing.assert_allclose(candidates[:, 1:], np.tanh(mean + std * noise), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(candidates, policy.candidates(obs, goals))               # every call the same
    reseeded = np.asarray(policy.replace(sample_seed=1).candidates(obs, goals))   # the same mode, other draws
    np.testing.assert_array_equal(reseeded[:, 0], candidates[:, 0])
    assert not np.allclose(reseeded, candidates)
    costs = np.asarray(P.held_action_costs(agent, obs, goals, jnp.asarray(candidates), 3))
    np.testing.assert_array_equal(policy.act(obs, goals), candidates[np.arange(5), costs.argmin(1)])
    keyed = np.asarray(policy.candidates(obs, goals, jax.random.PRNGKey(3)))
    assert keyed.shape == (5, 7, 2) and not np.allclose(keyed[:, 1:], candidates[:, 1:])
    for bad, match in ((dict(grid_size=0), "grid_size 0 \\(no grid\\) needs actor_samples >= 1"),
                       (dict(grid_size=1, actor_samples=2), "grid_size must be 0 \\(no grid\\) or >= 2, got 1"),
                       (dict(grid_size=0, actor_samples=2, sample_seed=-1), "sample_seed must be an int >= 0")):
        with pytest.raises(ValueError, match=match):
            P.LatentLookahead(agent, **bad)


def test_waypoints_choose_the_reachable_state_nearest_the_goal_by_brute_force(agent):
    obs, goals, waypoints = states(5, 6), states(5, 7), states(40, 8)
    d = lambda a, b: np.asarray(agent.goal_distances(a, b).max(0))  # noqa: E731
    pairs = lambda a, b: (jnp.broadcast_to(a[:, None], (5, 40, 4)), jnp.broadcast_to(b[None], (5, 40, 4)))  # noqa: E731
    d_sw = d(*pairs(obs, waypoints))                                                  # [5, 40]: every (s, w)
    d_wg = d(*pairs(goals, waypoints)[::-1])                                          # every (w, g)
    d_sg = d(obs, goals)
    reach = 1.0  # below every d(s, g); some states have waypoints within it, some none
    policy = P.WaypointPolicy.create(agent, waypoints, reach)
    targets, info = policy.targets(obs, goals)
    for n in range(5):
        reachable = np.flatnonzero(d_sw[n] <= reach)
        if d_sg[n] <= reach or reachable.size == 0:
            np.testing.assert_array_equal(targets[n], goals[n])
            assert not info["use_waypoint"][n]
        else:
            best = reachable[np.argmin(d_wg[n, reachable])]
            np.testing.assert_allclose(targets[n], waypoints[best])
            np.testing.assert_allclose(info["target_goal_distance"][n], d_wg[n, best], rtol=1e-5)
            assert info["target_distance"][n] <= reach
    assert 0 < np.asarray(info["use_waypoint"]).sum() < 5  # both branches taken
    # a reach beyond every distance sends each state straight for its goal
    far = P.WaypointPolicy.create(agent, waypoints, 1e9)
    np.testing.assert_array_equal(far.targets(obs, goals)[0], goals)
    # then it acts as its inner policy towards the targets
    np.testing.assert_allclose(policy.act(obs, goals), agent.act(obs, targets), rtol=1e-6)
    inner = P.LatentLookahead(agent, hold_steps=2, grid_size=3)
    with_lookahead = P.WaypointPolicy.create(agent, waypoints, reach, inner)
    np.testing.assert_array_equal(with_lookahead.act(obs, goals), inner.act(obs, targets))


def test_graph_waypoints_choose_the_reachable_state_with_the_cheapest_path_by_brute_force(agent):
    """plan="graph": against shortest paths by hand over the same waypoints, edges where the learned distance is
    within reach; where no waypoint within reach has a path to the goal, the choice on d(w, g)."""
    obs, goals, waypoints = states(6, 21), states(6, 22), states(30, 23)
    d = lambda a, b: np.asarray(agent.goal_distances(a, b).max(0))  # noqa: E731
    grid = lambda a, b: d(jnp.repeat(a, len(b), 0), jnp.tile(b, (len(a), 1))).reshape(len(a), len(b))  # noqa: E731
    d_ww, d_sw, d_wg, d_sg = grid(waypoints, waypoints), grid(obs, waypoints), grid(waypoints, goals).T, d(obs, goals)
    reach = float(np.quantile(d_ww[~np.eye(30, dtype=bool)], 0.3))  # a sparse graph: 30% of the pairs are edges
    policy = P.WaypointPolicy.create(agent, waypoints, reach, plan="graph")
    edges = np.where(d_ww <= reach, d_ww, np.inf)
    np.fill_diagonal(edges, 0.0)
    paths = edges.copy()  # shortest paths by repeated relaxation (Bellman-Ford), independent of Floyd-Warshall
    for _ in range(30):
        paths = np.minimum(paths, (paths[:, :, None] + edges[None]).min(1))
    np.testing.assert_allclose(np.asarray(policy.paths), paths, rtol=1e-5)
    targets, info = policy.targets(obs, goals)
    chosen = 0
    for n in range(6):
        to_goal = (paths + np.where(d_wg[n] <= reach, d_wg[n], np.inf)[None]).min(1)       # [M]: w -> ... -> g
        cost = np.where(d_sw[n] <= reach, to_goal, np.inf)
        if d_sg[n] <= reach or not (d_sw[n] <= reach).any():
            np.testing.assert_array_equal(targets[n], goals[n])
        elif np.isfinite(cost).any():
            np.testing.assert_allclose(targets[n], waypoints[np.argmin(cost)])
            chosen += 1
        else:
            greedy = np.flatnonzero(d_sw[n] <= reach)[np.argmin(d_wg[n][d_sw[n] <= reach])]
            np.testing.assert_allclose(targets[n], waypoints[greedy])
    assert chosen >= 1  # the path branch was taken
    np.testing.assert_allclose(policy.act(obs, goals), agent.act(obs, targets), rtol=1e-6)
    with pytest.raises(ValueError, match="plan must be 'greedy' or 'graph'"):
        P.WaypointPolicy.create(agent, waypoints, reach, plan="astar")


def test_mppi_policy_is_the_planning_step_on_qrls_plan_costs_and_carries_its_plan(agent):
    obs, goals = states(3, 9), states(3, 10)
    policy = P.MPPIPolicy(agent, horizon=4, num_samples=32, seed=5, episodes_per_call=2)
    state = policy.initial_policy_state(3)
    assert state["plans"].shape == (3, 4, 2) and not np.any(state["plans"])
    actions, state2 = jax.jit(type(policy).step)(policy, state, obs, goals)
    carried, key = jax.random.split(jax.random.PRNGKey(5))
    for n, k in enumerate(jax.random.split(key, 3)):  # each episode's step, by the planning function itself
        a, plan = mppi_step(k, jnp.zeros((4, 2)), lambda s: agent.plan_costs(obs[n], goals[n], s), 32, 1.0, 0.01)
        np.testing.assert_allclose(actions[n], a, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state2["plans"][n], plan, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state2["key"], carried)
    again, _ = type(policy).step(policy, state, obs, goals)  # the same state, the same actions
    np.testing.assert_allclose(again, actions, rtol=1e-6)
    nxt, _ = type(policy).step(policy, state2, obs, goals)  # the next step draws new samples from the carried plan
    assert not np.allclose(nxt, actions)


def test_every_policy_has_the_agents_acting_signature_and_vmaps_over_seeds():
    stack = SeedStack.create(QRLContinuousAgent, CONFIG, seeds=(0, 1))
    stack = stack.replace(agents=jax.vmap(lambda a, s: perturbed(a, s))(stack.agents, jnp.arange(2)))
    obs, goals, data = states(4, 11), states(4, 12), states(30, 13)
    settings = dict(actor={}, lookahead=dict(hold_steps=3, grid_size=3), waypoints=dict(reach=1.0, num_waypoints=20),
                    graph_waypoints=dict(reach=1.0, num_waypoints=20, patience=2), mppi=dict(num_samples=16, horizon=3))
    assert set(settings) == set(P.POLICIES)
    for name, kw in settings.items():
        def acts(agent):
            policy = P.make_policy(name, agent, data, **kw)
            return policy.step(policy.initial_policy_state(4), obs, goals)[0]

        vmapped = jax.jit(jax.vmap(acts))(stack.agents)
        assert vmapped.shape == (2, 4, 2) and np.all(np.abs(vmapped) <= 1)
        for i in range(2):
            np.testing.assert_allclose(vmapped[i], acts(stack.agent(i)), rtol=1e-5, atol=1e-6, err_msg=name)


def test_bad_policy_settings_are_named(agent):
    with pytest.raises(KeyError, match="unknown policy 'nearest'"):
        P.make_policy("nearest", agent)
    with pytest.raises(TypeError, match="agent must be a trained QRLContinuousAgent"):
        P.make_policy("lookahead", object())
    with pytest.raises(ValueError, match="needs dataset_states"):
        P.make_policy("waypoints", agent)
    with pytest.raises(ValueError, match="hold_steps must be an int >= 1"):
        P.make_policy("lookahead", agent, hold_steps=0)
    with pytest.raises(ValueError, match="cap_to_goal_distance must be a bool"):
        P.make_policy("lookahead", agent, cap_to_goal_distance=1)
    with pytest.raises(ValueError, match="reach must be > 0"):
        P.make_policy("waypoints", agent, states(5, 0), reach=0.0)
    with pytest.raises(ValueError, match=r"waypoints must be dataset states \[M >= 1, \(4,\)\]"):
        P.WaypointPolicy.create(agent, jnp.zeros((5, 3)), 1.0)
    with pytest.raises(ValueError, match="inner must be 'actor', 'lookahead' or a goal-conditioned policy with step"):
        P.make_policy("waypoints", agent, states(5, 0), inner="mppi")
    with pytest.raises(ValueError, match=r"goal_dims must be None or distinct indices into a 4-dim state"):
        P.make_policy("graph_waypoints", agent, states(5, 0), goal_dims=(0, 4))
    with pytest.raises(ValueError, match="MPPIPolicy.num_samples must be an int >= 1"):
        P.make_policy("mppi", agent, num_samples=0)
    with pytest.raises(ValueError, match="MPPIPolicy.temperature must be > 0"):
        P.make_policy("mppi", agent, temperature=0.0)


def test_waypoints_reuse_the_goal_distances_while_the_goals_stay_and_recompute_when_they_change(agent):
    obs, goals, waypoints = states(5, 14), states(5, 15), states(40, 16)
    policy = P.WaypointPolicy.create(agent, waypoints, 1.0)
    step = jax.jit(type(policy).step)
    state = policy.initial_policy_state(5)
    actions, state = step(policy, state, obs, goals)
    np.testing.assert_allclose(state["goal_distances"], policy.waypoint_goal_distances(goals), rtol=1e-6)
    np.testing.assert_allclose(actions, policy.act(obs, goals), rtol=1e-6)
    stale = dict(state, goal_distances=state["goal_distances"][:, ::-1])  # a cached value is used as it is ...
    assert not np.allclose(step(policy, stale, obs, goals)[0], actions)
    other = states(5, 17)  # ... until a goal changes
    moved, state = step(policy, stale, obs, other)
    np.testing.assert_allclose(moved, policy.act(obs, other), rtol=1e-6)
    np.testing.assert_allclose(state["goal_distances"], policy.waypoint_goal_distances(other), rtol=1e-6)


def test_waypoints_are_chosen_again_every_replan_every_steps(agent):
    obs, goals, waypoints = states(5, 18), states(5, 19), states(40, 20)
    policy = P.WaypointPolicy.create(agent, waypoints, 1.0, replan_every=3)
    step = jax.jit(type(policy).step)
    state = policy.initial_policy_state(5)
    chosen = []
    for t in range(7):  # the states move; the targets follow them at steps 0, 3 and 6 only
        here = obs + 0.2 * t
        _, state = step(policy, state, here, goals)
        chosen.append(np.asarray(state["targets"]))
        np.testing.assert_allclose(chosen[-1], policy.targets(obs + 0.2 * (t - t % 3), goals)[0], rtol=1e-6)
    assert int(state["since_replan"]) == 1
    assert not np.allclose(chosen[1], policy.targets(obs + 0.2, goals)[0])  # kept, though a replan would move them
    with pytest.raises(ValueError, match="replan_every must be an int >= 1"):
        P.WaypointPolicy.create(agent, waypoints, 1.0, replan_every=0)


def test_waypoints_that_give_no_progress_past_patience_are_dropped_for_the_episode(agent):
    obs, goals, waypoints = states(3, 21), states(3, 22), states(40, 23)
    d_sg = P.WaypointPolicy.create(agent, waypoints, 1.0).targets(obs, goals)[1]["goal_distance"]
    reach = 0.9 * float(np.min(d_sg))  # below every d(s, g): each episode targets a waypoint
    policy = P.WaypointPolicy.create(agent, waypoints, reach, replan_every=2, patience=3)
    first, info = policy.targets(obs, goals)
    assert np.all(np.asarray(info["use_waypoint"])), "the test needs a waypoint target in every episode"
    step = jax.jit(type(policy).step)
    state = policy.initial_policy_state(3)
    for t in range(5):  # the point does not move (a wall): the cost to the goal does not improve ...
        _, state = step(policy, state, obs, goals)
        if t < 4:
            np.testing.assert_allclose(state["targets"], first, rtol=1e-6)
            assert not np.asarray(state["dropped"]).any() and np.all(np.asarray(state["since_best"]) == t)
    # ... for 4 steps (> patience 3): every waypoint within reach ranked within H of the best is dropped
    best = np.asarray(info["target_goal_distance"])
    promised = np.asarray(info["in_reach"]) & (np.asarray(info["ranking"]) <= best[:, None] + reach)
    np.testing.assert_array_equal(state["dropped"], promised)
    assert np.all(promised[np.arange(3), np.asarray(info["waypoint"])])
    assert np.all(np.isinf(np.asarray(state["best"]))) and np.all(np.asarray(state["since_best"]) == 0)
    # the next replan (two steps on) chooses without them: the choice targets() makes with them dropped
    for _ in range(2):
        _, state = step(policy, state, obs, goals)
    np.testing.assert_allclose(state["targets"], policy.targets(obs, goals, dropped=jnp.asarray(promised))[0],
                               rtol=1e-6)
    assert not np.allclose(state["targets"], first)
    # without patience the first choice stays for ever; a new goal starts an episode with none dropped
    lasting = P.WaypointPolicy.create(agent, waypoints, reach, replan_every=2)
    state2 = lasting.initial_policy_state(3)
    for _ in range(8):
        _, state2 = jax.jit(type(lasting).step)(lasting, state2, obs, goals)
    np.testing.assert_allclose(state2["targets"], first, rtol=1e-6)
    _, fresh = step(policy, state, obs, states(3, 24))
    assert not np.asarray(fresh["dropped"]).any() and np.all(np.asarray(fresh["since_best"]) == 0)
    with pytest.raises(ValueError, match="patience must be None or an int >= 1"):
        P.WaypointPolicy.create(agent, waypoints, reach, patience=0)


def test_after_a_stall_the_episodes_targets_take_the_goals_form_until_its_goal_changes(agent):
    """stall_goal_dims (0, 1) with patience 3: the targets are the held waypoints until the episode stalls (4 steps
    without progress), then the same choices as goals (position from the waypoint, the goal's velocity) for the rest
    of the episode; a new goal starts with held targets again; without patience it is refused."""
    obs, waypoints = states(3, 21), states(40, 23)
    goals = jnp.concatenate([states(3, 22)[:, :2], jnp.full((3, 2), -0.25)], 1)
    d_sg = P.WaypointPolicy.create(agent, waypoints, 1.0).targets(obs, goals)[1]["goal_distance"]
    reach = 0.9 * float(np.min(d_sg))  # every episode targets a waypoint
    plain = P.WaypointPolicy.create(agent, waypoints, reach, replan_every=2, patience=3)
    policy = P.WaypointPolicy.create(agent, waypoints, reach, replan_every=2, patience=3, stall_goal_dims=(0, 1))
    step = jax.jit(type(policy).step)
    state, plain_state = policy.initial_policy_state(3), plain.initial_policy_state(3)
    as_goal = lambda t: np.concatenate([np.asarray(t)[:, :2], np.full((3, 2), -0.25)], 1)  # noqa: E731
    for t in range(9):  # the point does not move: it stalls at the 5th step (4 > patience without progress)
        _, state = step(policy, state, obs, goals)
        _, plain_state = jax.jit(type(plain).step)(plain, plain_state, obs, goals)
        stalled = t >= 4
        assert np.all(np.asarray(state["stalled"]) == stalled), t
        expected = as_goal(plain_state["targets"]) if stalled else np.asarray(plain_state["targets"])
        np.testing.assert_allclose(state["targets"], expected, rtol=1e-6, err_msg=str(t))
        assert not np.allclose(np.asarray(plain_state["targets"])[:, 2:], -0.25)  # held: the waypoint's velocity
    # Where a goal is a whole state (OGBench's point maze: a position), a target in the goal's form is the waypoint:
    # the same actions as without the option, stalls included.
    whole = P.WaypointPolicy.create(agent, waypoints, reach, replan_every=2, patience=3, stall_goal_dims=(0, 1, 2, 3))
    whole_state, plain_state = whole.initial_policy_state(3), plain.initial_policy_state(3)
    for t in range(9):
        actions, whole_state = step(whole, whole_state, obs, goals)
        plain_actions, plain_state = jax.jit(type(plain).step)(plain, plain_state, obs, goals)
        np.testing.assert_array_equal(actions, plain_actions, err_msg=str(t))
    assert np.asarray(whole_state["stalled"]).all()
    _, fresh = step(policy, state, obs, goals + 0.1)  # a new episode
    assert not np.asarray(fresh["stalled"]).any()
    assert not np.allclose(np.asarray(fresh["targets"])[:, 2:], np.asarray(goals + 0.1)[:, 2:])
    with pytest.raises(ValueError, match="stall_goal_dims needs patience"):
        P.WaypointPolicy.create(agent, waypoints, reach, stall_goal_dims=(0, 1))
    with pytest.raises(ValueError, match="stall_goal_dims must be None or distinct indices into a 4-dim state"):
        P.WaypointPolicy.create(agent, waypoints, reach, patience=3, stall_goal_dims=(0, 4))


def test_direct_first_targets_the_goal_until_the_first_stall_then_the_waypoints_dropping_nothing_then(agent):
    """direct_first with patience 3: the target is the goal itself while d(s, g) has not stalled (the point does not
    move: stalled after 4 steps without progress), then the waypoints the plain policy chooses, none dropped at that
    first stall; a later stall drops as usual; a new goal starts with the goal as target again."""
    obs, goals, waypoints = states(3, 21), states(3, 22), states(40, 23)
    d_sg = P.WaypointPolicy.create(agent, waypoints, 1.0).targets(obs, goals)[1]["goal_distance"]
    reach = 0.9 * float(np.min(d_sg))  # every episode would target a waypoint
    plain = P.WaypointPolicy.create(agent, waypoints, reach, replan_every=1, patience=3)
    policy = P.WaypointPolicy.create(agent, waypoints, reach, replan_every=1, patience=3, direct_first=True)
    step = jax.jit(type(policy).step)
    state = policy.initial_policy_state(3)
    for t in range(5):  # steps 0-3: the goal; the stall is counted at step 4 (4 > patience), after that step's choice
        _, state = step(policy, state, obs, goals)
        np.testing.assert_allclose(state["targets"], goals, err_msg=str(t))
    assert np.asarray(state["stalled"]).all() and not np.asarray(state["dropped"]).any()
    _, state = step(policy, state, obs, goals)  # the waypoints' turn: the plain policy's first choice
    np.testing.assert_allclose(state["targets"], plain.targets(obs, goals)[0], rtol=1e-6)
    assert not np.allclose(state["targets"], goals)
    for _ in range(4):  # the second stall drops what promised progress, as the plain policy's first does
        _, state = step(policy, state, obs, goals)
    assert np.asarray(state["dropped"]).any(1).all()
    _, fresh = step(policy, state, obs, goals + 0.1)  # a new episode: the goal first again
    np.testing.assert_allclose(fresh["targets"], goals + 0.1)
    assert not np.asarray(fresh["stalled"]).any() and not np.asarray(fresh["dropped"]).any()
    with pytest.raises(ValueError, match="direct_first must be a bool, and True needs patience"):
        P.WaypointPolicy.create(agent, waypoints, reach, direct_first=True)


def test_the_arrival_policy_acts_where_the_target_is_the_goal_and_the_inner_elsewhere(agent):
    """``arrival``: states whose target is their goal (within reach) take the arrival policy's action towards the
    goal; the others the inner policy's towards their waypoint."""
    obs, goals, waypoints = states(5, 6), states(5, 7), states(40, 8)
    reach = 1.0  # as in the brute-force test above: some states go for a waypoint, some for their goal
    arrival = P.LatentLookahead(agent, hold_steps=2, grid_size=3)
    policy = P.WaypointPolicy.create(agent, waypoints, reach, arrival=arrival)
    targets, info = policy.targets(obs, goals)
    at_goal = ~np.asarray(info["use_waypoint"])
    assert 0 < at_goal.sum() < 5
    actions = np.asarray(policy.act(obs, goals))
    np.testing.assert_allclose(actions[at_goal], np.asarray(arrival.act(obs, goals))[at_goal], rtol=1e-6)
    np.testing.assert_allclose(actions[~at_goal], np.asarray(agent.act(obs, targets))[~at_goal], rtol=1e-6)
    built = P.make_policy("graph_waypoints", agent, waypoints, reach=reach, arrival="lookahead", hold_steps=2)
    assert isinstance(built.arrival, P.LatentLookahead) and built.arrival.hold_steps == 2
    assert built.arrival.score == "final" and built.inner is agent
    dwell = P.make_policy("graph_waypoints", agent, waypoints, reach=reach, arrival="dwell", hold_steps=2)
    assert dwell.arrival.score == "dwell" and dwell.arrival.hold_steps == 2 and dwell.inner is agent
    with pytest.raises(ValueError, match=r"arrival must be one of \(None, 'lookahead', 'dwell'\), got 'mppi'"):
        P.make_policy("waypoints", agent, waypoints, arrival="mppi")
    with pytest.raises(ValueError, match="arrival must be None or a policy with step"):
        P.WaypointPolicy.create(agent, waypoints, reach, arrival="lookahead")


def test_make_policy_defaults_are_the_settings_the_benchmarks_measured(agent, monkeypatch):
    """A policy built by name alone acts as the tables' rows did: make_policy's defaults are QRLPolicySettings',
    the maze2d and OGBench benchmarks' cpu settings are those same settings, and each row's policy equals the
    default one (same structure, same arrays; the waypoint policies compared by what they are created from, so that
    the 1,000-waypoint graph is built once)."""
    from platonic_rl.benchmarks import ogbench
    from platonic_rl.benchmarks.presets import maze2d_scales

    assert maze2d_scales()["cpu"].policies == P.DEFAULT_SETTINGS == ogbench.scales()["cpu"].policies
    data = states(1500, 20)
    rows = [("lookahead", None, None, "grid"), ("lookahead", None, None, "actor"), ("waypoints", "actor", None, "grid"),
            ("graph_waypoints", "actor", None, "grid"), ("graph_waypoints", "lookahead", None, "grid"),
            ("graph_waypoints", "actor", "lookahead", "grid")]
    create = P.WaypointPolicy.create
    with monkeypatch.context() as patched:
        patched.setattr(P.WaypointPolicy, "create", classmethod(lambda cls, *args: args))  # what it is created from
        for name, inner, arrival, candidates in rows:
            benchmark = P.DEFAULT_SETTINGS.policy_kwargs(name, inner, arrival, candidates=candidates)
            chosen = {k: v for k, v in benchmark.items() if k in ("inner", "arrival", "grid_size", "actor_samples")}
            ours, theirs = P.make_policy(name, agent, data, **chosen), P.make_policy(name, agent, data, **benchmark)
            assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(theirs), (name, inner, arrival)
            for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
                np.testing.assert_array_equal(a, b)
    assert P.WaypointPolicy.create == create
    graph = P.make_policy("graph_waypoints", agent, data)
    assert (graph.waypoints.shape[0], float(graph.reach), graph.replan_every, graph.patience) == (1000, 20.0, 5, 40)
    assert P.make_policy("mppi", agent).num_samples == 10_000
    assert P.make_policy("lookahead", agent).hold_steps == 20


def test_waypoint_targets_take_the_goals_form_where_goal_dims_are_given(agent):
    """goal_dims (0, 1): a chosen waypoint's target is the goal with its first two entries taken from the waypoint
    (a maze2d goal: a position at rest), by hand; the choice itself is unchanged."""
    obs, waypoints = states(6, 21), states(30, 22)
    goals = jnp.concatenate([states(6, 23)[:, :2], jnp.full((6, 2), -0.25)], 1)
    held = P.WaypointPolicy.create(agent, waypoints, 1.5, plan="graph")
    as_goal = P.WaypointPolicy.create(agent, waypoints, 1.5, plan="graph", goal_dims=(0, 1))
    targets, info = held.targets(obs, goals)
    goal_form, info_goal = as_goal.targets(obs, goals)
    np.testing.assert_array_equal(info["waypoint"], info_goal["waypoint"])
    use = np.asarray(info["use_waypoint"])
    assert use.any() and not use.all()   # both cases are checked
    expected = np.where(use[:, None], np.concatenate([np.asarray(targets)[:, :2], np.full((6, 2), -0.25)], 1),
                        np.asarray(goals))
    np.testing.assert_array_equal(goal_form, expected)
    np.testing.assert_array_equal(np.asarray(targets)[~use], np.asarray(goals)[~use])


def test_a_goal_conditioned_policy_trained_on_the_same_data_serves_between_waypoints(agent):
    """inner may be any policy with step (here GCBC): it acts towards the targets the waypoints choose."""
    from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig

    gcbc = GCBCAgent.create(GCBCConfig(obs_dim=4, action_dim=2, hidden=(8,)), 0)
    obs, goals, data = states(5, 24), states(5, 25), states(40, 26)
    policy = P.make_policy("graph_waypoints", agent, data, inner=gcbc, reach=1.5, replan_every=1)
    actions, _ = jax.jit(type(policy).step)(policy, policy.initial_policy_state(5), obs, goals)
    targets = policy.targets(obs, goals)[0]
    np.testing.assert_allclose(actions, gcbc.act(obs, targets), rtol=1e-5, atol=1e-6)
