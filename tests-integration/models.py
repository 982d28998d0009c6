"""The models the end-to-end suite compiles (small, so the CPU interpreter runs them quickly)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    """Linear -> GELU -> LayerNorm -> Linear."""

    def __init__(self, d: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(F.gelu(self.fc1(x))))


class TransformerBlock(nn.Module):
    """Pre-norm attention (explicit matmuls and softmax) and MLP, with residuals."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (d // h) ** -0.5
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class SmallCNN(nn.Module):
    """conv -> batchnorm -> relu -> maxpool -> conv -> relu -> avgpool -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        x = F.avg_pool2d(torch.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


class SortModel(nn.Module):
    """Uses sort, which coil leaves to ATen on purpose: it must run as a fallback."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.sort(self.fc(x), dim=-1).values) * 0.5


MODELS = {
    "mlp": (MLP, (8, 16)),
    "transformer_block": (TransformerBlock, (2, 8, 32)),
    "cnn": (SmallCNN, (2, 3, 16, 16)),
    "fallback_sort": (SortModel, (4, 16)),
}
