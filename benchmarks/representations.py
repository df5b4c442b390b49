"""Alignment and uniformity vs contrastive learning, and the Platonic convergence claim, in miniature.

    python -m platonic_rl.benchmarks.representations                 # ~3 minutes on 2 CPU cores
    python -m platonic_rl.benchmarks.representations --scale cpu     # more steps and seeds

On scikit-learn's 8x8 digits (shipped inside the package; 1200 train / 597 test images), small MLP
encoders (64-256-256-32, outputs on the unit sphere) are trained self-supervised on two random
augmentations per image (shift by up to 1 pixel, pixel dropout, Gaussian noise) with

* L_align(alpha=2) + w * L_uniform(t=2) for several weights w (dissertation chapter 2, eq. for the
  combined loss), and
* symmetric InfoNCE with cosine critics at several temperatures,

plus untrained encoders and raw pixels as references. Each encoder is scored by a linear probe
(multinomial logistic regression on frozen test-split features) and by L_align / L_uniform on the test
split (Figure 2-7's axes). Then the mutual k-NN alignment (k = 10) between every pair of encoders is
measured, to ask whether better encoders align more with each other (Figure 6-2's claim).

Saves ``results.json`` (with the command and config), ``align_uniform.png`` and ``alignment.png``.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats
import tyro
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from tqdm import tqdm

from platonic_rl.benchmarks import report
from platonic_rl.common.networks import MLP
from platonic_rl.replearn import metrics, objectives


@dataclasses.dataclass(frozen=True)
class Scale:
    steps: int
    seeds: int
    batch: int = 256
    lr: float = 1e-3


PRESETS = {"quick": Scale(steps=1500, seeds=2), "cpu": Scale(steps=5000, seeds=3)}

UNIFORM_WEIGHTS = (0.1, 0.3, 1.0, 3.0, 10.0)
TEMPERATURES = (0.05, 0.1, 0.2, 0.5, 1.0)


@dataclasses.dataclass(frozen=True)
class Args:
    scale: Literal["quick", "cpu"] = "quick"
    seed: int = 0
    k: int = 10
    """Neighbours for the mutual k-NN alignment."""
    out_dir: str = "results/representations"


class Encoder(nn.Module):
    @nn.compact
    def __call__(self, x):
        z = MLP((256, 256), 32)(x)
        return z / jnp.maximum(jnp.linalg.norm(z, axis=-1, keepdims=True), 1e-12)


def load_data(seed: int):
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    perm = np.random.default_rng(seed).permutation(len(x))
    train, test = perm[:1200], perm[1200:]
    return x[train], digits.target[train], x[test], digits.target[test]


def augment(key, images):
    """Two-view augmentation of [b, 8, 8] images: shift by up to 1 pixel, 20% pixel dropout, noise."""
    shift_key, drop_key, noise_key = jax.random.split(key, 3)
    padded = jnp.pad(images, ((0, 0), (1, 1), (1, 1)))
    offsets = jax.random.randint(shift_key, (images.shape[0], 2), 0, 3)
    shifted = jax.vmap(lambda im, o: jax.lax.dynamic_slice(im, (o[0], o[1]), (8, 8)))(padded, offsets)
    keep = jax.random.bernoulli(drop_key, 0.8, shifted.shape)
    noisy = shifted * keep + 0.1 * jax.random.normal(noise_key, shifted.shape)
    return noisy.reshape(images.shape[0], 64)


def ssl_loss(z1, z2, family: str, param):
    if family == "align_uniform":
        return objectives.align_loss(z1, z2, 2.0) + param * objectives.uniform_loss_two_view(z1, z2, 2.0)
    return objectives.info_nce(objectives.pairwise_logits(z1, z2, "cosine", param))


def train_family(family: str, params_grid, seeds: int, images, scale: Scale, seed: int):
    """Train one encoder per (hyperparameter, seed), vmapped; returns stacked parameters."""
    encoder = Encoder()
    optimiser = optax.adam(scale.lr)
    grid = jnp.repeat(jnp.asarray(params_grid, jnp.float32), seeds)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(grid))
    images = jnp.asarray(images)

    def single(param, key):
        key, init_key = jax.random.split(key)
        variables = encoder.init(init_key, images[:1].reshape(1, 64))

        def step(carry, key):
            variables, opt_state = carry
            batch_key, view1, view2 = jax.random.split(key, 3)
            batch = images[jax.random.randint(batch_key, (scale.batch,), 0, images.shape[0])]

            def loss_fn(v):
                return ssl_loss(encoder.apply(v, augment(view1, batch)), encoder.apply(v, augment(view2, batch)),
                                family, param)

            loss, grads = jax.value_and_grad(loss_fn)(variables)
            updates, opt_state = optimiser.update(grads, opt_state)
            return (optax.apply_updates(variables, updates), opt_state), loss

        (variables, _), losses = jax.lax.scan(step, (variables, optimiser.init(variables)),
                                              jax.random.split(key, scale.steps))
        return variables, losses

    return jax.jit(jax.vmap(single))(grid, keys), np.repeat(np.asarray(params_grid), seeds)


def probe_accuracy(train_features, train_labels, test_features, test_labels) -> float:
    probe = LogisticRegression(max_iter=3000, C=1.0)
    probe.fit(train_features, train_labels)
    return float(probe.score(test_features, test_labels))


def run(args: Args) -> dict:
    scale = PRESETS[args.scale]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    x_train, y_train, x_test, y_test = load_data(args.seed)
    encoder = Encoder()
    encode = jax.jit(jax.vmap(lambda v, x: encoder.apply(v, x.reshape(-1, 64)), in_axes=(0, None)))
    view_key = jax.random.PRNGKey(args.seed + 1)
    test_views = (augment(jax.random.fold_in(view_key, 0), jnp.asarray(x_test)),
                  augment(jax.random.fold_in(view_key, 1), jnp.asarray(x_test)))

    encoders = []  # dicts: name, family, param, seed, train/test features
    families = [("align_uniform", UNIFORM_WEIGHTS), ("infonce", TEMPERATURES)]
    for family, grid in tqdm(families, desc="training encoders", unit="family"):
        (variables, losses), params = train_family(family, grid, scale.seeds, x_train, scale, args.seed)
        feats_train, feats_test = encode(variables, jnp.asarray(x_train)), encode(variables, jnp.asarray(x_test))
        view1, view2 = encode(variables, test_views[0]), encode(variables, test_views[1])
        for i, param in enumerate(params):
            encoders.append(dict(name=f"{family}({'w' if family == 'align_uniform' else 'tau'}={param:g})#{i % scale.seeds}",
                                 family=family, param=float(param), train=np.asarray(feats_train[i]),
                                 test=np.asarray(feats_test[i]), views=(view1[i], view2[i]),
                                 final_loss=float(np.asarray(losses[i][-100:]).mean())))
    untrained = jax.vmap(lambda k: encoder.init(k, jnp.zeros((1, 64))))(
        jax.random.split(jax.random.PRNGKey(args.seed + 7), scale.seeds))
    feats_train, feats_test = encode(untrained, jnp.asarray(x_train)), encode(untrained, jnp.asarray(x_test))
    v1, v2 = encode(untrained, test_views[0]), encode(untrained, test_views[1])
    for i in range(scale.seeds):
        encoders.append(dict(name=f"untrained#{i}", family="untrained", param=None, train=np.asarray(feats_train[i]),
                             test=np.asarray(feats_test[i]), views=(v1[i], v2[i]), final_loss=None))
    pixels_views = tuple(v / jnp.maximum(jnp.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in test_views)
    encoders.append(dict(name="pixels", family="pixels", param=None, train=x_train.reshape(-1, 64),
                         test=x_test.reshape(-1, 64), views=pixels_views, final_loss=None))

    for enc in tqdm(encoders, desc="linear probes", unit="encoder"):
        enc["accuracy"] = probe_accuracy(enc["train"], y_train, enc["test"], y_test)
        test = jnp.asarray(enc["test"])
        test = test / jnp.maximum(jnp.linalg.norm(test, axis=-1, keepdims=True), 1e-12)
        enc["align"] = float(objectives.align_loss(*enc["views"], 2.0))
        enc["uniform"] = float(objectives.uniform_loss(test, 2.0))

    names = [e["name"] for e in encoders]
    alignment = alignment_matrix([e["test"] for e in encoders], args.k)

    summary = summarise(encoders, alignment)
    record = dict(
        scale=dataclasses.asdict(scale),
        encoders=[{k: v for k, v in e.items() if k not in ("train", "test", "views")} for e in encoders],
        mutual_knn=dict(names=names, matrix=alignment.tolist(), k=args.k), summary=summary)
    extra = f"scale {args.scale}: {scale.steps:,} steps x batch {scale.batch}, {scale.seeds} seed(s) per setting"
    plots = {"align_uniform.png": lambda path: plot_align_uniform(path, encoders, title_extra=extra),
             "alignment.png": lambda path: plot_alignment(path, encoders, alignment, title_extra=extra, k=args.k)}
    return report.save_run(out, "platonic_rl.benchmarks.representations", args, record, table=format_table(record),
                           plots=plots, total_seconds=time.time() - t0)


def alignment_matrix(features: list, k: int) -> np.ndarray:
    """Mutual k-NN alignment (:func:`metrics.mutual_knn`) between every pair of ``features`` (each ``[n, d]``, the
    same n samples), ones on the diagonal: each one's neighbour lists are found once, then only compared."""
    return metrics.knn_overlap_matrix([metrics.knn_indices(metrics.unit_rows(jnp.asarray(x, jnp.float32)), k)
                                       for x in tqdm(features, desc="k-NN", unit="encoder")])


