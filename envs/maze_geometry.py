"""The maze2d layouts' continuous free space: uniform positions in it and exact shortest-path distances.

    rng = np.random.default_rng(0)
    positions = maze_geometry.sample_free_positions("medium", 2000, rng)   # [2000, 2], D4RL coordinates
    d = maze_geometry.geodesic_distances("medium", positions)              # [2000, 2000]
    grid, walls = maze_geometry.resting_grid(maze2d.get_layout("medium"))  # a grid of positions per cell

The point's centre moves in the **free space** of the layout: the plane minus every wall cell grown by the
ball's ``radius`` (0.1, :data:`~platonic_rl.envs.point_maze.RADIUS`), each wall an axis-aligned square
``[i - 0.7 - r, i + 0.3 + r] x [j - 0.7 - r, j + 0.3 + r]`` (cell (i, j) is centred at (i - 0.2, j - 0.2)).
With polygonal obstacles a shortest path is a polyline that bends only at obstacle corners, so the distance is
exact from a visibility graph: two points see each other when the open segment between them enters no grown
wall; the corners are the grown walls' corners that lie in the free space; corner-to-corner distances come from
Floyd-Warshall, and

    d(s, t) = |s - t|                                                     if s sees t,
            = min over corners c, c' seen by s and t of |s - c| + D(c, c') + |c' - t|   otherwise.

(The exact free space has corners rounded with radius r; square corners make a path that turns by 90 degrees around
one longer by at most (2 - pi / 2) r, 0.04 cells.)
"""
from __future__ import annotations

import numpy as np
import scipy.stats

from platonic_rl.envs import maze2d

RADIUS = 0.1  # the ball's radius (the physics' RADIUS in platonic_rl.envs.point_maze)
_EPS = 1e-9


def wall_boxes(layout: str | maze2d.Layout, radius: float = RADIUS) -> np.ndarray:
    """``[walls, 4]`` the grown wall squares ``(x_low, y_low, x_high, y_high)`` in D4RL coordinates."""
    cells = np.argwhere(maze2d.get_layout(layout).walls).astype(np.float64)
    low = cells - 0.5 - maze2d.CELL_OFFSET - radius
    return np.concatenate([low, low + 1.0 + 2 * radius], axis=1)


def _inside(points: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """``[n]`` True where a point lies strictly inside any box."""
    p = points[:, None, :]
    return np.any(np.all((p > boxes[None, :, :2] + _EPS) & (p < boxes[None, :, 2:] - _EPS), axis=-1), axis=1)


def sample_free_positions(layout: str | maze2d.Layout, n: int, rng: np.random.Generator,
                          radius: float = RADIUS) -> np.ndarray:
    """``[n, 2]`` positions uniform over the free space of ``layout`` (rejection sampling in its bounding box)."""
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"sample_free_positions: n must be a positive int, got {n!r}")
    boxes = wall_boxes(layout, radius)
    rows, cols = maze2d.get_layout(layout).shape
    low = np.array([-0.5, -0.5]) - maze2d.CELL_OFFSET
    high = np.array([rows, cols], np.float64) - 0.5 - maze2d.CELL_OFFSET
    kept = np.zeros((0, 2))
    while len(kept) < n:
        candidates = rng.uniform(low, high, size=(4 * n, 2))
        kept = np.concatenate([kept, candidates[~_inside(candidates, boxes)]])
    return kept[:n]


