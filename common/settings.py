"""How a config field behaves when a run resumes, said where the field is declared.

    @dataclasses.dataclass(frozen=True)
    class TrainConfig:
        steps: int = budget(20_000)        # a resumed run may continue to a new budget
        batch_size: int = 1024             # any other value defines the run: a resume with another is refused
        progress: bool = host_setting(True)  # changes neither the updates nor the metrics

    fields_on_resume(TrainConfig)          # ("steps", "progress"): what a resumed run may change
    fields_on_resume(config, HOST)         # ("progress",): what a record of the run leaves out
    budget_paths(config, "train_config")   # ("train_config.steps",): the settings a resumed run may change
    recorded_fields(config, HOST)          # {"steps": ..., "batch_size": ...}: the config as a record keeps it

A run directory (``training.run.RunDirectory``) compares everything else with the run it holds and refuses a resume
that differs; a loop decides how a new budget is reached (more updates, a larger replay buffer).
"""
from __future__ import annotations

import dataclasses
from typing import Any

ON_RESUME = "on_resume"  # the field metadata's key
BUDGET = "budget"        # how far the run goes (and what grows with it, as the replay capacity)
HOST = "host"            # how the host drives the run (checkpoints, progress, calls): no update or metric changes


def budget(default: Any) -> Any:
    """A field a resumed run may change: how far the run goes, or what grows with it."""
    return dataclasses.field(default=default, metadata={ON_RESUME: BUDGET})


def host_setting(default: Any) -> Any:
    """A field a resumed run may change that changes neither the updates nor the metrics rows."""
    return dataclasses.field(default=default, metadata={ON_RESUME: HOST})


def fields_on_resume(config: Any, *kinds: str) -> tuple[str, ...]:
    """The fields of ``config`` (a config dataclass or an instance) declared with one of ``kinds`` (default: both
    :data:`BUDGET` and :data:`HOST`), in declaration order."""
    kinds = kinds or (BUDGET, HOST)
    unknown = set(kinds) - {BUDGET, HOST}
    if unknown:
        raise ValueError(f"kinds must be among {BUDGET!r} and {HOST!r}, got {sorted(unknown)}")
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"config must be a config dataclass or one of its instances, got {type(config).__name__}")
    return tuple(f.name for f in dataclasses.fields(config) if f.metadata.get(ON_RESUME) in kinds)


def budget_paths(config: Any, under: str) -> tuple[str, ...]:
    """The settings paths (``"<under>.<field>"``) of ``config``'s :data:`BUDGET` fields: what a run directory lets a
    resumed run change when the loop records ``config`` under ``under``."""
    return tuple(f"{under}.{name}" for name in fields_on_resume(config, BUDGET))


def recorded_fields(config: Any, *left_out: str, keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """``config`` (a config dataclass instance) as a dict of its fields, without those declared with one of the kinds
    ``left_out`` (at least one: :data:`BUDGET`, :data:`HOST`) other than the fields named in ``keep``: what a run's
    record keeps of its config."""
    if not left_out:
        raise ValueError(f"left_out must name at least one of {BUDGET!r} and {HOST!r}")
    dropped = set(fields_on_resume(config, *left_out)) - set(keep)
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in dropped}
