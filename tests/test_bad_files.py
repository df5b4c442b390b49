"""Files a user hands the library are refused before anything trains, with a message naming the file and the
problem: datasets (training.offline.load_dataset) and a run directory's config.json. Each kind of damage by hand,
then generated ones (hypothesis): whatever the file holds, load_dataset returns a dataset that trains or raises
ValueError naming the file; nothing else escapes."""
import json
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from platonic_rl.training.offline import DATASET_KEYS, TrainConfig, load_dataset
from platonic_rl.training.run import RunDirectory, RunDirectoryError


def dataset(n: int = 20, d: int = 3, a: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return dict(observations=rng.normal(size=(n, d)).astype(np.float32),
                actions=rng.uniform(-1, 1, (n, a)).astype(np.float32),
                next_observations=rng.normal(size=(n, d)).astype(np.float32),
                rewards=-np.ones(n, np.float32))


def saved(tmp_path, data=None, name="d.npz", **changes):
    data = dict(dataset() if data is None else data, **changes)
    path = tmp_path / name
    np.savez(path, **data)
    return path


def test_a_good_file_loads_as_saved(tmp_path):
    data = load_dataset(saved(tmp_path))
    for key, value in dataset().items():
        np.testing.assert_array_equal(data[key], value)


@pytest.mark.parametrize("damage, match", [
    ("truncated", r"is not a readable \.npz archive|is damaged"),
    ("text", r"is not a readable \.npz archive"),
    ("npy", r"holds a single array \(\(20, 3\)\), not an \.npz archive"),
    ("empty file", r"is not a readable \.npz archive"),
])
def test_a_file_that_is_not_a_whole_npz_archive_is_refused_naming_it(tmp_path, damage, match):
    path = saved(tmp_path)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    elif damage == "text":
        path.write_text("observations,actions\n1,2\n")
    elif damage == "npy":
        np.save(path.with_suffix(".npy"), dataset()["observations"])
        path.unlink()
        path.with_suffix(".npy").rename(path)
    elif damage == "empty file":
        path.write_bytes(b"")
    with pytest.raises(ValueError, match=f"load_dataset: {path}.*({match})"):
        load_dataset(path)


@pytest.mark.parametrize("change, match", [
    (dict(actions=np.array([{"a": 1}] * 20, dtype=object)),
     r"array 'actions' cannot be read without unpickling"),
    (dict(rewards=-np.ones(19, np.float32)), r"data arrays must share one leading dimension"),
    (dict(observations=np.zeros(20, np.float32)), r"data\['observations'\] has shape \(20,\); it must be 2-d"),
    (dict(observations=np.zeros((20, 3), np.int64)),
     r"data\['observations'\] has dtype int64; it must be floating point \(convert it"),
    (dict(rewards=-np.ones((20, 1), np.float32)), r"data\['rewards'\] has shape \(20, 1\); it must be 1-d"),
    (dict(next_observations=np.zeros((20, 4), np.float32)),
     r"data\['next_observations'\] has shape \(20, 4\), the observations \(20, 3\)"),
    (dict(actions=np.zeros((20, 2), np.int32)), r"continuous actions \[N, A\] must be floating point"),
    (dict(observations=np.zeros((20, 0), np.float32), next_observations=np.zeros((20, 0), np.float32)),
     r"has shape \(20, 0\): no features"),
    (dict(actions=np.array(["left"] * 20)), r"data\['actions'\] has dtype <U4; datasets hold numbers"),
])
def test_arrays_a_dataset_cannot_hold_are_refused_naming_the_file_and_the_key(tmp_path, change, match):
    path = saved(tmp_path, **change)
    with pytest.raises(ValueError, match=f"load_dataset: {path}.*{match}"):
        load_dataset(path)


def test_an_empty_dataset_and_missing_keys_are_refused(tmp_path):
    empty = {k: v[:0] for k, v in dataset().items()}
    with pytest.raises(ValueError, match="data is empty"):
        load_dataset(saved(tmp_path, empty, "empty.npz"))
    with pytest.raises(ValueError, match=r"lacks the keys \['rewards'\]"):
        load_dataset(saved(tmp_path, {k: v for k, v in dataset().items() if k != "rewards"}, "short.npz"))


@pytest.mark.parametrize("text, match", [
    ('{"format": 2, "settings": {"lr": 0.1', r"not valid JSON"),
    ('["not", "a", "config"]', r"not a JSON object with settings"),
    ('{"format": 2, "settings": 3}', r"not a JSON object with settings"),
])
def test_a_config_json_edited_by_hand_is_refused_naming_it_and_overwrite_still_clears(tmp_path, text, match):
    run = RunDirectory.open(tmp_path / "run", dict(lr=0.1))
    run.close()
    (tmp_path / "run" / "config.json").write_text(text)
    with pytest.raises(RunDirectoryError, match=f"{tmp_path / 'run' / 'config.json'} is not a run's config "
                                                f"\\({match}.*start afresh with overwrite"):
        RunDirectory.open(tmp_path / "run", dict(lr=0.1))
    RunDirectory.open(tmp_path / "run", dict(lr=0.1), overwrite=True).close()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["settings"] == {"lr": 0.1}


# ------------------------------------------------------------------------------------ generated files

DTYPES = st.sampled_from([np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8, np.bool_,
                          np.complex64])
ARRAYS = st.builds(lambda dtype, shape: (dtype, shape), DTYPES,
                   hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.dictionaries(st.sampled_from([*DATASET_KEYS, "goals", "segment_end", "extra"]), ARRAYS, min_size=1),
       data=st.data())
def test_generated_datasets_load_as_valid_data_or_are_refused_with_a_value_error_naming_the_file(tmp_path, keys, data):
    arrays = {k: data.draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(np.dtype(dtype), allow_nan=True,
                                                                          allow_infinity=True)))
              for k, (dtype, shape) in keys.items()}
    path = tmp_path / "generated.npz"
    np.savez(path, **arrays)
    try:
        loaded = load_dataset(path)
    except ValueError as error:
        assert str(error).startswith(f"load_dataset: {path}"), str(error)
        return
    n = len(loaded["observations"])  # accepted: what the agents can train on
    assert n > 0 and loaded["observations"].ndim == 2 and loaded["observations"].shape[1] > 0
    assert loaded["next_observations"].shape == loaded["observations"].shape
    assert all(len(v) == n for v in loaded.values())
    for key in ("observations", "next_observations", "rewards"):
        assert np.issubdtype(loaded[key].dtype, np.floating) and np.isfinite(loaded[key]).all()


