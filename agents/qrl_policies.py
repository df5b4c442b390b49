"""Policies that read a trained QRL agent's learned distance beyond one step: this suite's additions to the
paper's actor, built only from what QRL learned (encoder f, quasimetric d, latent dynamics T, actor) and, for
waypoints, the dataset's states -- never a simulator.

    policy = make_policy("lookahead", agent, hold_steps=20)                 # argmin_a d(T^k(f(s), a), f(g))
    policy = make_policy("waypoints", agent, dataset_states, reach=20.0)    # subgoals along the learned distance
    policy = make_policy("graph_waypoints", agent, dataset_states)           # shortest paths over the waypoints
    policy = make_policy("mppi", agent, num_samples=10_000, horizon=5)      # C.3.2's MPPI on the learned model
    state = policy.initial_policy_state(batch_size)
    actions, state = jax.jit(type(policy).step)(policy, state, observations, goals, None, rng)

Every policy is an immutable pytree with the agents' acting signature (:mod:`platonic_rl.agents.contract`):
``initial_policy_state(batch_size)`` and ``step(policy_state, observations, goals, prev_actions=None, rng=None) ->
(actions, policy_state)``, so any loop or benchmark that evaluates an agent evaluates a policy; the stateless ones
also have ``act(observations, goals, rng=None)``. All of them are jit-able and vmappable over seeds (vmap over a
policy built from a :class:`~platonic_rl.agents.seeds.SeedStack`'s stacked agents); their ``step`` and ``act`` (and
the waypoints' ``targets``) are compiled (``jax.jit``) on their own, so a call from the host does not run the choice
op by op (a graph policy's first ``act`` on 500 waypoints: 19 s eagerly, under 1 s compiled), and inside a caller's
jit they are inlined. Observations, goals and
dataset states are what the agent sees (normalised as it was trained).

Why more than one step (docs/results.md, maze2d; the choice of k and H: docs/studies/qrl_policies.md): a transition's learned distance is
at most its cost, 1, so by the triangle inequality one step changes d(s, g) by at most 1 of the hundreds it spans,
and the critic's ordering errors swamp differences that small. The policies here compare states further apart:

* :class:`LatentLookahead` scores candidate actions by d(T^k(f(s), a), f(g)), each action held k steps in the
  learned latent dynamics (the simulator check held each action 20 steps in the true dynamics; this uses the
  model a deployed agent has); the candidates are a grid of actions or the actor's proposals, which keep to the
  dataset's actions, where the model was trained;
* :class:`WaypointPolicy` picks, among dataset states w within reach (d(s, w) <= H), the one nearest the goal,
  min d(w, g); by the triangle inequality d(s, g) <= d(s, w) + d(w, g), so with d(s, w) <= H no waypoint is
  nearer than d(s, g) - H, and the chosen one lies on a shortest path through the data as far as H allows. It
  then acts towards w with an inner policy (the actor or the lookahead), for which the near target restores the
  resolution the far goal lacks;
  With ``plan="graph"`` it plans over the waypoints instead (Search on the Replay Buffer, Eysenbach et al., 2019):
  the waypoints are the nodes of a graph whose edges join states within reach (d <= H), weighted by the learned
  distance, and d(w, g) is replaced by the cost of the cheapest path w -> ... -> g whose every leg is within reach,
  so only short learned distances, the ones the local constraint ties to the transitions, are read;
* :class:`MPPIPolicy` plans ``horizon`` steps in the learned model with the learned Q* as the per-step cost
  (C.3.2's MPPI with the QRL value: horizon 5, 10,000 samples, noise variance 1, lambda 0.01).

Every distance is the max over the critics, the cost QRL's actor is trained on (a max of quasimetrics is one).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp

from platonic_rl.agents.common import StatelessPolicy, as_key
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent
from platonic_rl.agents.qrl_diagnostics import action_grid
from platonic_rl.common.planning import mppi_step


# ------------------------------------------------------------------------------------ learned distances

SCORES = ("final", "dwell")  # what the lookahead ranks a held action by (held_action_costs)


def _encode(agent: QRLContinuousAgent, x: jax.Array) -> jax.Array:
    """f_i(x) for every critic: ``[num_critics, ..., latent]``."""
    critic = agent.critic
    return jax.vmap(lambda p: critic.apply(p, x, method="encode"))(agent.critic_params)


def _project(agent: QRLContinuousAgent, z: jax.Array) -> jax.Array:
    """The projector of every critic on its own latents ``z [num_critics, ..., latent]``."""
    critic = agent.critic
    return jax.vmap(lambda p, zi: critic.apply(p, zi, method=lambda m, v: m.projector(v)))(agent.critic_params, z)


def _head(agent: QRLContinuousAgent, p1: jax.Array, p2: jax.Array) -> jax.Array:
    """Every critic's quasimetric head on projected latents ``[num_critics, ..., head_dim]`` (broadcast), max
    over the critics."""
    critic = agent.critic
    return jax.vmap(lambda p, a, b: critic.apply(p, a, b, method=lambda m, x, y: m.head(x, y)))(
        agent.critic_params, p1, p2).max(0)


def held_action_costs(agent: QRLContinuousAgent, observations: jax.Array, goals: jax.Array, candidates: jax.Array,
                      hold_steps: int, cap_to_goal_distance: bool = False, score: str = "final") -> jax.Array:
    """max_i d_i(T_i^k(f_i(s), a), f_i(g)) for every candidate action a held ``hold_steps`` = k steps in the
    learned latent dynamics (``score="final"``), or its mean over the hold, (1/k) sum_{t=1..k} max_i d_i(T_i^t(f_i(s),
    a), f_i(g)) (``score="dwell"``: the cost summed along the trajectory, as MPPI sums its per-step cost (C.3.2), so
    that an action that passes the goal and carries on scores worse than one that arrives and stays near it).
    With ``cap_to_goal_distance``, a state's actions are held k_s = min(k, ceil d(s, g))
    steps instead (at least 1): no longer than the learned number of steps to the goal, so that near the goal a
    held action is not scored where it would have carried the agent past it. ``observations``, ``goals``:
    ``[N, D]``; ``candidates``: ``[N, G, A]``; returns ``[N, G]``."""
    if hold_steps < 1:
        raise ValueError(f"hold_steps must be >= 1, got {hold_steps}")
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    critic = agent.critic
    z, z_goal = _encode(agent, observations), _encode(agent, goals)   # [C, N, L]
    p_goal = _project(agent, z_goal)
    if cap_to_goal_distance:
        steps = jnp.clip(jnp.ceil(_head(agent, _project(agent, z), p_goal)), 1, hold_steps)   # [N]
    else:
        steps = jnp.full(observations.shape[0], hold_steps)

    # Every critic's latents held one more step (frozen past each state's k_s); with "dwell", the distance there added.
    def step(t, carry):
        zt, total = carry
        z_next = jax.vmap(lambda params, z: critic.apply(params, z, candidates, method="dynamics"))(
            agent.critic_params, zt)
        zt = jnp.where((t < steps)[:, None, None], z_next, zt)
        if score == "dwell":
            total = total + jnp.where((t < steps)[:, None], _head(agent, _project(agent, zt), p_goal[:, :, None]), 0.0)
        return zt, total

    z0 = jnp.broadcast_to(z[:, :, None], (z.shape[0], *candidates.shape[:2], z.shape[-1]))   # [C, N, G, L]
    z_after, total = jax.lax.fori_loop(0, hold_steps, step, (z0, jnp.zeros(candidates.shape[:2])))
    if score == "dwell":
        return total / steps[:, None]
    return _head(agent, _project(agent, z_after), p_goal[:, :, None])


def waypoint_distances(agent: QRLContinuousAgent, projections: jax.Array, rows_per_call: int = 50) -> jax.Array:
    """max_i d_i(w_a, w_b) between every two waypoints (their projections ``[num_critics, M, P]``): ``[M, M]``,
    ``rows_per_call`` rows at a time."""
    m = projections.shape[1]

    def row_block(rows):  # [R] waypoint indices -> their learned distances to every waypoint [R, M]
        return _head(agent, projections[:, rows, None], projections[:, None])

    padded = -(-m // rows_per_call) * rows_per_call
    blocks = jnp.minimum(jnp.arange(padded), m - 1).reshape(-1, rows_per_call)
    return jax.lax.map(row_block, blocks).reshape(padded, m)[:m]


def waypoint_graph(agent: QRLContinuousAgent, projections: jax.Array, reach: jax.Array, rows_per_call: int = 50
                   ) -> jax.Array:
    """All-pairs shortest paths ``[M, M]`` over waypoints (their projections ``[num_critics, M, P]``): an edge
    a -> b wherever max_i d_i(w_a, w_b) <= ``reach`` (:func:`waypoint_distances`), weighted by it, then
    Floyd-Warshall (inf where no path)."""
    d = waypoint_distances(agent, projections, rows_per_call)
    return shortest_paths(jnp.where(d <= reach, d, jnp.inf))


def shortest_paths(edges: jax.Array) -> jax.Array:
    """All-pairs shortest path costs ``[M, M]`` over a graph's edge costs ``edges [M, M]`` (inf: no edge; the
    diagonal is set to 0) by Floyd-Warshall: M steps, each over the whole matrix (time M^3, memory M^2)."""
    m = edges.shape[0]
    edges = edges.at[jnp.arange(m), jnp.arange(m)].set(0.0)
    return jax.lax.fori_loop(0, m, lambda k, paths: jnp.minimum(paths, paths[:, k, None] + paths[None, k, :]), edges)


# ------------------------------------------------------------------------------------ policies


class LatentLookahead(StatelessPolicy, flax.struct.PyTreeNode):
    """Act with the candidate action whose k-step held rollout in the learned dynamics ends nearest the goal:
    argmin_a max_i d_i(T_i^k(f_i(s), a), f_i(g)) (:func:`held_action_costs`). Candidates: a ``grid_size``^A grid
    over [-1, 1]^A (``grid_size`` 0: none), the actor's mode and ``actor_samples`` samples of the actor, drawn with
    the key ``step``/``act`` get or, without one, with the fixed key ``sample_seed`` (one set of draws of the noise
    for every state and call, in pairs +-e so that they centre on the mode: a deterministic policy for host
    evaluations). ``grid_size=0`` with samples ranks only actions the actor proposes: its behaviour cloning keeps
    them among the dataset's, where the learned dynamics were trained, while a grid offers every action, those into a
    wall included, where the learned dynamics err.
    ``hold_steps`` 1 with the grid alone is :func:`~platonic_rl.agents.qrl_diagnostics.grid_argmin_actions`.
    ``cap_to_goal_distance``: hold each state's actions at most its learned distance to the goal; ``score``: rank
    the actions by the distance where the hold ends (``"final"``) or by its mean along the hold (``"dwell"``; see
    :func:`held_action_costs`)."""
    agent: QRLContinuousAgent
    hold_steps: int = flax.struct.field(pytree_node=False, default=20)
    grid_size: int = flax.struct.field(pytree_node=False, default=9)
    actor_samples: int = flax.struct.field(pytree_node=False, default=0)
    cap_to_goal_distance: bool = flax.struct.field(pytree_node=False, default=False)
    score: str = flax.struct.field(pytree_node=False, default="final")
    sample_seed: int = flax.struct.field(pytree_node=False, default=0)

    def __post_init__(self):
        for name, low in (("hold_steps", 1), ("grid_size", 0), ("actor_samples", 0), ("sample_seed", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"LatentLookahead.{name} must be an int >= {low}, got {value!r}")
        if self.grid_size == 1:
            raise ValueError("LatentLookahead.grid_size must be 0 (no grid) or >= 2, got 1")
        if self.grid_size == 0 and self.actor_samples == 0:
            raise ValueError("LatentLookahead with grid_size 0 (no grid) needs actor_samples >= 1: its only other "
                             "candidate is the actor's mode")
        if not isinstance(self.cap_to_goal_distance, bool):
            raise ValueError(f"LatentLookahead.cap_to_goal_distance must be a bool, got {self.cap_to_goal_distance!r}")
        if self.score not in SCORES:
            raise ValueError(f"LatentLookahead.score must be one of {SCORES}, got {self.score!r}")

    def candidates(self, observations: jax.Array, goals: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        """``[N, G, A]``: the grid, the actor's mode and its samples (with ``rng``, or the fixed ``sample_seed``),
        per state."""
        n, a = observations.shape[0], self.agent.config.action_dim
        mean, log_std = self.agent.policy.apply(self.agent.actor_params, observations, goals)
        grid = [jnp.broadcast_to(action_grid(self.grid_size, a), (n, self.grid_size ** a, a))] if self.grid_size else []
        parts = [*grid, jnp.tanh(mean)[:, None]]
        if self.actor_samples:
            if rng is None:   # one fixed set of draws, the same for every state and call, in +- pairs (antithetic)
                half = jax.random.normal(jax.random.PRNGKey(self.sample_seed), (1, -(-self.actor_samples // 2), a),
                                         mean.dtype)
                noise = jnp.concatenate([half, -half], 1)[:, :self.actor_samples]
            else:
                noise = jax.random.normal(as_key(rng), (n, self.actor_samples, a), mean.dtype)
            parts.append(jnp.tanh(mean[:, None] + jnp.exp(log_std)[:, None] * noise))
        return jnp.concatenate(parts, 1)

    @jax.jit
    def act(self, observations: jax.Array, goals: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        """The best candidate per state, ``[N, A]``."""
        observations, goals = jnp.broadcast_arrays(jnp.asarray(observations), jnp.asarray(goals))
        candidates = self.candidates(observations, goals, rng)
        costs = held_action_costs(self.agent, observations, goals, candidates, self.hold_steps,
                                  self.cap_to_goal_distance, self.score)
        return jnp.take_along_axis(candidates, jnp.argmin(costs, 1)[:, None, None], 1)[:, 0]


class WaypointPolicy(flax.struct.PyTreeNode):
    """Subgoals from the quasimetric: among the dataset states w (a fixed subsample, ``waypoints [M, D]``) within
    reach, max_i d_i(s, w) <= ``reach`` (H, in steps), the one nearest the goal, min d(w, g); the goal itself when
    it is within reach or no waypoint is (see the module docstring for why). ``inner`` (the agent's actor, a
    :class:`LatentLookahead`, any policy with ``step``) then acts towards the chosen target, chosen again every
    ``replan_every`` steps (and whenever a goal changes). The waypoints are projected once, when the policy is built
    (:meth:`create`).

    ``plan="graph"``: the same rule with the graph's distance in place of d(w, g): among the waypoints within reach,
    the one whose cheapest path to the goal over the waypoint graph (:func:`waypoint_graph`, computed once in
    :meth:`create`; every leg within reach, the last one to the goal included) costs least -- the farthest waypoint
    within reach along that path. The path costs from each waypoint to a goal are computed when the goal changes.
    Where no waypoint within reach has a path, the choice is made on d(w, g) as above.

    ``patience`` (None: off): where the chosen targets' cost to the goal has not improved by at least 1 (a step's
    cost) for more than ``patience`` steps, the waypoints within reach that rank within H of that cost are dropped
    for the rest of the episode (its goal), and the choice is made without them. Where the learned distance puts
    waypoints within reach through a wall, the inner policy presses against the wall and the same few waypoints are
    chosen again and again; this is the suite's form of the cleanup of Sparse Graphical Memory (Emmons et al.,
    2020), which removes a graph edge the agent failed to traverse.

    ``stall_goal_dims`` (None: off; needs ``patience``): once an episode has stalled (``patience``), its targets take
    the goals' form for the rest of the episode, the waypoint's ``stall_goal_dims`` entries in the goal (a maze2d
    goal: the waypoint's position at rest). A waypoint is a state the dataset passed, velocity included; one the
    dataset passed moving back the way the point came asks an inner policy to turn round, and the point can stand
    still before it (maze2d large's single goal). At rest, every target can be reached and stayed at; the waypoints
    keep their velocities until then, which carry the point faster along the path.

    ``direct_first`` (False: off; needs ``patience``): the target is the goal itself until the episode first stalls
    (d(s, g) has not come down by 1 in more than ``patience`` steps), the waypoints from then on (nothing is dropped at
    that first stall). An inner policy that reaches the goal alone is not slowed by waypoints it does not need (on
    maze2d umaze GCBC alone arrives sooner than between QRL's waypoints), and one that cannot (a wall between it and
    the goal) gets them ``patience`` steps later. With ``stall_goal_dims`` the waypoints' targets are at rest from
    the switch on.

    ``arrival`` (None: off): a policy with ``step`` (e.g. a :class:`LatentLookahead`) that acts instead of ``inner``
    where the target is the goal itself (it is within reach): an inner policy that navigates between waypoints may not
    stop at the goal (on maze2d medium the actor reaches the goal in 86-100% of the episodes and leaves it again). A
    lookahead scoring the mean distance along the hold (``score="dwell"``) prefers the actions that stay near it."""
    agent: QRLContinuousAgent
    inner: Any
    waypoints: jax.Array            # [M, D]
    waypoint_projections: jax.Array  # [num_critics, M, head_dim]
    reach: jax.Array                 # H, steps of learned distance (a leaf: vmappable, no recompilation)
    paths: jax.Array | None = None   # plan="graph": shortest path costs between waypoints [M, M]
    replan_every: int = flax.struct.field(pytree_node=False, default=1)
    plan: str = flax.struct.field(pytree_node=False, default="greedy")
    patience: int | None = flax.struct.field(pytree_node=False, default=None)
    arrival: Any = None
    goal_dims: tuple[int, ...] | None = flax.struct.field(pytree_node=False, default=None)
    stall_goal_dims: tuple[int, ...] | None = flax.struct.field(pytree_node=False, default=None)
    direct_first: bool = flax.struct.field(pytree_node=False, default=False)

    @classmethod
    def create(cls, agent: QRLContinuousAgent, waypoints: jax.Array, reach: float, inner: Any = None,
               replan_every: int = 1, plan: str = "greedy", patience: int | None = None,
               arrival: Any = None, goal_dims: tuple[int, ...] | None = None,
               stall_goal_dims: tuple[int, ...] | None = None, direct_first: bool = False) -> "WaypointPolicy":
        waypoints = jnp.asarray(waypoints, jnp.float32)
        if waypoints.ndim != 2 or waypoints.shape[0] < 1 or waypoints.shape[1:] != agent.config.obs_shape:
            raise ValueError(f"waypoints must be dataset states [M >= 1, {agent.config.obs_shape}], got "
                             f"{waypoints.shape}")
        goal_dims = _check_goal_dims("goal_dims", goal_dims, waypoints.shape[1])
        stall_goal_dims = _check_goal_dims("stall_goal_dims", stall_goal_dims, waypoints.shape[1])
        if stall_goal_dims is not None and patience is None:
            raise ValueError("stall_goal_dims needs patience (an int >= 1): it acts once an episode has stalled")
        if not isinstance(direct_first, bool) or (direct_first and patience is None):
            raise ValueError(f"direct_first must be a bool, and True needs patience (an int >= 1: the waypoints take "
                             f"over once an episode has stalled), got direct_first={direct_first!r}, "
                             f"patience={patience!r}")
        if not reach > 0:
            raise ValueError(f"reach must be > 0 (steps of learned distance), got {reach}")
        if not isinstance(replan_every, int) or replan_every < 1:
            raise ValueError(f"replan_every must be an int >= 1 (steps), got {replan_every!r}")
        if plan not in ("greedy", "graph"):
            raise ValueError(f"plan must be 'greedy' or 'graph', got {plan!r}")
        if patience is not None and (not isinstance(patience, int) or patience < 1):
            raise ValueError(f"patience must be None or an int >= 1 (steps), got {patience!r}")
        projections = _project(agent, _encode(agent, waypoints))
        paths = waypoint_graph(agent, projections, jnp.float32(reach)) if plan == "graph" else None
        if arrival is not None and not callable(getattr(arrival, "step", None)):
            raise ValueError(f"arrival must be None or a policy with step (e.g. a LatentLookahead), got "
                             f"{type(arrival).__name__}")
        return cls(agent=agent, inner=agent if inner is None else inner, waypoints=waypoints,
                   waypoint_projections=projections, reach=jnp.float32(reach), paths=paths,
                   replan_every=replan_every, plan=plan, patience=patience, arrival=arrival, goal_dims=goal_dims,
                   stall_goal_dims=stall_goal_dims, direct_first=direct_first)

    def as_goal(self, waypoints: jax.Array, goals: jax.Array, goal_dims: tuple[int, ...] | None = None) -> jax.Array:
        """Targets of the kind the goals are: each goal with its ``goal_dims`` entries (default: the policy's) taken
        from the waypoint (the waypoint itself where they are None). A maze2d goal is a position at rest, so a
        waypoint's target is its position at rest, not the velocity the dataset passed it with."""
        goal_dims = self.goal_dims if goal_dims is None else goal_dims
        if goal_dims is None:
            return waypoints
        index = jnp.asarray(goal_dims)
        return goals.at[..., index].set(waypoints[..., index])

    def waypoint_goal_distances(self, goals: jax.Array) -> jax.Array:
        """max_i d_i(w, g) for every waypoint and goal: ``[N, M]``."""
        p_g = _project(self.agent, _encode(self.agent, goals))
        return _head(self.agent, self.waypoint_projections[:, None], p_g[:, :, None])

    def goal_costs(self, d_wg: jax.Array) -> jax.Array:
        """What the choice ranks the waypoints by, from their distances to the goals ``d_wg [N, M]``: d(w, g) itself
        (``plan="greedy"``), or the cost of the cheapest path from each waypoint to the goal over the graph, its last
        leg within reach (``plan="graph"``; inf where there is none)."""
        if self.plan == "greedy":
            return d_wg
        last_leg = jnp.where(d_wg <= self.reach, d_wg, jnp.inf)                    # [N, M]
        return jax.lax.map(lambda row: jnp.min(self.paths + row[None, :], axis=1), last_leg)

    @jax.jit
    def targets(self, observations: jax.Array, goals: jax.Array, d_wg: jax.Array | None = None,
                costs: jax.Array | None = None, dropped: jax.Array | None = None
                ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """``(targets [N, D], info)``: each state's chosen waypoint (or its goal) and, in ``info``, d(s, g),
        d(s, target), d(target, g), whether a waypoint was chosen and which (``waypoint``, -1: the goal; with
        ``plan="graph"``, d(target, g) is the path's cost), the waypoints within reach and what the choice ranked them
        by (``in_reach``, ``ranking``: ``[N, M]``). ``d_wg``, ``costs``: the waypoints' distances to the goals and
        what the choice ranks them by, if known (:meth:`waypoint_goal_distances`, :meth:`goal_costs`);
        ``dropped [N, M]``: waypoints left out of the choice (``patience``)."""
        p_s = _project(self.agent, _encode(self.agent, observations))   # [C, N, P]
        p_g = _project(self.agent, _encode(self.agent, goals))
        d_sg = _head(self.agent, p_s, p_g)                              # [N]
        d_sw = _head(self.agent, p_s[:, :, None], self.waypoint_projections[:, None])  # [N, M]
        d_wg = self.waypoint_goal_distances(goals) if d_wg is None else d_wg
        costs = self.goal_costs(d_wg) if costs is None else costs
        in_reach = (d_sw <= self.reach) & (True if dropped is None else ~dropped)
        # The waypoint within reach that costs least; where none within reach has a finite cost (the graph: no path),
        # the one nearest the goal, min d(w, g).
        has_cost = jnp.isfinite(jnp.where(in_reach, costs, jnp.inf)).any(1)
        d_wg = jnp.where(has_cost[:, None], costs, d_wg)
        best = jnp.argmin(jnp.where(in_reach, d_wg, jnp.inf), 1)
        use_waypoint = in_reach.any(1) & (d_sg > self.reach)
        targets = jnp.where(use_waypoint[:, None], self.as_goal(self.waypoints[best], goals), goals)
        pick = lambda d: jnp.take_along_axis(d, best[:, None], 1)[:, 0]  # noqa: E731
        info = dict(goal_distance=d_sg, use_waypoint=use_waypoint, waypoint=jnp.where(use_waypoint, best, -1),
                    target_distance=jnp.where(use_waypoint, pick(d_sw), d_sg),
                    target_goal_distance=jnp.where(use_waypoint, pick(d_wg), 0.0), in_reach=in_reach, ranking=d_wg)
        return targets, info

    def initial_policy_state(self, batch_size: int) -> dict[str, Any]:
        """The inner policy's state, the waypoints' distances to the last goals seen (NaN goals: none yet; with
        ``plan="graph"`` also their path costs), the current targets and the steps since they were chosen; with
        ``patience``, also each episode's progress (the cost to the goal of the target chosen at its last
        improvement by at least 1 since the last drop), the steps since then, and the waypoints dropped for the
        episode."""
        shape = (batch_size, *self.waypoints.shape[1:])
        per_waypoint = jnp.zeros((batch_size, self.waypoints.shape[0]))
        patience = dict(best=jnp.full(batch_size, jnp.inf), since_best=jnp.zeros(batch_size, jnp.int32),
                        dropped=jnp.zeros(per_waypoint.shape, bool),
                        **(dict(stalled=jnp.zeros(batch_size, bool)) if self._keeps_stalled else {}))
        arrival = {} if self.arrival is None else dict(arrival=self.arrival.initial_policy_state(batch_size))
        return dict(inner=self.inner.initial_policy_state(batch_size), goals=jnp.full(shape, jnp.nan), **arrival,
                    goal_distances=per_waypoint, targets=jnp.zeros(shape), since_replan=jnp.int32(0),
                    **(dict(goal_costs=per_waypoint) if self.plan == "graph" else {}),
                    **(patience if self.patience is not None else {}))

    @jax.jit
    def step(self, policy_state, observations, goals, prev_actions=None, rng=None):
        """Targets (chosen again when due), then the inner policy's step towards them. d(w, g) (and the graph's
        path costs) are computed again only when a goal changed (an episode's goal stays, so choosing costs d(s, w)
        alone)."""
        observations, goals = jnp.broadcast_arrays(jnp.asarray(observations), jnp.asarray(goals))
        same_goals = jnp.all(goals == policy_state["goals"])

        def for_new_goals():
            d_wg = self.waypoint_goal_distances(goals)
            return d_wg, self.goal_costs(d_wg)

        def cached():
            d_wg = policy_state["goal_distances"]
            return d_wg, policy_state["goal_costs"] if self.plan == "graph" else d_wg

        d_wg, costs = jax.lax.cond(same_goals, cached, for_new_goals)
        due = ~same_goals | (policy_state["since_replan"] % self.replan_every == 0)
        carried = dict(goals=goals, goal_distances=d_wg, **(dict(goal_costs=costs) if self.plan == "graph" else {}))
        if self.patience is None:
            targets = jax.lax.cond(due, lambda: self.targets(observations, goals, d_wg, costs)[0],
                                   lambda: policy_state["targets"])
        else:
            targets, kept = self._patient_targets(policy_state, observations, goals, d_wg, costs, due)
            carried.update(kept)
        actions, inner = self.inner.step(policy_state["inner"], observations, targets, prev_actions, rng)
        if self.arrival is not None:  # where the target is the goal, the arrival policy acts
            final, carried["arrival"] = self.arrival.step(policy_state["arrival"], observations, goals, prev_actions,
                                                          rng)
            actions = jnp.where(jnp.all(targets == goals, axis=-1, keepdims=True), final, actions)
        since = jnp.where(due, 1, policy_state["since_replan"] + 1).astype(jnp.int32)
        return actions, dict(carried, inner=inner, targets=targets, since_replan=since)

    @property
    def _keeps_stalled(self) -> bool:
        """Whether the policy state keeps, per episode, that it has stalled once (targets at rest, the waypoints'
        turn)."""
        return self.stall_goal_dims is not None or self.direct_first

    def _patient_targets(self, policy_state, observations, goals, d_wg, costs, due):
        """The targets (chosen when ``due``, as :meth:`targets` does, without the waypoints dropped in the episode)
        and the state ``patience`` keeps. Progress is the chosen target's cost to the goal (a waypoint's ranking, the
        goal's d(s, g)); where it has not improved by at least 1 for more than ``patience`` steps, every waypoint
        within reach that ranks within H of its cost at the last improvement is dropped for the episode (the options
        that promised that progress from here and did not give it: a wall the learned distance does not see), and
        progress is counted afresh. With ``direct_first``, the target is the goal until the first stall, whose
        progress is d(s, g), and that stall drops nothing."""
        new_goal = jnp.any(goals != policy_state["goals"], axis=-1)   # [N]: a new episode (NaN goals: the first)
        dropped = policy_state["dropped"] & ~new_goal[:, None]
        best = jnp.where(new_goal, jnp.inf, policy_state["best"])
        since = jnp.where(new_goal, 0, policy_state["since_best"])
        # whether each episode has stalled before this step (direct_first: the waypoints' turn has come)
        had_stalled = policy_state["stalled"] & ~new_goal if self._keeps_stalled else None

        def choose():
            targets, info = self.targets(observations, goals, d_wg, costs, dropped)
            progress = jnp.where(info["use_waypoint"], info["target_goal_distance"], info["goal_distance"])
            if self.direct_first:
                targets = jnp.where(had_stalled[:, None], targets, goals)
                progress = jnp.where(had_stalled, progress, info["goal_distance"])
            return targets, progress

        targets, progress = jax.lax.cond(due, choose, lambda: (policy_state["targets"], best))
        improved = progress < best - 1.0  # by at least one step's cost since the last improvement
        best, since = jnp.where(improved, progress, best), jnp.where(improved, 0, since + 1)
        stalled = since > self.patience

        def promised():  # [N, M]: within reach of the stalled states, ranked within H of their last progress
            info = self.targets(observations, goals, d_wg, costs, dropped)[1]
            drops = stalled & had_stalled if self.direct_first else stalled  # direct_first: not at the first stall
            return info["in_reach"] & (info["ranking"] <= best[:, None] + self.reach) & drops[:, None]

        dropped = dropped | jax.lax.cond(stalled.any(), promised, lambda: jnp.zeros_like(dropped))
        kept = dict(best=jnp.where(stalled, jnp.inf, best), since_best=jnp.where(stalled, 0, since).astype(jnp.int32),
                    dropped=dropped)
        if self._keeps_stalled:
            kept["stalled"] = had_stalled | stalled
        if self.stall_goal_dims is not None:  # stalled once in the episode: targets at rest from here on
            targets = jnp.where(kept["stalled"][:, None], self.as_goal(targets, goals, self.stall_goal_dims), targets)
        return targets, kept

    @jax.jit
    def act(self, observations, goals, rng=None):
        """``step`` from a fresh policy state."""
        return self.step(self.initial_policy_state(jnp.shape(observations)[0]), observations, goals, None, rng)[0]


class MPPIPolicy(flax.struct.PyTreeNode):
    """MPPI (:func:`~platonic_rl.common.planning.mppi_step`) in QRL's learned latent dynamics with its Q* as the
    per-step cost (:meth:`QRLContinuousAgent.plan_costs`); each episode's plan ``[horizon, A]`` is the policy
    state, carried between steps. Without a key, ``step`` draws from the key it carries in its state (from
    ``seed``). Episodes are planned ``episodes_per_call`` at a time (``lax.map``), which bounds memory at large
    ``num_samples``."""
    agent: QRLContinuousAgent
    horizon: int = flax.struct.field(pytree_node=False, default=5)
    num_samples: int = flax.struct.field(pytree_node=False, default=10_000)
    noise_std: float = flax.struct.field(pytree_node=False, default=1.0)
    temperature: float = flax.struct.field(pytree_node=False, default=0.01)
    seed: int = flax.struct.field(pytree_node=False, default=0)
    episodes_per_call: int = flax.struct.field(pytree_node=False, default=8)

    def __post_init__(self):
        for name in ("horizon", "num_samples", "episodes_per_call"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"MPPIPolicy.{name} must be an int >= 1, got {getattr(self, name)!r}")
        for name in ("noise_std", "temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MPPIPolicy.{name} must be > 0, got {getattr(self, name)!r}")

    def initial_policy_state(self, batch_size: int) -> dict[str, jax.Array]:
        return dict(plans=jnp.zeros((batch_size, self.horizon, self.agent.config.action_dim)),
                    key=jax.random.PRNGKey(self.seed))

    @jax.jit
    def step(self, policy_state, observations, goals, prev_actions=None, rng=None):
        observations, goals = jnp.broadcast_arrays(jnp.asarray(observations), jnp.asarray(goals))
        carried, key = (policy_state["key"], as_key(rng)) if rng is not None else jax.random.split(policy_state["key"])
        keys = jax.random.split(key, observations.shape[0])

        def one(args):
            k, plan, obs, goal = args
            cost = lambda seqs: self.agent.plan_costs(obs, goal, seqs)  # noqa: E731
            return mppi_step(k, plan, cost, self.num_samples, self.noise_std, self.temperature)

        actions, plans = jax.lax.map(one, (keys, policy_state["plans"], observations, goals),
                                     batch_size=self.episodes_per_call)
        return actions, dict(plans=plans, key=carried)


# ------------------------------------------------------------------------------------ the table


@dataclasses.dataclass(frozen=True)
class QRLPolicySettings:
    """The deployable QRL policies' settings: what the benchmarks measured (their choice: docs/studies/qrl_policies.md),
    and :func:`make_policy`'s defaults (:data:`DEFAULT_SETTINGS`), so a policy built without settings acts as the
    tables' rows did. :meth:`policy_kwargs` gives one policy's keywords."""
    hold_steps: int = 20          # the lookahead's k: each candidate action held k steps in the learned dynamics
    reach: float = 20.0           # the waypoints' H: a waypoint w is within reach when d(s, w) <= H
    num_waypoints: int = 1000     # dataset states the waypoints are drawn from (a fixed subsample)
    replan_every: int = 5         # steps between two choices of waypoint (and whenever the goal changes)
    mppi_samples: int = 10_000    # MPPI at C.3.2's sample count (the scale's mppi_samples is the cpu row's)
    mppi_episodes: int = 10       # its evaluation episodes per (seed, setting): it costs ~150x the 64-sample row
    cap_to_goal_distance: bool = False  # the lookahead holds each action at most d(s, g) steps (LatentLookahead)
    actor_samples: int = 64       # the lookahead over the actor's proposals: its mode and this many draws, no grid
    patience: int | None = 40     # graph waypoints: steps without progress (the targets' cost to the goal down by 1)
    #                               before the waypoints that promised it are dropped for the episode (twice the
    #                               reach: they lie behind a wall the learned distance does not see;
    #                               WaypointPolicy.patience)

    def policy_kwargs(self, policy: str, inner: str | None = None, arrival: str | None = None,
                      score: str = "final", candidates: str = "grid", goal_dims: tuple[int, ...] | None = None,
                      stall_goal_dims: tuple[int, ...] | None = None, direct_first: bool = False) -> dict:
        """``make_policy``'s settings for the ``lookahead`` or the ``waypoints`` / ``graph_waypoints`` (with
        ``inner``, and ``arrival``: the policy that acts once the goal is within reach, None, ``"lookahead"`` or
        ``"dwell"``) policy; ``score``: what the lookahead ranks held actions by (``"final"`` or ``"dwell"``;
        recorded only where it is not the default); ``candidates``: the actions it ranks, ``"grid"`` (a 9 x 9 grid
        and the actor's mode) or ``"actor"`` (the actor's mode and ``actor_samples`` draws); ``goal_dims``: the
        waypoints' targets take the goals' form (:meth:`WaypointPolicy.as_goal`; the env's, not a tuned setting);
        ``stall_goal_dims``: the same, once an episode has stalled (the graph waypoints'; ``WaypointPolicy``);
        ``direct_first``: the goal itself is the target until the episode first stalls (the graph waypoints')."""
        if candidates not in ("grid", "actor"):
            raise ValueError(f"candidates must be 'grid' or 'actor', got {candidates!r}")
        lookahead = dict(hold_steps=self.hold_steps, cap_to_goal_distance=self.cap_to_goal_distance,
                         **({} if score == "final" else dict(score=score)),
                         **({} if candidates == "grid" else dict(grid_size=0, actor_samples=self.actor_samples)))
        if policy == "lookahead":
            return lookahead
        if policy in ("waypoints", "graph_waypoints"):
            kwargs = dict(reach=self.reach, num_waypoints=self.num_waypoints, replan_every=self.replan_every, inner=inner)
            return (kwargs | (lookahead if inner == "lookahead" or arrival is not None else {})
                    | (dict(goal_dims=tuple(goal_dims)) if goal_dims is not None else {})
                    | (dict(arrival=arrival) if arrival is not None else {})
                    | (dict(patience=self.patience) if policy == "graph_waypoints" else {})
                    | (dict(stall_goal_dims=tuple(stall_goal_dims)) if stall_goal_dims is not None else {})
                    | (dict(direct_first=True) if direct_first else {}))
        raise ValueError(f"policy must be 'lookahead', 'waypoints' or 'graph_waypoints' (the ones these settings "
                         f"describe), got {policy!r}")

    def defaults(self, policy: str) -> dict:
        """:func:`make_policy`'s keywords for ``policy`` where the caller gives none: the lookahead's over a grid,
        the waypoints' with the actor between them (the lookahead's settings ready for ``inner="lookahead"``), MPPI
        at ``mppi_samples``."""
        if policy in ("waypoints", "graph_waypoints"):
            return self.policy_kwargs(policy, "actor") | self.policy_kwargs("lookahead")
        if policy == "lookahead":
            return self.policy_kwargs("lookahead")
        if policy == "mppi":
            return dict(num_samples=self.mppi_samples)
        return {}


DEFAULT_SETTINGS = QRLPolicySettings()
"""What :func:`make_policy` builds a policy with where a setting is not given: the benchmarks' settings."""


def _waypoints(agent, dataset_states, reach: float, num_waypoints: int, replan_every: int, hold_steps: int,
               inner: Any = "actor", seed: int = 0, plan: str = "greedy", patience: int | None = None,
               arrival: str | None = None, goal_dims: tuple[int, ...] | None = None,
               stall_goal_dims: tuple[int, ...] | None = None, direct_first: bool = False, **inner_settings):
    """The waypoint policies of :data:`POLICIES`; the settings without a default come from :data:`DEFAULT_SETTINGS`
    through :func:`make_policy`."""
    if dataset_states is None:
        raise ValueError("the waypoints policy needs dataset_states: the dataset's observations [N, D]")
    states = jnp.asarray(dataset_states, jnp.float32)
    if num_waypoints < 1:
        raise ValueError(f"num_waypoints must be >= 1, got {num_waypoints}")
    if states.shape[0] > num_waypoints:
        states = states[jax.random.choice(jax.random.PRNGKey(seed), states.shape[0], (num_waypoints,), replace=False)]
    if inner not in ("actor", "lookahead") and not callable(getattr(inner, "step", None)):
        raise ValueError(f"inner must be 'actor', 'lookahead' or a goal-conditioned policy with step (e.g. a trained "
                         f"GCBCAgent), got {inner!r}")
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {ARRIVALS}, got {arrival!r}")
    lookahead = LatentLookahead(agent, hold_steps=hold_steps, **inner_settings)
    arrival_policy = (None if arrival is None else
                      lookahead.replace(score="dwell") if arrival == "dwell" else lookahead)
    inner_policy = agent if inner == "actor" else lookahead if inner == "lookahead" else inner
    return WaypointPolicy.create(agent, states, reach, inner_policy, replan_every, plan, patience, arrival_policy,
                                 goal_dims, stall_goal_dims, direct_first)


def _check_goal_dims(name: str, goal_dims, state_dim: int) -> tuple[int, ...] | None:
    if goal_dims is None:
        return None
    goal_dims = tuple(goal_dims)
    if (not goal_dims or len(set(goal_dims)) != len(goal_dims)
            or not all(isinstance(i, int) and 0 <= i < state_dim for i in goal_dims)):
        raise ValueError(f"{name} must be None or distinct indices into a {state_dim}-dim state (the entries a goal "
                         f"specifies), got {goal_dims!r}")
    return goal_dims


ARRIVALS = (None, "lookahead", "dwell")
"""The waypoint policies' ``arrival``: none, the lookahead, or the lookahead scoring the mean distance along the hold
(``score="dwell"``)."""


@dataclasses.dataclass(frozen=True)
class PolicyEntry:
    build: Callable[..., Any]  # (agent, dataset_states, **settings) -> policy
    description: str


POLICIES: dict[str, PolicyEntry] = {
    "actor": PolicyEntry(lambda agent, dataset_states=None: agent,
                         "the paper's actor: the mode of pi(a | s, g), one step ahead"),
    "lookahead": PolicyEntry(lambda agent, dataset_states=None, **kw: LatentLookahead(agent, **kw),
                             "argmin over a grid or the actor's samples (and its mode) of d(T^k(f(s), a), f(g)), "
                             "a held k steps"),
    "waypoints": PolicyEntry(_waypoints, "subgoals: the dataset state within reach H nearest the goal, then an inner "
                                         "policy (the actor or the lookahead) towards it"),
    "graph_waypoints": PolicyEntry(lambda agent, dataset_states=None, **kw: _waypoints(agent, dataset_states,
                                                                                      plan="graph", **kw),
                                   "the waypoint within reach whose cheapest path to the goal over the dataset states "
                                   "(every leg within reach H; SoRB) costs least, then an inner policy towards it"),
    "mppi": PolicyEntry(lambda agent, dataset_states=None, **kw: MPPIPolicy(agent, **kw),
                        "MPPI in the learned model with the learned Q* as the per-step cost (C.3.2)"),
}


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """A policy of :data:`POLICIES` by name and settings, built from an agent when called: what the loops take as
    an evaluation policy (:mod:`platonic_rl.training.evaluation`), hashable and recorded by its settings.

        spec = PolicySpec.of("lookahead", hold_steps=5)
        policy = spec(agent)                         # make_policy("lookahead", agent, hold_steps=5)"""
    name: str
    settings: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if self.name not in POLICIES:
            raise KeyError(f"unknown policy {self.name!r}; known: {sorted(POLICIES)}")

    @classmethod
    def of(cls, name: str, **settings) -> "PolicySpec":
        return cls(name, tuple(sorted(settings.items())))

    def __call__(self, agent: QRLContinuousAgent, dataset_states: jax.Array | None = None) -> Any:
        return make_policy(self.name, agent, dataset_states, **dict(self.settings))

    @property
    def dataset_states_wanted(self) -> int:
        """How many dataset states the policy is built from (0: none): the waypoint policies' ``num_waypoints``. A
        loop that evaluates it online passes that many of its replay buffer's states (Search on the Replay Buffer's
        setting: :mod:`platonic_rl.training.evaluation`)."""
        if self.name not in ("waypoints", "graph_waypoints"):
            return 0
        return int(dict(self.settings).get("num_waypoints", DEFAULT_SETTINGS.num_waypoints))

    def as_dict(self) -> dict[str, Any]:
        return dict(policy=self.name, **dict(self.settings))


def make_policy(name: str, agent: QRLContinuousAgent, dataset_states: jax.Array | None = None, **settings) -> Any:
    """Policy ``name`` of :data:`POLICIES` built from a trained agent (and, for ``waypoints``, the dataset's
    states as the agent sees them), with its settings as keywords."""
    if name not in POLICIES:
        raise KeyError(f"unknown policy {name!r}; known: {sorted(POLICIES)}")
    if not isinstance(agent, QRLContinuousAgent):
        raise TypeError(f"agent must be a trained QRLContinuousAgent, got {type(agent).__name__}")
    return POLICIES[name].build(agent, dataset_states, **(DEFAULT_SETTINGS.defaults(name) | settings))
