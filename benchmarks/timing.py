"""How the benchmarks time updates: matmul FLOPs from a jaxpr, the device's measured matmul peak, the median of
timed calls, the synthetic batches an update is timed on, and the device loop's seconds per iteration. Shared by
the speed report (:mod:`~platonic_rl.benchmarks.speed`), the device loop benchmark
(:mod:`~platonic_rl.benchmarks.device_loop`) and the accelerator check (:mod:`~platonic_rl.benchmarks.accelerator`);
needs only JAX, Flax and NumPy.

    peak = matmul_peak("float32", (1024, 2048), repeats=5)                     # FLOP/s
    row = time_update(agent, goal_batch(256, 10, 4), 256, repeats=5, scan_length=10, peak=peak)
"""
from __future__ import annotations

import math
import re
import statistics
import time
from typing import Callable

import flax.struct
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np

from platonic_rl.training.device_loop import DeviceLoopConfig, make_loop
from platonic_rl.training.updates import update_steps


MATMULS = ("dot_general", "conv_general_dilated")


def matmul_eqns(jaxpr, count: int = 1) -> list[tuple[object, int]]:
    """The matrix products of ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``): each ``dot_general`` and convolution
    equation with the number of times one call runs it, ``count`` times. Sub-jaxprs are included, a scan's body
    times its length, a ``cond`` as its most expensive branch and a ``while`` body once (its trip count is not
    static)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in MATMULS:
            found.append((eqn, count))
        elif name == "cond":
            found += max((matmul_eqns(branch, count) for branch in eqn.params["branches"]),
                         key=lambda eqns: sum(n * eqn_flops(e) for e, n in eqns))
        elif name == "scan":
            found += matmul_eqns(eqn.params["jaxpr"], count * eqn.params["length"])
        else:
            found += [pair for value in eqn.params.values() for pair in _sub_eqns(value, count)]
    return found


def _sub_eqns(value, count: int) -> list:
    if isinstance(value, (jax.extend.core.Jaxpr, jax.extend.core.ClosedJaxpr)):
        return matmul_eqns(value, count)
    if isinstance(value, (tuple, list)):
        return [pair for v in value for pair in _sub_eqns(v, count)]
    return []


def eqn_flops(eqn) -> int:
    """FLOPs of one ``dot_general`` or convolution equation: 2 per multiply-add."""
    if eqn.primitive.name == "dot_general":
        (lhs_contract, _), _ = eqn.params["dimension_numbers"]
        lhs = eqn.invars[0].aval.shape
        return 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[i] for i in lhs_contract)
    rhs = eqn.invars[1].aval.shape
    spec = eqn.params["dimension_numbers"].rhs_spec  # (out features, in features, *spatial)
    per_output = math.prod(rhs[i] for i in spec[1:])  # in features per group x kernel window
    return 2 * math.prod(eqn.outvars[0].aval.shape) * per_output


def matmul_flops(jaxpr) -> int:
    """FLOPs of the matrix products in ``jaxpr`` (:func:`matmul_eqns`: scans times their length, a ``cond`` as its
    most expensive branch, a ``while`` body once)."""
    return sum(count * eqn_flops(eqn) for eqn, count in matmul_eqns(jaxpr))


def time_matmuls_alone(jaxpr, repeats: int) -> float:
    """Median seconds of the matrix products of ``jaxpr`` (:func:`matmul_eqns`) run alone, at their shapes and as
    many times as one call runs them, in one jitted call: what the products cost without the work around them.
    Every run of a product reads random inputs of its own (a product run n times in a scan is run over n stacked
    inputs by ``lax.map``), so none can be computed once for several."""
    eqns = matmul_eqns(jaxpr)
    key = jax.random.PRNGKey(0)
    inputs = [[jax.random.normal(jax.random.fold_in(key, 2 * i + k), (count, *v.aval.shape)).astype(v.aval.dtype)
               for k, v in enumerate(eqn.invars)] for i, (eqn, count) in enumerate(eqns)]

    def products(inputs):
        return [eqn.primitive.bind(*(x[0] for x in xs), **eqn.params) if count == 1
                else jax.lax.map(lambda ys, eqn=eqn: eqn.primitive.bind(*ys, **eqn.params), xs)
                for (eqn, count), xs in zip(eqns, inputs)]

    return time_call(jax.jit(products), (inputs,), repeats)


HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(?P<name>[\w.\-]+) = .*? (?P<op>[\w\-]+)\(")
HLO_COMPUTATION = re.compile(r"^(?:ENTRY )?%(?P<name>[\w.\-]+) .*\{$")
HLO_PRODUCTS = ("dot", "convolution")


def hlo_instructions(text: str) -> dict[str, dict]:
    """The instructions of a compiled HLO module's text (``jit(f).lower(...).compile().as_text()``): ``{name:
    dict(op, products, source)}``: its opcode, whether it runs a matrix product (a dot or convolution, itself or in
    the computations it calls, e.g. a fusion's), and the JAX operation it came from (its metadata's ``op_name``)."""
    computations: dict[str, list[tuple[str, str, str, list[str]]]] = {}
    current = None
    for line in text.splitlines():
        header = HLO_COMPUTATION.match(line)
        if header:
            current = computations.setdefault(header["name"], [])
            continue
        found = HLO_INSTRUCTION.match(line)
        if found and current is not None:
            source = re.search(r'op_name="([^"]*)"', line)
            called = re.findall(r"(?:calls|to_apply|body|condition)=%([\w.\-]+)", line)
            current.append((found["name"], found["op"], source[1] if source else "", called))
    memo: dict[str, bool] = {}

    def runs_products(computation: str) -> bool:
        if computation not in memo:
            memo[computation] = False  # (a computation does not call itself)
            memo[computation] = any(op in HLO_PRODUCTS or any(runs_products(c) for c in called)
                                    for _, op, _, called in computations.get(computation, []))
        return memo[computation]

    return {name: dict(op=op, products=op in HLO_PRODUCTS or any(runs_products(c) for c in called), source=source)
            for body in computations.values() for name, op, source, called in body}


def profile_compiled(fn: Callable, args: tuple, repeats: int) -> dict:
    """Where the compiled program of ``jit(fn)(*args)`` spends its time, instruction by instruction: JAX's profiler
    traces ``repeats`` calls (after a first, untraced one) and each event named after an instruction of the compiled
    HLO (on CPU, XLA runs each fusion, product and copy as its own thunk and traces it) is summed per call. Returns
    ``wall_ms`` (per call, traced), ``traced_ms`` (all instructions' time per call; above ``wall_ms`` where
    instructions ran at once on several threads), ``products_ms`` (the instructions that run matrix products,
    with what XLA fused into them) and ``other_ms``, and ``instructions``: each traced instruction's ``ms``, ``op``,
    ``products`` and ``source``, longest first."""
    import glob
    import tempfile

    from jax.profiler import ProfileData

    compiled = jax.jit(fn).lower(*args).compile()  # the program whose text is read is the one timed
    instructions = hlo_instructions(compiled.as_text())
    jax.block_until_ready(compiled(*args))
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder)
        try:
            start = time.perf_counter()
            for _ in range(repeats):
                jax.block_until_ready(compiled(*args))
            wall = (time.perf_counter() - start) / repeats
        finally:
            jax.profiler.stop_trace()
        traces = glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)
        if not traces:
            raise RuntimeError(f"profile_compiled: JAX's profiler wrote no trace under {folder}")
        profile = ProfileData.from_file(traces[0])
    seconds: dict[str, float] = {}
    for plane in profile.planes:
        for line in plane.lines:
            for event in line.events:
                if event.name in instructions:
                    seconds[event.name] = seconds.get(event.name, 0.0) + event.duration_ns * 1e-9 / repeats
    rows = sorted(({**instructions[name], "name": name, "ms": 1e3 * s} for name, s in seconds.items()),
                  key=lambda row: -row["ms"])
    products = sum(row["ms"] for row in rows if row["products"])
    traced = sum(row["ms"] for row in rows)
    return dict(wall_ms=1e3 * wall, traced_ms=traced, products_ms=products, other_ms=traced - products,
                instructions=rows)


def source_group(source: str) -> str:
    """Where in the program an instruction came from, forward and backward alike: its ``op_name`` without the jit,
    jvp, transpose and vmap wrappers and without the last (primitive) step, e.g. ``QuasimetricCritic.head_distance/
    head`` for ``jit(update)/transpose(jvp(vmap(QuasimetricCritic.head_distance)))/head/and``; ``(top level)`` for an
    operation outside any module."""
    parts = [re.sub(r"^(?:(?:transpose|jvp|vmap|jit|pjit)\()+|\)+$", "", part) for part in source.split("/")]
    parts = [p for p in parts[1:-1] if p]  # the first names the jitted function, the last the primitive
    return "/".join(parts) or "(top level)"


def compiled_groups(profile: dict, top: int = 6) -> list[tuple[str, float]]:
    """The ``top`` largest :func:`source_group` sums of a :func:`profile_compiled` result's instructions that run no
    matrix product, in ms per call, largest first."""
    groups: dict[str, float] = {}
    for row in profile["instructions"]:
        if not row["products"]:
            key = source_group(row["source"])
            groups[key] = groups.get(key, 0.0) + row["ms"]
    return sorted(groups.items(), key=lambda kv: -kv[1])[:top]


def time_call(fn: Callable, args: tuple, repeats: int) -> float:
    """Median seconds of ``fn(*args)`` (results blocked on) over ``repeats`` calls, after one that compiles."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_peak(dtype: str = "float32", sizes: tuple[int, ...] = (1024, 2048), repeats: int = 5) -> float:
    """This device's matmul rate in ``dtype``, FLOP/s: the best median over square matmuls of ``sizes`` (at JAX's
    default precision, so float32 may run as TF32 on GPUs)."""
    best = 0.0
    for n in sizes:
        a, b = (jax.random.normal(jax.random.PRNGKey(i), (n, n)).astype(dtype) for i in range(2))
        seconds = time_call(jax.jit(jnp.matmul), (a, b), repeats)
        best = max(best, 2 * n ** 3 / seconds)
    return best


