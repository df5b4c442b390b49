import importlib
import sys

import pytest

from platonic_rl.benchmarks import smoke


@pytest.mark.parametrize("name", list(smoke.SMOKE_RUNS))
def test_every_smoke_command_parses_with_its_benchmark(name, tmp_path):
    import tyro

    argv = smoke.smoke_command(name, tmp_path / name)
    assert argv[:2] == [sys.executable, "-m"] and argv[-2:] == ["--out-dir", str(tmp_path / name)]
    module = importlib.import_module(argv[2])
    args = tyro.cli(module.Args, args=argv[3:])
    assert str(args.out_dir) == str(tmp_path / name)


def test_a_command_is_timed_with_its_status_and_stopped_at_the_timeout():
    ok = smoke.time_command([sys.executable, "-c", "print('hello')"], 60, {})
    assert ok["status"] == 0 and "hello" in ok["tail"] and 0 < ok["seconds"] < 60
    failed = smoke.time_command([sys.executable, "-c", "import sys; sys.exit(3)"], 60, {})
    assert failed["status"] == 3
    stopped = smoke.time_command([sys.executable, "-c", "import time; time.sleep(30)"], 1, {})
    assert stopped["status"] is None and 1 <= stopped["seconds"] < 30


def test_the_table_says_which_runs_fit_the_smoke_budget():
    rows = dict(fast=dict(seconds=50.0, status=0), slow=dict(seconds=300.0, status=0),
                broken=dict(seconds=5.0, status=1), hung=dict(seconds=1200.0, status=None))
    lines = smoke.format_table(rows, [2.0e11, 2.2e11]).splitlines()
    assert "200-220 GFLOP/s" in lines[0]
    assert lines[2].split()[-2:] == ["ok", "yes"] and lines[3].split()[-2:] == ["ok", "NO"]
    assert lines[4].split()[-3:] == ["exit", "1", "yes"] and lines[5].split()[-2:] == ["stopped", "NO"]


def test_bad_arguments_name_the_choices():
    with pytest.raises(ValueError, match="--runs must name some of"):
        smoke.Args(runs=("mountaincar", "nope"))
    with pytest.raises(ValueError, match="--timeout"):
        smoke.Args(timeout=0)
