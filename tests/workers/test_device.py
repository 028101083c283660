"""Device selection for trials: CPU unless a GPU was given and is visible (then Triton runs)."""

from __future__ import annotations

import pytest
import torch

from normfree.settings import Settings
from normfree.specs import NormSpec, TrialConfig
from normfree.workers.trainer import select_device, train_trial


def test_auto_trains_on_cpu_without_a_gpu_grant() -> None:
    assert select_device(Settings(trial_gpus=0)).type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert select_device(Settings(trial_gpus=1)).type == expected
    assert select_device(Settings(trial_device="cpu", trial_gpus=1)).type == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where CUDA is absent")
def test_forcing_cuda_without_one_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no CUDA device"):
        select_device(Settings(trial_device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (GPU machines)")
@pytest.mark.parametrize("proxy", ["vit-tiny", "dit-tiny"])
def test_a_trial_trains_on_cuda_with_the_triton_operator(proxy: str) -> None:
    cpu_state = torch.get_rng_state()
    cuda_state = torch.cuda.get_rng_state()
    config = TrialConfig(proxy=proxy, norm=NormSpec(name="erf"), seed=0, epochs=1)
    result = train_trial(config, device="cuda")
    # Pure: the trial forked every generator it seeded, CUDA's included.
    assert torch.equal(torch.get_rng_state(), cpu_state)
    assert torch.equal(torch.cuda.get_rng_state(), cuda_state)
    assert result.status == "complete", result.error