@flax.struct.dataclass
class FixedBatch:
    """A sampler that returns the same batch (the scan measures the update, not sampling)."""
    batch: dict

    def sample(self, key):
        del key
        return self.batch


def time_update(agent, batch: dict, samples: int, repeats: int, scan_length: int, peak: float) -> dict:
    """One agent's update timed as one jitted call and inside a ``lax.scan`` of ``scan_length`` updates (the
    training layer's ``update_steps``, which every loop uses), each the median of ``repeats`` calls: ms per update,
    samples/s in the scan (``samples`` per update), the matmul FLOPs of one update (from its jaxpr) and their
    share of ``peak`` (FLOP/s)."""
    batch = jax.tree.map(jnp.asarray, batch)
    one = time_call(jax.jit(type(agent).update), (agent, batch), repeats)
    keys = jax.random.split(jax.random.PRNGKey(0), scan_length)
    scanned = time_call(update_steps, (agent, FixedBatch(batch), keys), repeats) / scan_length
    flops = matmul_flops(jax.make_jaxpr(type(agent).update)(agent, batch))
    return dict(ms_one_call=1e3 * one, ms_in_scan=1e3 * scanned, samples_per_s=samples / scanned,
                matmul_gflops=flops / 1e9, peak_fraction_one_call=flops / one / peak,
                peak_fraction_in_scan=flops / scanned / peak)


