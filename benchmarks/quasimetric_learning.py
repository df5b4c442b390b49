"""Quasimetric learning on random directed graphs: Figure 3-4 and Table 3.2 (dissertation 3.5.5, 3.6.1).

    python -m platonic_rl.benchmarks.quasimetric_learning                  # quick: 7 heads, a smoke run
    python -m platonic_rl.benchmarks.quasimetric_learning --scale cpu      # ~40 minutes on 2 CPU cores
    python -m platonic_rl.benchmarks.quasimetric_learning --scale paper    # appendix B.4.2 lengths (accelerators)

Every head of :data:`platonic_rl.qrl.quasimetrics.HEADS` family (plus the unconstrained baselines with the triangle
regulariser) is trained with the same encoder (64-128-128-128-48 ReLU MLP) by MSE on gamma-discounted
distances (gamma = 0.9; unreachable pairs have target gamma^inf = 0):

1. **Random graphs** (Figure 3-4): three 300-vertex graphs (dense, sparse, block), training on a random
   fraction of the off-diagonal pairs (5 fractions, log-spaced 0.01-0.7) and testing on the rest. All
   (graph, fraction, seed) runs of one head are vmapped into one compiled training call.
2. **Larger graph** (Table 3.2 columns): a sparse graph (600 / 1,500 / 5,000 vertices at the quick / cpu /
   paper scale) with landmark train/test pairs: test MSE on discounted distances, l1 error where the true
   distance is finite, and the mean prediction where it is infinite. The paper's numbers (Berkeley-Stanford web
   graph) are printed beside for orientation: the graphs differ, so compare the ordering, not the values.
3. **Throughput**: forward + backward pairs per second of each head alone at batch 4096, latent 2048.

Saves ``results.json`` (with the exact command and config), ``mse_vs_train_size.png`` and
``large_graph.png`` in ``--out-dir``.
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from tqdm import tqdm

from platonic_rl.benchmarks import report
from platonic_rl.common.networks import MLP
from platonic_rl.envs import random_graphs as rg
from platonic_rl.qrl import quasimetrics as qm

GAMMA = 0.9

# name -> (registry head, head options, triangle-regulariser weight). IQE uses 6 components of 8 on the
# 48-dim latent; DeepNorm 3 layers of 128, WideNorm 32 components of 32 (appendix B.4.2).
METHODS: dict[str, tuple[str, dict, float]] = {
    "iqe-sum": ("iqe-sum", dict(dim_per_component=8), 0.0),
    "iqe-maxmean": ("iqe-maxmean", dict(dim_per_component=8), 0.0),
    "pqe-lh": ("pqe-lh", dict(dim_per_component=4, gamma=GAMMA), 0.0),
    "pqe-gg": ("pqe-gg", dict(dim_per_component=4, gamma=GAMMA), 0.0),
    "mrn": ("mrn", {}, 0.0),
    "deepnorm": ("deepnorm", dict(hidden=128, num_layers=3), 0.0),
    "deepnorm-maxmean": ("deepnorm-maxmean", dict(hidden=128, num_layers=3), 0.0),
    "widenorm": ("widenorm", dict(num_components=32, component_dim=32), 0.0),
    "widenorm-maxmean": ("widenorm-maxmean", dict(num_components=32, component_dim=32), 0.0),
    "l2": ("l2", {}, 0.0),
    "l1": ("l1", {}, 0.0),
    "spherical": ("spherical", {}, 0.0),
    "mlp": ("mlp", dict(transform="raw", gamma=GAMMA), 0.0),
    "mlp+tri": ("mlp", dict(transform="raw", gamma=GAMMA), 1.0),
    "asymdot": ("asymdot", dict(transform="square", gamma=GAMMA), 0.0),
    "asymdot+tri": ("asymdot", dict(transform="square", gamma=GAMMA), 1.0),
}

FAMILIES = {  # method -> family, for the "best of family" rows of Table 3.2
    "iqe-sum": "IQE-sum", "iqe-maxmean": "IQE-maxmean", "pqe-lh": "PQE-LH", "pqe-gg": "PQE-GG",
    "mrn": "MRN", "deepnorm": "DeepNorm", "deepnorm-maxmean": "DeepNorm",
    "widenorm": "WideNorm", "widenorm-maxmean": "WideNorm", "l2": "Metric embedding",
    "l1": "Metric embedding", "spherical": "Metric embedding", "mlp": "Unconstrained net",
    "mlp+tri": "Unconstrained net (+tri)", "asymdot": "Asym. dot product",
    "asymdot+tri": "Asym. dot product (+tri)",
}

PAPER_TABLE_3_2 = {  # Berkeley-Stanford web graph: (MSE x 1e-3, l1 error d < inf, prediction d = inf)
    "IQE-sum": (1.078, 1.303, 118.244), "IQE-maxmean": (1.488, 1.333, 89.635),
    "PQE-LH": (2.921, 1.659, 71.390), "PQE-GG": (3.872, 2.121, math.inf),
    "WideNorm": (3.533, 1.769, 124.658), "DeepNorm": (5.071, 2.085, 120.045),
    "MRN": (10.820, 2.882, 129.528), "Metric embedding": (17.595, 7.540, 53.850),
    "Unconstrained net": (3.086, 2.115, 59.524), "Unconstrained net (+tri)": (2.813, 2.211, 61.371),
    "Asym. dot product": (48.106, 2.520e11, 2.679e11), "Asym. dot product (+tri)": (48.102, 2.299e11, 2.500e11),
}


@dataclasses.dataclass(frozen=True)
class Scale:
    steps: int              # gradient steps per random-graph run
    batch: int              # pairs per step
    fractions: tuple[float, ...]
    seeds: int
    large_nodes: int
    large_steps: int
    large_batch: int
    throughput_batch: int = 4096
    throughput_latent: int = 2048
    lr: float = 1e-3
    methods: tuple[str, ...] | None = None  # the heads run by default (None: every one of METHODS)


QUICK_METHODS = ("iqe-maxmean", "pqe-lh", "mrn", "deepnorm", "widenorm", "l2", "mlp+tri")
"""The quick preset's heads, one per kind (an IQE, a PQE, MRN, Deep Norm, Wide Norm, a metric, an unconstrained MLP with
the triangle regulariser): the smoke run compiles 7 heads instead of 16, so its best-of-family rows lack the other
families (the cpu and paper presets run every head)."""


PRESETS = {
    "quick": Scale(steps=300, batch=256, fractions=(0.03, 0.3), seeds=1, large_nodes=600,
                   large_steps=300, large_batch=512, throughput_batch=512, throughput_latent=256,
                   methods=QUICK_METHODS),
    "cpu": Scale(steps=1000, batch=256, fractions=tuple(np.geomspace(0.01, 0.7, 5).round(3)), seeds=1,
                 large_nodes=1500, large_steps=1500, large_batch=512),
    # Appendix B.4.2: 2048 pairs per step, lr 1e-4 cosine-decayed over 3000 epochs, 5 seeds.
    "paper": Scale(steps=100_000, batch=2048, fractions=tuple(np.geomspace(0.01, 0.7, 5).round(3)),
                   seeds=5, large_nodes=5000, large_steps=200_000, large_batch=1024, lr=1e-4),
}


@dataclasses.dataclass(frozen=True)
class Args:
    scale: Literal["quick", "cpu", "paper"] = "quick"
    """Preset for training lengths and sizes (see PRESETS)."""
    methods: tuple[str, ...] | None = None
    """Which heads to run (names of METHODS); default: the preset's (quick: one head per family, QUICK_METHODS;
    cpu and paper: all of them)."""
    seed: int = 0
    """Seeds graph generation, splits and initialisation."""
    parts: tuple[Literal["graphs", "large", "throughput"], ...] = ("graphs", "large", "throughput")
    out_dir: str = "results/quasimetric_learning"
    steps: int | None = None
    """Override the preset's gradient steps per random-graph run."""
    large_steps: int | None = None
    """Override the preset's gradient steps on the larger graph."""

    def __post_init__(self):
        if self.methods is None:  # the preset's heads, written out (so the record says which ran)
            object.__setattr__(self, "methods", PRESETS[self.scale].methods or tuple(METHODS))
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown:
            raise ValueError(f"--methods: unknown heads {unknown}; expected names from {list(METHODS)}")


