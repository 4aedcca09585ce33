"""Checkpoints (issue 32, 2 cases): --init that is the model itself gets a warning (KL = 0 is
honest only if the model never saw DATA); a weight stored as int8 is named with its dtype."""

from __future__ import annotations

import json
import os

from safetensors.torch import save_file

from tests._cli_helpers import invoke
from tests._measure_helpers import state_dict_of, tiny_bert
from tests.reliability._rel_helpers import one_line_error


def test_init_equal_to_the_model_folder_warns(tiny, tmp_path):
    link = tmp_path / "same"
    os.symlink(tiny / "cls", link)
    for init in (tiny / "cls", link):
        out = tmp_path / "s.json"
        res = invoke("-q", "measure", tiny / "cls", "--init", init, "-o", out, "--json")
        assert res.exit_code == 0, res.output[-1500:]
        assert (f"warning: --init {init} is the model itself: ‖w − w_prior‖ = 0 and the KL "
                "term is 0, which is honest only if these weights never saw DATA") in res.stderr
        assert json.loads(out.read_text())["scalars"]["dist_init_total"]["value"] == 0
    other = invoke("-q", "measure", tiny / "cls", "--init", tiny / "prior", "-o",
                   tmp_path / "p.json")
    assert other.exit_code == 0 and "is the model itself" not in other.stderr


def test_an_int8_query_weight_is_named_with_its_dtype(tmp_path):
    sd = state_dict_of(tiny_bert())
    name = "encoder.layer.0.attention.self.query.weight"
    sd[name] = (sd[name] * 100).round().clamp(-127, 127).to(dtype=__import__("torch").int8)
    folder = tmp_path / "q8"
    folder.mkdir()
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(tiny_bert().config.to_json_string())
    err = one_line_error(invoke("measure", folder, "-o", tmp_path / "s.json"), 6)
    assert f"'{name}' is stored as int8, not a floating-point type" in err
    assert "layer 0's 'q' weight" in err