# ------------------------------------------------------------------------------------- synthetic batches


def goal_batch(n: int, obs_dim: int, action_dim: int, seed: int = 0) -> dict:
    """``n`` goal-conditioned transitions with continuous actions in [-1, 1], as the goal agents' updates take."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    return dict(observations=obs, actions=rng.uniform(-1, 1, (n, action_dim)).astype(np.float32),
                next_observations=obs + 0.1 * rng.normal(size=obs.shape).astype(np.float32),
                rewards=-np.ones(n, np.float32), goals=rng.normal(size=(n, obs_dim)).astype(np.float32))


def discrete_batch(n: int, obs_dim: int, num_actions: int, seed: int = 0) -> dict:
    """``n`` transitions with integer actions in ``[0, num_actions)`` (discrete QRL's update)."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    return dict(observations=obs, actions=rng.integers(0, num_actions, n).astype(np.int32),
                next_observations=obs + 0.1 * rng.normal(size=obs.shape).astype(np.float32),
                rewards=-np.ones(n, np.float32))


def sequence_batch(b: int, t: int, obs_dim: int, action_dim: int, seed: int = 0) -> dict:
    """``b`` sequences of ``t`` steps, as the world-model agents' updates take."""
    rng = np.random.default_rng(seed)
    return dict(observations=rng.normal(size=(b, t, obs_dim)).astype(np.float32),
                prev_actions=rng.uniform(-1, 1, (b, t, action_dim)).astype(np.float32),
                rewards=rng.normal(size=(b, t)).astype(np.float32))


def time_device_loop(agent_cfg, env, config: DeviceLoopConfig, iterations: int, num_seeds: int | None = None,
                     mesh=None) -> float:
    """Seconds per iteration of the compiled goal-conditioned device loop in steady state
    (:func:`time_loop_iterations`)."""
    return time_loop_iterations(make_loop(agent_cfg, env, config, mesh=mesh), iterations, num_seeds)


def time_loop_iterations(loop, iterations: int, num_seeds: int | None = None) -> float:
    """Seconds per iteration of a device loop (anything with ``jitted``: the goal-conditioned one, the world-model
    one) in steady state: one timed call of ``iterations`` iterations after a compiling call of the same length,
    the best of two; ``num_seeds`` vmapped seeds, or one."""
    init, run = loop.jitted(vmapped=num_seeds is not None)
    key = jax.random.PRNGKey(0)
    state = init(key if num_seeds is None else jax.random.split(key, num_seeds))
    state = jax.block_until_ready(run(state, iterations)[0])
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        state = jax.block_until_ready(run(state, iterations)[0])
        best = min(best, time.perf_counter() - start)
    return best / iterations