def summarise(encoders, alignment) -> dict:
    def best(family):
        by_param = {}
        for e in encoders:
            if e["family"] == family:
                by_param.setdefault(e["param"], []).append(e["accuracy"])
        param, accs = max(by_param.items(), key=lambda kv: np.mean(kv[1]))
        return dict(param=param, accuracy=float(np.mean(accs)), std=float(np.std(accs)))

    n = len(encoders)
    acc = np.array([e["accuracy"] for e in encoders])
    mean_alignment = (alignment.sum(1) - 1) / (n - 1)
    rho, p = scipy.stats.spearmanr(acc, mean_alignment)
    order = np.argsort(-acc)
    quarter = max(2, n // 4)

    def within(idx):
        return float(np.mean([alignment[i, j] for i in idx for j in idx if i < j]))

    return dict(best_align_uniform=best("align_uniform"), best_infonce=best("infonce"),
                spearman_accuracy_vs_mean_alignment=float(rho), spearman_p=float(p),
                alignment_within_top_quarter=within(order[:quarter]),
                alignment_within_bottom_quarter=within(order[-quarter:]), quarter_size=int(quarter))


def format_table(record) -> str:
    rows = {}
    for e in record["encoders"]:
        key = (e["family"], e["param"])
        rows.setdefault(key, []).append(e)
    lines = [f"{'encoder':28s}{'probe acc':>11s}{'L_align':>9s}{'L_uniform':>11s}   (mean over seeds)"]
    for (family, param), es in rows.items():
        label = family if param is None else f"{family} ({'w' if family == 'align_uniform' else 'tau'}={param:g})"
        acc = np.array([e["accuracy"] for e in es])
        lines.append(f"{label:28s}{acc.mean():8.3f}±{acc.std():.3f}{np.mean([e['align'] for e in es]):9.3f}"
                     f"{np.mean([e['uniform'] for e in es]):11.3f}")
    s = record["summary"]
    lines += ["",
              f"best align+uniform: w={s['best_align_uniform']['param']:g}, accuracy "
              f"{s['best_align_uniform']['accuracy']:.3f} ± {s['best_align_uniform']['std']:.3f}",
              f"best InfoNCE:       tau={s['best_infonce']['param']:g}, accuracy "
              f"{s['best_infonce']['accuracy']:.3f} ± {s['best_infonce']['std']:.3f}",
              f"mutual {record['mutual_knn']['k']}-NN alignment: within the most accurate {s['quarter_size']} "
              f"encoders {s['alignment_within_top_quarter']:.3f}, within the least accurate "
              f"{s['alignment_within_bottom_quarter']:.3f}; Spearman(accuracy, mean alignment to the others) = "
              f"{s['spearman_accuracy_vs_mean_alignment']:.3f} (p = {s['spearman_p']:.2g})"]
    return "\n".join(lines)


def _suptitle(fig, title: str, title_extra: str | None) -> None:
    fig.suptitle(title + (f"\n{title_extra}" if title_extra else ""), fontsize=11)


def plot_align_uniform(path: Path, encoders, title_extra: str | None = None):
    """Figure 2-7's axes, colour = linear-probe accuracy; ``title_extra`` (e.g. the scale and budget) is
    added to the title. Returns the (closed) Figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.6), layout="constrained")
    markers = {"align_uniform": "o", "infonce": "s", "untrained": "x", "pixels": "^"}
    acc = np.array([e["accuracy"] for e in encoders])
    low = np.percentile(acc, 10)  # collapsed encoders would otherwise squash the colour scale
    norm = matplotlib.colors.Normalize(vmin=low, vmax=acc.max())
    for family, marker in markers.items():
        es = [e for e in encoders if e["family"] == family]
        if not es:
            continue
        ax.scatter([e["uniform"] for e in es], [e["align"] for e in es], c=[e["accuracy"] for e in es],
                   cmap="viridis", norm=norm, marker=marker, s=50, label=family, linewidths=0.8)
    bar = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap="viridis"), ax=ax,
                       extend="min" if acc.min() < low else "neither")
    bar.set_label("linear-probe accuracy (fraction of test digits correct)"
                  + ("\narrow: below the 10th percentile" if acc.min() < low else ""))
    ax.set(xlabel="L_uniform (t=2) = log mean exp(-2 |z_i - z_j|$^2$) over test images\n(lower: more uniform)",
           ylabel="L_align (alpha=2) = mean |z - z'|$^2$ between two augmentations\n"
                  "(unit-sphere features, 0 to 4; lower: more aligned)")
    legend = ax.legend(fontsize=8, title="encoder family (marker)", title_fontsize=8)
    for handle in legend.legend_handles:  # marker shape only: the colour is the accuracy
        handle.set_array(None)
        handle.set_facecolor("0.35")
        handle.set_edgecolor("0.35")
    _suptitle(fig, "Digits: alignment vs uniformity of the encoders (cf. Figure 2-7)", title_extra)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def plot_alignment(path: Path, encoders, alignment, title_extra: str | None = None, k: int | None = None):
    """Mutual k-NN alignment between every pair of encoders, and per encoder against probe accuracy;
    ``title_extra`` (e.g. the scale and budget) is added to the title. Returns the (closed) Figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    knn = f"mutual {k}-NN" if k else "mutual k-NN"
    acc = np.array([e["accuracy"] for e in encoders])
    order = np.argsort(-acc)
    n = len(encoders)
    mean_alignment = (alignment.sum(1) - 1) / max(n - 1, 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 8.5), layout="constrained",
                                      gridspec_kw=dict(width_ratios=(1.15, 1.0)))
    im = left.imshow(alignment[np.ix_(order, order)], cmap="magma")
    left.set_xticks(range(n), [encoders[i]["name"] for i in order], rotation=90, fontsize=6)
    left.set_yticks(range(n), [f"{encoders[i]['name']} ({acc[i]:.2f})" for i in order], fontsize=6)
    left.set(xlabel="encoder (sorted by probe accuracy)", ylabel="encoder (probe accuracy)")
    left.set_title(f"{knn} alignment between encoders", fontsize=10)
    bar = fig.colorbar(im, ax=left, shrink=0.85)
    bar.set_label(f"{knn} alignment (fraction of shared nearest\nneighbours of test images; 1 on the diagonal)")
    for family, marker in (("align_uniform", "o"), ("infonce", "s"), ("untrained", "x"), ("pixels", "^")):
        idx = [i for i, e in enumerate(encoders) if e["family"] == family]
        if idx:
            right.scatter(acc[idx], mean_alignment[idx], marker=marker, label=family)
    right.set(xlabel="linear-probe accuracy (fraction of test digits correct)",
              ylabel=f"mean {knn} alignment to the other encoders (0 to 1)")
    right.set_title("Do better encoders align more? (cf. Figure 6-2)", fontsize=10)
    right.legend(fontsize=8, title="encoder family", title_fontsize=8)
    _suptitle(fig, f"Digits: {knn} alignment of {n} encoders", title_extra)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def main():
    run(tyro.cli(Args))


if __name__ == "__main__":
    main()
