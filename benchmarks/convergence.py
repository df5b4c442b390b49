"""Do RL agents converge on one representation of the world? The Platonic Representation Hypothesis, measured on
the suite's goal-reaching agents in the point maze.

    python -m platonic_rl.benchmarks.convergence --scale quick                  # a smoke run (the tests)
    python -m platonic_rl.benchmarks.convergence --scale cpu                    # QRL, Contrastive RL, GCBC x 5 seeds

**Agents**: QRL, Contrastive RL and GCBC trained online in the device loop (:mod:`~platonic_rl.training.device_loop`)
on the JAX point maze (umaze, medium; observations normalised by the layout's extent), ``seeds`` seeds vmapped in
one program per (env, method), at the networks of the device-loop benchmark's scale. At each of the scale's
``snapshots`` (iterations; 0 = untrained) the representations are read and the deterministic policy's success is
measured on ``eval_episodes`` episodes (the same episodes at every snapshot, for every seed and method).

**Shared inputs**, drawn once per layout (:mod:`~platonic_rl.envs.maze_geometry`): ``states`` positions uniform over
the maze's free space (velocity 0), and ``states`` (state, goal) pairs of them (independent draws, goal != state).

**Representations**

* ``state`` view, agents with a state encoder: QRL's encoder f(s) (the first critic's; the latent its quasimetric
  head reads), Contrastive RL's goal encoder psi(s) (the state given as a goal). GCBC has no state encoder.
* ``pair`` view, every agent: the last hidden layer (after its ReLU) of the policy network on [s, g] -- the
  feature the action is read from. QRL's actor, Contrastive RL's actor and GCBC's policy have the same shape.

**Alignment** (:mod:`~platonic_rl.replearn.metrics`; every agent feature is L2-normalised first, as in the PRH paper):
mutual k-NN (neighbours by cosine similarity, k = ``k``; chance k / (n - 1)) and linear CKA between every two
representations of a view (every method, seed and snapshot); and each representation's alignment with the world:

* ``geodesic``: the true shortest-path distance in the maze (:func:`~platonic_rl.envs.maze_geometry.
  geodesic_distances`); neighbours by it, and its classical-MDS kernel -1/2 D^2 for CKA. For pairs, the distance
  between (s, g) and (s', g') is sqrt(D(s, s')^2 + D(g, g')^2).
* ``position``: the raw (x, y) position (for pairs, [s_xy, g_xy]); Euclidean neighbours, linear kernel.

Saves ``results.json`` (command, settings, success per snapshot and seed, every alignment matrix), ``heatmap.png``,
``alignment_vs_success.png``, ``world_vs_success.png`` and ``within_vs_across.png``, and prints the table. Each
finished (env, method) keeps ``record.json`` and its representations (``representations.npz``, float16) in
``--runs-dir``; a later call with the same settings reuses them, so methods and envs can be added one at a time.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import time
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.presets import device_loop_agent_config, device_loop_env, device_loop_scales
from platonic_rl.envs import maze_geometry
from platonic_rl.replearn import metrics
from platonic_rl.training.device_loop import DeviceLoopConfig, make_loop
from platonic_rl.common.records import as_json
from platonic_rl.training.updates import check_finite

MODULE = "platonic_rl.benchmarks.convergence"
Method = Literal["qrl", "crl", "gcbc"]
EnvName = Literal["umaze", "medium"]
NAMES = dict(qrl="QRL", crl="Contrastive RL", gcbc="GCBC")
STATE_ENCODERS = ("qrl", "crl")  # the methods with a state encoder (the state view)
VIEWS = ("state", "pair")
WORLDS = ("geodesic", "position")
EVAL_KEY = 30_000_000  # the success episodes: the same at every snapshot, for every seed and method


@dataclasses.dataclass(frozen=True)
class Scale:
    networks: str                  # the device-loop benchmark's scale whose networks (and batch) the agents use
    learning: DeviceLoopConfig     # its ``iterations`` are the last snapshot's
    snapshots: tuple[int, ...]     # iterations at which representations and success are read (0: untrained)
    states: int                    # shared states (and (state, goal) pairs) per layout
    eval_episodes: int
    note: str


def scales() -> dict[str, Scale]:
    """``quick``: tiny networks and budgets, a smoke run NOT meant to learn. ``cpu``: the device-loop benchmark's cpu
    agents (2 x 256 MLPs, batch 256; 128 envs x 50-step unrolls per 16 updates) for 200 iterations (1.3M env steps,
    3,200 updates per seed), snapshots at 0, 10, 25, 50, 100 and 200 iterations."""
    no_eval = 10 ** 6  # the loop's own evaluations: only after its last iteration; snapshots evaluate themselves
    return {
        "quick": Scale("quick", DeviceLoopConfig(num_envs=16, unroll=50, updates_per_iteration=4, iterations=4,
                                                 prefill_episodes=16, batch_size=64, eval_every=no_eval,
                                                 eval_episodes=8, chunk_iterations=2),
                       (0, 2, 4), 128, 8, note="quick: tiny networks and budgets, a smoke run NOT meant to learn"),
        "cpu": Scale("cpu", DeviceLoopConfig(num_envs=128, unroll=50, updates_per_iteration=16, iterations=200,
                                             prefill_episodes=128, batch_size=256, eval_every=no_eval, eval_episodes=8,
                                             chunk_iterations=5),
                     (0, 10, 25, 50, 100, 200), 2000, 128,
                     note="cpu: 2 x 256 MLPs, batch 256, 200 iterations (3,200 updates per seed)"),
    }


@dataclasses.dataclass(frozen=True)
class Args:
    """Representation convergence across agents, seeds and budgets (see the module docstring)."""
    scale: Literal["quick", "cpu"] = "cpu"
    envs: tuple[EnvName, ...] = ("umaze", "medium")
    methods: tuple[Method, ...] = ("qrl", "crl", "gcbc")
    seeds: int = 5
    k: int = 10                        # neighbours of mutual k-NN
    out_dir: str | None = None         # default: results/convergence/<scale>
    runs_dir: str | None = None        # each (env, method)'s record and representations; default: <out-dir>/runs
    overwrite: bool = False            # train every (env, method) of this call again

    def __post_init__(self):
        if not isinstance(self.seeds, int) or self.seeds < 2:
            raise ValueError(f"--seeds must be an int >= 2 (within-method alignment compares seeds), got {self.seeds!r}")
        if not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"--k must be a positive int, got {self.k!r}")
        for name in ("envs", "methods"):
            if not getattr(self, name):
                raise ValueError(f"--{name} needs at least one value")


# --------------------------------------------------------------------------------------- the inputs


def shared_inputs(layout: str, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The layout's shared inputs: ``positions [n, 2]`` uniform over the free space, pairs ``pair_states``,
    ``pair_goals`` (indices into ``positions``, never equal) and the geodesic distances between the positions."""
    rng = np.random.default_rng(seed)
    positions = maze_geometry.sample_free_positions(layout, n, rng)
    pair_states = rng.integers(0, n, n)
    pair_goals = (pair_states + rng.integers(1, n, n)) % n
    return dict(positions=positions, pair_states=pair_states, pair_goals=pair_goals,
                geodesic=maze_geometry.geodesic_distances(layout, positions))