# ------------------------------------------------------------------------------------------- model

class PairModel(nn.Module):
    """The shared encoder f (64-128-128-128-48) followed by a registered head: d(f(x), f(y))."""

    head_name: str
    head_kwargs: dict
    latent_dim: int = 48

    def setup(self):
        self.encoder = MLP((128, 128, 128), self.latent_dim)
        self.head = qm.make_head(self.head_name, **self.head_kwargs)

    def encode(self, x):
        return self.encoder(x)

    def distance(self, zx, zy):
        return self.head(zx, zy)

    def __call__(self, x, y):
        return self.distance(self.encode(x), self.encode(y))


def discount(d):
    """gamma^d, with gamma^inf = 0."""
    return jnp.where(jnp.isfinite(d), GAMMA ** jnp.where(jnp.isfinite(d), d, 0.0), 0.0)


def _loss(model, params, z_i, z_j, target, z_triplet, tri_weight):
    pred = model.apply(params, z_i, z_j, method=PairModel.distance)
    mse = jnp.mean(jnp.square(GAMMA ** pred - target))
    if tri_weight:
        zx, zy, zz = z_triplet
        dist = lambda a, b: model.apply(params, a, b, method=PairModel.distance)  # noqa: E731
        reg = qm.triangle_regulariser(dist(zx, zy), dist(zy, zz), dist(zx, zz), GAMMA)
        return mse + tri_weight * reg, mse
    return mse, mse


