"""The small classifier whose feature space the DiT's sample-quality score is measured in.

FID uses Inception features; on 8x8 digits that network means nothing, so we train a small MLP
on the same dataset's training split (deterministically: fixed seed, one thread, fixed epochs)
and compute the Frechet distance between its penultimate features of generated samples and of
real training images. The metric is named for what it is: ``fd_<dataset>_clf``, not "FID".

The classifier is trained once per dataset and cached in-process and on disk beside the kernel
cache (``<kernel_cache>/../feature_clf/``), keyed by dataset name, data fingerprint and recipe
version, so every trial of every worker measures in the same feature space.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from scipy import linalg
from torch import nn

from normfree.settings import get_settings
from normfree.workers.data import Dataset, get_dataset

RECIPE = "mlp-256-64-e30-v1"  # bump when the recipe below changes: invalidates the disk cache


class FeatureClassifier(nn.Module):
    def __init__(self, in_features: int, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Flatten(), nn.Linear(in_features, 256), nn.GELU(), nn.Linear(256, 64), nn.GELU()
        )
        self.head = nn.Linear(64, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)  # (B, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def metric_name(dataset: str) -> str:
    """``fd_<dataset>_clf``: a Frechet distance in this classifier's space, not an FID."""
    stem = Path(dataset.split(":", 1)[-1]).stem if ("/" in dataset or ":" in dataset) else dataset
    return "fd_" + "".join(ch if ch.isalnum() else "_" for ch in stem) + "_clf"


def _fingerprint(ds: Dataset) -> str:
    h = hashlib.sha256(ds.x_train[: min(256, len(ds.x_train))].tobytes())
    h.update(str(ds.x_train.shape).encode())
    return h.hexdigest()[:12]


def _train(ds: Dataset) -> FeatureClassifier:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.from_numpy(ds.x_train)
        y = torch.from_numpy(ds.y_train)
        model = FeatureClassifier(int(np.prod(ds.image_shape)), ds.num_classes)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        gen = torch.Generator().manual_seed(0)
        for _ in range(30):
            for idx in torch.randperm(len(y), generator=gen).split(128):
                loss = F.cross_entropy(model(x[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    return model.eval()


@lru_cache(maxsize=8)
def get_feature_classifier(dataset: str) -> FeatureClassifier:
    """Load the cached classifier for ``dataset`` or train and cache it (a few seconds)."""
    ds = get_dataset(dataset)
    cache_dir = get_settings().kernel_cache.parent / "feature_clf"
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in ds.name)
    path = cache_dir / f"{safe}-{_fingerprint(ds)}-{RECIPE}.pt"
    model = FeatureClassifier(int(np.prod(ds.image_shape)), ds.num_classes)
    if path.is_file():
        try:
            model.load_state_dict(torch.load(path, weights_only=True))
            return model.eval()
        except Exception:  # a partial or stale file: retrain and overwrite
            pass
    model = _train(ds)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{id(model)}")
        torch.save(model.state_dict(), tmp)
        tmp.replace(path)  # atomic: concurrent workers never read a half-written file
    except OSError:
        pass  # a read-only cache is fine: the in-process cache still holds it
    return model


@torch.no_grad()
def features(model: FeatureClassifier, x01: torch.Tensor) -> np.ndarray:
    """Penultimate features of images in [0, 1]."""
    return torch.cat([model.features(b) for b in x01.split(512)]).double().numpy()


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """||mu_a - mu_b||^2 + Tr(Ca + Cb - 2 (Ca Cb)^(1/2)) between two feature sets."""
    mu_a, mu_b = a.mean(0), b.mean(0)
    ca, cb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    covmean = linalg.sqrtm(ca @ cb)
    if np.iscomplexobj(covmean):
        covmean = covmean.real
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(ca + cb - 2 * covmean))


@lru_cache(maxsize=8)
def real_features(dataset: str) -> np.ndarray:
    """Reference features: the real training images."""
    ds = get_dataset(dataset)
    return features(get_feature_classifier(dataset), torch.from_numpy(ds.x_train))


def fd_score(dataset: str, samples01: torch.Tensor) -> float:
    """Frechet distance between generated samples (in [0, 1]) and real training images."""
    fake = features(get_feature_classifier(dataset), samples01)
    return frechet_distance(fake, real_features(dataset))