def agent_inputs(env, positions: np.ndarray) -> tuple[jax.Array, jax.Array]:
    """The positions as the agent sees them: observations ``[x, y, 0, 0]`` and goal states (normalised; goal states
    masked to the goal dimensions), through the env's own normalisation."""
    states = jnp.asarray(np.concatenate([positions, np.zeros_like(positions)], 1), jnp.float32)
    return env.normalize(states), env.normalize(states) * jnp.asarray(env.goal_mask)


def mlp_hidden_features(params, x: jax.Array) -> jax.Array:
    """The last hidden layer (after its ReLU) of a policy network's MLP on ``x``: its ``Dense_i`` layers but the
    output layer, applied in order (a :class:`~platonic_rl.common.policies.GoalConditionedPolicy` holds its
    :class:`~platonic_rl.common.policies.TanhNormalPolicy` one level down)."""
    layers = params["params"]
    while "Dense_0" not in layers:
        if len(layers) != 1:
            raise ValueError(f"mlp_hidden_features: no Dense_0 among {sorted(layers)}")
        (layers,) = layers.values()
    names = sorted((k for k in layers if k.startswith("Dense_")), key=lambda k: int(k.split("_")[1]))
    for name in names[:-1]:
        x = jax.nn.relu(x @ layers[name]["kernel"] + layers[name]["bias"])
    return x


