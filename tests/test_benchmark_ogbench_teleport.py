"""The teleport maze's diagnosis: OGBench's teleporters read from its env, teleports found in recorded positions,
and each task's shares counted by hand."""
import numpy as np
import pytest

from platonic_rl.benchmarks import ogbench_teleport


def test_the_teleport_mazes_exits_are_read_and_the_walled_in_one_named():
    pytest.importorskip("ogbench")
    from platonic_rl.envs import ogbench_maze

    ports = ogbench_teleport.teleporters(ogbench_maze.make_env("pointmaze-teleport-v0"))
    assert ports["outbound_cells"] == [[1, 7], [6, 1], [6, 10]] and ports["walled_in"] == [True, False, False]
    assert ports["inbound"].shape == (2, 2) and ports["radius"] == 1.5
    with pytest.raises(ValueError, match="has no teleporters"):
        ogbench_teleport.teleporters(ogbench_maze.make_env("pointmaze-medium-v0"))


def test_episode_shares_count_teleports_walled_in_ends_and_failed_cells():
    walk = np.cumsum(np.full((1, 6, 2), 0.2), 1)                   # moves 0.28 a step: no teleport
    jump = walk.copy()
    jump[0, 3:] += 10.0                                             # one step of 10: a teleport
    trapped = jump.copy()
    trapped[0, 3:] = [20.0, 20.0]                                  # lands at the walled-in exit and stays
    result = dict(trajectories=[dict(positions=np.concatenate([walk, jump, trapped]))],
                  steps=[np.array([5, 1000, 1000])])                # the first arrived, the others failed
    ports = dict(outbound=np.array([[20.0, 20.0], [0.0, 0.0]]), walled_in=[True, False])
    (row,) = ogbench_teleport.episode_report(result, ports, 4.0, lambda p: (int(p[1] // 4), int(p[0] // 4)))
    assert row["success"] == pytest.approx(1 / 3) and row["teleported"] == pytest.approx(2 / 3)
    assert row["trapped"] == pytest.approx(1 / 3) and row["success_without_teleport"] == 1.0
    assert row["episodes_without_teleport"] == 1 and row["failed_ends"] == [[2, 2, 1], [5, 5, 1]]

