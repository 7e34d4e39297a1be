"""The PyTorch side: models, loss, canonical weights, a reference training loop, FSDP units.

With ``torch_known`` (published architectures, to measure a device with), the only module of
the package that imports torch. Modules are registered in the configs'
canonical order, so `named_parameters()` order (what DDP buckets and FSDP shards see) is the
canonical order too; `get_weights` converts to the canonical (Keras) layouts. Recsys tables
are `EmbeddingBag(mode='sum')` and give sparse gradients with `sparse=True`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from workloads.configs import CNNConfig, MLPConfig, ModelConfig, RecsysConfig, TransformerConfig
from workloads.data import Batch
from workloads.spec import CLICK, LANGUAGE_MODEL, WorkloadError, WorkloadSpec
from workloads.user import UserWorkload
from workloads.weights import init_weights

LN_EPS = 1e-5


class MLP(nn.Module):
    def __init__(self, config: MLPConfig) -> None:
        super().__init__()
        w = config.widths
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(w))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


class ResidualBlock(nn.Module):
    def __init__(self, config: CNNConfig, c_in: int, c_out: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(config.norm_groups(c_in), c_in, eps=LN_EPS)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(config.norm_groups(c_out), c_out, eps=LN_EPS)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.proj = nn.Conv2d(c_in, c_out, 1, bias=False) if c_in != c_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.relu(self.norm1(x))
        h = self.conv2(F.relu(self.norm2(self.conv1(a))))
        return h + (self.proj(a) if self.proj is not None else x)


class CNN(nn.Module):
    """Takes NHWC images (the neutral data layout) and transposes them to NCHW."""

    def __init__(self, config: CNNConfig) -> None:
        super().__init__()
        self.stem = nn.Conv2d(config.image[2], config.widths[0], 3, padding=1)
        stages: list[list[ResidualBlock]] = [[] for _ in config.widths]
        for s, _, c_in, c_out in config.block_channels():
            stages[s].append(ResidualBlock(config, c_in, c_out))
        self.stages = nn.ModuleList(nn.ModuleList(blocks) for blocks in stages)
        self.norm = nn.GroupNorm(config.norm_groups(config.widths[-1]), config.widths[-1],
                                 eps=LN_EPS)
        self.head = nn.Linear(config.widths[-1], config.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x.permute(0, 3, 1, 2))
        for s, blocks in enumerate(self.stages):
            if s > 0:
                x = F.avg_pool2d(x, 2)
            for block in blocks:
                x = block(x)
        return self.head(F.relu(self.norm(x)).mean(dim=(2, 3)))


class TransformerBlock(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        d = config.d_model
        self.heads = config.heads
        self.ln1 = nn.LayerNorm(d, eps=LN_EPS)
        self.attn_qkv = nn.Linear(d, 3 * d)
        self.attn_out = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=LN_EPS)
        self.fc1 = nn.Linear(d, d * config.mlp_ratio)
        self.fc2 = nn.Linear(d * config.mlp_ratio, d)

    def _attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.attn_qkv(x).split(d, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(b, t, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn_out(self._attention(self.ln1(x)))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(config.vocab, config.d_model)
        self.pos_emb = nn.Embedding(config.context, config.d_model)
        self.blocks = nn.ModuleList(TransformerBlock(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.d_model, eps=LN_EPS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)[None]
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.tok_emb.weight.T  # tied head


class Recsys(nn.Module):
    def __init__(self, config: RecsysConfig, sparse: bool = False) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, config.dim, mode="sum", sparse=sparse)
                                    for rows in config.table_rows)
        self.bottom = nn.Linear(config.dense_features, config.dim)
        w = config.top_widths
        self.top = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(w))

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.head(dense, [table(ids[:, t, :]) for t, table in enumerate(self.tables)])

    def head(self, dense: torch.Tensor, pooled: list[torch.Tensor]) -> torch.Tensor:
        """Everything after the lookups: what embedding sharding runs data-parallel on the
        rows its tables' owners sent."""
        x = torch.cat([F.relu(self.bottom(dense)), *pooled], dim=-1)
        for i, layer in enumerate(self.top):
            x = layer(x)
            if i < len(self.top) - 1:
                x = F.relu(x)
        return x[:, 0]


def _config(spec: WorkloadSpec) -> ModelConfig:
    if spec.config is None:
        raise WorkloadError(f"workload {spec.name!r} is not a built-in family; use its "
                            "UserWorkload.build_model")
    return spec.config


def _new_module(config: ModelConfig, sparse: bool) -> nn.Module:
    if isinstance(config, MLPConfig):
        return MLP(config)
    if isinstance(config, CNNConfig):
        return CNN(config)
    if isinstance(config, TransformerConfig):
        return Transformer(config)
    if isinstance(config, RecsysConfig):
        return Recsys(config, sparse=sparse)
    raise WorkloadError(f"no torch model for config {type(config).__name__}")


def build_model(spec: WorkloadSpec, seed: int = 0, sparse: bool = False) -> nn.Module:
    """The torch module of a built-in workload, with the seed's canonical initial weights.

    sparse=True makes recsys tables produce sparse gradients (parameter servers; DDP and
    FSDP need the default dense ones). Built on the meta device first: torch's own random
    init would be thrown away anyway, and costs seconds for the large tables.
    """
    config = _config(spec)
    with torch.device("meta"):
        module = _new_module(config, sparse)
    module = module.to_empty(device="cpu")
    set_weights(module, init_weights(config, seed))
    return module