def _visible(a: np.ndarray, b: np.ndarray, boxes: np.ndarray, chunk: int = 1 << 14) -> np.ndarray:
    """``[len(a), len(b)]`` True where the segment a_i -> b_j enters no box's interior (slab test per box)."""
    out = np.empty((len(a), len(b)), bool)
    lo, hi = boxes[:, :2], boxes[:, 2:]
    rows = max(1, chunk // max(len(b), 1))
    for start in range(0, len(a), rows):
        p = a[start:start + rows, None, None, :]        # [r, 1, 1, 2]
        q = b[None, :, None, :]                          # [1, m, 1, 2]
        d = q - p
        with np.errstate(divide="ignore", invalid="ignore"):
            t1 = (lo - p) / d
            t2 = (hi - p) / d
        parallel = np.abs(d) < _EPS                      # the segment does not move along this axis
        within = (p > lo + _EPS) & (p < hi - _EPS)      # ... and lies strictly between the slab's sides
        t_enter = np.where(parallel, np.where(within, -np.inf, np.inf), np.minimum(t1, t2)).max(-1)
        t_exit = np.where(parallel, np.where(within, np.inf, -np.inf), np.maximum(t1, t2)).min(-1)
        enters = (np.maximum(t_enter, 0.0) < np.minimum(t_exit, 1.0) - _EPS)  # [r, m, walls]
        out[start:start + rows] = ~enters.any(-1)
    return out


def _corners(boxes: np.ndarray) -> np.ndarray:
    """The grown walls' corners that lie in the free space (not strictly inside another grown wall)."""
    x0, y0, x1, y1 = boxes.T
    corners = np.unique(np.concatenate([np.stack([x, y], 1) for x in (x0, x1) for y in (y0, y1)]).round(9), axis=0)
    return corners[~_inside(corners, boxes)]


def _min_plus(a: np.ndarray, b: np.ndarray, chunk: int = 256) -> np.ndarray:
    """``(a (min,+) b)_ij = min_k a_ik + b_kj``, in row chunks."""
    return np.concatenate([np.min(a[i:i + chunk, :, None] + b[None], axis=1) for i in range(0, len(a), chunk)])


def geodesic_distances(layout: str | maze2d.Layout, positions: np.ndarray, targets: np.ndarray | None = None,
                       radius: float = RADIUS) -> np.ndarray:
    """``[n, m]`` shortest-path lengths in the free space from each of ``positions [n, 2]`` to each of
    ``targets [m, 2]`` (default: ``positions``), in D4RL units (one cell = 1). Raises ``ValueError`` for a
    point inside a (grown) wall."""
    positions = np.asarray(positions, np.float64)
    targets = positions if targets is None else np.asarray(targets, np.float64)
    for name, x in (("positions", positions), ("targets", targets)):
        if x.ndim != 2 or x.shape[1] != 2:
            raise ValueError(f"geodesic_distances: {name} must have shape [n, 2], got {x.shape}")
    boxes = wall_boxes(layout, radius)
    for name, x in (("positions", positions), ("targets", targets)):
        bad = np.flatnonzero(_inside(x, boxes))
        if len(bad):
            raise ValueError(f"geodesic_distances: {name}[{bad[0]}] = {x[bad[0]].tolist()} lies inside a wall "
                             f"(grown by radius {radius}); {len(bad)} such rows")
    euclid = lambda a, b: np.linalg.norm(a[:, None] - b[None], axis=-1)  # noqa: E731
    corners = _corners(boxes)
    between = np.where(_visible(corners, corners, boxes), euclid(corners, corners), np.inf)
    for k in range(len(corners)):  # Floyd-Warshall over the corners
        between = np.minimum(between, between[:, k:k + 1] + between[k:k + 1, :])
    to_corners = np.where(_visible(positions, corners, boxes), euclid(positions, corners), np.inf)
    from_corners = np.where(_visible(corners, targets, boxes), euclid(corners, targets), np.inf)
    via = _min_plus(_min_plus(to_corners, between), from_corners)
    direct = np.where(_visible(positions, targets, boxes), euclid(positions, targets), np.inf)
    return np.minimum(direct, via)


def resting_grid(layout: maze2d.Layout, per_cell: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """``per_cell x per_cell`` positions per maze cell (D4RL coordinates) ``[R, C, 2]`` and whether each is
    inside a wall ``[R, C]``."""
    rows, cols = layout.shape
    a = (np.arange(rows * per_cell) + 0.5) / per_cell - 0.5 - maze2d.CELL_OFFSET
    b = (np.arange(cols * per_cell) + 0.5) / per_cell - 0.5 - maze2d.CELL_OFFSET
    grid = np.stack(np.meshgrid(a, b, indexing="ij"), -1)
    cells = maze2d.cell_of(grid)
    return grid, layout.walls[cells[..., 0], cells[..., 1]]


def shortest_path_rank_correlation(learned: np.ndarray, layout: maze2d.Layout, goal: tuple[int, int],
                                   per_cell: int = 8) -> float:
    """Spearman's rank correlation between a distance ``learned [R, C]`` on :func:`resting_grid`'s positions
    and the true shortest-path distance (in cells) of each position's cell to ``goal``, over free positions
    that can reach the goal. 1: the learned distance orders the maze as the shortest path does."""
    grid, walls = resting_grid(layout, per_cell)
    learned = np.asarray(learned, np.float64)
    if learned.shape != walls.shape:
        raise ValueError(f"learned must have the grid's shape {walls.shape}, got {learned.shape}")
    cells = maze2d.cell_of(grid)
    true = maze2d.cell_distances(layout, goal)[cells[..., 0], cells[..., 1]]
    free = ~walls & np.isfinite(true)
    return float(scipy.stats.spearmanr(learned[free], true[free]).statistic)
