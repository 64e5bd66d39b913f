"""The `ernie-pretrain` recipe: typed dataclasses whose field docstrings are the help (parsed by
`ernie_zoo.recipe_cli`, which also writes them back as commented YAML)::

    ernie-pretrain recipes/pretrain/tiny-cpu.yaml --optim.lr 1e-3 --max_steps 50

    from ernie_zoo.recipe_cli import load_recipe
    recipe = load_recipe("recipes/pretrain/tiny-cpu.yaml", {"max_steps": 50}, cls=PretrainRecipe)

`PretrainRecipe.validate()` checks what types cannot; `DistributedArgs` is shared with `ernie-finetune`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ernie_zoo.models.recompute import RECOMPUTE
from ernie_zoo.parallel.deepspeed_backend import OFFLOAD_DEVICES
from ernie_zoo.parallel.distributed import DEFAULT_TIMEOUT_S
from ernie_zoo.parallel.pipeline import check_schedule


# --------------------------------------------------------------------------------------------- the recipe
@dataclass
class PretrainModelArgs:
    """The encoder: a size preset plus optional overrides, and the character features."""

    preset: str | None = "tiny"
    """Size preset from ernie_zoo.models.presets.PRESETS (tiny, mini, base, 10b, 100b, ...), or an ERNIE 4.5
    decoder preset from DECODER_PRESETS (ernie4.5-zoo, ernie4.5-0.3b, ernie4.5-21b-a3b, ...: causal-LM pretraining
    with packed documents, training/causal_lm.py; the masking and character-feature keys do not apply); null to
    give hidden_size, num_hidden_layers, num_attention_heads and intermediate_size explicitly."""
    hidden_size: int | None = None
    """Hidden width; overrides the preset."""
    num_hidden_layers: int | None = None
    """Number of transformer layers; overrides the preset."""
    num_attention_heads: int | None = None
    """Number of attention heads; overrides the preset."""
    intermediate_size: int | None = None
    """Feed-forward width; overrides the preset."""
    max_position_embeddings: int | None = None
    """Position table size; overrides the preset (must be >= data.max_seq_len)."""
    vocab_size: int | None = None
    """Embedding rows; null: the tokenizer's vocabulary size. May exceed it (e.g. padded to a multiple of 64),
    never be smaller."""
    hidden_dropout_prob: float = 0.1
    """Dropout on hidden states."""
    attention_probs_dropout_prob: float = 0.1
    """Dropout on attention probabilities."""
    use_pinyin: bool = True
    """Embed the context-aware pinyin (syllable + tone) of each Han character."""
    use_radical: bool = True
    """Embed the Kangxi radical of each character."""
    use_strokes: bool = True
    """Embed the total stroke count of each character."""
    use_stroke_sequence: bool = False
    """Embed the 5-type stroke sequence of each character."""
    feature_fusion: str = "add"
    """How character features join the word embedding: add (ERNIE-style sum) or concat (ChineseBERT-style concat
    + projection)."""
    init_from: str | None = None
    """Start from the weights of this from_pretrained directory (e.g. an earlier run's checkpoint: continued
    pretraining with a new schedule or data); its architecture and vocabulary must match this section's. null:
    random initialisation."""


@dataclass
class TokenizerArgs:
    """Where the tokenizer comes from."""

    path: str | None = None
    """Saved tokenizer directory (save_pretrained); null: train a WordPiece vocabulary on the training text and
    save it in output_dir/tokenizer."""
    vocab_size: int = 21128
    """Vocabulary size when training one (BERT-zh uses 21128)."""
    min_frequency: int = 2
    """A character needs this many occurrences to get its own token when training one."""
    do_lower_case: bool = True
    """Lower-case Latin text."""


@dataclass
class PretrainDataArgs:
    """Training text and the held-out split."""

    files: list[str] = field(default_factory=list)
    """Text files (one document per line) or .jsonl files with a 'text' field. Relative paths resolve against the
    working directory."""
    dataset_dir: str | None = None
    """A tokenized dataset saved with datasets' save_to_disk (e.g. by `ernie-zoo prepare-data`); used instead of
    files. Needs tokenizer.path."""
    max_seq_len: int = 128
    """Tokens per example, [CLS] and [SEP] included."""
    eval_fraction: float = 0.05
    """Fraction of examples held out (seeded) for evaluation; 0 disables evaluation."""
    split_seed: int | None = None
    """Seed of the held-out split; null: the recipe's seed. A stage that continues an earlier run with a new seed
    (new data order and masks) sets this to the earlier run's seed, so the examples that run held out stay
    held out."""
    num_proc: int = 1
    """Processes for tokenization and boundary precompute."""
    cache_dir: str | None = None
    """Cache for the prepared dataset; null: no cache."""
    lexicon: str | None = None
    """Entity lexicon file (one entity per line) for entity masking; null: none (entities then come only from POS
    tags, if use_pos_entities)."""
    user_dict: str | None = None
    """Extra jieba user dictionary for phrase boundaries."""
    sentiment_lexicon: str | None = None
    """Sentiment lexicon written by `python -m ernie_zoo.data.sentiment_lexicon` (word, kind, polarity, strength,
    sources per line) for the sentiment masking unit: its sentiment words are found as whole words of the
    segmentation; needed by a sentiment stage in masking.schedule. null: none."""
    sentiment_min_sources: int = 1
    """Use only the sentiment words at least this many of the lexicon's sources agree on (precision over
    coverage)."""
    use_pos_entities: bool = False
    """Also mark person/place/organisation names found by jieba's POS tagger as entities."""
    pack: bool = False
    """Join consecutive short documents into examples of up to max_seq_len tokens (no padding wasted on short
    lines); held-out documents are packed among themselves."""


