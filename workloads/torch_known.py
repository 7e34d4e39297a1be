"""Published architectures in torch, to measure a device with: ResNet-50 v1.5, BERT-large
with both pre-training heads, and GPT-2 XL.

Each is the model ``workloads.known`` describes by its operators (the same layers, so the
same parameter count: a test holds them equal), so a step measured on a GPU sits beside the
device model's prediction for that very model. torch only: imported where a device is
measured (``harness.measure.device_step``), never by the simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workloads.known import BERT_LARGE, MEASURED_MODELS, TRANSFORMERS
from workloads.spec import WorkloadError, choices_message
from workloads.torch_models import Transformer

IMAGE, CLASSES = 224, 1000


class Bottleneck(nn.Module):
    """ResNet-50 v1.5's block (torchvision's): 1x1, 3x3 with the stride, 1x1 to 4 x mid."""

    def __init__(self, c_in: int, mid: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, 4 * mid, 1, bias=False), nn.BatchNorm2d(4 * mid)
        self.down = (nn.Sequential(nn.Conv2d(c_in, 4 * mid, 1, stride, bias=False),
                                   nn.BatchNorm2d(4 * mid))
                     if stride != 1 or c_in != 4 * mid else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + (self.down(x) if self.down is not None else x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        blocks: list[nn.Module] = []
        c_in = 64
        for mid, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(n):
                blocks.append(Bottleneck(c_in, mid, stride if i == 0 else 1))
                c_in = 4 * mid
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c_in, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(images))), 3, 2, 1)
        return self.fc(self.blocks(x).mean(dim=(2, 3)))


class BertBlock(nn.Module):
    """A post-LN encoder block; attention through torch's scaled_dot_product_attention."""

    def __init__(self, d: int, heads: int, ff: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(d, dim=-1))
        p = self.dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        x = self.ln1(x + F.dropout(self.out(a.transpose(1, 2).reshape(b, t, d)), p,
                                   self.training))
        return self.ln2(x + F.dropout(self.fc2(F.gelu(self.fc1(x))), p, self.training))


class BertPretraining(nn.Module):
    """BERT with its masked-LM head (on the predicted positions only, its decoder tied to
    the token embedding) and its next-sentence head on [CLS]."""

    def __init__(self, dropout: float = 0.1) -> None:
        super().__init__()
        c = BERT_LARGE
        d = c.d
        self.words, self.positions = nn.Embedding(c.vocab, d), nn.Embedding(c.positions, d)
        self.types, self.norm, self.dropout = nn.Embedding(c.types, d), nn.LayerNorm(d), dropout
        self.blocks = nn.ModuleList(BertBlock(d, c.heads, c.ff, dropout)
                                    for _ in range(c.layers))
        self.pooler, self.nsp = nn.Linear(d, d), nn.Linear(d, 2)
        self.transform, self.mlm_norm = nn.Linear(d, d), nn.LayerNorm(d)
        self.mlm_bias = nn.Parameter(torch.zeros(c.vocab))

    def forward(self, tokens: torch.Tensor, types: torch.Tensor, predicted: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.words(tokens) + self.positions(positions)[None] + self.types(types)
        x = F.dropout(self.norm(x), self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        nsp = self.nsp(torch.tanh(self.pooler(x[:, 0])))
        h = x.flatten(0, 1).index_select(0, predicted)
        h = self.mlm_norm(F.gelu(self.transform(h)))
        return h @ self.words.weight.T + self.mlm_bias, nsp


@dataclass(frozen=True)
class Measured:
    """A model to time: its module, a batch maker (batch size, device -> inputs) and the
    loss of a batch; ``seq`` where its sample is a sequence."""

    module: nn.Module
    batch: Callable[[int, torch.device], tuple[torch.Tensor, ...]]
    loss: Callable[[nn.Module, tuple[torch.Tensor, ...]], torch.Tensor]
    optimizer: str  # workloads.optimizers' name of what updates it
    seq: int | None = None


def _images(batch: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    return (torch.randn(batch, 3, IMAGE, IMAGE, device=device),
            torch.randint(0, CLASSES, (batch,), device=device))


def _classify(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    images, labels = inputs
    return F.cross_entropy(model(images).float(), labels)


def _bert_batch(seq: int) -> Callable[[int, torch.device], tuple[torch.Tensor, ...]]:
    c = BERT_LARGE

    def make(batch: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        predicted = max(1, round(c.masked * seq))
        positions = torch.cat([torch.randperm(seq, device=device)[:predicted] + i * seq
                               for i in range(batch)])
        return (torch.randint(0, c.vocab, (batch, seq), device=device),
                torch.randint(0, c.types, (batch, seq), device=device), positions,
                torch.randint(0, c.vocab, (positions.numel(),), device=device),
                torch.randint(0, 2, (batch,), device=device))
    return make


def _pretrain(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    tokens, types, positions, targets, next_sentence = inputs
    mlm, nsp = model(tokens, types, positions)
    return F.cross_entropy(mlm.float(), targets) + F.cross_entropy(nsp.float(), next_sentence)


def _tokens(vocab: int, seq: int) -> Callable[[int, torch.device], tuple[torch.Tensor, ...]]:
    def make(batch: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        return (torch.randint(0, vocab, (batch, seq + 1), device=device),)
    return make


def _next_token(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    (tokens,) = inputs
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())


MODELS = MEASURED_MODELS


def measured_model(name: str, seq: int | None = None) -> Measured:
    """The torch model of ``name`` (one of MODELS), on the meta device until it is moved:
    BERT at ``seq`` tokens (default 128, pre-training's phase 1)."""
    if name == "resnet50":
        with torch.device("meta"):
            return Measured(ResNet50(), _images, _classify, "momentum")
    if name == "bert_large":
        length = seq or 128
        with torch.device("meta"):
            return Measured(BertPretraining(), _bert_batch(length), _pretrain, "adam", length)
    if name == "gpt2_xl":
        config = TRANSFORMERS["gpt2_xl"]
        if seq not in (None, config.context):
            raise WorkloadError(f"gpt2_xl trains {config.context}-token sequences, not {seq}")
        with torch.device("meta"):
            return Measured(Transformer(config), _tokens(config.vocab, config.context),
                            _next_token, "adam", config.context)
    raise WorkloadError(choices_message("model", name, MODELS))
