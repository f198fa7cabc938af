"""Layers, losses and the MLP, with PyTorch names and semantics."""

from minigrad.engine.tensor import Parameter
from minigrad.nn import functional, windows
from minigrad.nn.contrastive import DualEncoder, InfoNCELoss, info_nce, pairs
from minigrad.nn.dropout import Dropout, dropout_keys
from minigrad.nn.language import CharMLP
from minigrad.nn.layers import (
    GELU,
    Embedding,
    Identity,
    Linear,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
)
from minigrad.nn.loss import CrossEntropyLoss, MSELoss
from minigrad.nn.mlp import MLP
from minigrad.nn.module import Module
from minigrad.nn.norm import BatchNorm1d, GhostBatchNorm1d, GroupNorm, LayerNorm
from minigrad.nn.recomputation import Recompute, recompute

__all__ = [
    "BatchNorm1d", "CharMLP", "CrossEntropyLoss", "Dropout", "DualEncoder", "Embedding", "GELU",
    "GhostBatchNorm1d", "GroupNorm", "Identity", "InfoNCELoss", "LayerNorm", "Linear", "MLP",
    "MSELoss", "Module", "Parameter", "ReLU", "Recompute", "Sequential", "Sigmoid", "Tanh",
    "dropout_keys", "functional", "info_nce", "pairs", "recompute", "windows",
]
