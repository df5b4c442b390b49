import os

# Tests run on CPU; keep XLA from grabbing every core's worth of threads in each test process.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Headless rendering; must be set before mujoco is imported (gymnasium_robotics imports it).
os.environ.setdefault("MUJOCO_GL", "egl")

# The tests' programs are tiny, and compiling them is much of the suite's time. XLA's CPU backend spends most of a
# compile in LLVM's optimisation passes; at level 0 the suite took 15 min 52 s in a quiet fresh clone on 2 cores,
# against more than 18 min at the default level (stopped at 90% after 18 min): the many agent and world-model
# compiles are faster, long training loops slower (a test that trains long passes compiler_options to its own
# jit). The values agree to float32 accuracy (tests/test_update_fixtures.py holds at either level). A level given
# in XLA_FLAGS is kept.
for _flag in ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"):
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402

# Many tests compile the same small programs (the same tiny agents, in several files and in both xdist
# workers): they share XLA's compiled executables through one on-disk cache per test session, made by the
# first process (the xdist controller; workers inherit its environment) and removed when it ends. Only the jax
# config is set, so the subprocesses some tests start (the multi-process tests) compile for themselves.
_OWNS_CACHE = "PLATONIC_RL_TEST_XLA_CACHE" not in os.environ
if _OWNS_CACHE:
    os.environ["PLATONIC_RL_TEST_XLA_CACHE"] = tempfile.mkdtemp(prefix="platonic_rl_test_xla_cache_")
jax.config.update("jax_compilation_cache_dir", os.environ["PLATONIC_RL_TEST_XLA_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


def pytest_unconfigure(config):
    if _OWNS_CACHE:
        shutil.rmtree(os.environ.pop("PLATONIC_RL_TEST_XLA_CACHE"), ignore_errors=True)