MUTATIONS = st.sampled_from(["dtype", "drop rows", "add axis", "squeeze", "nan", "remove key", "none"])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(st.tuples(MUTATIONS, st.sampled_from(DATASET_KEYS), DTYPES, st.integers(0, 19)),
                          max_size=2), n=st.integers(1, 20))
def test_a_good_dataset_changed_at_random_loads_only_if_still_valid(tmp_path, mutations, n):
    """One or two changes to a good dataset (a key's dtype, rows, rank, a NaN, a key removed): accepted exactly when
    the result is still a dataset the agents train on, refused naming the file otherwise."""
    arrays = {k: v[:n] for k, v in dataset().items()}
    for kind, key, dtype, row in mutations:
        if key not in arrays or not len(arrays[key]):
            continue
        a = arrays[key]
        if kind == "dtype":
            arrays[key] = a.astype(dtype)
        elif kind == "drop rows":
            arrays[key] = a[:row % len(a)]
        elif kind == "add axis":
            arrays[key] = a[..., None]
        elif kind == "squeeze":
            arrays[key] = a.reshape(len(a), -1)[:, 0]
        elif kind == "nan" and np.issubdtype(a.dtype, np.floating):
            arrays[key] = a.copy()
            arrays[key].reshape(len(a), -1)[row % len(a), 0] = np.nan
        elif kind == "remove key":
            del arrays[key]
    path = tmp_path / "changed.npz"
    np.savez(path, **arrays)
    floats = ("observations", "next_observations", "rewards")
    valid = (set(DATASET_KEYS) <= set(arrays) and len({len(v) for v in arrays.values()}) == 1
             and arrays["observations"].ndim == 2 and arrays["next_observations"].shape == arrays["observations"].shape
             and arrays["rewards"].ndim == 1 and all(np.issubdtype(arrays[k].dtype, np.floating) for k in floats)
             and all(np.isfinite(arrays[k]).all() for k in floats)
             and ((arrays["actions"].ndim == 2 and np.issubdtype(arrays["actions"].dtype, np.floating)  # continuous
                   and np.all(np.abs(arrays["actions"]) <= 1))                                        # (NaN fails)
                  or (arrays["actions"].ndim == 1 and np.issubdtype(arrays["actions"].dtype, np.integer)  # action ids
                      and np.all(arrays["actions"] >= -1))))
    if valid:
        loaded = load_dataset(path)
        for key, value in arrays.items():
            np.testing.assert_array_equal(loaded[key], value)
    else:
        with pytest.raises(ValueError, match=f"^load_dataset: {path}"):
            load_dataset(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 10_000), flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)),
                                                   max_size=3))
def test_damaged_bytes_of_a_good_file_are_refused_or_read_back_exactly(tmp_path, cut, flips):
    """A good file truncated and some bytes changed: refused naming the file, or (a change outside the arrays'
    bytes, which zip's CRC covers) read back exactly."""
    raw = bytearray(saved(tmp_path, name="good.npz").read_bytes())
    raw = raw[:len(raw) - cut % len(raw)]
    for at, xor in flips:
        if raw:
            raw[at % len(raw)] ^= xor
    path = tmp_path / "damaged.npz"
    path.write_bytes(bytes(raw))
    try:
        loaded = load_dataset(path)
    except ValueError as error:
        assert str(error).startswith(f"load_dataset: {path}"), str(error)
        return
    for key, value in dataset().items():
        np.testing.assert_array_equal(loaded[key], value)


@settings(max_examples=100, deadline=None)
@given(steps=st.integers(-5, 200), batch=st.integers(-2, 64), log_every=st.integers(-2, 50),
       checkpoint_every=st.integers(-10, 200))
def test_generated_train_configs_are_valid_or_refused_naming_the_field(steps, batch, log_every, checkpoint_every):
    try:
        config = TrainConfig(steps=steps, batch_size=batch, log_every=log_every, checkpoint_every=checkpoint_every)
    except ValueError as error:
        assert str(error).startswith("TrainConfig."), str(error)
        return
    assert config.steps >= 1 and config.batch_size >= 1 and config.steps % config.log_every == 0
    assert config.checkpoint_every == 0 or config.checkpoint_every % config.log_every == 0


def test_the_zip_members_crc_is_what_catches_changed_array_bytes(tmp_path):
    """The premise of the damaged-bytes test: a changed byte inside an array's data fails zip's CRC check."""
    path = saved(tmp_path)
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("observations.npy")
        offset = info.header_offset + 30 + len(info.filename) + len(info.extra) + 200
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"array 'observations' is damaged \(BadZipFile: Bad CRC-32"):
        load_dataset(path)
