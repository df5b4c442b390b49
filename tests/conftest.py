import os

# Tests run on CPU; keep XLA from grabbing every core's worth of threads in each test process.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Headless rendering; must be set before mujoco is imported (gymnasium_robotics imports it).
os.environ.setdefault("MUJOCO_GL", "egl")

# The tests' programs are tiny, and compiling them is most of the suite's time (about 70% of it: XLA's backend
# compile, then jax's lowering and tracing). Two XLA settings make the CPU backend's compiles cheaper:
# - optimisation level 0: LLVM's optimisation passes are skipped (the default level took more than 18 min for the
#   suite against 15 min 52 s). Long training loops run slower; a test that trains long passes compiler_options to
#   its own jit.
# - the legacy fusion emitters (--xla_cpu_use_fusion_emitters=false): a single elementwise op compiled in 42 ms
#   with the newer MLIR fusion emitters and in 19 ms with these, a tiny world model's recorded case (create, three
#   updates, acting: tests/fixtures/update_fixtures.py) in 19 s and 13 s; the suite's summed backend compile time
#   fell from 883 s to 519 s.
# The values agree to float32 accuracy (tests/test_update_fixtures.py holds under either setting). A setting given in
# XLA_FLAGS is kept.
for _flag in ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"):
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

# Many tests compile the same programs (the same tiny agents, in several files and in both xdist workers, and the
# same single operations run outside jit): they share XLA's compiled executables through one on-disk cache per pytest
# run, made by the first process (the xdist controller; workers inherit its environment) and removed when it
# ends. Every compile is cached, however short: reading a single operation's executable back takes about 2 ms,
# compiling it about 20 ms. Only the jax config is set, so the subprocesses some tests start (the multi-process
# tests) compile for themselves.
_OWNS_CACHE = "PLATONIC_RL_TEST_XLA_CACHE" not in os.environ
if _OWNS_CACHE:
    os.environ["PLATONIC_RL_TEST_XLA_CACHE"] = tempfile.mkdtemp(prefix="platonic_rl_test_xla_cache_")
jax.config.update("jax_compilation_cache_dir", os.environ["PLATONIC_RL_TEST_XLA_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

# Property-based tests (hypothesis) draw the same examples in every run: a failure reproduces, and the suite stays
# deterministic; HYPOTHESIS_PROFILE=explore draws new ones each run.
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # a minimal install without the test extra
    pass
else:
    _hypothesis_settings.register_profile("suite", derandomize=True, database=None)
    _hypothesis_settings.register_profile("explore", derandomize=False)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


def pytest_unconfigure(config):
    if _OWNS_CACHE:
        shutil.rmtree(os.environ.pop("PLATONIC_RL_TEST_XLA_CACHE"), ignore_errors=True)


# The files that take longest, longest first (seconds of one measured run of the default suite on 2 cores; see
# the durations with `pytest --durations=0`). xdist hands whole files to its workers in collection order
# (pyproject.toml: --dist loadfile --no-loadscope-reorder); starting with the longest ones keeps one worker from
# finishing a long file alone at the end. Only the order changes: every file still runs, the rest as collected.
LONGEST_FIRST = ("test_dmc_jax.py", "test_docs.py", "test_qrl_policies.py", "test_device_loop.py",
                 "test_world_model_device.py", "test_update_fixtures.py", "test_maze2d.py", "test_bad_input.py",
                 "test_imports.py", "test_denoised.py", "test_online.py", "test_qrl_agent.py",
                 "test_quasimetric_zoo.py", "test_benchmark_dmc.py", "test_gcivl.py", "test_qrl_continuous.py",
                 "test_maze2d_waypoints.py", "test_jax_envs.py", "test_replearn.py", "test_run_directory.py",
                 "test_benchmark_dmc_pixel_fit.py", "test_maze2d_jax_data.py", "test_train_state.py",
                 "test_dmc_pixels.py")


@pytest.fixture(autouse=True)
def _temporary_files_stay_in_pytests_directories(tmp_path_factory, monkeypatch):
    """What a test's libraries write to the temporary directory lands in one of pytest's own (removed with its old
    runs), not in the system's: gymnasium-robotics writes every PointMaze's XML there and never deletes it, and tests
    make such envs directly (``gym.make("PointMaze_UMaze-v3")``). Subprocesses keep the system's directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("tempfile", numbered=True)))


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (fixtures), which would undo this
def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: within a file, the collected order
