"""Shortest paths in the point maze's free space: hand-computed, against straight lines, and their invariants."""
import numpy as np
import pytest

from platonic_rl.envs import maze2d, maze_geometry


def test_around_the_umaze_wall_hand_computed():
    # umaze: cells (1, 1) and (3, 1) are separated by the wall row (2, 0..2); the grown wall cell (2, 2) spans
    # [1.2, 2.4]^2, so the path bends at its corners (1.2, 2.4) and (2.4, 2.4).
    start, goal = np.array([[0.8, 0.8]]), np.array([[2.8, 0.8]])
    leg = np.hypot(0.4, 1.6)
    assert maze_geometry.geodesic_distances("umaze", start, goal)[0, 0] == pytest.approx(2 * leg + 1.2, abs=1e-9)
    # Within the top corridor (row 1) the path is straight.
    a, b = np.array([[0.8, 0.7]]), np.array([[0.8, 2.6]])
    assert maze_geometry.geodesic_distances("umaze", a, b)[0, 0] == pytest.approx(1.9, abs=1e-9)


@pytest.mark.parametrize("layout", ["umaze", "medium"])
def test_geodesic_distances_are_a_metric_at_least_euclidean(layout):
    rng = np.random.default_rng(0)
    p = maze_geometry.sample_free_positions(layout, 120, rng)
    d = maze_geometry.geodesic_distances(layout, p)
    euclid = np.linalg.norm(p[:, None] - p[None], axis=-1)
    assert np.all(np.isfinite(d))
    np.testing.assert_allclose(d, d.T, atol=1e-9)
    np.testing.assert_allclose(np.diag(d), 0.0, atol=1e-12)
    assert np.all(d >= euclid - 1e-9)
    assert np.all(d[:, :, None] <= d[:, None, :] + d.T[None, :, :] + 1e-9)  # d(i,j) <= d(i,k) + d(k,j)
    assert np.mean(d > euclid + 1e-6) > 0.1  # walls lengthen many paths
    # Rows of other targets are the same distances.
    np.testing.assert_allclose(maze_geometry.geodesic_distances(layout, p[:7], p[50:60]), d[:7, 50:60], atol=1e-9)


def test_sampled_positions_are_free_and_spread_over_the_maze():
    p = maze_geometry.sample_free_positions("medium", 4000, np.random.default_rng(1))
    boxes = maze_geometry.wall_boxes("medium")
    inside = (p[:, None] > boxes[None, :, :2]) & (p[:, None] < boxes[None, :, 2:])
    assert not np.any(np.all(inside, -1))
    cells = np.unique(np.rint(p + 0.2).astype(int), axis=0)
    assert len(cells) == 26  # every free cell of medium is visited
    with pytest.raises(ValueError, match="n must be a positive int"):
        maze_geometry.sample_free_positions("medium", 0, np.random.default_rng(0))


def test_points_inside_walls_and_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"positions\[1\].*inside a wall"):
        maze_geometry.geodesic_distances("umaze", np.array([[0.8, 0.8], [1.8, 0.8]]))
    with pytest.raises(ValueError, match=r"targets must have shape \[n, 2\]"):
        maze_geometry.geodesic_distances("umaze", np.array([[0.8, 0.8]]), np.zeros((2, 3)))


def test_shortest_path_rank_correlation_of_the_true_distance_is_one():
    layout = maze2d.get_layout("medium")
    goal = layout.goal_cell
    grid, walls = maze_geometry.resting_grid(layout, per_cell=4)
    cells = maze2d.cell_of(grid)
    true = maze2d.cell_distances(layout, goal)[cells[..., 0], cells[..., 1]]
    learned = np.where(walls, 1e6, np.nan_to_num(true, posinf=1e6))  # wall values must be ignored
    learned = learned + 1e-3 * np.random.default_rng(0).random(learned.shape)  # ties within a cell
    assert maze_geometry.shortest_path_rank_correlation(np.sqrt(learned), layout, goal, per_cell=4) > 0.99  # monotone
    assert maze_geometry.shortest_path_rank_correlation(-learned, layout, goal, per_cell=4) < -0.99
    scrambled = np.random.default_rng(1).permutation(learned.reshape(-1)).reshape(learned.shape)
    assert abs(maze_geometry.shortest_path_rank_correlation(scrambled, layout, goal, per_cell=4)) < 0.2
    with pytest.raises(ValueError, match="learned must have the grid's shape"):
        maze_geometry.shortest_path_rank_correlation(learned[:-1], layout, goal, per_cell=4)