def _optimizer(scale: Scale, steps: int):
    return optax.adam(optax.cosine_decay_schedule(scale.lr, steps))


def train_on_graphs(method: str, features, targets, orders, n_train, keys, scale: Scale):
    """Train one head on a stack of (graph, fraction, seed) configurations at once (vmapped).

    features [C, n, F]; targets [C, n * n] discounted distances; orders [C, n * (n - 1)] flat pair indices
    with the training pairs first; n_train [C]. Returns predicted distances [C, n, n] and the
    training MSE curve [C, steps // 50].
    """
    head_name, head_kwargs, tri_weight = METHODS[method]
    model = PairModel(head_name, head_kwargs)
    n = features.shape[1]
    optimiser = _optimizer(scale, scale.steps)

    def single(feats, target, order, count, key):
        key, init_key = jax.random.split(key)
        params = model.init(init_key, feats[:2], feats[:2])
        opt_state = optimiser.init(params)

        def step(carry, key):
            params, opt_state = carry
            pair_key, tri_key = jax.random.split(key)
            flat = order[jax.random.randint(pair_key, (scale.batch,), 0, count)]
            nodes = jax.random.randint(tri_key, (3, scale.batch // 3), 0, n)

            def loss_fn(p):
                z = model.apply(p, feats, method=PairModel.encode)
                return _loss(model, p, z[flat // n], z[flat % n], target[flat], z[nodes], tri_weight)

            (_, mse), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
            updates, opt_state = optimiser.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), mse

        (params, _), mse = jax.lax.scan(step, (params, opt_state), jax.random.split(key, scale.steps))
        z = model.apply(params, feats, method=PairModel.encode)
        # Row by row: some heads (PQE-GG's quadrature) hold [pairs, latent, nodes] intermediates.
        pred = jax.lax.map(lambda z_row: model.apply(params, z_row[None], z, method=PairModel.distance), z)
        return pred, mse.reshape(-1, 50).mean(-1) if scale.steps % 50 == 0 else mse

    return jax.jit(jax.vmap(single))(features, targets, orders, n_train, keys)


def graph_experiment(args: Args, scale: Scale, methods) -> dict:
    """Figure 3-4: test MSE vs training-set fraction, per head and graph structure."""
    graphs = {}
    for i, structure in enumerate(rg.GRAPH_STRUCTURES):
        graphs[structure] = rg.make_graph(structure, args.seed + i)
    rng = np.random.default_rng(args.seed)
    n = 300
    off_diagonal = np.flatnonzero(~np.eye(n, dtype=bool).ravel())
    configs, features, targets, orders, n_train = [], [], [], [], []
    for structure, graph in graphs.items():
        for fraction in scale.fractions:
            for seed in range(scale.seeds):
                configs.append(dict(graph=structure, fraction=float(fraction), seed=seed))
                features.append(graph.features)
                targets.append(np.asarray(discount(jnp.asarray(graph.distances))).ravel())
                orders.append(rng.permutation(off_diagonal).astype(np.int32))
                n_train.append(max(1, int(round(fraction * len(off_diagonal)))))
    features, targets, orders = map(np.stack, (features, targets, orders))
    n_train = np.asarray(n_train, np.int32)
    keys = jax.random.split(jax.random.PRNGKey(args.seed), len(configs))

    results = {}
    for method in tqdm(methods, desc="random graphs", unit="head"):
        start = time.time()
        pred, curve = train_on_graphs(method, features, targets, orders, n_train, keys, scale)
        pred = np.asarray(pred, np.float64).reshape(len(configs), -1)
        rows = []
        for c, config in enumerate(configs):
            disc_pred = GAMMA ** pred[c]
            test, train = orders[c][n_train[c]:], orders[c][:n_train[c]]
            rows.append(dict(config, test_mse=float(np.mean((disc_pred[test] - targets[c][test]) ** 2)),
                             train_mse=float(np.mean((disc_pred[train] - targets[c][train]) ** 2)),
                             final_train_curve=float(np.asarray(curve[c])[-1])))
        results[method] = dict(runs=rows, seconds=time.time() - start)
        tqdm.write(f"  {method:18s} {time.time() - start:6.1f}s  mean test MSE "
                   f"{np.mean([r['test_mse'] for r in rows]):.4f}")
    stats = dict(structure={s: dict(reachable_fraction=float(np.isfinite(g.distances[~np.eye(n, dtype=bool)]).mean()),
                                    edges=int(g.adjacency.sum())) for s, g in graphs.items()})
    return dict(configs=configs, results=results, graphs=stats)


def train_large(method: str, graph: rg.Graph, train_pairs, test_pairs, scale: Scale, seed: int):
    """Table 3.2 columns on the larger graph (landmark pairs); returns predictions on the test pairs."""
    head_name, head_kwargs, tri_weight = METHODS[method]
    model = PairModel(head_name, head_kwargs)
    feats = jnp.asarray(graph.features)
    n = graph.num_nodes
    target = discount(jnp.asarray(graph.distances[train_pairs[:, 0], train_pairs[:, 1]]))
    train_pairs = jnp.asarray(train_pairs)
    optimiser = _optimizer(scale, scale.large_steps)

    @jax.jit
    def run(key):
        key, init_key = jax.random.split(key)
        params = model.init(init_key, feats[:2], feats[:2])

        def step(carry, key):
            params, opt_state = carry
            pair_key, tri_key = jax.random.split(key)
            idx = jax.random.randint(pair_key, (scale.large_batch,), 0, len(train_pairs))
            nodes = jax.random.randint(tri_key, (3, scale.large_batch // 3), 0, n)

            def loss_fn(p):
                enc = lambda x: model.apply(p, x, method=PairModel.encode)  # noqa: E731
                pair = train_pairs[idx]
                return _loss(model, p, enc(feats[pair[:, 0]]), enc(feats[pair[:, 1]]), target[idx],
                             enc(feats[nodes]), tri_weight)

            (_, mse), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
            updates, opt_state = optimiser.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), mse

        (params, _), mse = jax.lax.scan(step, (params, optimiser.init(params)),
                                        jax.random.split(key, scale.large_steps))
        return params, mse

    params, mse = run(jax.random.PRNGKey(seed))
    z = jax.jit(lambda p: model.apply(p, feats, method=PairModel.encode))(params)
    dist = jax.jit(lambda p, a, b: model.apply(p, z[a], z[b], method=PairModel.distance))
    chunks = [dist(params, c[:, 0], c[:, 1]) for c in np.array_split(test_pairs, max(1, len(test_pairs) // 4_000))]
    return np.concatenate([np.asarray(c, np.float64) for c in chunks]), np.asarray(mse)


def large_graph_experiment(args: Args, scale: Scale, methods) -> dict:
    rng = np.random.default_rng(args.seed + 100)
    # Average out-degree about 6 (like a sparse web graph): rho_un = 6 / (n - 1) of pairs connected.
    graph = rg.random_graph(rng, scale.large_nodes, 6.0 / (scale.large_nodes - 1), 0.85)
    train_pairs, test_pairs = rg.landmark_split(graph, rng, train_landmarks=150, test_landmarks=50)
    true = graph.distances[test_pairs[:, 0], test_pairs[:, 1]].astype(np.float64)
    finite = np.isfinite(true)
    results = {}
    for method in tqdm(methods, desc="larger graph", unit="head"):
        start = time.time()
        pred, curve = train_large(method, graph, train_pairs, test_pairs, scale, args.seed)
        target = np.where(finite, GAMMA ** np.where(finite, true, 0), 0.0)
        results[method] = dict(
            test_mse=float(np.mean((GAMMA ** pred - target) ** 2)),
            l1_finite=float(np.mean(np.abs(pred[finite] - true[finite]))),
            pred_infinite=float(np.mean(pred[~finite])) if (~finite).any() else None,
            final_train_mse=float(curve[-100:].mean()), seconds=time.time() - start)
        tqdm.write(f"  {method:18s} {time.time() - start:6.1f}s  test MSE {results[method]['test_mse']:.4f}")
    return dict(nodes=graph.num_nodes, edges=int(graph.adjacency.sum()), train_pairs=len(train_pairs),
                test_pairs=len(test_pairs), test_reachable_fraction=float(finite.mean()), results=results)


def throughput(method: str, batch: int, latent: int, repeats: int = 3) -> dict:
    """Forward + backward pairs/s of the head alone on random latents [batch, latent]."""
    head_name, head_kwargs, _ = METHODS[method]
    kwargs = dict(head_kwargs)
    if head_name.startswith("iqe"):
        kwargs["dim_per_component"] = 32  # QRL's 64 x 32 at latent 2048
    head = qm.make_head(head_name, **kwargs)
    x, y = jax.random.normal(jax.random.PRNGKey(0), (2, batch, latent))
    params = head.init(jax.random.PRNGKey(1), x[:2], y[:2])
    step = jax.jit(jax.grad(lambda p, a, b: head.apply(p, a, b).sum(), argnums=(0, 1, 2)))
    jax.block_until_ready(step(params, x, y))
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(step(params, x, y))
    seconds = (time.perf_counter() - start) / repeats
    return dict(pairs_per_second=batch / seconds, seconds_per_step=seconds,
                params=qm.count_params(head, latent), batch=batch, latent=latent)


# ------------------------------------------------------------------------------------------ report

def format_report(record: dict) -> str:
    lines = []
    graphs = record.get("graphs")
    if graphs:
        fractions = sorted({c["fraction"] for c in graphs["configs"]})
        lines.append("Random graphs (300 vertices): test MSE on 0.9-discounted distances (x 1e-3), "
                     "mean over seeds")
        for structure in rg.GRAPH_STRUCTURES:
            lines.append(f"\n  {structure} graph ({graphs['graphs']['structure'][structure]['reachable_fraction']:.0%}"
                         " of pairs reachable)")
            lines.append("  " + f"{'train fraction':18s}" + "".join(f"{f:>9.3f}" for f in fractions))
            for method, res in graphs["results"].items():
                cells = []
                for f in fractions:
                    runs = [r["test_mse"] for r in res["runs"] if r["graph"] == structure and r["fraction"] == f]
                    cells.append(f"{1e3 * np.mean(runs):9.2f}")
                lines.append("  " + f"{method:18s}" + "".join(cells))
    large = record.get("large")
    if large:
        lines.append(f"\nLarger graph ({large['nodes']} vertices, {large['edges']} edges, landmark split, "
                     f"{large['test_reachable_fraction']:.0%} of test pairs reachable)")
        lines.append(f"  {'method':18s}{'MSE x1e-3':>11s}{'l1 (d<inf)':>12s}{'d when inf':>12s}"
                     f"   | paper: {'MSE':>7s}{'l1':>8s}{'d inf':>9s}")
        for method, r in large["results"].items():
            paper = PAPER_TABLE_3_2.get(FAMILIES[method])
            paper_cells = "".join(f"{v:>8.3g}" for v in paper) if paper else ""
            inf_cell = f"{r['pred_infinite']:12.2f}" if r["pred_infinite"] is not None else f"{'-':>12s}"
            lines.append(f"  {method:18s}{1e3 * r['test_mse']:11.3f}{r['l1_finite']:12.3f}{inf_cell}"
                         f"   | {FAMILIES[method]:s} {paper_cells}")
    tp = record.get("throughput")
    if tp:
        first = next(iter(tp.values()))
        lines.append(f"\nThroughput, head only, forward + backward, batch {first['batch']}, latent "
                     f"{first['latent']} ({record['device']})")
        for method, r in tp.items():
            lines.append(f"  {method:18s}{r['pairs_per_second']:12,.0f} pairs/s  {r['params']:>11,d} params")
    return "\n".join(lines)


def plot_graphs(path: Path, graphs: dict, title_extra: str | None = None):
    """Figure 3-4: test MSE vs training fraction per head (mean over seeds); ``title_extra`` (e.g. the scale
    and budget) is added to the title. Returns the (closed) Figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2), sharey=False, layout="constrained")
    fractions = sorted({c["fraction"] for c in graphs["configs"]})
    seeds = len({c["seed"] for c in graphs["configs"]})
    reachable = {s: v.get("reachable_fraction") for s, v in graphs.get("graphs", {}).get("structure", {}).items()}
    cmap = plt.get_cmap("tab20")
    for ax, structure in zip(axes, rg.GRAPH_STRUCTURES):
        for i, (method, res) in enumerate(graphs["results"].items()):
            means = [np.mean([r["test_mse"] for r in res["runs"] if r["graph"] == structure
                              and r["fraction"] == f]) for f in fractions]
            style = "-" if qm.make_head(METHODS[method][0]).is_quasimetric else ":"
            width = 2.5 if method.startswith("iqe") else 1.3
            ax.plot(fractions, means, style, marker="o", ms=3 if len(fractions) > 3 else 5, lw=width,
                    color=cmap(i % cmap.N), label=method)
        reach = f" ({reachable[structure]:.0%} of pairs reachable)" if reachable.get(structure) is not None else ""
        ax.set(xscale="log", yscale="log", title=f"{structure} graph{reach}",
               xlabel="fraction of the off-diagonal pairs used for training (log scale)")
        ax.set_xticks(fractions, [f"{f:g}" for f in fractions])  # the fractions that were run
        ax.xaxis.set_minor_formatter(NullFormatter())
        ys = np.concatenate([line.get_ydata() for line in ax.get_lines()] or [np.zeros(0)]).astype(float)
        ys = ys[np.isfinite(ys) & (ys > 0)]
        if ys.size:
            _log_ticks(ax.yaxis, ys.min(), ys.max())
    axes[0].set_ylabel("test MSE of $0.9^{d}$ (d: shortest-path hops;\nunreachable: 0), log scale")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="outside right center",
               title="head (dotted: not a quasimetric)", title_fontsize=7)
    title = (f"Quasimetric learning on 300-vertex random directed graphs: test MSE on the pairs not trained on, "
             f"mean over {seeds} seed(s)")
    fig.suptitle(title + (f"\n{title_extra}" if title_extra else ""))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def _log_ticks(axis, low: float, high: float) -> None:
    """A log axis readable for any span: plain-number labels, 1-2-5 ticks within about two decades, decades
    beyond, and no minor-tick labels (matplotlib labels those when the span is short, and they overlap)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    subs = (1.0, 2.0, 5.0) if high > 0 and low > 0 and np.log10(high / low) <= 2.5 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _log_value_axis(ax, values) -> None:
    """Log x axis for bars, with room on the right for the printed bar values."""
    ax.set_xscale("log")
    values = np.asarray([v for v in values if v is not None and v > 0], float)
    low, high = (values.min() / 1.5, values.max() * 4.0) if values.size else (0.1, 10.0)
    ax.set_xlim(low, high)
    _log_ticks(ax.xaxis, low, high)


def plot_large(path: Path, large: dict, title_extra: str | None = None):
    """Table 3.2 columns on the larger graph as bars with their values printed; ``title_extra`` (e.g. the
    scale and budget) is added to the title. Returns the (closed) Figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(large["results"])
    fig, axes = plt.subplots(1, 3, figsize=(16, 0.28 * len(methods) + 2.2), layout="constrained")
    columns = (("test_mse", "test MSE of 0.9^d - lower is better", "MSE of discounted distance (log scale)"),
               ("l1_finite", "l1 error where d < inf - lower is better", "mean |predicted d - d| (hops, log scale)"),
               ("pred_infinite", "mean prediction where d = inf - higher is better",
                "mean predicted d (hops, log scale)"))
    for ax, (key, title, xlabel) in zip(axes, columns):
        values = [large["results"][m][key] for m in methods]
        valid = [v is not None and np.isfinite(v) and v > 0 for v in values]
        y = np.arange(len(methods))
        drawn = [v if ok else np.nan for v, ok in zip(values, valid)]
        ax.barh(y, drawn, color=["tab:blue" if m.startswith("iqe") else "tab:gray" for m in methods])
        _log_value_axis(ax, [v for v, ok in zip(values, valid) if ok])
        left = ax.get_xlim()[0]
        for yy, v, ok in zip(y, values, valid):
            ax.text(v * 1.08 if ok else left * 1.1, yy, f"{v:.3g}" if ok else ("n/a" if v is None else f"{v:g}"),
                    va="center", fontsize=7, color="k" if ok else "0.4")
        ax.set_yticks(y, methods)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.invert_yaxis()
    reachable = large.get("test_reachable_fraction")
    title = (f"Larger random graph: {large.get('nodes', '?'):,} vertices, {large.get('edges', '?'):,} edges; landmark "
             f"split, {large.get('train_pairs', '?'):,} train / {large.get('test_pairs', '?'):,} test pairs"
             + (f" ({reachable:.0%} of test pairs reachable)" if reachable is not None else "") + "; blue: IQE")
    fig.suptitle(title + (f"\n{title_extra}" if title_extra else ""))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def run(args: Args) -> dict:
    scale = PRESETS[args.scale]
    scale = dataclasses.replace(scale, steps=args.steps or scale.steps, large_steps=args.large_steps or scale.large_steps)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    record = dict(scale=dataclasses.asdict(scale), methods={m: METHODS[m] for m in args.methods}, gamma=GAMMA,
                  paper_table_3_2=PAPER_TABLE_3_2, device=str(jax.devices()[0]))
    plots = {}
    if "graphs" in args.parts:
        record["graphs"] = graph_experiment(args, scale, args.methods)
        budget = f"scale {args.scale}: {scale.steps:,} steps x batch {scale.batch} per run"
        plots["mse_vs_train_size.png"] = lambda path: plot_graphs(path, record["graphs"], title_extra=budget)
    if "large" in args.parts:
        record["large"] = large_graph_experiment(args, scale, args.methods)
        large_budget = f"scale {args.scale}: {scale.large_steps:,} steps x batch {scale.large_batch}"
        plots["large_graph.png"] = lambda path: plot_large(path, record["large"], title_extra=large_budget)
    if "throughput" in args.parts:
        record["throughput"] = {m: throughput(m, scale.throughput_batch, scale.throughput_latent)
                                for m in tqdm(args.methods, desc="throughput", unit="head")}
    return report.save_run(out, "platonic_rl.benchmarks.quasimetric_learning", args, record,
                           table=format_report(record), plots=plots, total_seconds=time.time() - t0)


def main():
    run(tyro.cli(Args))


if __name__ == "__main__":
    main()
