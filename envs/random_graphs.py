"""Random directed graphs with exact shortest-path quasimetrics (dissertation appendix B.4.2).

Generation of an n-vertex graph with feature dimension d and parameters (rho_un, rho_di):

1. connect a random rho_un fraction of the n (n - 1) / 2 vertex pairs by an undirected edge (two opposite
   directed edges);
2. optimise an [n, d] feature matrix on the unit sphere with L_align(2) + 0.3 L_uniform(3), connected
   vertices being positive pairs (so features carry the graph's structure);
3. draw a random tanh network g: d -> width -> width -> width -> width -> 1 (the paper uses width 4096);
4. make the rho_di fraction of connected pairs with the largest |g(u) - g(v)| one-way, keeping only the
   edge towards the vertex with larger g, so one-way edges run "uphill" and form long one-way paths.

``block_graph`` builds the third structure of the paper (10 dense 30-vertex graphs wired through one
representative each, following a sparse 10-vertex supergraph). Distances are unweighted shortest paths
from SciPy's csgraph (inf where unreachable). Everything is seeded by a NumPy generator.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.sparse
import scipy.sparse.csgraph

from platonic_rl.replearn.objectives import align_loss, uniform_loss


@dataclasses.dataclass(frozen=True)
class Graph:
    features: np.ndarray   # [n, d] float32
    adjacency: np.ndarray  # [n, n] bool, adjacency[u, v]: edge u -> v
    distances: np.ndarray  # [n, n] float32, shortest-path hops, inf if unreachable

    @property
    def num_nodes(self) -> int:
        return self.features.shape[0]


def shortest_paths(adjacency: np.ndarray) -> np.ndarray:
    """All-pairs unweighted shortest paths (BFS), ``inf`` where unreachable; ``[n, n]`` float32."""
    adjacency = np.asarray(adjacency, bool)
    if adjacency.ndim != 2 or adjacency.shape[0] != adjacency.shape[1]:
        raise ValueError(f"adjacency must be a square [n, n] matrix, got shape {adjacency.shape}")
    graph = scipy.sparse.csr_matrix(adjacency.astype(np.float32))
    return scipy.sparse.csgraph.shortest_path(graph, directed=True, unweighted=True).astype(np.float32)


def _undirected_pairs(rng: np.random.Generator, n: int, rho_un: float) -> np.ndarray:
    iu, ju = np.triu_indices(n, k=1)
    count = int(round(rho_un * len(iu)))
    chosen = rng.choice(len(iu), size=count, replace=False)
    return np.stack([iu[chosen], ju[chosen]], axis=1)


def _optimise_features(rng: np.random.Generator, n: int, dim: int, pairs: np.ndarray,
                       steps: int = 300) -> np.ndarray:
    """Features on S^{dim-1} minimising L_align(2) + 0.3 L_uniform(3) with connected pairs positive."""
    init = rng.normal(size=(n, dim)).astype(np.float32)
    optimiser = optax.adam(1e-2)

    def loss(raw):
        f = raw / jnp.linalg.norm(raw, axis=-1, keepdims=True)
        aligned = align_loss(f[pairs[:, 0]], f[pairs[:, 1]]) if len(pairs) else 0.0
        return aligned + 0.3 * uniform_loss(f, t=3.0)

    def step(carry, _):
        raw, state = carry
        grads = jax.grad(loss)(raw)
        updates, state = optimiser.update(grads, state)
        return (optax.apply_updates(raw, updates), state), None

    raw = jnp.asarray(init)
    (raw, _), _ = jax.lax.scan(step, (raw, optimiser.init(raw)), None, length=steps)
    return np.asarray(raw / jnp.linalg.norm(raw, axis=-1, keepdims=True), np.float32)


def _random_tanh_net(rng: np.random.Generator, x: np.ndarray, width: int, depth: int = 4) -> np.ndarray:
    """A randomly initialised d-width-...-width-1 tanh network (fully connected default init)."""
    h = x.astype(np.float32)
    for out in [width] * depth + [1]:
        bound = 1.0 / np.sqrt(h.shape[1])
        w = rng.uniform(-bound, bound, size=(h.shape[1], out)).astype(np.float32)
        b = rng.uniform(-bound, bound, size=out).astype(np.float32)
        h = h @ w + b
        if out != 1:
            h = np.tanh(h)
    return h[:, 0]


def random_graph(rng: np.random.Generator, n: int, rho_un: float, rho_di: float, feature_dim: int = 64,
                 width: int = 1024) -> Graph:
    """An n-vertex random directed graph (see the module docstring)."""
    if n < 2 or not 0 <= rho_un <= 1 or not 0 <= rho_di <= 1:
        raise ValueError(f"need n >= 2 and rho_un, rho_di in [0, 1]; got n={n}, rho_un={rho_un}, "
                         f"rho_di={rho_di}")
    pairs = _undirected_pairs(rng, n, rho_un)
    features = _optimise_features(rng, n, feature_dim, pairs)
    g = _random_tanh_net(rng, features, width)
    adjacency = np.zeros((n, n), bool)
    adjacency[pairs[:, 0], pairs[:, 1]] = adjacency[pairs[:, 1], pairs[:, 0]] = True
    diff = g[pairs[:, 0]] - g[pairs[:, 1]]
    one_way = np.argsort(-np.abs(diff))[: int(round(rho_di * len(pairs)))]
    for (u, v), delta in zip(pairs[one_way], diff[one_way]):
        low, high = (v, u) if delta > 0 else (u, v)
        adjacency[high, low] = False  # keep only low -> high
    return Graph(features, adjacency, shortest_paths(adjacency))


def block_graph(rng: np.random.Generator, blocks: int = 10, block_size: int = 30,
                width: int = 1024) -> Graph:
    """Sparse graph with block structure (Figure B-8): dense blocks (rho_un 0.18, rho_di 0.15, 32-dim
    features) wired like a sparse supergraph (rho_un 0.22, rho_di 0.925) through one representative
    vertex per block; vertex features = block features :: supergraph vertex features (64-dim)."""
    super_graph = random_graph(rng, blocks, 0.22, 0.925, feature_dim=32, width=width)
    n = blocks * block_size
    adjacency = np.zeros((n, n), bool)
    features, representatives = [], []
    for b in range(blocks):
        block = random_graph(rng, block_size, 0.18, 0.15, feature_dim=32, width=width)
        sl = slice(b * block_size, (b + 1) * block_size)
        adjacency[sl, sl] = block.adjacency
        features.append(np.concatenate(
            [block.features, np.repeat(super_graph.features[b][None], block_size, axis=0)], axis=1))
        representatives.append(b * block_size + int(rng.integers(block_size)))
    reps = np.asarray(representatives)
    adjacency[np.ix_(reps, reps)] |= super_graph.adjacency
    return Graph(np.concatenate(features).astype(np.float32), adjacency, shortest_paths(adjacency))


GRAPH_STRUCTURES = ("dense", "sparse", "block")


def make_graph(structure: str, seed: int, n: int = 300, width: int = 1024) -> Graph:
    """The three 300-vertex structures of section 3.5.5 / Figures B-6 to B-8 (64-dim features)."""
    rng = np.random.default_rng(seed)
    if structure == "dense":
        return random_graph(rng, n, 0.15, 0.85, width=width)
    if structure == "sparse":
        return random_graph(rng, n, 0.05, 0.85, width=width)
    if structure == "block":
        if n % 10:
            raise ValueError(f"the block graph needs n divisible by 10 blocks, got n={n}")
        return block_graph(rng, blocks=10, block_size=n // 10, width=width)
    raise ValueError(f"structure must be one of {GRAPH_STRUCTURES}, got {structure!r}")


def landmark_split(graph: Graph, rng: np.random.Generator, train_landmarks: int, test_landmarks: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The landmark method (Rizi et al. 2018; appendix B.4.2): pairs (l, v) and (v, l) for every vertex v
    and disjoint sets of train / test landmarks l. Returns two ``[m, 2]`` int arrays of (source, target)
    without self-pairs."""
    n = graph.num_nodes
    if train_landmarks + test_landmarks > n:
        raise ValueError(f"{train_landmarks} + {test_landmarks} landmarks exceed the {n} vertices")
    landmarks = rng.permutation(n)[: train_landmarks + test_landmarks]

    def pairs(ls):
        others = np.arange(n)
        out = np.concatenate([np.stack(np.broadcast_arrays(l, others), 1) for l in ls] +
                             [np.stack(np.broadcast_arrays(others, l), 1) for l in ls])
        return out[out[:, 0] != out[:, 1]].astype(np.int32)

    return pairs(landmarks[:train_landmarks]), pairs(landmarks[train_landmarks:])
