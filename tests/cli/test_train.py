"""``normfree train`` and ``normfree prescreen`` through click's CliRunner."""

from __future__ import annotations

import json

from click.testing import CliRunner

from normfree.cli import main


def test_train_json():
    r = CliRunner().invoke(
        main, ["train", "--proxy", "vit-tiny", "--norm", "derf", "--epochs", "1", "--json"]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "complete"
    assert out["config"]["norm"] == {
        "name": "erf",
        "formula": None,
        "shift": "scalar",
        "affine": True,
        "alpha0": 0.5,
    }
    assert len(out["curves"]) == 1 and "val_acc" in out["metrics"]


def test_train_human_summary_and_set_override():
    r = CliRunner().invoke(
        main,
        [
            "train",
            "--proxy",
            "dit-tiny",
            "--norm",
            "layernorm",
            "--epochs",
            "1",
            "--set",
            "depth=1",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "status: complete" in r.stdout and "val_loss" in r.stdout
    assert "blocks.0.norm1" in r.stdout and "blocks.1" not in r.stdout


def test_train_bad_input_is_a_clear_error():
    r = CliRunner().invoke(main, ["train", "--proxy", "vit-tiny", "--set", "nope=1", "--json"])
    assert r.exit_code == 2
    assert "unknown override" in json.loads(r.stdout)["error"]
    r = CliRunner().invoke(main, ["train", "--proxy", "not-a-proxy"])
    assert r.exit_code != 0


def test_prescreen_json():
    r = CliRunner().invoke(main, ["prescreen", "--proxy", "vit-tiny", "--norm", "dyt", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["norm"]["name"] == "tanh" and isinstance(out["survives"], bool)