def _qrl_features(agent, observations, goals, pair_input):
    first_critic = jax.tree.map(lambda x: x[0], agent.critic_params)
    return dict(state=agent.critic.apply(first_critic, observations, method="encode"),
                pair=mlp_hidden_features(agent.actor_params, pair_input))


def _crl_features(agent, observations, goals, pair_input):
    return dict(state=agent.critic.apply(agent.critic_params, goals, method=lambda m, g: m.g_encoder(g)),
                pair=mlp_hidden_features(agent.actor_params, pair_input))


def _gcbc_features(agent, observations, goals, pair_input):
    return dict(pair=mlp_hidden_features(agent.params, pair_input))


FEATURES = {"qrl": _qrl_features, "crl": _crl_features, "gcbc": _gcbc_features}
"""Per method, the features compared: ``pair`` (the policy's last hidden layer on (state, goal)) and, where the
method has a state encoder, ``state`` (QRL: the first critic's encoder on states; Contrastive RL: its goal encoder)."""


def representations(method: str, agent, observations: jax.Array, goals: jax.Array, pair_states: jax.Array,
                    pair_goals: jax.Array) -> dict[str, jax.Array]:
    """One agent's ``pair`` features (and ``state`` features where it has a state encoder) on the shared inputs."""
    if method not in FEATURES:
        raise ValueError(f"method must be one of {list(FEATURES)}, got {method!r}")
    pair_input = jnp.concatenate([observations[pair_states], goals[pair_goals]], -1)
    return FEATURES[method](agent, observations, goals, pair_input)


# ------------------------------------------------------------------------------------------ training


def run_settings(args: Args, scale: Scale, env_name: str, method: str) -> dict:
    env = device_loop_env(env_name)
    cfg = device_loop_agent_config(method, device_loop_scales()[scale.networks], env.obs_dim,
                                             env.action_dim)
    return dict(agent=cfg, env=env_name, seeds=list(range(args.seeds)), loop=scale.learning,
                snapshots=list(scale.snapshots), states=scale.states, eval_episodes=scale.eval_episodes)


