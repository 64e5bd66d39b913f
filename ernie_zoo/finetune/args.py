"""Typed run arguments of `ernie-finetune`: a recipe dataclass parsed by `ernie_zoo.training.recipe`.

A recipe mirrors the dataclasses below (each field's docstring is what `--help` prints and what
`--print_config` writes as a YAML comment):

    task: sequence_classification
    data:   {train_file: train.jsonl, dev_file: dev.jsonl}
    model:  {model_name_or_path: ernie-zoo-mini-zh}    # the shipped encoder; {preset: tiny} builds from scratch
    method: {method: lora, lora_r: 8}
    train:  {output_dir: outputs/sentiment, epochs: 3}

Overrides are `--section.key value`; since every key name is unique across sections, `--key value` works too
(`--learning_rate 1e-3` is `--train.learning_rate 1e-3`). Unknown keys and values of the wrong type raise
errors that name the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ernie_zoo.recipe_cli import iter_fields, load_recipe, recipe_to_yaml, unknown_keys
from ernie_zoo.training.recipe import DistributedArgs, PretrainRecipe
from ernie_zoo.zoo import ModelNotFoundError, is_shipped_name, resolve_model_source

from .methods import METHODS, check_supported

#: the methods the decoder tasks (instruction, preference) run (tested on the decoders; the others target ErnieZoo
#: module names)
INSTRUCTION_METHODS = ("full", "lora")
#: the tasks that fine-tune an ERNIE 4.5 decoder
DECODER_TASKS = ("instruction", "preference")
FINETUNE_TASKS = (
    "sequence_classification",
    "token_classification",
    "generation",
    "text_correction",
    "instruction",
    "information_extraction",
    "preference",
)


@dataclass
class FinetuneDataArgs:
    """Where the examples come from and how they are read."""

    train_file: str | None = None
    """Training file: .csv, .tsv, .jsonl/.json, or a char-per-line tagged file (.conll/.bio/.bmes/.bioes/.txt)
    for token classification. `~` is expanded."""
    dev_file: str | None = None
    """Development file (same format); drives early stopping and best-checkpoint selection."""
    test_file: str | None = None
    """Optional test file, scored once with the best checkpoint at the end."""
    dataset_name: str | None = None
    """A datasets hub name, used instead of local files (needs network)."""
    dataset_config: str | None = None
    """Configuration name of dataset_name, if it has several."""
    train_split: str = "train"
    """Split of dataset_name used for training."""
    dev_split: str | None = "validation"
    """Split of dataset_name used as the development set."""
    test_split: str | None = None
    """Split of dataset_name used as the test set."""
    file_format: str | None = None
    """Force a file format (csv, tsv, jsonl, conll); default: the extension."""
    text_column: str = "text"
    """Column holding the input text."""
    text_pair_column: str | None = None
    """Column holding the second text of a text pair (sequence classification)."""
    label_column: str = "label"
    """Column holding the label (sequence classification)."""
    labels: list[str] | None = None
    """Label names in id order; default: the sorted labels of the training data. A label outside the list is an
    error."""
    multi_label: bool = False
    """Multi-label classification: a label cell holds several labels (a list in jsonl, or label_separator-joined
    text in csv/tsv)."""
    label_separator: str = ","
    """Separator of several labels in one csv/tsv cell (multi_label)."""
    entities_column: str = "entities"
    """Column of jsonl span files holding [{start, end, type}, ...]."""
    entity_types: list[str] | None = None
    """Entity types; default: the sorted types of the training data."""
    tag_scheme: str = "bio"
    """Tags the token classifier learns: bio or bioes. Files in BIO, BIOES or BMES are all read; this only picks
    the output tags."""
    lexicon: str | None = None
    """Entity lexicon file for token classification (entity_lexicon.txt format; build one with `python -m
    ernie_zoo.data.lexicon`): the tagger sees each token's lexicon matches as extra input bits and saves the
    lexicon with the model. Needs use_crf. For sequence classification of single texts, a sentiment lexicon
    file (`python -m ernie_zoo.data.sentiment_lexicon`): the classifier sees each token's sentiment-word
    polarity, negator, degree-adverb and negated bits (ernie_zoo.text.sentiment.FEATURES) and saves the
    lexicon with the model. A base model saved with a lexicon keeps using its own when this is null."""
    confusion_sets: str | None = None
    """Text correction: confusion-set file (confusion_sets.json, built by `python -m ernie_zoo.data.spelling`);
    decoding may only turn a character into one of its confusable characters, and the file is saved with the
    model. Null: any character may become any other."""
    prompt_column: str = "prompt"
    """Column holding the prompt (generation, e.g. a poem title; instruction)."""
    target_column: str = "target"
    """Column holding the continuation to learn (generation) or the corrected text (text_correction)."""
    response_column: str = "response"
    """Column holding the response to learn (instruction; its prompt is data.prompt_column), e.g. jsonl lines
    {"prompt": ..., "response": ...}."""
    dev_fraction: float = 0.1
    """information_extraction without dev_file: this fraction of the training texts (drawn by a hash seeded with
    train.seed) is held out as the dev set; 0: no dev set."""
    negative_ratio: int = 3
    """information_extraction: negative prompts (a type or relation with nothing to find in the text) per positive
    prompt of each text, at most."""
    messages_column: str = "messages"
    """Instruction: a file with this column holds conversations, [{"role": "system" | "user" | "assistant",
    "content": ...}, ...] per row; the loss is on every assistant turn (and its end token) only."""
    chosen_column: str = "chosen"
    """Preference: the column holding the preferred response (text, or a list of one assistant message)."""
    rejected_column: str = "rejected"
    """Preference: the column holding the dispreferred response."""
    max_length: int = 128
    """Maximum tokens per example (prompt + continuation for generation); longer inputs are truncated. Instruction:
    the templated prompt must fit with at least one response token (else an error names the row); the response
    is cut at the end."""
    max_train_samples: int | None = None
    """Use at most this many training examples (the first N)."""
    max_eval_samples: int | None = None
    """Use at most this many dev/test examples (the first N)."""
    max_line_bytes: int = 16_000_000
    """Longest line a data file may have, in bytes (16 MB: about 5 million Chinese characters). Lines are read
    with this bound, so a huge line is reported (file:line) without being loaded, instead of crashing the
    tokenizer. A .json file holding one array on one line counts as one line: write JSON lines, or raise this."""


@dataclass
class FinetuneModelArgs:
    """The base model and tokenizer."""

    model_name_or_path: str | None = None
    """A from_pretrained directory (pretrained or converted checkpoint), a model shipped in the package by name
    (ernie-zoo-mini-zh: the zoo's pretrained encoder; resolved like Taskflow's model=) or a hub id. null: a
    randomly initialised `preset` is built and saved to output_dir/base_model."""
    preset: str = "tiny"
    """Size preset for a randomly initialised model, used only when model_name_or_path is null (see `ernie-zoo
    info`)."""
    tokenizer: str | None = None
    """Tokenizer directory; default: model_name_or_path, or a vocabulary trained on the training texts when the
    model is built from a preset. A shipped model name works here too."""
    vocab_size: int = 8000
    """Vocabulary size when a tokenizer is trained on the training texts."""
    config_overrides: dict[str, Any] = field(default_factory=dict)
    """ErnieZooConfig fields to set, e.g. {feature_fusion: concat, hidden_dropout_prob: 0.1} (architecture fields
    only for presets)."""
    use_crf: bool = False
    """Token classification: decode with a linear-chain CRF layer on top of the classifier."""
    quantize_base: str | None = None
    """8bit or 4bit (NF4): load the base's Linear weights quantized by bitsandbytes and train LoRA on it (QLoRA), for
    the decoder tasks (instruction, preference) on a pretrained model_name_or_path, one process. The merged export
    folds the adapter into the full-precision base the quantized one was loaded from (a logged note says so);
    null: the base in fp32."""


@dataclass
class MethodArgs:
    """How the model is adapted: full fine-tuning, a peft method, or bottleneck adapters."""

    method: str = "lora"
    """full, lora, adalora, ia3, loha, lokr, prompt_tuning, p_tuning, prefix_tuning (generation only), houlsby or
    pfeiffer (bottleneck adapters), or one registered with ernie_zoo.finetune.methods.register_method;
    `ernie-finetune --help` lists each with its tasks and default learning rate."""
    lora_r: int = 8
    """Rank of LoRA / LoHa / LoKr updates (AdaLoRA: the initial rank)."""
    lora_alpha: int = 16
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_dropout: float = 0.05
    """Dropout on the LoRA input."""
    target_modules: list[str] | None = None
    """Module names to adapt; default: query, key, value, dense (+ the char-feature fusion Linear when
    feature_fusion is concat)."""
    modules_to_save: list[str] | None = None
    """Modules trained fully and saved with the adapter; default: the task head (classifier, crf)."""
    num_virtual_tokens: int = 16
    """Virtual tokens of prompt_tuning / p_tuning / prefix_tuning."""
    reduction_factor: int = 16
    """Bottleneck adapters: hidden_size / bottleneck width."""
    adapter_non_linearity: str = "relu"
    """Bottleneck adapters: activation (relu, gelu, silu, tanh)."""


@dataclass
class TrainArgs:
    """The training loop."""

    output_dir: str = "outputs/finetune"
    """The final model, checkpoints, TensorBoard logs and eval_results.json go here."""
    epochs: float = 3.0
    """Passes over the training data (fractions allowed); max_steps wins if set."""
    max_steps: int | None = None
    """Stop after this many optimizer steps."""
    batch_size: int = 32
    """Examples per batch."""
    group_by_length: bool = False
    """Batch examples of similar length (shuffled, then sorted by length within windows of 50 batches; the batch
    order is shuffled again): less padding, so faster on data of mixed lengths. Seeded, so resumes see the
    same batches."""
    eval_batch_size: int = 64
    """Examples per evaluation batch."""
    grad_accum: int = 1
    """Batches per optimizer step."""
    learning_rate: float | None = None
    """Peak learning rate; default: 5e-5 full fine-tuning, 1e-3 LoRA/adapters, 3e-2 prompt methods."""
    head_learning_rate: float | None = None
    """Peak learning rate of the modules trained fully (method.modules_to_save, else the task head: the classifier
    and a CRF's transitions; and any module the checkpoint lacked); null: learning_rate. A freshly initialised head on a base with small hidden states (e5's: std 0.26) learns too
    slowly at an encoder's rate: a token tagger on e5 predicts O everywhere for hundreds of steps at 5e-5."""
    weight_decay: float = 0.01
    """AdamW weight decay (not on biases, LayerNorm weights or the embedding block: the rule pretraining uses,
    ernie_zoo.training.core)."""
    warmup_ratio: float = 0.06
    """Fraction of the steps with linear learning-rate warm-up."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (0 disables)."""
    token_dropout: float = 0.0
    """Training only: replace each input token (not special tokens or padding) by [MASK] with this probability,
    and its pinyin by 0 (the reading would give the character away); the labels stay, so the model learns to
    read from context, e.g. for names never seen in training. Seeded by seed, epoch and batch, so a resumed
    run sees the same masks."""
    distill_from: list[str] | None = None
    """Knowledge distillation: fine-tuned models of the same task, vocabulary and labels (run output directories)
    whose mean logits the model also learns: loss = (1 - distill_alpha) * task loss + distill_alpha * T^2 *
    KL(teachers || model) at temperature distill_temperature, over every row (sequence classification) or
    labelled token (token classification; a CRF tagger's emissions). The teachers read the batch before
    token_dropout."""
    distill_alpha: float = 0.5
    """Weight of the distillation loss (0 < alpha <= 1) when distill_from is set."""
    distill_temperature: float = 1.0
    """Softmax temperature T of the distillation loss (> 0; above 1 softens the teachers' outputs)."""
    eval_every: int | None = None
    """Evaluate and checkpoint every N optimizer steps; default: every epoch."""
    metric: str | None = None
    """Dev score for early stopping and the best checkpoint; default: accuracy (classification), micro_f1
    (multi-label), f1 (NER), loss (generation)."""
    patience: int = 3
    """Stop after this many evaluations without dev improvement (0: never stop early)."""
    seed: int = 42
    """Seeds initialisation, data order and dropout."""
    resume: str = "auto"
    """auto: continue from the newest valid checkpoint in output_dir/checkpoints if there is one; latest: the
    same but one must exist; never: start fresh; or the path of a checkpoint directory."""
    overwrite: bool = False
    """Start fresh in a non-empty output_dir that holds no checkpoint to resume (its files are removed)."""
    tensorboard: bool = True
    """Write TensorBoard events to output_dir/runs."""
    progress: bool = True
    """Show a tqdm progress bar."""
    merge: bool = True
    """Merge LoRA-style adapters into the base weights in the exported model (output_dir is then a plain
    from_pretrained directory; the adapter stays in output_dir/adapter)."""
    device: str = "auto"
    """auto (cuda if available, else cpu), cpu, cuda or cuda:N."""
    num_threads: int | None = None
    """torch CPU threads; null: torch's default."""


