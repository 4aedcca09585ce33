"""Bad inputs: each a one-line error naming the culprit. Also the CLI end to end."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch

from _measure_helpers import one_thread  # noqa: F401  (autouse fixture)
from _measure_helpers import invoke_cli, save_safetensors, save_state_dict, tiny_bert

from boundcalc.errors import BoundcalcError, CheckpointError
from boundcalc.measure import measure
from boundcalc.stats import load_stats


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text
    return text


def test_missing_file(tmp_path):
    path = tmp_path / "nope.safetensors"
    with pytest.raises(CheckpointError) as e:
        measure(path, progress=False)
    assert str(path) in _one_line(e.value)


def test_garbage_and_truncated_safetensors(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(os.urandom(300))
    with pytest.raises(CheckpointError) as e:
        measure(bad, progress=False)
    assert "bad.safetensors" in _one_line(e.value) and "safetensors" in str(e.value)
    folder = save_safetensors(tiny_bert(), tmp_path / "m")
    data = (folder / "model.safetensors").read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as e:
        measure(cut, progress=False, n_heads=4)
    assert "cut.safetensors" in _one_line(e.value)


def test_sharded_index_cannot_point_outside_its_folder(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a.weight": "../elsewhere.safetensors"}}))
    with pytest.raises(CheckpointError, match="lies outside"):
        measure(folder, progress=False)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a.weight": "missing.safetensors"}}))
    with pytest.raises(CheckpointError, match="missing.safetensors: no such safetensors file"):
        measure(folder, progress=False)


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickle_with_code_is_refused_and_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    with open(path, "wb") as fh:
        pickle.dump({"w": _Evil(str(marker))}, fh, protocol=2)
    assert not marker.exists()
    with pytest.raises(CheckpointError) as e:
        measure(path, progress=False)
    msg = _one_line(e.value)
    assert "refused" in msg and "evil.pt" in msg and "open" in msg and "execute code" in msg
    assert not marker.exists()
    # a protocol-4 pickle of the same payload, and plain garbage, are refused too
    with open(path, "wb") as fh:
        pickle.dump({"w": _Evil(str(marker))}, fh, protocol=4)
    with pytest.raises(CheckpointError, match="refused"):
        measure(path, progress=False)
    path.write_bytes(b"garbage" * 9)
    with pytest.raises(CheckpointError, match="evil.pt"):
        measure(path, progress=False)
    assert not marker.exists()


def test_unknown_architecture_lists_names_and_mapping_hint():
    sd = {"foo.bar.weight": torch.zeros(4, 4), "baz.qux": torch.zeros(2)}
    with pytest.raises(CheckpointError) as e:
        measure(sd, progress=False)
    msg = _one_line(e.value)
    assert "unknown architecture" in msg and "'foo.bar.weight'" in msg and "mapping=" in msg


def test_mismatched_init_names_the_tensor(tmp_path):
    model = tiny_bert()
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sd["encoder.layer.1.intermediate.dense.weight"] = torch.zeros(65, 32)
    with pytest.raises(CheckpointError) as e:
        measure(model, init=sd, progress=False)
    msg = _one_line(e.value)
    assert "encoder.layer.1.intermediate.dense.weight" in msg and "[65, 32]" in msg
    del sd["encoder.layer.1.intermediate.dense.weight"]
    with pytest.raises(CheckpointError, match="init has no tensor 'encoder.layer.1.intermediate"):
        measure(model, init=sd, progress=False)


def test_missing_layer_role_and_bad_heads():
    sd = {k: v for k, v in tiny_bert().state_dict().items()
          if k != "encoder.layer.0.attention.self.key.weight"}
    with pytest.raises(CheckpointError, match="layer 0 has no 'k' weight"):
        measure(sd, n_heads=4, progress=False)
    with pytest.raises(CheckpointError, match="cannot be split into 5 heads"):
        measure(tiny_bert(), n_heads=5, progress=False)


def test_nan_weights_are_refused():
    sd = {k: v.clone() for k, v in tiny_bert().state_dict().items()}
    sd["encoder.layer.0.attention.self.query.weight"][0, 0] = float("nan")
    with pytest.raises(CheckpointError, match="query.weight' holds NaN"):
        measure(sd, n_heads=4, progress=False)


def test_bad_device():
    with pytest.raises(BoundcalcError, match="expected one of auto, cpu, cuda"):
        measure(tiny_bert(), device="tpu", progress=False)


# ---- CLI -----------------------------------------------------------------------------------

def test_cli_measure_writes_stats(tmp_path):
    folder = save_safetensors(tiny_bert(), tmp_path / "m")
    init = save_safetensors(tiny_bert(seed=3), tmp_path / "i")
    data = tmp_path / "d.npz"
    np.savez(data, inputs=np.random.default_rng(0).normal(size=(4, 3, 32)))
    out = tmp_path / "stats.json"
    code, text = invoke_cli(["measure", str(folder), "--init", str(init), "--data", str(data),
                             "--device", "cpu", "-o", str(out), "--show-map"])
    assert code == 0, text
    assert "bert" in text and "excluded" in text and "QK" in text
    stats = load_stats(out)
    assert stats.model["n_heads"] == 4 and "dist_init_total" in stats.scalars
    assert stats.scalars["n"].value == 4
    code, text = invoke_cli(["measure", str(folder), "-o", str(tmp_path / "s2.json"), "--json"])
    assert code == 0
    summary = json.loads(text)
    assert summary["matrices"]["QK"] == 8 and summary["model"]["architecture"] == "bert"


@pytest.mark.parametrize("case", ["missing", "garbage", "no_heads", "empty_data"])
def test_cli_errors_are_one_line(tmp_path, case):
    args = ["measure"]
    if case == "missing":
        args += [str(tmp_path / "absent")]
        needle = "absent"
    elif case == "garbage":
        bad = tmp_path / "x.safetensors"
        bad.write_bytes(b"\x00garbage" * 10)
        args += [str(bad)]
        needle = "x.safetensors"
    elif case == "no_heads":
        from _measure_helpers import tiny_torch_encoder

        args += [str(save_state_dict(tiny_torch_encoder(), tmp_path / "enc.pt"))]
        needle = "--n-heads"
    else:
        folder = save_safetensors(tiny_bert(), tmp_path / "m")
        data = tmp_path / "e.npz"
        np.savez(data, inputs=np.zeros((0, 3, 32)))
        args += [str(folder), "--data", str(data)]
        needle = "empty data"
    code, text = invoke_cli(args + ["-o", str(tmp_path / "o.json")])
    assert code != 0
    lines = [l for l in text.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], text
    assert "Traceback" not in text
    assert not (tmp_path / "o.json").exists()
