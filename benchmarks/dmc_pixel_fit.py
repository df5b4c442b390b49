"""Does a pixel world model see the body behind a video background? Offline fits on random-action frames.

    python -m platonic_rl.benchmarks.dmc_pixel_fit --settings noiseless video video-width32 --updates 1200

At 100k env steps from 64x64 pixels, Dreamer and Denoised MDP both failed on cheetah-run with the video background
while the noiseless pixel Dreamer learned (``docs/results.md``), and their posteriors held no body. Online, the
model, the data (what the policy visits) and the settings (conv width, batch) change together. Here they are pulled
apart: episodes of uniformly random actions are rendered twice from the same physics, once noiseless and once with
the video background (same seed, same actions, so the same body at every step; one video on across the episodes or
one per episode, :func:`collect`), and the world model alone (eq. 5.4's model step,
:meth:`DenoisedMDPAgent.model_loss_fn`; no policy) is fitted on them under each setting of :data:`SETTINGS`. Every
``measure_every`` updates the held-out episodes are filtered with the posterior, decoded, and scored:

* ``body_error``: the reconstruction's squared error on the *body's* pixels (where the noiseless frame is not
  background, :func:`~platonic_rl.envs.dmc.background_mask`), divided by that of the training frames' per-pixel
  mean. 1 is no better than a constant image; 0 a perfect body.
* ``background_error``: the same on the background's pixels.
* ``probe_pose`` / ``probe_state``: held-out R^2 of ridge read-outs of the body's joint positions (qpos without
  rootx) and of its full state (qpos, qvel) from the posterior features ([h, state] of every factor), fitted on
  the first ``probe_train`` held-out episodes and scored on the rest (:func:`ridge_probe_r2`).
* ``recon_nll``: the reconstruction NLL per frame (what the model minimises; nats); beside it the mean over the
  training batches since the last measurement (``train``: every metric of the model step), where a gap shows frames
  the model has fitted but does not generalise from.

Each setting's curve is saved in ``<out-dir>/<setting>/record.json`` as soon as it finishes, so a run split over
several calls skips finished settings (a record made with other settings is refused). The frames are rendered anew each
call that fits something (about 12 s per episode for the two variants). Saves ``results.json``, ``fit.png`` (the
four scores against updates) and ``reconstructions.png`` (held-out frames and the reconstruction of each setting
fitted in this call).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import tyro

from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent, DenoisedMDPConfig
from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.presets import DMC_PRESETS, make_config
from platonic_rl.denoised.model import all_features, observe
from platonic_rl.envs.dmc import EPISODE_STEPS, TASKS, DMCEnv, background_mask
from platonic_rl.envs.replay import SequenceBuffer
from platonic_rl.replearn.probes import ridge_probe_r2
from platonic_rl.common.records import read_json, write_json

# name -> (pixel variant, conv width, sequences per batch, steps per sequence[, free nats]); None: the cpu preset's.
SETTINGS = {
    "noiseless": ("noiseless", None, None, None),
    "video": ("distractors", None, None, None),
    "video-width32": ("distractors", 32, None, None),   # the paper's conv width (D.2.1)
    "video-batch32": ("distractors", None, 32, None),   # twice the cpu preset's sequences (1024 frames)
    "video-batch50x50": ("distractors", None, 50, 50),  # DreamerV1's batch (2500 frames)
    "video-freenats10": ("distractors", None, None, None, 10.0),  # KL free up to 10 nats (the paper's 3)
}
RECORD = "record.json"
VIDEOS = ("one", "per-episode")  # collect's videos


@dataclasses.dataclass
class Args:
    task: str = "cheetah-run"
    settings: tuple[str, ...] = ("noiseless", "video", "video-width32")
    """Names in :data:`SETTINGS`, fitted one after the other."""
    method: Literal["dreamer", "denoised"] = "dreamer"
    episodes: int = 20
    """Training episodes of uniformly random actions (per variant)."""
    test_episodes: int = 6
    """Held-out episodes scored every ``measure_every`` updates."""
    probe_train: int = 4
    """Held-out episodes the probe's ridge read-outs are fitted on (scored on the remaining ones)."""
    episode_steps: int = EPISODE_STEPS // 2
    """Agent steps per episode (action repeat 2: 500 is a whole episode)."""
    videos: Literal["one", "per-episode"] = "one"
    """``one``: one video plays on across all episodes, as in the ``dmc`` env (the held-out episodes show the
    training episodes' gratings); ``per-episode``: each episode its own (held out: unseen gratings). See
    :func:`collect`."""
    updates: int = 1200
    measure_every: int = 200
    seed: int = 0
    out_dir: str = "build/dmc_pixel_fit"

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)}, got {self.task!r}")
        unknown = [s for s in self.settings if s not in SETTINGS]
        if unknown or not self.settings:
            raise ValueError(f"settings must be names in {list(SETTINGS)}, got {list(self.settings)}")
        for name in ("episodes", "episode_steps", "updates", "measure_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 2 <= self.probe_train + 1 <= self.test_episodes:
            raise ValueError(f"need 1 <= probe_train < test_episodes, got probe_train={self.probe_train}, "
                             f"test_episodes={self.test_episodes}")
        if self.updates % self.measure_every:
            raise ValueError(f"measure_every must divide updates, got {self.measure_every} and {self.updates}")


# ---------------------------------------------------------------------------------------------- data

def collect(task: str, episodes: int, steps: int, seed: int, videos: str = "one") -> dict[str, np.ndarray]:
    """``episodes`` episodes of ``steps`` uniformly random actions, each rendered noiseless and with the video
    background from the same physics (two envs, one seed, the same actions). ``videos="one"``: the envs are seeded
    once and the video plays on across episodes, as in the ``dmc`` benchmark's env (every episode shows the same
    gratings, at other phases); ``"per-episode"``: episode ``e`` is seeded ``seed + e``, so each has a procedural
    video of its own (gratings of new orientations and frequencies), as if every episode played another clip.
    Returns ``[E, steps + 1, ...]`` arrays: ``noiseless`` and ``video`` frames (uint8), ``body`` (bool ``[.., 64,
    64]``: not background in the noiseless frame), ``prev_actions`` (zero at the first step), ``rewards`` (zero at
    the first step) and ``agent_state`` (MuJoCo qpos without rootx, then qvel; ``pose``: its qpos part)."""
    if videos not in VIDEOS:
        raise ValueError(f"videos must be one of {VIDEOS}, got {videos!r}")
    out = {k: [] for k in ("noiseless", "video", "body", "prev_actions", "rewards", "agent_state")}
    pair = lambda s: [DMCEnv(task, v, s, observation="pixels") for v in ("noiseless", "distractors")]  # noqa: E731
    envs, rng = pair(seed), np.random.default_rng(seed)
    for e in range(episodes):
        if videos == "per-episode" and e > 0:
            envs, rng = pair(seed + e), np.random.default_rng(seed + e)
        reseed = videos == "per-episode" or e == 0  # "one": later episodes go on from the last one's state
        (plain, info), (video, _) = (env.reset(seed=seed + e if reseed else None) for env in envs)
        episode = dict(noiseless=[plain], video=[video], prev_actions=[np.zeros(envs[0].action_space.shape)],
                       rewards=[0.0], agent_state=[info["agent_state"]])
        for _ in range(steps):
            action = rng.uniform(envs[0].action_space.low, envs[0].action_space.high)
            (plain, reward, _, _, info), (video, _, _, _, video_info) = (env.step(action) for env in envs)
            if not np.array_equal(info["agent_state"], video_info["agent_state"]):
                raise RuntimeError("collect: the noiseless and video envs diverged under the same actions")
            for key, value in (("noiseless", plain), ("video", video), ("prev_actions", action), ("rewards", reward),
                               ("agent_state", info["agent_state"])):
                episode[key].append(value)
        for key, value in episode.items():
            out[key].append(np.asarray(value))
        out["body"].append(~background_mask(np.asarray(episode["noiseless"]), task))
    arrays = {k: np.stack(v) for k, v in out.items()}
    arrays["prev_actions"] = arrays["prev_actions"].astype(np.float32)
    arrays["rewards"] = arrays["rewards"].astype(np.float32)
    arrays["pose"] = arrays["agent_state"][..., :envs[0].position_dims]
    return arrays


def masked_error(images: np.ndarray, targets: np.ndarray, mask: np.ndarray) -> float:
    """Mean squared error of ``images`` against ``targets`` (``[..., H, W, 3]``, in the same units) over the pixels
    where ``mask`` ``[..., H, W]`` holds, all three channels; NaN where ``mask`` holds nowhere."""
    weight = np.broadcast_to(np.asarray(mask, bool)[..., None], targets.shape)
    count = weight.sum()
    if count == 0:
        return float("nan")
    return float(np.sum(np.square(np.asarray(images, np.float64) - targets) * weight) / count)


def scaled(frames) -> np.ndarray:
    """uint8 frames in the model's units: [-0.5, 0.5]."""
    return np.asarray(frames, np.float32) / 255.0 - 0.5


# ------------------------------------------------------------------------------------------- fitting

def setting_config(args: Args, setting: str, action_dim: int) -> tuple[DenoisedMDPConfig, int, int]:
    """(agent config, sequences per batch, steps per sequence) of ``setting``: the ``dmc`` benchmark's cpu preset
    for 64x64 pixels (:func:`~platonic_rl.benchmarks.presets.make_config`: Denoised MDP with Table D.5's beta and
    alpha 1; 3 free nats), with :data:`SETTINGS`' changes."""
    variant, width, batch_size, chunk, *free_nats = SETTINGS[setting]
    config = make_config(args.method, args.task, variant, (64, 64, 3), action_dim, "cpu")
    if width is not None:
        config = dataclasses.replace(config, model=dataclasses.replace(config.model, conv_width=width))
    if free_nats:
        config = dataclasses.replace(config, free_nats=free_nats[0])
    preset = DMC_PRESETS["cpu"]
    return config, batch_size or preset["batch_size"], chunk or preset["chunk"]


@functools.partial(jax.jit, static_argnames=("batch_size", "chunk"))
def model_step(agent: DenoisedMDPAgent, buffer: SequenceBuffer, key: jax.Array, batch_size: int, chunk: int):
    """One world-model step (eq. 5.4) on a batch of sequences sampled from ``buffer``; the policy is untouched."""
    sample_key, loss_key = jax.random.split(key)
    batch = buffer.sample(sample_key, batch_size, chunk)
    (_, (_, metrics)), grads = jax.value_and_grad(agent.model_loss_fn, has_aux=True)(
        agent.model_params, batch, loss_key)
    return agent.replace(model_state=agent.model_state.apply_gradients(grads)), metrics


@jax.jit
def posterior_and_reconstruction(agent: DenoisedMDPAgent, observations, prev_actions, key):
    """Posterior features ``[E, L, F]`` (every factor) and decoded frames ``[E, L, 64, 64, 3]`` of whole episodes."""
    m = agent.config.model
    states, _ = observe(m, agent.model_params, observations, prev_actions, key)
    feats = all_features(m, states)
    return feats, agent.model.apply(agent.model_params, feats, method="decode")


def measure(agent, data: dict, frames: np.ndarray, mean_frame: np.ndarray, args: Args, key) -> dict:
    """The scores of the module docstring on the held-out ``data`` (observed as ``frames``)."""
    feats, recon = posterior_and_reconstruction(agent, jnp.asarray(frames), jnp.asarray(data["prev_actions"]), key)
    feats, recon, target = np.asarray(feats), np.asarray(recon), scaled(frames)
    body = data["body"]
    constant = np.broadcast_to(mean_frame, target.shape)
    scores = dict(body_error=masked_error(recon, target, body) / masked_error(constant, target, body),
                  background_error=masked_error(recon, target, ~body) / masked_error(constant, target, ~body),
                  recon_nll=float(0.5 * np.mean(np.sum(np.square(recon - target), axis=(-3, -2, -1)))))
    n = args.probe_train
    flat = lambda x: x.reshape((-1, x.shape[-1]))  # noqa: E731
    groups = np.repeat(np.arange(n), feats.shape[1])
    for name, target_ in (("probe_pose", data["pose"]), ("probe_state", data["agent_state"])):
        scores[name] = ridge_probe_r2(flat(feats[:n]), flat(target_[:n]), flat(feats[n:]), flat(target_[n:]),
                                      alpha=None, groups=groups)
    return scores, recon


def fit(args: Args, setting: str, train: dict, test: dict) -> tuple[dict, np.ndarray]:
    """Fit one setting's world model; returns its record and its last reconstruction of the held-out episodes."""
    variant = SETTINGS[setting][0]
    frames = "noiseless" if variant == "noiseless" else "video"
    config, batch_size, chunk = setting_config(args, setting, train["prev_actions"].shape[-1])
    agent = DenoisedMDPAgent.create(config, args.seed)
    buffer = SequenceBuffer(observations=jnp.asarray(train[frames]), prev_actions=jnp.asarray(train["prev_actions"]),
                            rewards=jnp.asarray(train["rewards"]), size=jnp.int32(len(train[frames])),
                            insert_at=jnp.int32(0))
    mean_frame = scaled(train[frames]).mean(axis=(0, 1))
    key = jax.random.PRNGKey(args.seed)
    curve, seconds, losses = [], 0.0, []
    for update in range(1, args.updates + 1):
        key, step_key = jax.random.split(key)
        start = time.time()
        agent, metrics = model_step(agent, buffer, step_key, batch_size, chunk)
        losses.append({k: float(v) for k, v in metrics.items()})
        seconds += time.time() - start
        if update % args.measure_every == 0:
            scores, recon = measure(agent, test, test[frames], mean_frame, args, jax.random.PRNGKey(1))
            train_metrics = {k: float(np.mean([m[k] for m in losses])) for k in losses[0]}
            curve.append(dict(updates=update, **scores, train=train_metrics))
            losses = []
            print(f"{setting} {update}: " + ", ".join(f"{k} {v:.3f}" for k, v in scores.items())
                  + f", kl {train_metrics.get('kl_x', float('nan')):.2f}, {seconds / update:.2f} s/update", flush=True)
    record = dict(setting=setting, settings=setting_settings(args, setting), curve=curve,
                  seconds_per_update=seconds / args.updates, agent_config=dataclasses.asdict(config),
                  batch_size=batch_size, chunk=chunk)
    return record, recon


def setting_settings(args: Args, setting: str) -> dict:
    """What a finished setting's record must match to be reused."""
    keep = ("task", "method", "episodes", "test_episodes", "probe_train", "episode_steps", "videos", "updates",
            "measure_every", "seed")
    return dict(setting=list(SETTINGS[setting]), **{k: getattr(args, k) for k in keep})


def run(args: Args) -> dict:
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    action_dim = DMCEnv(args.task, "noiseless", 0, observation="pixels").action_space.shape[0]
    for setting in args.settings:
        _, _, chunk = setting_config(args, setting, action_dim)
        if chunk > args.episode_steps + 1:
            raise ValueError(f"episode_steps must be at least {chunk - 1} for setting {setting!r} (its sequences are "
                             f"{chunk} steps long), got {args.episode_steps}")
    records, reconstructions, todo = [], {}, []
    for setting in args.settings:
        path = out / setting / RECORD
        if path.exists():
            saved = read_json(path, "a finished setting's record")
            if saved["settings"] != json.loads(json.dumps(setting_settings(args, setting))):
                raise ValueError(f"{path} was made with other settings ({saved['settings']}); remove it or give "
                                 f"another --out-dir")
            print(f"{setting}: finished in {path.parent}, its record reused", flush=True)
            records.append(saved)
        else:
            todo.append(setting)
            records.append(None)
    extra, plots = {}, {"fit.png": lambda path: plot_fit(path, args, records)}
    if todo:  # render the frames only when something is to be fitted
        start = time.time()
        data = collect(args.task, args.episodes + args.test_episodes, args.episode_steps, args.seed, args.videos)
        extra = dict(collect_seconds=time.time() - start, body_pixel_share=float(data["body"].mean()))
        train = {k: v[:args.episodes] for k, v in data.items()}
        test = {k: v[args.episodes:] for k, v in data.items()}
        for i, setting in enumerate(args.settings):
            if setting in todo:
                records[i], reconstructions[setting] = fit(args, setting, train, test)
                (out / setting).mkdir(exist_ok=True)
                write_json(out / setting / RECORD, records[i])
        plots["reconstructions.png"] = lambda path: plot_reconstructions(path, args, test, reconstructions)
    return report.save_run(out, "platonic_rl.benchmarks.dmc_pixel_fit", args, dict(records=records, **extra),
                           table=format_table(records), plots=plots, total_seconds=time.time() - t0)


# ------------------------------------------------------------------------------------------ reporting

SCORES = (("body_error", "body pixels: error / constant image's"), ("background_error",
          "background pixels: error / constant image's"), ("probe_pose", "R^2, joint positions from the latent"),
          ("probe_state", "R^2, positions + velocities from the latent"))


def format_table(records: list[dict]) -> str:
    lines = ["setting | conv width | batch | s/update | " + " | ".join(k for k, _ in SCORES)
             + " | recon NLL (nats), held out | on training batches",
             "--- | " * (6 + len(SCORES)) + "---"]
    for r in records:
        last = r["curve"][-1]
        lines.append(f"{r['setting']} | {r['agent_config']['model']['conv_width']} | "
                     f"{r['batch_size']} x {r['chunk']} | {r['seconds_per_update']:.2f} | "
                     + " | ".join(f"{last[k]:.3f}" for k, _ in SCORES)
                     + f" | {last['recon_nll']:.1f} | {last['train'].get('recon_nll', float('nan')):.1f}")
    return f"After {records[0]['curve'][-1]['updates']} world-model updates, held-out episodes:\n" + "\n".join(lines)


def _title(args: Args) -> str:
    return (f"{args.method} world model fitted offline on {args.episodes} random-action episodes of {args.task} "
            f"({args.episode_steps} agent steps each, 64x64 pixels; "
            f"{'one video on across episodes' if args.videos == 'one' else 'a video per episode'}), "
            f"cpu preset unless the setting says otherwise; "
            f"scored on {args.test_episodes} held-out episodes, seed {args.seed}")


def plot_fit(path: Path, args: Args, records: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SCORES), figsize=(4.2 * len(SCORES), 4.0))
    for ax, (key, label) in zip(axes, SCORES):
        for r in records:
            ax.plot([c["updates"] for c in r["curve"]], [c[key] for c in r["curve"]], marker="o", label=r["setting"])
        ax.set_xlabel("world-model updates")
        ax.set_ylabel(label)
        ax.axhline(1.0 if "error" in key else 0.0, color="gray", lw=0.8, ls="--")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    report.suptitle(fig, "What the pixel world model holds of the body\n" + _title(args), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_reconstructions(path: Path, args: Args, test: dict, reconstructions: dict, frames: int = 4):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episode = args.test_episodes - 1
    steps = np.linspace(0, args.episode_steps, frames + 2).astype(int)[1:-1]
    rows = [("noiseless frame", test["noiseless"][episode]), ("video frame", test["video"][episode])]
    rows += [(f"{name}\nreconstruction", np.clip(recon[episode] + 0.5, 0, 1))
             for name, recon in reconstructions.items()]
    fig, axes = plt.subplots(len(rows), frames, squeeze=False, figsize=(1.8 * frames + 1.2, 1.9 * len(rows) + 0.9))
    for i, (label, images) in enumerate(rows):
        for j, step in enumerate(steps):
            axes[i, j].imshow(images[step])
            axes[i, j].set_xticks([])
            axes[i, j].set_yticks([])
            if i == 0:
                axes[i, j].set_title(f"agent step {step}", fontsize=8)
            if j == 0:
                axes[i, j].set_ylabel(label, fontsize=8)
    report.suptitle(fig, f"Held-out episode {episode}, after {args.updates} updates\n" + _title(args), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main():
    run(tyro.cli(Args))


if __name__ == "__main__":
    main()