# Canonical suffix and layout conversion for each parameter of the modules used above.
_Layout = dict[str, tuple[str, tuple[int, ...] | None]]
_LINEAR: _Layout = {"weight": ("kernel", (1, 0)), "bias": ("bias", None)}
_CONV: _Layout = {"weight": ("kernel", (2, 3, 1, 0)), "bias": ("bias", None)}
_NORM: _Layout = {"weight": ("gamma", None), "bias": ("beta", None)}
_EMBEDDING: _Layout = {"weight": ("embeddings", None)}
_KINDS: list[tuple[type, _Layout]] = [
    (nn.Linear, _LINEAR), (nn.Conv2d, _CONV), (nn.LayerNorm, _NORM), (nn.GroupNorm, _NORM),
    (nn.Embedding, _EMBEDDING), (nn.EmbeddingBag, _EMBEDDING)]


def _canonical(model: nn.Module) -> list[tuple[str, nn.Parameter, tuple[int, ...] | None]]:
    """(canonical name, parameter, permutation to canonical layout) in parameter order."""
    out: list[tuple[str, nn.Parameter, tuple[int, ...] | None]] = []
    for path, module in model.named_modules():
        table = next((t for kind, t in _KINDS if isinstance(module, kind)), None)
        for pname, p in module.named_parameters(recurse=False):
            if table is None or pname not in table:
                out.append((f"{path}.{pname}" if path else pname, p, None))
                continue
            suffix, perm = table[pname]
            out.append((f"{path}.{suffix}", p, perm))
    return out


def named_weights(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(canonical name, parameter) in canonical order (= named_parameters order)."""
    return [(name, p) for name, p, _ in _canonical(model)]


def get_weights(model: nn.Module) -> list[np.ndarray]:
    """Weights as numpy arrays in canonical order and layout (a copy)."""
    out = []
    for _, p, perm in _canonical(model):
        t = p.detach().cpu()
        out.append((t.permute(*perm) if perm else t).contiguous().numpy().copy())
    return out


def set_weights(model: nn.Module, arrays: Sequence[np.ndarray]) -> None:
    """Copy canonical-layout arrays into the parameters."""
    entries = _canonical(model)
    if len(arrays) != len(entries):
        raise WorkloadError(f"got {len(arrays)} arrays for {len(entries)} weights")
    with torch.no_grad():
        for (name, p, perm), a in zip(entries, arrays, strict=True):
            t = torch.as_tensor(np.asarray(a, np.float32))
            if perm:
                t = t.permute(*np.argsort(perm).tolist())
            if tuple(t.shape) != tuple(p.shape):
                raise WorkloadError(f"weight {name}: shape {tuple(np.shape(a))} does not fit "
                                    f"{tuple(p.shape)}")
            p.copy_(t)


def check_model(model: Any, name: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise WorkloadError(f"user workload {name!r}: build_model returned "
                            f"{type(model).__name__}, expected a torch.nn.Module")
    return model


def count_params(model: nn.Module, workload: UserWorkload | None = None) -> int:
    if workload is not None:
        check_model(model, workload.name)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def to_tensors(batch: Batch) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in batch.items()}


def loss(spec: WorkloadSpec, model: nn.Module, batch: Batch) -> torch.Tensor:
    """Mean loss of a built-in workload on a batch (softmax or sigmoid cross-entropy)."""
    b = to_tensors(batch)
    if spec.task == CLICK:
        return click_loss(model(b["dense"], b["ids"]), b)
    logits = model(b["x"])
    if spec.task == LANGUAGE_MODEL:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b["y"].reshape(-1))
    return F.cross_entropy(logits, b["y"])


def click_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The recommender's loss on its logits: mean sigmoid cross-entropy over the batch."""
    return F.binary_cross_entropy_with_logits(logits, batch["y"])


def _loss_fn(workload: WorkloadSpec | UserWorkload) -> Any:
    if isinstance(workload, UserWorkload):
        return workload.loss_fn
    return lambda model, batch: loss(workload, model, batch)


def gradients(workload: WorkloadSpec | UserWorkload, model: nn.Module,
              batch: Any) -> tuple[float, list[torch.Tensor | None]]:
    """(loss, gradients in named_weights order, torch layout; sparse for sparse tables)."""
    model.zero_grad(set_to_none=True)
    value = _loss_fn(workload)(model, batch)
    value.backward()
    return float(value.detach()), [p.grad for _, p in named_weights(model)]


def train_steps(model: nn.Module, workload: WorkloadSpec | UserWorkload,
                batches: Sequence[Any], lr: float = 0.05) -> list[float]:
    """Plain SGD, one step per batch; returns each step's loss (before its update)."""
    if isinstance(workload, UserWorkload):
        check_model(model, workload.name)
    loss_fn = _loss_fn(workload)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        value = loss_fn(model, batch)
        value.backward()
        optimizer.step()
        losses.append(float(value.detach()))
    return losses


def shard_units(model: nn.Module) -> list[nn.Module]:
    """Submodules to wrap with FSDP's fully_shard before the root (one unit per block).

    The tied transformer embedding stays with the root, so input and head share it.
    """
    if isinstance(model, CNN):
        return [block for stage in model.stages for block in stage]
    if isinstance(model, MLP):
        return list(model.layers)
    if isinstance(model, Transformer):
        return list(model.blocks)
    if isinstance(model, Recsys):
        return list(model.tables)
    return []