@dataclass
class MaskingArgs:
    """Knowledge masking (ERNIE 1.0, SKEP): a staged schedule of char -> phrase -> entity (-> sentiment) masking."""

    schedule: list[dict[str, Any]] = field(default_factory=lambda: [{"strategy": "char", "until_step": None}])
    """Stages in order: each {strategy: char|phrase|entity|sentiment (or a {name: probability} mixture),
    until_step: N or null for the last stage}. sentiment (SKEP) masks the words of data.sentiment_lexicon
    first, within the same budget, and trains the word polarity head."""
    mlm_probability: float = 0.15
    """Fraction of tokens selected for prediction."""
    max_ngram: int = 1
    """Mask spans of up to this many consecutive units, n drawn with p(n) ~ 1/n; 1: single units."""
    eval_strategy: str = "char"
    """Masking of the held-out split. Its masks are drawn once, so evaluations are comparable across the whole
    schedule."""
    polarity_weight: float = 1.0
    """With a sentiment stage: weight of the sentiment-word polarity loss (SKEP; a linear head on the final
    hidden state of each masked sentiment-word token, saved with the model) added to the MLM loss. 0: no
    polarity head."""

    def uses_sentiment(self) -> bool:
        """Whether a stage of the schedule, or the held-out split's masking, uses the sentiment unit."""
        strategies = [stage.get("strategy") for stage in self.schedule if isinstance(stage, dict)]
        strategies.append(self.eval_strategy)
        return any(s == "sentiment" or (isinstance(s, dict) and bool(s.get("sentiment"))) for s in strategies)


@dataclass
class OptimArgs:
    """AdamW with linear warmup and cosine/linear decay."""

    lr: float = 5e-4
    """Peak learning rate."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas (beta1, beta2)."""
    eps: float = 1e-8
    """AdamW epsilon."""
    weight_decay: float = 0.01
    """Decoupled weight decay; biases, LayerNorm weights and embeddings are not decayed."""
    warmup_steps: int = 0
    """Steps of linear warmup from 0 to lr."""
    decay: str = "cosine"
    """Decay after warmup: cosine, linear or constant."""
    min_lr_ratio: float = 0.0
    """Final learning rate as a fraction of lr."""
    grad_clip: float | None = 1.0
    """Clip the global gradient norm to this value; null or 0 disables."""