def train_and_represent(args: Args, scale: Scale, env_name: str, method: str, inputs: dict) -> tuple[dict, dict]:
    """Train ``method`` on ``env_name`` with ``args.seeds`` vmapped seeds, reading success and representations at
    each snapshot. Returns ``(record, features)``: features ``view -> [seeds, snapshots, n, d]``."""
    settings = run_settings(args, scale, env_name, method)
    env = device_loop_env(env_name)
    loop_config = dataclasses.replace(scale.learning, eval_episodes=scale.eval_episodes)
    loop = make_loop(settings["agent"], env, loop_config)
    init, run = loop.jitted(vmapped=True)
    chunk = math.gcd(*scale.snapshots)
    observations, goals = agent_inputs(env, inputs["positions"])
    pair_states, pair_goals = jnp.asarray(inputs["pair_states"]), jnp.asarray(inputs["pair_goals"])
    eval_key = jax.random.PRNGKey(EVAL_KEY)
    read = jax.jit(jax.vmap(lambda agent: (loop.evaluate(agent, eval_key)["eval_success"],
                                           representations(method, agent, observations, goals, pair_states,
                                                           pair_goals))))
    start = time.perf_counter()
    state = init(jnp.stack([jax.random.PRNGKey(s) for s in range(args.seeds)]))
    success, features, done = [], {}, 0
    for snapshot in scale.snapshots:
        while done < snapshot:
            state, rows = run(state, chunk)
            check_finite({k[len("finite/"):]: np.all(np.asarray(v), axis=0) for k, v in jax.device_get(rows).items()
                          if k.startswith("finite/")}, first_step=done + 1, unit="iteration")  # [seeds, chunk]
            done += chunk
        rate, feats = jax.device_get(read(state.agent))
        success.append(np.asarray(rate, float).tolist())
        for view, x in feats.items():
            features.setdefault(view, []).append(np.asarray(x, np.float16))
        print(f"{env_name}-{method}: iteration {snapshot}, success {np.round(rate, 2).tolist()}")
    features = {view: np.stack(x, axis=1) for view, x in features.items()}  # [seeds, snapshots, n, d]
    record = dict(success=success, seconds=time.perf_counter() - start, settings=as_json(settings))
    return record, features


def load_or_train(args: Args, scale: Scale, env_name: str, method: str, inputs: dict, runs: Path) -> tuple[dict, dict]:
    """The (env, method) run's record and features: reused from ``runs`` when finished with these settings."""
    run_dir = runs / f"{env_name}-{method}"
    arrays, trained = run_dir / "representations.npz", {}

    def train() -> dict:
        record, trained["features"] = train_and_represent(args, scale, env_name, method, inputs)
        run_dir.mkdir(parents=True, exist_ok=True)
        np.savez(arrays, **trained["features"])
        return record

    record = report.finished_run(run_dir / "record.json", run_settings(args, scale, env_name, method), train,
                                 overwrite=args.overwrite or not arrays.exists(), elsewhere="--runs-dir")
    if "features" in trained:
        return record, trained["features"]
    with np.load(arrays) as data:
        return record, {view: data[view] for view in data.files}


# ----------------------------------------------------------------------------------------- alignment


def world_references(inputs: dict, view: str, k: int) -> dict[str, dict]:
    """Per world structure: its k-NN lists ``[n, k]`` and its kernel ``[n, n]`` for ``view``'s samples."""
    d, p = inputs["geodesic"], inputs["positions"]
    if view == "pair":
        s, g = inputs["pair_states"], inputs["pair_goals"]
        squared = d[np.ix_(s, s)] ** 2 + d[np.ix_(g, g)] ** 2
        p = np.concatenate([p[s], p[g]], 1)
    else:
        squared = d ** 2
    p = jnp.asarray(p, jnp.float32)
    return dict(geodesic=dict(knn=metrics.knn_from_distances(jnp.asarray(squared, jnp.float32), k),
                              kernel=jnp.asarray(-0.5 * squared, jnp.float32)),
                position=dict(knn=metrics.knn_indices(p, k, normalized=False), kernel=p @ p.T))


def alignments(features: list[np.ndarray], references: dict[str, dict], k: int) -> dict:
    """Mutual k-NN and linear CKA between every two of ``features`` (each ``[n, d]``), and of each with the world
    references. Returns matrices ``[m, m]`` and per-reference lists ``[m]``."""
    units = [metrics.unit_rows(jnp.asarray(x, jnp.float32)) for x in features]
    knn = jax.jit(lambda x: metrics.knn_indices(x, k))
    neighbours = [knn(x) for x in units]
    overlap = jax.jit(metrics.knn_overlap)
    linear_cka = jax.jit(lambda a, b: metrics.cka(a, b, normalize=False))
    kernel_cka = jax.jit(lambda x, kernel: metrics.kernel_cka(x @ x.T, kernel))
    m = len(units)
    mknn, cka = metrics.knn_overlap_matrix(neighbours), np.eye(m)
    for i, j in itertools.combinations(range(m), 2):
        cka[i, j] = cka[j, i] = float(linear_cka(units[i], units[j]))
    world = {name: dict(mutual_knn=[float(overlap(nb, ref["knn"])) for nb in neighbours],
                        cka=[float(kernel_cka(x, ref["kernel"])) for x in units])
             for name, ref in references.items()}
    return dict(mutual_knn=mknn.tolist(), cka=cka.tolist(), world=world)


