"""The benchmarks' plots on tiny synthetic inputs: each file is written, and the figure has what a reader
needs to trust it (labelled axes, colour bars where colour carries a value, markers on sparse points, the
scale/budget in the title)."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def colorbars(fig):
    return [ax._colorbar for ax in fig.axes if getattr(ax, "_colorbar", None) is not None]


def visible_tick_labels(axis) -> bool:
    return any(t.label1.get_visible() and t.label1.get_text() for t in axis.get_major_ticks())


def has_marker(line) -> bool:
    return line.get_marker() not in (None, "", "None", " ")


def labelled(ax) -> bool:
    return bool(ax.get_xlabel().strip()) and bool(ax.get_ylabel().strip())


def all_text(fig) -> str:
    texts = [fig._suptitle.get_text() if fig._suptitle else ""]
    for ax in fig.axes:
        texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
    return "\n".join(texts)


# --------------------------------------------------------------------------------------- mountaincar


def test_mountaincar_values_axes_colour_bars_and_title(tmp_path):
    from platonic_rl.benchmarks import mountaincar as bench
    from platonic_rl.envs import mountaincar as mc

    states = mc.all_states()  # [25600, 2] (position, velocity), ordered by flat index k_pos * 160 + k_vel
    position = states[:, 0].astype(np.float64)
    steps = np.where(position > 0.3, np.inf, np.abs(states[:, 1]) * 1000)  # ground truth with unreachable states
    top = bench.Goal("top of hill", mc.GENERAL_GOAL, position > 0.5, position > 0.5, steps, steps)
    obs = np.asarray(mc.to_observation(np.array([-0.5, 0.01], np.float32)))
    other = bench.Goal("(-0.50, +0.010)", obs, position > 0.5, position > 0.5, steps, steps)
    learned = {"qrl_single": [position, None], "qrl_multi": [position, 2 * position]}
    path = tmp_path / "values.png"
    fig = bench.plot_values(path, [top, other], learned, title_extra="scale quick, 3,000 steps x batch 256, seed 0")
    assert path.stat().st_size > 0
    assert "scale quick, 3,000 steps x batch 256" in fig._suptitle.get_text()

    bars = colorbars(fig)
    assert len(bars) == 3  # one per row: ground truth + 2 methods
    assert "steps" in bars[0].ax.get_ylabel() and all(b.ax.get_ylabel().strip() for b in bars)

    panels = [ax for ax in fig.axes if ax.get_images()]
    assert len(panels) == 5  # qrl_single has no image for the second goal
    for ax in panels:
        image = ax.get_images()[0]
        assert image.get_extent() == pytest.approx((-mc.MAX_SPEED, mc.MAX_SPEED, mc.MIN_POSITION, mc.MAX_POSITION))
    # What is drawn: the learned "position" image varies along the rows (y, upwards) and not the columns (x).
    image = panels[2].get_images()[0].get_array()  # qrl_single, top of hill
    assert np.ptp(image[:, 0]) == pytest.approx(mc.MAX_POSITION - mc.MIN_POSITION, rel=1e-5)
    assert np.ptp(image[0, :]) == 0 and image[-1, 0] > image[0, 0]
    assert panels[2].get_ylabel() == "position"
    # Labels and tick labels on the outer panels: the first of each row, the lowest of each column.
    first_of_rows = [panels[0], panels[2], panels[3]]
    lowest_of_columns = [panels[3], panels[4]]
    for ax in first_of_rows:
        assert ax.get_ylabel() == "position" and visible_tick_labels(ax.yaxis)
    for ax in lowest_of_columns:
        assert ax.get_xlabel().startswith("velocity") and visible_tick_labels(ax.xaxis)
    assert not visible_tick_labels(panels[0].xaxis)  # inner panels stay clean
    assert "unreachable" in fig._suptitle.get_text()
    assert np.isnan(np.ma.getdata(panels[0].get_images()[0].get_array())).any()  # inf -> NaN: "bad" colour


# --------------------------------------------------------------------------------------------- fetch


def fetch_curves(steps, seeds=(0, 1)):
    rng = np.random.default_rng(0)
    return {name: [dict(seed=s, env_steps=list(steps), success=list(rng.uniform(0, 1, len(steps)))) for s in seeds]
            for name in ("qrl", "crl")}


def test_fetch_curves_single_evaluation_is_visible(tmp_path):
    from platonic_rl.benchmarks import fetch as bf

    args = bf.Args(env="reach", agents=("qrl", "crl"), seeds=(0, 1), env_steps=20_000)
    path = tmp_path / "curves.png"
    fig = bf.plot_curves(path, args, fetch_curves([12_000]), {"env_steps": [12_000], "smoothed_mean": [0.1]})
    assert path.stat().st_size > 0
    (ax,) = fig.axes
    assert labelled(ax)
    lines = [line for line in ax.get_lines() if line.get_label() in ("qrl", "crl")]
    assert len(lines) == 2 and all(has_marker(line) for line in lines)
    assert all(has_marker(line) for line in ax.get_lines() if line.get_label().startswith("zero action"))
    title = ax.get_title()
    assert "12,000 of 20,000 env steps" in title and "2 seed(s)" in title and "QRL preset" in title
    assert ax.get_xlim()[1] >= 20_000  # the budget is on the axis: one point at 12,000 of it


def test_fetch_curves_many_evaluations_keep_the_band(tmp_path):
    from platonic_rl.benchmarks import fetch as bf

    args = bf.Args(env="push", agents=("qrl", "crl"), seeds=(0, 1, 2), env_steps=20_000)
    steps = range(12_000, 20_001, 2000)
    fig = bf.plot_curves(tmp_path / "curves.png", args, fetch_curves(steps, seeds=(0, 1, 2)))  # positional, as run() calls it
    (ax,) = fig.axes
    assert len(ax.collections) >= 2  # a min-max band per agent
    assert all(has_marker(line) for line in ax.get_lines())
    assert "20,000 env steps" in ax.get_title() and "3 seed(s)" in ax.get_title()
    assert "of 20,000" not in ax.get_title()  # the budget was reached


# ----------------------------------------------------------------------------------------------- dmc


def test_dmc_returns_and_probe(tmp_path):
    pytest.importorskip("dm_control")
    from platonic_rl.benchmarks import dmc as bd

    def fake(task, variant, method, probe):
        return dict(task=task, variant=variant, method=method, seed=0, env_steps=[1000, 2000], train_return=[1.0, 2.0],
                    eval_steps=[2000], eval_return=[3.0], probe=probe)

    runs = [fake("cheetah-run", "noiseless", "denoised", {"x->agent_state": 0.5, "x->distractor_state": np.nan,
                                                          "y->agent_state": 0.1, "y->distractor_state": np.nan}),
            fake("cheetah-run", "distractors", "denoised", {"x->agent_state": 0.5, "x->distractor_state": 0.2,
                                                            "y->agent_state": 0.1, "y->distractor_state": -4.0}),
            fake("cheetah-run", "distractors", "dreamer", {"x->agent_state": 0.6, "x->distractor_state": 0.7})]
    args = bd.Args(tasks=("cheetah-run",), variants=("noiseless", "distractors"), env_steps=15_000,
                   out_dir=str(tmp_path))
    figures = bd.plot(tmp_path, args, runs, bd.summarise(runs))
    assert (tmp_path / "returns.png").stat().st_size > 0 and (tmp_path / "probe.png").stat().st_size > 0

    returns = figures["returns"]
    assert "15,000 env steps" in returns._suptitle.get_text() and "1 seed(s)" in returns._suptitle.get_text()
    assert labelled(returns.axes[0])  # bottom-left panel of a one-row grid
    anchor = "pixel Dreamer at 100k (CURL)"
    assert all(has_marker(line) for ax in returns.axes for line in ax.get_lines()
               if line.get_label() != anchor)  # 2 points per curve: sparse
    anchors = [[line.get_ydata()[0] for line in ax.get_lines() if line.get_label() == anchor] for ax in returns.axes]
    assert anchors == [[bd.ANCHORS_100K["cheetah-run"]], []]  # the published anchor, on the noiseless panel only

    (ax,) = figures["probe"].axes
    assert labelled(ax) and "15,000 env steps" in ax.get_title()
    texts = [t.get_text() for t in ax.texts]
    assert "n/a" in texts  # no distractor in "noiseless": said, not a silently missing bar
    assert "-4" in texts and ax.get_ylim()[0] > -4  # a clipped bar prints its value


# ------------------------------------------------------------------------------ quasimetric learning


def test_quasimetric_learning_plots(tmp_path):
    from matplotlib.ticker import NullFormatter

    from platonic_rl.benchmarks import quasimetric_learning as ql
    from platonic_rl.envs import random_graphs as rg

    rng = np.random.default_rng(0)
    methods = ["iqe-sum", "l2", "mlp"]
    configs = [dict(graph=s, fraction=f, seed=0) for s in rg.GRAPH_STRUCTURES for f in (0.03, 0.3)]
    graphs = dict(configs=configs,
                  results={m: dict(runs=[dict(c, test_mse=float(rng.uniform(1e-3, 5e-2))) for c in configs])
                           for m in methods},
                  graphs=dict(structure={s: dict(reachable_fraction=0.5, edges=10) for s in rg.GRAPH_STRUCTURES}))
    fig = ql.plot_graphs(tmp_path / "mse.png", graphs, title_extra="scale quick: 300 steps x batch 256")
    assert (tmp_path / "mse.png").stat().st_size > 0
    assert "300 steps x batch 256" in fig._suptitle.get_text()
    axes = [ax for ax in fig.axes if ax.get_lines()]
    assert len(axes) == 3 and labelled(axes[0]) and all(ax.get_xlabel() for ax in axes)
    assert all(has_marker(line) for ax in axes for line in ax.get_lines())
    assert all(isinstance(ax.xaxis.get_minor_formatter(), NullFormatter) for ax in axes)  # no overlapping labels
    assert fig.legends  # outside the panels, not over the block graph's lines

    large = dict(nodes=600, edges=3600, train_pairs=900, test_pairs=300, test_reachable_fraction=0.7,
                 results={m: dict(test_mse=0.02 * (i + 1), l1_finite=3.0 * 10 ** i,
                                  pred_infinite=None if m == "l2" else 50.0 * (i + 1)) for i, m in enumerate(methods)})
    fig = ql.plot_large(tmp_path / "large.png", large)  # positional, as run() calls it
    assert (tmp_path / "large.png").stat().st_size > 0
    assert "600 vertices" in fig._suptitle.get_text()
    assert all(ax.get_xlabel().strip() and ax.get_title() for ax in fig.axes)
    assert "n/a" in [t.get_text() for t in fig.axes[2].texts]  # no unreachable-pair prediction for l2
    assert all(isinstance(ax.xaxis.get_minor_formatter(), NullFormatter) for ax in fig.axes)


# ---------------------------------------------------------------------------------- representations


def test_representations_plots(tmp_path):
    from platonic_rl.benchmarks import representations as br

    rng = np.random.default_rng(0)
    encoders = [dict(name=f"{family}#{i}", family=family, accuracy=float(rng.uniform(0.5, 1.0)),
                     align=float(rng.uniform(0, 2)), uniform=float(rng.uniform(-3, -1)))
                for family in ("align_uniform", "infonce", "untrained") for i in range(2)]
    encoders.append(dict(name="pixels", family="pixels", accuracy=0.9, align=1.0, uniform=-1.0))
    n = len(encoders)
    alignment = np.full((n, n), 0.4) + 0.6 * np.eye(n)

    fig = br.plot_align_uniform(tmp_path / "au.png", encoders, title_extra="scale quick: 1,500 steps")
    assert (tmp_path / "au.png").stat().st_size > 0
    (bar,) = colorbars(fig)
    assert "accuracy" in bar.ax.get_ylabel()
    assert labelled(fig.axes[0]) and "1,500 steps" in fig._suptitle.get_text()

    fig = br.plot_alignment(tmp_path / "al.png", encoders, alignment)  # positional, as run() calls it
    assert (tmp_path / "al.png").stat().st_size > 0
    (bar,) = colorbars(fig)
    assert "alignment" in bar.ax.get_ylabel()
    assert all(labelled(ax) for ax in fig.axes if getattr(ax, "_colorbar", None) is None)
    fig = br.plot_alignment(tmp_path / "al.png", encoders, alignment, title_extra="2 seeds", k=10)
    assert "mutual 10-NN" in all_text(fig) and "2 seeds" in fig._suptitle.get_text()
