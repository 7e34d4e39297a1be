"""Model families (mlp, cnn, transformer, recsys) in sizes S/M/L, their data, user workloads
and known models (resnet50, gpt3_175b, ...: numbers only, for simulation).

This package's top level is framework-free (numpy only): specs, costs, data and parsers import
fast and run without TensorFlow or torch. The framework code lives in `workloads.tf_models`
and `workloads.torch_models`; get them with `framework_module('tf' | 'torch')`.
"""

from workloads.catalog import get_spec, list_workloads, parse_workload
from workloads.configs import (
    CNNConfig,
    MLPConfig,
    ModelConfig,
    RecsysConfig,
    TransformerConfig,
    WeightSpec,
)
from workloads.data import SOURCES, Batch, batch, batch_shard, shard
from workloads.frameworks import framework_missing, framework_module
from workloads.known import KnownModel, get_known, known_names
from workloads.profile import parse_profile, profile_workload
from workloads.resolve import Workload, numbers_only, resolve_workload
from workloads.spec import (
    FAMILIES,
    FRAMEWORKS,
    SIZES,
    WorkloadError,
    WorkloadSpec,
)
from workloads.user import (
    ENTRY_POINT_GROUP,
    UserWorkload,
    describe_user_workload,
    entry_point_names,
    load_entry_point,
    load_user_workload,
)
from workloads.weights import init_weights

__all__ = [
    "ENTRY_POINT_GROUP",
    "FAMILIES",
    "FRAMEWORKS",
    "SIZES",
    "SOURCES",
    "Batch",
    "CNNConfig",
    "KnownModel",
    "MLPConfig",
    "ModelConfig",
    "RecsysConfig",
    "TransformerConfig",
    "UserWorkload",
    "WeightSpec",
    "Workload",
    "WorkloadError",
    "WorkloadSpec",
    "batch",
    "batch_shard",
    "describe_user_workload",
    "entry_point_names",
    "framework_missing",
    "framework_module",
    "get_known",
    "get_spec",
    "init_weights",
    "known_names",
    "list_workloads",
    "load_entry_point",
    "load_user_workload",
    "numbers_only",
    "parse_profile",
    "parse_workload",
    "profile_workload",
    "resolve_workload",
    "shard",
]