def analyse_env(runs: dict[str, tuple[dict, dict]], inputs: dict, args: Args, scale: Scale) -> dict:
    """Every representation of one env (per view: a list of (method, seed, snapshot) entries) and their alignments."""
    out = {}
    for view in VIEWS:
        entries, features = [], []
        for method, (record, feats) in runs.items():
            if view not in feats:
                continue
            for seed in range(args.seeds):
                for s, snapshot in enumerate(scale.snapshots):
                    entries.append(dict(method=method, seed=seed, iteration=snapshot,
                                        success=record["success"][s][seed]))
                    features.append(feats[view][seed, s])
        if len(entries) < 2:
            continue
        out[view] = dict(entries=entries, **alignments(features, world_references(inputs, view, args.k), args.k))
    return out


def summarise(view: dict, snapshots: tuple[int, ...]) -> dict:
    """The readings of one view: within-method (across seeds) and across-method alignment per snapshot, and the
    Spearman correlation of pairwise alignment with the pair's mean success (trained representations only)."""
    entries, mknn = view["entries"], np.asarray(view["mutual_knn"])
    methods = sorted({e["method"] for e in entries}, key=list(NAMES).index)
    by_snapshot = {}
    for snapshot in snapshots:
        idx = [i for i, e in enumerate(entries) if e["iteration"] == snapshot]
        within, across = {}, {}
        for i, j in itertools.combinations(idx, 2):
            a, b = entries[i]["method"], entries[j]["method"]
            key = a if a == b else "/".join(sorted((a, b), key=list(NAMES).index))
            (within if a == b else across).setdefault(key, []).append(mknn[i, j])
        by_snapshot[str(snapshot)] = dict(within={k: float(np.mean(v)) for k, v in within.items()},
                                          across={k: float(np.mean(v)) for k, v in across.items()})
    trained = [i for i, e in enumerate(entries) if e["iteration"] > 0]
    pairs = [(i, j) for i, j in itertools.combinations(trained, 2) if entries[i]["method"] != entries[j]["method"]]
    out = dict(methods=methods, by_snapshot=by_snapshot)
    if len(pairs) > 2:
        competence = [(entries[i]["success"] + entries[j]["success"]) / 2 for i, j in pairs]
        out["spearman_across_alignment_vs_success"] = _spearman(competence, [mknn[i, j] for i, j in pairs])
    if len(trained) > 2:
        success = [entries[i]["success"] for i in trained]
        out["spearman_world_vs_success"] = {
            world: _spearman(success, [view["world"][world]["mutual_knn"][i] for i in trained]) for world in WORLDS}
    return out


def _spearman(x, y) -> float:
    """Spearman's rank correlation; NaN where either side is constant (it is undefined there)."""
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(scipy.stats.spearmanr(x, y).statistic)


# ------------------------------------------------------------------------------------------- report


def method_readings(view: dict, method: str, snapshot: int) -> dict[str, float]:
    """``method``'s mean readings at ``snapshot`` in one view: success, mutual k-NN within (across seeds) and across
    methods (same snapshot), and mutual k-NN and CKA with each world structure."""
    entries, mknn = view["entries"], np.asarray(view["mutual_knn"])
    at = [i for i, e in enumerate(entries) if e["iteration"] == snapshot]
    mine = [i for i in at if entries[i]["method"] == method]
    others = [i for i in at if entries[i]["method"] != method]
    out = dict(success=float(np.mean([entries[i]["success"] for i in mine])),
               within=float(np.mean([mknn[i, j] for i, j in itertools.combinations(mine, 2)])),
               across=float(np.mean([mknn[i, j] for i in mine for j in others])) if others else float("nan"))
    for world in WORLDS:
        for metric, key in (("knn", "mutual_knn"), ("cka", "cka")):
            out[f"{metric}/{world}"] = float(np.mean([view["world"][world][key][i] for i in mine]))
    return out