@dataclass
class CheckpointArgs:
    """Atomic checkpoints with rotation."""

    interval: int = 1000
    """Save a checkpoint every this many optimizer steps (0: only at the end)."""
    keep_last: int = 3
    """Keep the newest N checkpoints; older ones are deleted."""
    save_final: bool = True
    """Also save a checkpoint after the last step."""
    async_save: bool = True
    """distributed.backend pipeline: write checkpoints in the background. Each rank's state is copied to CPU memory
    and training goes on while the files are written; the next save and the end of the run wait for it. The
    checkpoint appears (its temporary directory renamed, with a manifest) only once every rank's files are written,
    so a run killed during a save resumes from the one before. false: the step loop waits for every save. The
    single and deepspeed backends always save synchronously."""


@dataclass
class EvalArgs:
    """Periodic evaluation on the held-out split."""

    interval: int = 500
    """Evaluate every this many optimizer steps (0: only at the end)."""
    max_batches: int | None = None
    """Evaluate on at most this many batches; null: the whole held-out split."""
    batch_size: int | None = None
    """Evaluation batch size; null: micro_batch_size."""


@dataclass
class LoggingArgs:
    """Progress bar, TensorBoard and metrics files."""

    interval: int = 10
    """Log training metrics every this many optimizer steps."""
    tensorboard: bool = True
    """Write TensorBoard event files to output_dir/tensorboard."""
    progress_bar: bool = True
    """Show a tqdm progress bar."""
    peak_flops: float | None = None
    """Peak FLOP/s of one device for the MFU estimate; null: looked up for known GPUs at the run's precision, not
    reported on CPU."""
    profile_steps: list[int] | None = None
    """[start, end]: record optimizer steps start..end (1-based, inclusive) with torch.profiler and write, per
    rank, a Chrome/Perfetto trace (output_dir/profile/rank<r>.pt.trace.json) and a table of the ops that took
    the time (rank<r>.txt); keep the window short (a few steps). null: no profiling."""