@dataclass
class PreferenceArgs:
    """Preference tuning (task preference): the loss and its knobs (ernie_zoo.training.preference)."""

    loss: str = "dpo"
    """dpo (sigmoid), ipo, orpo or simpo. dpo and ipo compare with a reference: the frozen base (full) or the base
    with the adapter disabled (LoRA); orpo and simpo need none."""
    beta: float = 0.1
    """β: DPO's KL weight, IPO's τ, ORPO's λ (weight of the odds-ratio term), SimPO's reward scale (try 2.0)."""
    simpo_gamma: float = 0.5
    """SimPO: the target reward margin γ."""
    label_smoothing: float = 0.0
    """SimPO: ε, the assumed fraction of flipped preference labels (0 <= ε < 0.5)."""
    sft_weight: float = 0.0
    """SimPO: weight of the NLL of the chosen response added to the loss (TRL's cpo_alpha)."""


@dataclass
class FinetuneArgs:
    """Fine-tuning of an ErnieZoo model (classification, NER, generation, correction; full, peft or bottleneck) or
    instruction tuning of an ERNIE 4.5 decoder (full or LoRA)."""

    task: str = "sequence_classification"
    """One of sequence_classification, token_classification, generation, text_correction, instruction (prompt /
    response pairs or conversations on an ERNIE 4.5 decoder, with a chat template), preference (prompt / chosen /
    rejected on an ERNIE 4.5 decoder: DPO, IPO, ORPO, SimPO), information_extraction (doccano / Label Studio
    exports; docs/information_extraction.md)."""
    data: FinetuneDataArgs = field(default_factory=FinetuneDataArgs)
    model: FinetuneModelArgs = field(default_factory=FinetuneModelArgs)
    method: MethodArgs = field(default_factory=MethodArgs)
    train: TrainArgs = field(default_factory=TrainArgs)
    preference: PreferenceArgs = field(default_factory=PreferenceArgs)
    distributed: DistributedArgs = field(default_factory=DistributedArgs)

    def validate(self) -> None:
        """Check what types alone cannot; raises ValueError naming the key."""
        from ernie_zoo.models.presets import DECODER_PRESETS, PRESETS

        def check(ok: bool, key: str, value: Any, message: str) -> None:
            if not ok:
                raise ValueError(f"recipe key {key!r} = {value!r}: {message}")

        check(self.task in FINETUNE_TASKS, "task", self.task, f"must be one of {FINETUNE_TASKS}")
        check(
            0.0 <= self.data.dev_fraction < 1.0,
            "data.dev_fraction",
            self.data.dev_fraction,
            "must be in [0, 1)",
        )
        check(self.data.negative_ratio >= 0, "data.negative_ratio", self.data.negative_ratio, "must be >= 0")
        check(
            self.data.tag_scheme in ("bio", "bioes"),
            "data.tag_scheme",
            self.data.tag_scheme,
            "must be bio or bioes",
        )
        check(self.data.max_length >= 4, "data.max_length", self.data.max_length, "must be >= 4")
        check(self.data.max_line_bytes >= 1, "data.max_line_bytes", self.data.max_line_bytes, "must be >= 1")
        check(
            self.model.preset in PRESETS or self.model.preset in DECODER_PRESETS,
            "model.preset",
            self.model.preset,
            f"must be one of {sorted(PRESETS)} (encoders) or {sorted(DECODER_PRESETS)} (decoders)",
        )
        for key in ("model_name_or_path", "tokenizer"):
            # A shipped name can be checked now (a directory only when the run builds: a recipe may name the
            # output of an earlier stage that is still to run).
            value = getattr(self.model, key)
            if value is not None and is_shipped_name(value):
                try:
                    resolve_model_source(value)
                except ModelNotFoundError as e:
                    raise ValueError(f"recipe key 'model.{key}' = {value!r}: {e}") from None
        check(
            not self.model.use_crf or self.task == "token_classification",
            "model.use_crf",
            True,
            "a CRF layer only applies to token_classification",
        )
        check(
            self.data.lexicon is None
            or (self.task == "token_classification" and self.model.use_crf)
            or (self.task == "sequence_classification" and not self.data.text_pair_column),
            "data.lexicon",
            self.data.lexicon,
            "a lexicon needs task token_classification with model.use_crf true (an entity lexicon) or "
            "sequence_classification of single texts (a sentiment lexicon)",
        )
        check_supported(self.method.method, self.task)
        check(
            self.task not in DECODER_TASKS or self.method.method in INSTRUCTION_METHODS,
            "method.method",
            self.method.method,
            f"task {self.task} (an ERNIE 4.5 decoder) is tested with {' and '.join(INSTRUCTION_METHODS)} only",
        )
        self._validate_preference(check)
        q = self.model.quantize_base
        check(q in (None, "8bit", "4bit"), "model.quantize_base", q, "must be 8bit, 4bit or null")
        if q is not None:
            check(
                self.task in DECODER_TASKS and self.method.method == "lora",
                "model.quantize_base",
                q,
                "a quantized base trains LoRA on the decoder tasks (instruction, preference) only",
            )
            check(
                self.model.model_name_or_path is not None,
                "model.quantize_base",
                q,
                "needs a pretrained model_name_or_path (a preset's random weights are not worth quantizing)",
            )
            check(
                self.distributed.backend == "single",
                "model.quantize_base",
                q,
                "runs with distributed.backend single only (ZeRO does not partition bitsandbytes weights)",
            )
        t = self.train
        for key in ("batch_size", "eval_batch_size", "grad_accum"):
            check(getattr(t, key) >= 1, f"train.{key}", getattr(t, key), "must be >= 1")
        check(t.epochs > 0, "train.epochs", t.epochs, "must be > 0")
        check(0 <= t.token_dropout < 1, "train.token_dropout", t.token_dropout, "must be >= 0 and < 1")
        check(0 < t.distill_alpha <= 1, "train.distill_alpha", t.distill_alpha, "must be > 0 and <= 1")
        check(t.distill_temperature > 0, "train.distill_temperature", t.distill_temperature, "must be > 0")
        check(
            not t.distill_from or self.task in ("sequence_classification", "token_classification"),
            "train.distill_from",
            t.distill_from,
            "distillation supports sequence_classification and token_classification",
        )
        check(
            not t.distill_from or not self.data.multi_label,
            "train.distill_from",
            t.distill_from,
            "distillation does not support multi_label classification",
        )
        check(t.max_steps is None or t.max_steps > 0, "train.max_steps", t.max_steps, "must be > 0 or null")
        check(
            t.eval_every is None or t.eval_every > 0, "train.eval_every", t.eval_every, "must be > 0 or null"
        )
        check(
            t.learning_rate is None or t.learning_rate > 0,
            "train.learning_rate",
            t.learning_rate,
            "must be > 0",
        )
        check(
            t.head_learning_rate is None or t.head_learning_rate > 0,
            "train.head_learning_rate",
            t.head_learning_rate,
            "must be > 0",
        )
        check(0 <= t.warmup_ratio < 1, "train.warmup_ratio", t.warmup_ratio, "must be in [0, 1)")
        check(t.patience >= 0, "train.patience", t.patience, "must be >= 0")
        check(
            t.resume in ("auto", "latest", "never") or Path(t.resume).expanduser().is_dir(),
            "train.resume",
            t.resume,
            "must be auto, latest, never or an existing checkpoint directory",
        )
        self._validate_distributed(check)

    def _validate_preference(self, check) -> None:
        from ernie_zoo.training.preference import PREFERENCE_LOSSES

        p = self.preference
        check(p.loss in PREFERENCE_LOSSES, "preference.loss", p.loss, f"must be one of {PREFERENCE_LOSSES}")
        check(p.beta > 0, "preference.beta", p.beta, "must be > 0")
        check(
            0 <= p.label_smoothing < 0.5,
            "preference.label_smoothing",
            p.label_smoothing,
            "must be in [0, 0.5)",
        )
        check(p.sft_weight >= 0, "preference.sft_weight", p.sft_weight, "must be >= 0")
        if self.task == "preference":
            check(
                self.train.token_dropout == 0,
                "train.token_dropout",
                self.train.token_dropout,
                "preference tuning compares the log-probabilities of the responses as written; use 0",
            )
            check(
                not self.train.group_by_length,
                "train.group_by_length",
                True,
                "preference pairs are not grouped by length; use false",
            )

    def _validate_distributed(self, check) -> None:
        """The shared rules (`DistributedArgs.validate`), then fine-tuning's own."""
        d = self.distributed
        d.validate()
        check(d.recompute == "none", "distributed.recompute", d.recompute, "fine-tuning supports none only")
        check(d.backend != "pipeline", "distributed.backend", d.backend, "pipeline is ernie-pretrain's only")
        if d.backend == "single":
            return
        # Methods the deepspeed backend runs are tested under ZeRO-3 against one process (`Method.deepspeed`).
        # AdaLoRA re-allocates ranks from whole weights between steps, the others are untested under ZeRO
        # partitioning: refused rather than guessed.
        runs = [m.name for m in METHODS.values() if m.deepspeed]
        check(
            self.method.method in runs,
            "method.method",
            self.method.method,
            f"distributed.backend deepspeed runs {' and '.join(runs)} only (others are untested "
            "under ZeRO partitioning); use distributed.backend single",
        )
        check(
            not self.train.distill_from,
            "train.distill_from",
            self.train.distill_from,
            "distillation runs with distributed.backend single only",
        )
        check(
            d.deepspeed_config is None or Path(d.deepspeed_config).expanduser().is_file(),
            "distributed.deepspeed_config",
            d.deepspeed_config,
            "no such file",
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def resolved(self) -> FinetuneArgs:
        """A copy whose model sources are locations: `model.model_name_or_path` and `model.tokenizer` resolved by
        `ernie_zoo.zoo.resolve_model_source` (the rule of Taskflow's model=: a shipped name becomes its directory
        inside the package, an existing directory its absolute path, a hub id stays a hub id), and shipped
        names in `train.distill_from` their directories. Raises ValueError naming the key."""

        def locate(key: str, value: str | None, hub_ok: bool = True) -> str | None:
            if value is None or (not hub_ok and not is_shipped_name(value)):
                return value
            try:
                return resolve_model_source(value).location
            except ModelNotFoundError as e:
                raise ValueError(f"recipe key {key!r} = {value!r}: {e}") from None

        model = dataclasses.replace(
            self.model,
            model_name_or_path=locate("model.model_name_or_path", self.model.model_name_or_path),
            tokenizer=locate("model.tokenizer", self.model.tokenizer),
        )
        teachers = self.train.distill_from
        if teachers:
            teachers = [locate("train.distill_from", t, hub_ok=False) for t in teachers]
        return dataclasses.replace(
            self, model=model, train=dataclasses.replace(self.train, distill_from=teachers)
        )


def flat_aliases() -> dict[str, str]:
    """Leaf name -> dotted key, e.g. "learning_rate" -> "train.learning_rate" (names are unique)."""
    aliases: dict[str, str] = {}
    for key, _, _ in iter_fields(FinetuneArgs):
        name = key.rsplit(".", 1)[-1]
        if name in aliases:  # guarded by a test: flat names must stay unambiguous
            raise RuntimeError(f"recipe key name {name!r} appears in two sections")
        aliases[name] = key
    return aliases


def build_args(
    recipe: str | Path | dict[str, Any] | None = None, overrides: dict[str, Any] | None = None
) -> FinetuneArgs:
    """`FinetuneArgs` from a YAML path or a recipe dict, plus flat or dotted overrides; validated."""
    if recipe is not None and not isinstance(recipe, dict) and not Path(recipe).is_file():
        raise ValueError(f"recipe {recipe} does not exist")
    aliases, dotted = flat_aliases(), {}
    for key, value in (overrides or {}).items():
        if aliases.get(key, key) in dotted:
            raise ValueError(f"--{key} given twice (as --{aliases[key]})")
        dotted[aliases.get(key, key)] = value
    return load_recipe(recipe, dotted, cls=FinetuneArgs)


#: Top-level keys that only an ernie-finetune recipe has (an ernie-pretrain recipe has optim, masking, ...).
FINETUNE_KEYS = ("task", "method", "train")


def recipe_schema(path: str | Path) -> type[FinetuneArgs] | type[PretrainRecipe]:
    """The schema a recipe file is written for: `FinetuneArgs` (`ernie-finetune`) when it has a section only
    fine-tuning has (task, method, train) or fewer keys unknown to `FinetuneArgs` than to `PretrainRecipe`, else
    `PretrainRecipe` (`ernie-pretrain`; so a misspelt key is reported by the schema it was meant for). Only the
    file's keys are read, never its values: those come from the schema (`load_recipe(path,
    cls=recipe_schema(path))`), since a recipe leaves out every key at its default."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a recipe is a mapping of keys, got {type(data).__name__}")
    if any(key in data for key in FINETUNE_KEYS):
        return FinetuneArgs
    if len(unknown_keys(data, FinetuneArgs)) < len(unknown_keys(data, PretrainRecipe)):
        return FinetuneArgs
    return PretrainRecipe


def dump_recipe(args: FinetuneArgs) -> str:
    """The resolved arguments as commented YAML (saved next to the results so the run can be repeated)."""
    return recipe_to_yaml(args, header="ernie-finetune recipe (resolved); run: ernie-finetune THIS_FILE")


__all__ = [
    "FinetuneDataArgs",
    "DistributedArgs",
    "FinetuneArgs",
    "MethodArgs",
    "FinetuneModelArgs",
    "FINETUNE_KEYS",
    "DECODER_TASKS",
    "PreferenceArgs",
    "FINETUNE_TASKS",
    "TrainArgs",
    "build_args",
    "dump_recipe",
    "flat_aliases",
    "recipe_schema",
]