def format_table(record: dict, args: Args, scale: Scale) -> str:
    n = scale.states
    lines = [f"Representation convergence -- scale {args.scale} ({scale.note}); {args.seeds} seeds; {n} shared states "
             f"and pairs per layout; mutual k-NN with k = {args.k} (chance {args.k / (n - 1):.3f})",
             "Final snapshot, mean over seeds: success; mutual k-NN within the method (across seeds), with the other "
             "methods, and with the world (geodesic / position); linear CKA with the world (geodesic / position); "
             "in brackets the untrained networks'",
             f"{'env':8s} {'view':6s} {'method':15s} {'success':>12s} {'within':>14s} {'across':>14s} "
             f"{'kNN geodesic':>14s} {'kNN position':>14s} {'CKA geodesic':>14s} {'CKA position':>14s}"]
    last = scale.snapshots[-1]
    for env_name, views in record["envs"].items():
        for view_name, view in views.items():
            for method in view["summary"]["methods"]:
                final, untrained = (method_readings(view, method, snapshot) for snapshot in (last, 0))
                cells = [f"{final[name]:.{2 if name == 'success' else 3}f} ({untrained[name]:.{2 if name == 'success' else 3}f})"
                         for name in ("success", "within", "across", "knn/geodesic", "knn/position", "cka/geodesic",
                                      "cka/position")]
                lines.append(f"{env_name:8s} {view_name:6s} {NAMES[method]:15s} {cells[0]:>12s} "
                             + " ".join(f"{c:>14s}" for c in cells[1:]))
            summary = view["summary"]
            if "spearman_across_alignment_vs_success" in summary:
                lines.append(f"{'':8s} {view_name:6s} Spearman, across-method alignment vs mean success of the pair: "
                             f"{summary['spearman_across_alignment_vs_success']:+.2f}; world alignment vs success: "
                             + ", ".join(f"{w} {r:+.2f}" for w, r in summary["spearman_world_vs_success"].items()))
    lines.append("Seconds per (env, method) run (training, evaluations and representations): "
                 + ", ".join(f"{key} {r['seconds']:.0f}" for key, r in record["runs"].items()))
    return "\n".join(lines)


COLOURS = dict(qrl="tab:blue", crl="tab:orange", gcbc="tab:green")
PAIR_COLOURS = {"qrl/crl": "tab:purple", "qrl/gcbc": "tab:cyan", "crl/gcbc": "tab:olive"}


def _budget_title(args: Args, scale: Scale) -> str:
    return (f"scale {args.scale}: {args.seeds} seeds, {scale.snapshots[-1]} iterations "
            f"({scale.snapshots[-1] * scale.learning.updates_per_iteration} updates per seed), k = {args.k}")


def _figure(record: dict, rows: int = 1, width: float = 5.5, height: float = 4.3):
    """A figure with one column of axes per env (``rows`` rows)."""
    import matplotlib.pyplot as plt

    envs = list(record["envs"])
    fig, axes = plt.subplots(rows, len(envs), figsize=(width * len(envs), height * rows), squeeze=False)
    return fig, axes, envs


