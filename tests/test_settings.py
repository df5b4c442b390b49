import dataclasses

import pytest

from platonic_rl.common.settings import (BUDGET, HOST, budget, budget_paths, fields_on_resume, host_setting,
                                         recorded_fields)
from platonic_rl.training.run import RunDirectory, RunDirectoryError


@dataclasses.dataclass(frozen=True)
class Loop:
    steps: int = budget(100)
    """How far the run goes."""
    width: int = 8
    progress: bool = host_setting(True)


def test_fields_say_where_they_are_declared_what_a_resume_may_change():
    assert fields_on_resume(Loop) == ("steps", "progress") == fields_on_resume(Loop(), BUDGET, HOST)
    assert fields_on_resume(Loop(), BUDGET) == ("steps",) and fields_on_resume(Loop, HOST) == ("progress",)
    assert Loop().steps == 100 and dataclasses.replace(Loop(), steps=5).steps == 5  # plain defaults otherwise
    assert budget_paths(Loop(), "loop") == ("loop.steps",)  # what a loop recording Loop under "loop" lets grow


def test_a_run_directory_resumes_across_the_declared_fields_only(tmp_path):
    def open_with(loop):
        return RunDirectory.open(tmp_path, dict(loop=loop), resume=True, overwrite=False,
                                 resumable=tuple(f"loop.{k}" for k in fields_on_resume(loop)))

    open_with(Loop()).close()
    open_with(Loop(steps=200, progress=False)).close()
    with pytest.raises(RunDirectoryError, match="loop.width: saved 8, now 16"):
        open_with(Loop(width=16))


def test_the_loops_declare_their_budgets_and_host_settings():
    from platonic_rl.training.device_loop import DeviceLoopConfig
    from platonic_rl.training.goal_online import OnlineConfig
    from platonic_rl.training.offline import TrainConfig
    from platonic_rl.training.world_model import DMCOnlineConfig

    assert fields_on_resume(TrainConfig, BUDGET) == ("steps",)
    assert fields_on_resume(OnlineConfig, BUDGET) == fields_on_resume(DMCOnlineConfig, BUDGET) == (
        "env_steps", "buffer_episodes")
    assert fields_on_resume(DeviceLoopConfig, BUDGET) == ("iterations",)
    for config in (TrainConfig, OnlineConfig, DMCOnlineConfig, DeviceLoopConfig):
        host = set(fields_on_resume(config, HOST))
        assert "checkpoint_every" in host and not host & {"batch_size", "seed", "discount"}, config.__name__


def test_bad_arguments():
    with pytest.raises(ValueError, match="kinds must be among"):
        fields_on_resume(Loop, "grows")
    with pytest.raises(TypeError, match="config must be a config dataclass"):
        fields_on_resume(dict(steps=1))


def test_a_record_keeps_the_config_without_the_left_out_kinds():
    loop = Loop(steps=5, width=16, progress=False)
    assert recorded_fields(loop, HOST) == dict(steps=5, width=16)
    assert recorded_fields(loop, BUDGET, HOST) == dict(width=16)
    assert recorded_fields(loop, BUDGET, HOST, keep=("steps",)) == dict(steps=5, width=16)
    with pytest.raises(ValueError, match="left_out must name at least one"):
        recorded_fields(loop)