@dataclass
class DistributedArgs:
    """How training is spread over processes and devices (ernie-pretrain and ernie-finetune alike)."""

    backend: str = "single"
    """single (one process, one device), deepspeed (DeepSpeed ZeRO data parallelism over the ranks a launcher
    such as torchrun or deepspeed starts, ernie_zoo.parallel.deepspeed_backend; gloo on CPU) or pipeline
    (ernie-pretrain only: pipeline parallelism over pp_size stages x tp_size tensor parallelism x data
    parallelism over the remaining ranks, ernie_zoo.training.pipeline_engine). Fine-tuning
    under deepspeed splits every batch of train.batch_size examples over the ranks, runs method full or lora
    only, takes train.device as each rank's own, and resumes with the same number of ranks and ZeRO stage (0-3).
    """
    deepspeed_config: str | None = None
    """deepspeed backend: the DeepSpeed json (ZeRO stage, communication); the run's batch sizes, gradient
    accumulation and clipping (and, pretraining, precision) are written over it. null: the built-in ZeRO-3
    default."""
    pp_size: int = 1
    """pipeline backend: pipeline stages (>= 2): the model's layers (an encoder's, or a dense ERNIE 4.5 decoder's)
    split into this many contiguous runs, the embeddings on the first, the MLM or LM head on the last (docs/scale.md,
    Pipeline parallelism). tp_size (each stage's TP plan layers DTensor-sharded; null: 1), recompute and timeout_s
    apply to this backend as to deepspeed."""
    pp_schedule: str = "1f1b"
    """pipeline backend: 1f1b (one stage per rank), interleaved (interleaved 1F1B, pp_virtual_stages >= 2 stages
    per rank: a smaller bubble for more point-to-point traffic), zero_bubble (each backward split into its input
    and its weight gradient, the weight gradients filling the bubble; pp_virtual_stages >= 1 stages per rank, 1 is
    the paper's ZB-H1) or zbv (zero bubble over 2 stages per rank placed in a V; best with pp_microbatches >=
    2 pp_size - 1). Idle fraction with p = pp_size, m = pp_microbatches, v stages per rank: (p-1)/(m+p-1),
    (p-1)/(v m+p-1), (p-1)/(3 v m+p-1), (p-1)/(6m+p-1) (docs/scale.md, Pipeline schedules)."""
    pp_microbatches: int | None = None
    """pipeline backend: pipeline micro batches each micro batch is cut into (micro_batch_size must be a multiple);
    null: pp_size. 1f1b needs >= pp_size; interleaved and zero_bubble run them in pp_microbatches // pp_size equal
    rounds (a multiple of pp_size always works)."""
    pp_virtual_stages: int = 2
    """pipeline backend, schedules interleaved and zero_bubble: stages per rank (stage s runs on pipeline rank
    s % pp_size); zbv: must be 2; 1f1b: not used. pp_size x this many stages need as many layers."""
    tp_size: int | None = None
    """deepspeed backend: AutoTP tensor-parallel size (the TP plan's Linear layers split over groups of this many
    ranks, which read the same rows; it must divide the ranks and the attention heads); null: the json's
    autotp_size, else 1. Fine-tuning: full and lora (LoRA's factors split with the layers they wrap)."""
    ep_size: int = 1
    """pipeline backend, a MoE decoder (ERNIE 4.5 MoE): expert parallelism, each MoE layer's routed experts split
    over groups of this many ranks (each rank holds moe_num_experts / ep_size of them), tokens sent to their
    experts' ranks by all-to-all, the rest data-parallel. pp_size 1: EP x TP x DP (ernie_zoo.training.expert_engine;
    with tp_size > 1 the attention and shared experts TP-sharded, ep_size a multiple of tp_size); tp_size 1 and
    pp_size > 1: PP x EP, each stage's experts over the data-parallel ranks of that stage, the router's
    load-balancing loss carried through the stages (ernie_zoo.training.pipeline_engine; docs/scale.md, Expert
    parallelism). It must divide the launched ranks and moe_num_experts. zero_stage 0-3 at pp_size 1 (ZeRO-1:
    AdamW's state sharded, the experts' over the ranks holding the same experts; ZeRO-2: gradients too, ZeRO-3:
    parameters too, with torch's FSDP2: dense over the data-parallel ranks, experts over the expert-data-parallel
    ones), 0 with pp_size > 1. 1: every expert on every rank."""
    moe_capacity_factor: float | None = None
    """pipeline backend, a MoE decoder at pp_size 1: each expert takes at most ceil(factor x tokens x top_k /
    moe_num_experts) of a rank's (token, expert) pairs per forward, the first in token order; the rest are dropped
    before the all-to-all (their tokens keep their other experts, the shared experts and the residual), and
    pretraining logs train/moe_dropped and train/moe_dropped_fraction. null: no dropping (transformers' router)."""
    zero_stage: int | None = None
    """deepspeed backend: ZeRO stage 0-3 over the json's; null: the json's. pipeline backend: 0/null or 1 (ZeRO-1:
    each data-parallel rank keeps the AdamW state of its share of the stage's parameters); with ep_size > 1 at
    pp_size 1 also 2 (gradients reduce-scattered: each rank keeps its shard's) or 3 (parameters sharded too and
    gathered around each layer's forward and backward), torch's FSDP2 (ernie_zoo.training.expert_engine)."""
    recompute: str = "none"
    """deepspeed and pipeline backends: full recomputes every layer in backward (activation checkpointing, the
    layer inputs kept); selective only each layer's attention core, QK^T, softmax, dropout, .V (Megatron's
    selective recompute, ernie_zoo.models.recompute); none keeps every activation. Fine-tuning: none only."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """deepspeed backend: seconds a collective waits for the other ranks before it fails, so a rank that died or
    hangs ends the step on every rank and the launcher restarts the job from the newest valid checkpoint
    (docs/scale.md, Failures and restarts); keep it above the slowest legitimate wait (a checkpoint save)."""
    offload_optimizer: str | None = None
    """deepspeed backend, ZeRO-Offload: none, cpu (fp32 master weights, gradients and Adam moments in host memory,
    the step run by DeepSpeed's CPU Adam; ZeRO stage 1-3) or nvme (the same states swapped to files under
    nvme_path; ZeRO-3); null: the json's zero_optimization.offload_optimizer, else none."""
    offload_param: str | None = None
    """deepspeed backend, ZeRO-Infinity: none, cpu (each rank's ZeRO-3 parameter partition in host memory, copied
    to the device for every forward and backward) or nvme (in files under nvme_path); ZeRO-3 only; null: the
    json's zero_optimization.offload_param, else none."""
    nvme_path: str | None = None
    """deepspeed backend: directory on a fast local NVMe drive for offload nvme (DeepSpeed's async_io op, which
    needs libaio); each rank writes its own swap files there."""

    def validate(self) -> None:
        """The rules of both commands; raises `ValueError` naming the key."""
        _check(
            self.backend in BACKENDS,
            "distributed.backend",
            self.backend,
            "must be single, deepspeed or pipeline",
        )
        _check(
            self.tp_size is None or self.tp_size >= 1,
            "distributed.tp_size",
            self.tp_size,
            "must be >= 1 or null",
        )
        _check(
            self.zero_stage in (None, 0, 1, 2, 3),
            "distributed.zero_stage",
            self.zero_stage,
            "must be 0-3 or null",
        )
        _check(
            self.recompute in RECOMPUTE,
            "distributed.recompute",
            self.recompute,
            f"must be one of {', '.join(RECOMPUTE)}",
        )
        _check(self.timeout_s > 0, "distributed.timeout_s", self.timeout_s, "must be > 0 (seconds)")
        for key in ("offload_optimizer", "offload_param"):
            value = getattr(self, key)
            _check(
                value in (None, *OFFLOAD_DEVICES),
                f"distributed.{key}",
                value,
                "must be none, cpu, nvme or null",
            )
            if value == "nvme":
                _check(
                    bool(self.nvme_path),
                    "distributed.nvme_path",
                    self.nvme_path,
                    f"{key} nvme needs a directory",
                )
        if self.zero_stage is not None:
            _check(
                self.offload_param in (None, "none") or self.zero_stage == 3,
                "distributed.offload_param",
                self.offload_param,
                f"parameter offload needs ZeRO stage 3 (distributed.zero_stage is {self.zero_stage})",
            )
            _check(
                self.offload_optimizer in (None, "none", "cpu") or self.zero_stage == 3,
                "distributed.offload_optimizer",
                self.offload_optimizer,
                f"nvme needs ZeRO stage 3 (distributed.zero_stage is {self.zero_stage}); cpu works with 1-3",
            )
            _check(
                self.offload_optimizer in (None, "none") or self.zero_stage >= 1,
                "distributed.offload_optimizer",
                self.offload_optimizer,
                "optimizer offload needs ZeRO stage 1-3 (distributed.zero_stage is 0)",
            )
        _check(self.ep_size >= 1, "distributed.ep_size", self.ep_size, "must be >= 1")
        if self.ep_size > 1:
            _check(
                self.backend == "pipeline" and (self.pp_size == 1 or (self.tp_size or 1) == 1),
                "distributed.ep_size",
                self.ep_size,
                f"expert parallelism runs on distributed.backend pipeline as EP x TP x DP (pp_size 1) or PP x EP x DP "
                f"(tp_size 1; EP with both PP and TP is not built), got backend {self.backend}, pp_size "
                f"{self.pp_size}, tp_size {self.tp_size}",
            )
            _check(
                self.ep_size % (self.tp_size or 1) == 0,
                "distributed.ep_size",
                self.ep_size,
                f"must be a multiple of distributed.tp_size {self.tp_size} (each TP group inside one expert group)",
            )
            _check(
                self.pp_size == 1 or not self.zero_stage,
                "distributed.zero_stage",
                self.zero_stage,
                "must be 0 or null with distributed.ep_size > 1 and pp_size > 1 (ZeRO-1 of a pipeline's experts is "
                "not built; it runs at pp_size 1)",
            )
        if self.moe_capacity_factor is not None:
            _check(
                self.moe_capacity_factor > 0,
                "distributed.moe_capacity_factor",
                self.moe_capacity_factor,
                "must be > 0 or null",
            )
            _check(
                self.backend == "pipeline" and self.pp_size == 1,
                "distributed.moe_capacity_factor",
                self.moe_capacity_factor,
                "token dropping runs in the expert-parallel engine: distributed.backend pipeline with pp_size 1",
            )
        pipeline = {"pp_size": 1, "pp_schedule": "1f1b", "pp_microbatches": None, "pp_virtual_stages": 2}
        if self.backend != "pipeline":
            for key, default in pipeline.items():
                value = getattr(self, key)
                _check(value == default, f"distributed.{key}", value, "needs distributed.backend pipeline")
        else:
            _check(
                self.pp_size >= 1, "distributed.pp_size", self.pp_size, "must be >= 1 under backend pipeline"
            )
            _check(
                self.pp_microbatches is None or self.pp_microbatches >= 1,
                "distributed.pp_microbatches",
                self.pp_microbatches,
                "must be >= 1 or null",
            )
            m = self.pp_microbatches or self.pp_size
            check_schedule(self.pp_schedule, self.pp_size, self.pp_virtual_stages, m)
            _check(
                self.zero_stage in (None, 0, 1) or (self.ep_size > 1 and self.pp_size == 1),
                "distributed.zero_stage",
                self.zero_stage,
                "must be 0, 1 or null under backend pipeline (ZeRO-1 shards the optimizer over the data-parallel "
                "replicas; ZeRO-2/3 would reduce-scatter or gather every pipeline micro batch, and are not "
                "supported), except with distributed.ep_size > 1 at pp_size 1: the expert-parallel engine runs "
                "ZeRO-2/3 (FSDP2: dense over the data-parallel ranks, experts over the expert-data-parallel ones)",
            )
            unset = {"deepspeed_config": None}
            unset.update(offload_optimizer=None, offload_param=None, nvme_path=None)
            for key, default in unset.items():
                value = getattr(self, key)
                _check(
                    value == default,
                    f"distributed.{key}",
                    value,
                    "needs distributed.backend deepspeed (the pipeline backend averages gradients over its "
                    "data-parallel replicas, with the optimizer whole on each or ZeRO-1-sharded)",
                )
        if self.backend == "single":
            unset = {"deepspeed_config": None, "tp_size": None, "zero_stage": None, "recompute": "none"}
            unset["timeout_s"] = DEFAULT_TIMEOUT_S
            unset.update(offload_optimizer=None, offload_param=None, nvme_path=None)
            for key, default in unset.items():
                value = getattr(self, key)
                _check(value == default, f"distributed.{key}", value, "needs distributed.backend deepspeed")