def _save(fig, path: Path, title: str, fontsize: int = 9) -> None:
    import matplotlib.pyplot as plt

    report.suptitle(fig, title, fontsize)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_heatmap(path: Path, record: dict, args: Args, scale: Scale) -> None:
    """Mutual k-NN between every two pair-view representations, ordered by method, snapshot, seed."""
    fig, axes, envs = _figure(record, width=6.5, height=5.8)
    for ax, env_name in zip(axes[0], envs):
        view = record["envs"][env_name]["pair"]
        entries, mknn = view["entries"], np.asarray(view["mutual_knn"])
        low = np.floor(10 * np.min(mknn)) / 10  # the colours span the values measured (to 1, the diagonal)
        image = ax.imshow(mknn, cmap="viridis", vmin=low, vmax=1, interpolation="nearest")
        fig.colorbar(image, ax=ax, fraction=0.046, label=f"mutual k-NN (k = {args.k})")
        bounds, labels, start = [], [], 0
        for method in view["summary"]["methods"]:
            count = sum(e["method"] == method for e in entries)
            labels.append((start + count / 2, NAMES[method]))
            start += count
            bounds.append(start - 0.5)
        for b in bounds[:-1]:
            ax.axhline(b, color="white", lw=1)
            ax.axvline(b, color="white", lw=1)
        ax.set_xticks([p for p, _ in labels], [n for _, n in labels])
        ax.set_yticks([p for p, _ in labels], [n for _, n in labels], rotation=90, va="center")
        ax.set_title(f"point maze {env_name}: policy features on (s, g)\nwithin a method: {args.seeds} seeds in order, "
                     f"each at iterations {list(scale.snapshots)}", fontsize=9)
    _save(fig, path, f"Pairwise alignment of the agents' representations -- {_budget_title(args, scale)}", 10)


def plot_alignment_vs_success(path: Path, record: dict, args: Args, scale: Scale) -> None:
    """Across-method alignment of two trained representations against their mean success (the PRH's plot)."""
    fig, axes, envs = _figure(record)
    for ax, env_name in zip(axes[0], envs):
        view = record["envs"][env_name]["pair"]
        entries, mknn = view["entries"], np.asarray(view["mutual_knn"])
        trained = [i for i, e in enumerate(entries) if e["iteration"] > 0]
        for i, j in itertools.combinations(trained, 2):
            a, b = entries[i]["method"], entries[j]["method"]
            if a == b:
                continue
            key = "/".join(sorted((a, b), key=list(NAMES).index))
            ax.scatter((entries[i]["success"] + entries[j]["success"]) / 2, mknn[i, j], s=6, alpha=0.35,
                       color=PAIR_COLOURS[key], marker="o")
        for key, colour in PAIR_COLOURS.items():
            a, b = key.split("/")
            ax.scatter([], [], color=colour, marker="o", label=f"{NAMES[a]} - {NAMES[b]}")
        ax.axhline(args.k / (scale.states - 1), color="gray", ls="--", lw=1, label="chance k / (n - 1)")
        rho = view["summary"].get("spearman_across_alignment_vs_success", float("nan"))
        ax.set(xlabel="mean success of the two agents (fraction of episodes)", ylabel=f"mutual k-NN (k = {args.k})",
               title=f"point maze {env_name}: Spearman rho {rho:+.2f}")
        ax.legend(fontsize=7)
    _save(fig, path, "Do competent agents agree? Policy features on (s, g), every pair of trained agents of two "
                     f"methods\n{_budget_title(args, scale)}")


def plot_world_vs_success(path: Path, record: dict, args: Args, scale: Scale) -> None:
    """Each representation's alignment with the maze's shortest paths against its success, per view."""
    fig, axes, envs = _figure(record, rows=len(VIEWS), height=4.0)
    for col, env_name in enumerate(envs):
        for row, view_name in enumerate(VIEWS):
            ax = axes[row, col]
            view = record["envs"][env_name].get(view_name)
            if view is None:
                ax.set_axis_off()
                continue
            entries = view["entries"]
            order = list(scale.snapshots)
            for method in view["summary"]["methods"]:
                idx = [i for i, e in enumerate(entries) if e["method"] == method]
                ax.scatter([entries[i]["success"] for i in idx], [view["world"]["geodesic"]["mutual_knn"][i] for i in idx],
                           s=[12 + 8 * order.index(entries[i]["iteration"]) for i in idx], color=COLOURS[method],
                           alpha=0.7, marker="o", label=NAMES[method])
            ax.axhline(args.k / (scale.states - 1), color="gray", ls="--", lw=1, label="chance")
            what = "state encoder f(s)" if view_name == "state" else "policy features on (s, g)"
            ax.set(xlabel="success (fraction of episodes)",
                   ylabel="mutual k-NN with the true shortest paths",
                   title=f"point maze {env_name}: {what}\n(marker size: later snapshot)")
            ax.legend(fontsize=7)
    _save(fig, path, f"Alignment with the world's geodesic structure against competence -- {_budget_title(args, scale)}")


