"""Widely used models by name, as numbers: what the simulator and recommender need of them.

Nothing here can train these models (no framework code); each entry gives parameters,
training FLOPs per sample, a per-device batch, activation memory per sample and gradient
sparsity, every figure either cited or computed from the cited architecture, so that
`stratbench simulate`-style questions can be asked about the models people actually train.

Conventions (the same as workloads.costs): a multiply-accumulate is 2 FLOPs; only matmuls,
convolutions and attention products are counted; training = 3 x forward. Activation memory is
fp32 (4 bytes a value; halve it for fp16/bf16 mixed precision), without recomputation, by the
rule of `costs.activation_elements` (what some backward reads), dropout left out.
docs/MODELS.md has the table with every figure's source.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from workloads import convnets, costs
from workloads.configs import EmbeddingTables, TransformerConfig
from workloads.dims import TransformerDims, from_config
from workloads.hf import dims_of
from workloads.operators import (
    Op,
    cross_entropy,
    dense_stack,
    elementwise,
    embedding,
    gemm,
    norm,
    transformer_block,
)
from workloads.spec import WorkloadError, WorkloadSpec, choices_message

KNOWN = "known"  # the family and task of their specs


@dataclass(frozen=True)
class KnownModel:
    """One published model as the simulator sees it; `source` says where each figure is from."""

    name: str
    params: int
    flops_per_sample: float  # training FLOPs (forward + backward) per sample
    sample: str  # what one sample is (image size, sequence length)
    batch_size: int  # default per-device batch, from the cited training setup
    activation_bytes_per_sample: float  # fp32, no recomputation
    sparsity: float  # fraction of gradient entries a step at batch_size touches
    source: tuple[str, ...]
    notes: str
    ops: tuple[Op, ...] = ()  # one sample's forward operators (workloads.operators)
    tables: EmbeddingTables | None = None  # embedding tables with sparse gradients
    # what its cited training setup updates the weights with (a workloads.optimizers
    # name): the state memory keeps and the update's traffic
    optimizer: str = "adam"

    def spec(self) -> WorkloadSpec:
        """The neutral description; no framework here can build it (frameworks is empty)."""
        return WorkloadSpec(
            family=KNOWN, size="", task=KNOWN, batch_size=self.batch_size, params=self.params,
            flops_per_sample=self.flops_per_sample, sparsity=self.sparsity, frameworks=(),
            given_name=self.name, activation_bytes_per_sample=self.activation_bytes_per_sample,
            ops=self.ops, tables=self.tables, optimizer=self.optimizer,
        )


#: The decoder-only transformers of the catalog, by name: workloads/structure.py cuts them
#: into layers for pipeline and tensor parallelism.
TRANSFORMERS = {
    "gpt2_xl": TransformerConfig(vocab=50257, context=1024, d_model=1600, layers=48, heads=25),
    "gpt3_175b": TransformerConfig(vocab=50257, context=2048, d_model=12288, layers=96,
                                   heads=96),
}

#: Current open models by their dimensions (workloads/dims.py), by name.
LLAMA3_SOURCE = ("Llama Team, AI @ Meta 2024, The Llama 3 Herd of Models, arXiv:2407.21783, "
                 "Table 3 (layers, model dimension, FFN dimension, attention heads, key/value "
                 "heads, vocabulary 128,000 (128,256 in the released tokenizer), RoPE, "
                 "SwiGLU) and section 3.4 (pre-training sequence length 8,192)",
                 "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json "
                 "(vocab_size 128256, tie_word_embeddings false)")
DIMS_MODELS = {
    "llama3_8b": TransformerDims(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                                 vocab=128256, seq=8192, mlp="swiglu", tied=False,
                                 positions="rope", name="llama3_8b"),
    "llama3_70b": TransformerDims(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                                  vocab=128256, seq=8192, mlp="swiglu", tied=False,
                                  positions="rope", name="llama3_70b"),
    "llama3_405b": TransformerDims(layers=126, hidden=16384, heads=128, kv_heads=8,
                                   ffn=53248, vocab=128256, seq=8192, mlp="swiglu",
                                   tied=False, positions="rope", name="llama3_405b"),
    "mixtral_8x7b": TransformerDims(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                                    vocab=32000, seq=4096, mlp="swiglu", tied=False,
                                    positions="rope", experts=8, top_k=2,
                                    name="mixtral_8x7b"),
    # DeepSeek-V3: multi-head latent attention, the first 3 layers dense
    "deepseek_v3": TransformerDims(layers=61, hidden=7168, heads=128, ffn=18432,
                                   vocab=129280, seq=4096, mlp="swiglu", tied=False,
                                   positions="rope", experts=256, top_k=8, shared=1,
                                   expert_ffn=2048, dense_layers=3, q_rank=1536, kv_rank=512,
                                   rope_dim=64, qk_dim=128, v_dim=128, name="deepseek_v3"),
}

#: the published models a device is measured with (``workloads.torch_known`` builds them in
#: torch; ``stratbench devicecheck`` times them)
MEASURED_MODELS = ("resnet50", "bert_large", "gpt2_xl")
TORCHVISION_MODELS = "https://github.com/pytorch/vision/blob/main/torchvision/models/"
TORCHVISION_RECIPE = ("torchvision reference recipe, 32 images per GPU on 8 GPUs: "
                      "https://github.com/pytorch/vision/tree/main/references/classification")


def _convnet(net: convnets.ConvNet, sample: str, batch_size: int, source: tuple[str, ...],
             notes: str, optimizer: str = "momentum") -> KnownModel:
    return KnownModel(
        name=net.name, params=net.params,
        flops_per_sample=float(costs.TRAIN_FLOPS_FACTOR * convnets.forward_flops(net)),
        sample=sample, batch_size=batch_size,
        activation_bytes_per_sample=float(costs.ACTIVATION_BYTES * net.kept), sparsity=1.0,
        source=source, notes=notes, ops=net.ops, optimizer=optimizer)


def _resnet50() -> KnownModel:
    return _convnet(
        convnets.resnet50(), "one 224x224 RGB image", 32,
        ("He et al. 2015, arXiv:1512.03385 (architecture, Table 1; its 'FLOPs' are "
         "multiply-adds)",
         f"{TORCHVISION_MODELS}resnet.py (ResNet50_Weights.IMAGENET1K_V1: num_params "
         "25,557,032, _ops 4.089 GMACs)",
         TORCHVISION_RECIPE),
        "torchvision's ResNet-50 v1.5 (stride 2 in the 3x3 conv; the paper's v1 has 3.8e9 "
        "multiply-adds). Parameters and 4.089e9 MACs are counted from the layer table in "
        "workloads/convnets.py and equal torchvision's figures. Batch 32 per GPU x 8 = 256, "
        "He et al.'s mini-batch, trained with SGD and momentum 0.9 (section 3.4; the "
        "torchvision recipe's default).")


def _vgg16() -> KnownModel:
    return _convnet(
        convnets.vgg16(), "one 224x224 RGB image", 32,
        ("Simonyan & Zisserman 2014, arXiv:1409.1556 (configuration D, Table 2: 138M "
         "parameters; batch 256)",
         f"{TORCHVISION_MODELS}vgg.py (VGG16_Weights.IMAGENET1K_V1: num_params 138,357,544, "
         "_ops 15.47 GMACs)",
         TORCHVISION_RECIPE),
        "No BatchNorm. Parameters and 15.47e9 MACs counted from the layer table equal "
        "torchvision's. Batch 32 per GPU x 8 = 256, the paper's batch, trained with SGD "
        "and momentum 0.9 (section 3.1).")


def _inception_v3() -> KnownModel:
    return _convnet(
        convnets.inception_v3(), "one 299x299 RGB image", 32,
        ("Szegedy et al. 2015, arXiv:1512.00567 (architecture; section 8: 50 replicas, "
         "batch 32 each)",
         f"{TORCHVISION_MODELS}inception.py (Inception_V3_Weights.IMAGENET1K_V1: num_params "
         "27,161,264 with the auxiliary classifier, _ops 5.713 GMACs in eval mode)"),
        "Training runs the auxiliary classifier: 27,161,264 parameters and 5.719e9 MACs "
        "(5.713e9 without it, torchvision's figure), counted from the layer table. Trained "
        "with RMSProp, decay 0.9 (section 8): one slot per parameter.", "rmsprop")


@dataclass(frozen=True)
class _Bert:
    """A BERT encoder pre-trained with masked-LM and next-sentence heads (post-LN blocks)."""

    layers: int
    d: int
    heads: int
    ff: int
    vocab: int
    positions: int
    types: int
    seq: int
    masked: float  # fraction of positions the masked-LM head predicts

    @property
    def params(self) -> int:
        d, ff = self.d, self.ff
        block = 4 * (d * d + d) + 2 * d * ff + ff + d + 4 * d  # attention, MLP, 2 LayerNorms
        embeddings = (self.vocab + self.positions + self.types) * d + 2 * d
        pooler_nsp = d * d + d + 2 * d + 2
        mlm = d * d + d + 2 * d + self.vocab  # transform, LayerNorm, output bias (tied matrix)
        return embeddings + self.layers * block + pooler_nsp + mlm

    @property
    def forward_macs(self) -> float:
        t, d = self.seq, self.d
        blocks = self.layers * (t * (4 * d * d + 2 * d * self.ff) + 2 * t * t * d)
        mlm = self.masked * t * (d * d + d * self.vocab)
        return blocks + mlm + d * d + 2 * d  # + pooler and NSP on [CLS]

    def with_seq(self, seq: int, masked: float) -> _Bert:
        return _Bert(self.layers, self.d, self.heads, self.ff, self.vocab, self.positions,
                     self.types, seq, masked)

    def ops(self, dropout: float = 0.1) -> tuple[Op, ...]:
        """Embeddings (token, position, type; summed, normalised), the post-LN blocks, the
        pooler and next-sentence head on [CLS], and the masked-LM head on the predicted
        positions only (as NVIDIA's and Hugging Face's pre-training gather them)."""
        t, d = self.seq, self.d
        block = transformer_block(t, d, self.heads, d, self.ff, gated=False,
                                  dropout=dropout, causal=False)
        predicted = self.masked * t
        return (embedding("embeddings", 3 * t, d), elementwise("sum", 4 * t * d, 3 * t * d),
                norm("embedding_norm", t * d), *(block * self.layers),
                gemm("pooler", 1, d, d, bias=True), gemm("nsp", 1, 2, d, bias=True),
                gemm("mlm.transform", predicted, d, d, bias=True),
                elementwise("mlm.gelu", 2 * predicted * d), norm("mlm.norm", predicted * d),
                gemm("mlm.decoder", predicted, self.vocab, d, bias=True),
                cross_entropy("mlm.loss", predicted, self.vocab),
                cross_entropy("nsp.loss", 1, 2))

    @property
    def kept(self) -> float:
        """Per block and token 8 d + 2 ff + heads * T (the transformer rule of
        costs.activation_elements, post-LN); embedding LayerNorm input; per predicted token
        4 d + vocab; pooler input and output and the NSP softmax."""
        t, d = self.seq, self.d
        per_token = self.layers * (8 * d + 2 * self.ff + self.heads * t) + d
        return t * per_token + self.masked * t * (4 * d + self.vocab) + 2 * d + 2


BERT_LARGE = _Bert(layers=24, d=1024, heads=16, ff=4096, vocab=30522, positions=512, types=2,
                   seq=512, masked=0.15)


def bert_large_ops(seq: int = 512, masked: float = 0.15, dropout: float = 0.1
                   ) -> tuple[Op, ...]:
    """BERT-large's operators for one sequence of ``seq`` tokens, ``masked`` of them
    predicted (pre-training's phase 1 runs 128 tokens, phase 2 512)."""
    return BERT_LARGE.with_seq(seq, masked).ops(dropout)


def _bert_large() -> KnownModel:
    bert = BERT_LARGE
    return KnownModel(
        name="bert_large", params=bert.params,
        flops_per_sample=costs.TRAIN_FLOPS_FACTOR * 2 * bert.forward_macs,
        sample="one 512-token sequence, 15% of positions predicted", batch_size=4,
        activation_bytes_per_sample=costs.ACTIVATION_BYTES * bert.kept, sparsity=1.0,
        ops=bert.ops(),
        source=("Devlin et al. 2018, arXiv:1810.04805 (L=24, H=1024, A=16, 340M; section "
                "3.1: 15% masked; appendix A.2: 256 sequences of 512 tokens on 16 Cloud "
                "TPUs, 64 chips)",
                "https://huggingface.co/google-bert/bert-large-uncased (config.json: vocab "
                "30522, intermediate 4096, 512 positions, 2 token types)"),
        notes="336,226,108 parameters counted with both pre-training heads (the paper rounds "
              "to 340M). Batch 4 = 256 sequences over 64 TPU chips. The paper trains 90% of "
              "its steps at 128 tokens; figures here are for 512. Dropout (p=0.1) is not "
              "counted in activations.")


def _gpt(config: TransformerConfig, name: str, batch_size: int, source: tuple[str, ...],
         notes: str) -> KnownModel:
    return KnownModel(
        name=name, params=costs.param_count(config),
        flops_per_sample=float(costs.training_flops(config)),
        sample=f"one {config.context}-token sequence", batch_size=batch_size,
        activation_bytes_per_sample=float(costs.activation_bytes(config)), sparsity=1.0,
        source=source, notes=notes,
        ops=from_config(config.vocab, config.context, config.d_model, config.layers,
                        config.heads, config.mlp_ratio, name).ops())


def _gpt2_xl() -> KnownModel:
    return _gpt(
        TRANSFORMERS["gpt2_xl"],
        "gpt2_xl", 8,
        ("Radford et al. 2019, Language Models are Unsupervised Multitask Learners, "
         "https://cdn.openai.com/better-language-models/language_models_are_unsupervised_"
         "multitask_learners.pdf (Table 2: 1542M, 48 layers, d_model 1600; context 1024, "
         "vocabulary 50,257)",
         "https://huggingface.co/openai-community/gpt2-xl (config.json: 25 heads)",
         "NVIDIA ADLR, MegatronLM's Supercharged V1.0, https://nv-adlr.github.io/MegatronLMV1 "
         "(the 1.2B GPT-2 baseline of Shoeybi et al. 2019, arXiv:1909.08053, runs on one GPU "
         "at batch 8)"),
        "Same architecture as the built-in transformer (pre-LN, learned positions, tied "
        "head), so costs.py counts it: 1,557,611,200 parameters (the paper's table says "
        "1542M). Dropout (p=0.1) is not counted in activations.")


def _gpt3_175b() -> KnownModel:
    return _gpt(
        TRANSFORMERS["gpt3_175b"],
        "gpt3_175b", 1,
        ("Brown et al. 2020, arXiv:2005.14165 (Table 2.1: 175.0B, 96 layers, d_model "
         "12288, 96 heads, context 2048; appendix D: 6 FLOPs per parameter per token, "
         "3.14e23 FLOPs over 300B tokens)",
         "https://github.com/NVIDIA/Megatron-LM/blob/main/examples/gpt3/"
         "train_gpt3_175b_distributed.sh (micro-batch 1, global batch 1536)"),
        "Counted by costs.py as a GPT-2-style decoder: 174.6e9 parameters (0.2% under the "
        "paper's 175.0B). Training FLOPs include attention over dense 2048x2048 scores in "
        "every layer: 2.7% above the paper's 6 N per token; the paper alternates dense and "
        "locally banded sparse layers, so this is an upper bound. Activations: 310 GB per "
        "sequence in fp32; Megatron-LM trains it with tensor and pipeline parallelism and "
        "recomputation.")


# DLRM as MLPerf Training ran it on Criteo Terabyte (facebookresearch/dlrm, --max-ind-range
# 40M): one id per table and sample, 128-wide embeddings, dot interaction.
DLRM_TABLE_ROWS = (39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546,
                   403346, 10, 2208, 11938, 155, 4, 976, 14, 39979771, 25641295, 39664984,
                   585935, 12972, 108, 36)
DLRM_DIM = 128
DLRM_BOTTOM = (13, 512, 256, 128)
DLRM_TOP = (1024, 1024, 512, 256, 1)


def _dense(widths: tuple[int, ...]) -> tuple[int, int]:
    """(parameters, MACs) of a dense stack."""
    pairs = list(itertools.pairwise(widths))
    return sum(a * b + b for a, b in pairs), sum(a * b for a, b in pairs)


def _dlrm() -> KnownModel:
    vectors = len(DLRM_TABLE_ROWS) + 1  # 26 pooled embeddings and the bottom output
    top_in = DLRM_DIM + vectors * (vectors - 1) // 2  # 128 + 351 pairwise dots = 479
    bottom_params, bottom_macs = _dense(DLRM_BOTTOM)
    top_params, top_macs = _dense((top_in, *DLRM_TOP))
    dense_params = bottom_params + top_params
    params = sum(DLRM_TABLE_ROWS) * DLRM_DIM + dense_params
    interaction_macs = vectors * vectors * DLRM_DIM  # the reference's bmm(T, T^T)
    forward_flops = 2 * (bottom_macs + interaction_macs + top_macs)
    batch = 2048
    # Upper bound on touched rows: every id of the batch distinct, capped by the table.
    touched_rows = sum(min(batch, rows) for rows in DLRM_TABLE_ROWS)
    kept = (DLRM_BOTTOM[0] + sum(DLRM_BOTTOM[1:]) + vectors * DLRM_DIM + top_in
            + sum(DLRM_TOP))
    # the tables stay fp32 under mixed precision: NVIDIA's DLRM keeps them fp32 and its fused
    # gather writes fp16 rows under --amp, its backward fp32 sparse rows
    # (DeepLearningExamples PyTorch/Recommendation/DLRM dlrm/nn/embeddings.py,
    # dlrm/cuda_src/gather_gpu_fused_pytorch_impl.cu); torch's autocast never casts an
    # embedding's weight
    ops = (embedding("tables", len(DLRM_TABLE_ROWS), DLRM_DIM, fp32_table=True),
           *dense_stack(DLRM_BOTTOM, "bottom", relu_last=True),
           elementwise("stack", 2 * vectors * DLRM_DIM, 2 * vectors * DLRM_DIM),
           gemm("interaction", vectors, vectors, DLRM_DIM),
           elementwise("triangle", vectors * vectors + top_in, 2 * top_in),
           *dense_stack((top_in, *DLRM_TOP), "top"), elementwise("loss", 4, 3))
    return KnownModel(
        name="dlrm", params=params, flops_per_sample=float(3 * forward_flops),
        sample="one Criteo click log line (13 dense features, 26 categorical ids)",
        batch_size=batch, activation_bytes_per_sample=float(costs.ACTIVATION_BYTES * kept),
        sparsity=(dense_params + DLRM_DIM * touched_rows) / params, ops=ops,
        tables=EmbeddingTables(DLRM_TABLE_ROWS, DLRM_DIM), optimizer="sgd",
        source=("Naumov et al. 2019, arXiv:1906.00091 (the DLRM architecture)",
                "https://github.com/facebookresearch/dlrm/blob/main/bench/run_and_time.sh "
                "(MLPerf Training reference run: embeddings 128, bottom 13-512-256-128, top "
                "1024-1024-512-256-1, --max-ind-range=40000000, mini-batch 2048)",
                "https://github.com/facebookresearch/dlrm/blob/main/tools/visualize.py "
                "(the 26 Criteo Terabyte table sizes at 40M, top input 479)"),
        notes="24.0e9 of the parameters are embedding rows. Sparsity is an upper bound at "
              "batch 2048: the dense layers plus one row per table per sample, all distinct "
              "(35,680 rows; small tables capped at their size); Criteo ids repeat, so a "
              "real batch touches fewer. FLOPs count the MLPs and the 27x27 interaction "
              "product; lookups are not matmuls. Activations: dense input, bottom ReLUs, "
              "the 27x128 interaction input, the 479-wide top input, top ReLUs, the "
              "sigmoid. Trained with plain SGD (the reference's dlrm_s_pytorch.py default, "
              "as MLPerf ran it): no optimizer state.")


def by_dims(dims: TransformerDims, name: str, source: tuple[str, ...] = (),
            notes: str = "") -> KnownModel:
    """A transformer by its dimensions as a known model: what data-parallel questions read."""
    return KnownModel(
        name=name, params=dims.params,
        flops_per_sample=float(costs.TRAIN_FLOPS_FACTOR * dims.forward_flops),
        sample=f"one {dims.seq}-token sequence", batch_size=dims.batch,
        activation_bytes_per_sample=float(costs.ACTIVATION_BYTES * dims.activations),
        sparsity=1.0, source=source or ("described by its dimensions",),
        notes=notes or dims.describe(), ops=dims.ops())


def _llama3(name: str, released: str) -> KnownModel:
    dims = DIMS_MODELS[name]
    return by_dims(dims, name, LLAMA3_SOURCE,
                   f"{dims.describe()}; {dims.params / 1e9:.2f}e9 parameters counted (Meta: "
                   f"{released}). Batch 1 sequence per device; Meta trained the 405B model "
                   f"on 16M-token batches.")


MIXTRAL_SOURCE = ("Jiang et al. 2024, Mixtral of Experts, arXiv:2401.04088, Table 1 (dim 4096, "
                  "32 layers, head_dim 128, hidden_dim 14336, 32 heads, 8 KV heads, vocab "
                  "32000, 8 experts, top-2); 46.7B total and 12.9B active parameters "
                  "(Mistral AI, https://mistral.ai/news/mixtral-of-experts)",
                  "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json")
DEEPSEEK_V3_SOURCE = ("DeepSeek-AI 2024, DeepSeek-V3 Technical Report, arXiv:2412.19437, "
                      "section 4.2 (61 layers, hidden 7168, 128 heads of 128, MLA; every FFN "
                      "but the first 3 a MoE of 1 shared and 256 routed experts of width "
                      "2048, 8 routed per token; 671B total, 37B activated; 4K pre-training "
                      "sequence)",
                      "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json "
                      "(vocab_size 129280, intermediate_size 18432, moe_intermediate_size "
                      "2048, first_k_dense_replace 3, q_lora_rank 1536, kv_lora_rank 512, "
                      "qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128)")


def _moe(name: str, source: tuple[str, ...], published: str, shape: str) -> KnownModel:
    dims = DIMS_MODELS[name]
    return by_dims(dims, name, source,
                   f"{dims.describe()}; {dims.params / 1e9:.1f}e9 parameters, "
                   f"{dims.active_params / 1e9:.1f}e9 active per token counted (published: "
                   f"{published}).{shape} The training sequence is not the config's "
                   f"max_position_embeddings; batch 1 sequence per device.")


_MODELS: dict[str, KnownModel] = {m.name: m for m in (
    _resnet50(), _vgg16(), _inception_v3(), _bert_large(), _gpt2_xl(), _gpt3_175b(),
    _llama3("llama3_8b", "8B"), _llama3("llama3_70b", "70B"), _llama3("llama3_405b", "405B"),
    _moe("mixtral_8x7b", MIXTRAL_SOURCE, "46.7B total, 12.9B active",
         " Sequence 4,096 as Megatron-Core's Mixtral benchmark ran it (Mistral AI published "
         "no training length)."),
    _moe("deepseek_v3", DEEPSEEK_V3_SOURCE, "671B total, 37B activated",
         " Multi-head latent attention (MLA) by its ranks and head widths, the first 3 "
         "layers dense FFNs of width 18,432; the multi-token-prediction module (14B, not in "
         "the 671B) is left out, as is the router's per-expert score bias (256 values a "
         "layer)."),
    _dlrm())}


def known_key(name: str) -> str:
    """How a typed name is looked up: lower-case, '-' read as '_' (GPT2-XL -> gpt2_xl)."""
    return name.strip().lower().replace("-", "_")


def known_names() -> tuple[str, ...]:
    """Every known model's name, in catalog order (vision, language, recommendation)."""
    return tuple(_MODELS)


def get_known(name: str) -> KnownModel:
    """The known model `name` names (or a transformer by its dimensions); WorkloadError (one
    line, the choices) if none."""
    dims = dims_of(name)
    if dims is not None:
        return by_dims(dims, name.strip())
    model = _MODELS.get(known_key(name))
    if model is None:
        raise WorkloadError(choices_message("model", name, known_names()))
    return model


def list_known() -> list[KnownModel]:
    """Every known model, in catalog order."""
    return list(_MODELS.values())