@dataclass
class PretrainRecipe:
    """Masked-language-model pretraining of an ErnieZoo encoder with knowledge masking."""

    output_dir: str = "runs/pretrain"
    """Checkpoints, TensorBoard events, metrics.jsonl and summary.json go here."""
    seed: int = 0
    """Seeds initialisation, the data order, the masks and dropout."""
    max_steps: int = 1000
    """Optimizer steps to train."""
    micro_batch_size: int = 32
    """Examples per forward/backward pass."""
    grad_accum_steps: int = 1
    """Micro batches per optimizer step (global batch = micro_batch_size * grad_accum_steps * data-parallel
    size)."""
    precision: str = "fp32"
    """fp32, bf16 (autocast; slow on CPUs without bf16 units) or fp16 (autocast + loss scaling; CUDA only)."""
    device: str = "auto"
    """auto (cuda if available, else cpu), cpu, cuda or cuda:N."""
    num_threads: int | None = None
    """torch CPU threads; null: torch's default."""
    sparse_last_layer: bool = True
    """Run the last encoder layer's queries and feed-forward, and the MLM head, only at masked positions (the
    loss reads nothing else: same value, less compute). Off: the full last layer, then the head on the masked
    rows."""
    torch_compile: bool = False
    """torch.compile each encoder or decoder layer (regional compilation, dynamic shapes: one compiled graph
    serves every layer and sequence length; Inductor's on-disk cache makes a second start faster).
    distributed.backend single only. Off by default: on CPU it did not pay (bench/results/compile_step.json)."""
    resume: str = "auto"
    """auto: continue from the newest valid checkpoint in output_dir if there is one; latest: the same but one
    must exist; never: start fresh (output_dir must hold no checkpoints); or the path of a checkpoint
    directory."""
    model: PretrainModelArgs = field(default_factory=PretrainModelArgs)
    tokenizer: TokenizerArgs = field(default_factory=TokenizerArgs)
    data: PretrainDataArgs = field(default_factory=PretrainDataArgs)
    masking: MaskingArgs = field(default_factory=MaskingArgs)
    optim: OptimArgs = field(default_factory=OptimArgs)
    checkpoint: CheckpointArgs = field(default_factory=CheckpointArgs)
    eval: EvalArgs = field(default_factory=EvalArgs)
    logging: LoggingArgs = field(default_factory=LoggingArgs)
    distributed: DistributedArgs = field(default_factory=DistributedArgs)

    def validate(self) -> None:
        """Check values that types alone cannot; raises `ValueError` naming the key."""
        from ernie_zoo.models.presets import DECODER_PRESETS, PRESETS

        _check(self.max_steps > 0, "max_steps", self.max_steps, "must be > 0")
        _check(self.micro_batch_size > 0, "micro_batch_size", self.micro_batch_size, "must be > 0")
        _check(self.grad_accum_steps > 0, "grad_accum_steps", self.grad_accum_steps, "must be > 0")
        _check(self.precision in PRECISIONS, "precision", self.precision, f"must be one of {PRECISIONS}")
        _check(
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
            "device",
            self.device,
            "must be auto, cpu, cuda or cuda:N",
        )
        _check(
            self.num_threads is None or self.num_threads > 0, "num_threads", self.num_threads, "must be > 0"
        )
        _check(
            not self.torch_compile or self.distributed.backend == "single",
            "torch_compile",
            self.torch_compile,
            "needs distributed.backend single (DeepSpeed wraps the model in its own hooks)",
        )
        if self.distributed.backend == "pipeline":
            _check(
                self.precision in ("fp32", "bf16"),
                "precision",
                self.precision,
                "the pipeline backend runs fp32 or bf16 (fp16 needs loss scaling across the stages, not built)",
            )
            _check(
                not (self.masking.uses_sentiment() and self.masking.polarity_weight > 0),
                "masking.polarity_weight",
                self.masking.polarity_weight,
                "the pipeline backend does not train the word-polarity head: set it to 0 or use another backend",
            )
        m = self.model
        if m.preset is not None:
            _check(
                m.preset in PRESETS or m.preset in DECODER_PRESETS,
                "model.preset",
                m.preset,
                f"must be an encoder preset ({', '.join(sorted(PRESETS))}), a decoder preset "
                f"({', '.join(sorted(DECODER_PRESETS))}) or null",
            )
        else:
            missing = [k for k in ARCH_FIELDS if getattr(m, k) is None]
            _check(
                not missing, "model.preset", None, f"is null, so model.{', model.'.join(missing)} must be set"
            )
        _check(
            m.feature_fusion in ("add", "concat"),
            "model.feature_fusion",
            m.feature_fusion,
            "must be add or concat",
        )
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(m, key)
            _check(0.0 <= value < 1.0, f"model.{key}", value, "must be in [0, 1)")
        _check(
            self.tokenizer.vocab_size > 5, "tokenizer.vocab_size", self.tokenizer.vocab_size, "must be > 5"
        )
        d = self.data
        _check(
            bool(d.files) != (d.dataset_dir is not None),
            "data.files",
            d.files,
            "give exactly one of data.files or data.dataset_dir",
        )
        _check(
            d.dataset_dir is None or self.tokenizer.path is not None,
            "tokenizer.path",
            None,
            "must be set when data.dataset_dir is used (a vocabulary cannot be trained on token ids)",
        )
        _check(d.max_seq_len >= 8, "data.max_seq_len", d.max_seq_len, "must be >= 8")
        _check(0.0 <= d.eval_fraction < 1.0, "data.eval_fraction", d.eval_fraction, "must be in [0, 1)")
        _check(d.num_proc > 0, "data.num_proc", d.num_proc, "must be > 0")
        k = self.masking
        _check(
            0.0 < k.mlm_probability < 1.0, "masking.mlm_probability", k.mlm_probability, "must be in (0, 1)"
        )
        _check(k.max_ngram >= 1, "masking.max_ngram", k.max_ngram, "must be >= 1")
        _check(
            k.polarity_weight >= 0 and k.polarity_weight != float("inf"),
            "masking.polarity_weight",
            k.polarity_weight,
            "must be finite and >= 0",
        )
        _check(
            d.sentiment_min_sources >= 1,
            "data.sentiment_min_sources",
            d.sentiment_min_sources,
            "must be >= 1",
        )
        _check(bool(k.schedule), "masking.schedule", k.schedule, "needs at least one stage")
        for i, stage in enumerate(k.schedule):
            _check(
                isinstance(stage, dict) and "strategy" in stage,
                f"masking.schedule[{i}]",
                stage,
                "needs a strategy",
            )
        _check(
            not k.uses_sentiment() or d.sentiment_lexicon is not None or d.dataset_dir is not None,
            "data.sentiment_lexicon",
            d.sentiment_lexicon,
            "must be set when masking.schedule (or masking.eval_strategy) uses the sentiment unit",
        )
        o = self.optim
        _check(o.lr > 0, "optim.lr", o.lr, "must be > 0")
        _check(
            len(o.betas) == 2 and all(0.0 <= b < 1.0 for b in o.betas),
            "optim.betas",
            o.betas,
            "must be two values in [0, 1)",
        )
        _check(o.eps > 0, "optim.eps", o.eps, "must be > 0")
        _check(o.weight_decay >= 0, "optim.weight_decay", o.weight_decay, "must be >= 0")
        _check(o.warmup_steps >= 0, "optim.warmup_steps", o.warmup_steps, "must be >= 0")
        _check(o.decay in DECAYS, "optim.decay", o.decay, f"must be one of {DECAYS}")
        _check(0.0 <= o.min_lr_ratio <= 1.0, "optim.min_lr_ratio", o.min_lr_ratio, "must be in [0, 1]")
        _check(
            o.grad_clip is None or o.grad_clip >= 0, "optim.grad_clip", o.grad_clip, "must be >= 0 or null"
        )
        _check(self.checkpoint.interval >= 0, "checkpoint.interval", self.checkpoint.interval, "must be >= 0")
        _check(
            self.checkpoint.keep_last >= 1, "checkpoint.keep_last", self.checkpoint.keep_last, "must be >= 1"
        )
        _check(self.eval.interval >= 0, "eval.interval", self.eval.interval, "must be >= 0")
        for key in ("max_batches", "batch_size"):
            value = getattr(self.eval, key)
            _check(value is None or value > 0, f"eval.{key}", value, "must be > 0 or null")
        _check(self.logging.interval > 0, "logging.interval", self.logging.interval, "must be > 0")
        pf = self.logging.peak_flops
        _check(pf is None or pf > 0, "logging.peak_flops", pf, "must be > 0 or null")
        window = self.logging.profile_steps
        _check(
            window is None or (len(window) == 2 and 1 <= window[0] <= window[1] <= self.max_steps),
            "logging.profile_steps",
            window,
            f"must be [start, end] with 1 <= start <= end <= max_steps ({self.max_steps}), or null",
        )
        self.distributed.validate()


PRECISIONS = ("fp32", "bf16", "fp16")
DECAYS = ("cosine", "linear", "constant")
BACKENDS = ("single", "deepspeed", "pipeline")  # the engines of ernie_zoo.training.backends
ARCH_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def _check(ok: bool, key: str, value: Any, message: str) -> None:
    if not ok:
        raise ValueError(f"recipe key {key!r} = {value!r}: {message}")


__all__ = [
    "ARCH_FIELDS",
    "BACKENDS",
    "CheckpointArgs",
    "DECAYS",
    "PretrainDataArgs",
    "DistributedArgs",
    "EvalArgs",
    "LoggingArgs",
    "MaskingArgs",
    "PretrainModelArgs",
    "OptimArgs",
    "PRECISIONS",
    "PretrainRecipe",
    "TokenizerArgs",
]