def plot_within_vs_across(path: Path, record: dict, args: Args, scale: Scale) -> None:
    """Within-method (across seeds) and across-method mutual k-NN per snapshot, pair view."""
    fig, axes, envs = _figure(record)
    x = np.arange(len(scale.snapshots))
    for ax, env_name in zip(axes[0], envs):
        by_snapshot = record["envs"][env_name]["pair"]["summary"]["by_snapshot"]
        keys = sorted({k for s in by_snapshot.values() for k in s["within"]}, key=list(NAMES).index)
        for method in keys:
            ax.plot(x, [by_snapshot[str(s)]["within"].get(method, np.nan) for s in scale.snapshots], marker="o",
                    color=COLOURS[method], label=f"within {NAMES[method]} (seeds)")
        for key in PAIR_COLOURS:
            values = [by_snapshot[str(s)]["across"].get(key, np.nan) for s in scale.snapshots]
            if not np.all(np.isnan(values)):
                a, b = key.split("/")
                ax.plot(x, values, marker="s", ls="--", color=PAIR_COLOURS[key], label=f"{NAMES[a]} vs {NAMES[b]}")
        ax.axhline(args.k / (scale.states - 1), color="gray", ls=":", lw=1, label="chance")
        ax.set_xticks(x, [str(s) for s in scale.snapshots])
        ax.set(xlabel="training iteration (snapshot)", ylabel=f"mean mutual k-NN (k = {args.k})",
               title=f"point maze {env_name}: policy features on (s, g)")
        ax.legend(fontsize=7)
    _save(fig, path, f"Within-method against across-method alignment -- {_budget_title(args, scale)}")


def run(args: Args) -> dict:
    scale = scales()[args.scale]
    out = Path(args.out_dir or f"results/convergence/{args.scale}")
    runs_dir = Path(args.runs_dir) if args.runs_dir else out / "runs"
    start = time.perf_counter()
    record = dict(scale=dataclasses.asdict(scale), envs={}, runs={})
    for env_name in args.envs:
        inputs = shared_inputs(env_name, scale.states)
        runs = {}
        for method in args.methods:
            run_record, features = load_or_train(args, scale, env_name, method, inputs, runs_dir)
            runs[method] = (run_record, features)
            record["runs"][f"{env_name}/{method}"] = dict(success=run_record["success"], seconds=run_record["seconds"])
        views = analyse_env(runs, inputs, args, scale)
        for view in views.values():
            view["summary"] = summarise(view, scale.snapshots)
        record["envs"][env_name] = views
    table = format_table(record, args, scale)
    plots = {}
    if all("pair" in views for views in record["envs"].values()):
        plots = {"heatmap.png": lambda p: plot_heatmap(p, record, args, scale),
                 "alignment_vs_success.png": lambda p: plot_alignment_vs_success(p, record, args, scale),
                 "world_vs_success.png": lambda p: plot_world_vs_success(p, record, args, scale),
                 "within_vs_across.png": lambda p: plot_within_vs_across(p, record, args, scale)}
    return report.save_run(out, MODULE, args, record, table, plots=plots, total_seconds=time.perf_counter() - start)


def main():
    import tyro

    return run(tyro.cli(Args))


if __name__ == "__main__":
    main()
