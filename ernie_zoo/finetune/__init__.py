"""Fine-tuning ErnieZoo models: classification, NER (optionally with a CRF), generation; full, peft or
bottleneck adapters. The `ernie-finetune` command runs `run_finetune` on a YAML recipe plus overrides.

    from ernie_zoo.finetune import build_args, run_finetune, load_finetuned
    result = run_finetune(build_args("recipes/finetune/sentiment_lora.yaml", {"output_dir": "outputs/senta"}))
    model, tokenizer = load_finetuned("outputs/senta")
"""

from ernie_zoo.models import (  # re-exported: the model classes live in ernie_zoo.models
    ErnieZooEnsembleForTokenClassificationCRF,
    ErnieZooForTokenClassificationCRF,
    LinearChainCRF,
)

from .args import (
    FinetuneArgs,
    FinetuneDataArgs,
    FinetuneModelArgs,
    MethodArgs,
    TrainArgs,
    build_args,
    dump_recipe,
)
from .bottleneck import BottleneckConfig, BottleneckModel
from .export import export, load_adapter, load_finetuned, merge_adapter, unwrap
from .methods import METHODS, Method, apply_method, check_supported, register_method
from .run import run_finetune

__all__ = [
    "BottleneckConfig",
    "BottleneckModel",
    "FinetuneDataArgs",
    "ErnieZooEnsembleForTokenClassificationCRF",
    "ErnieZooForTokenClassificationCRF",
    "FinetuneArgs",
    "LinearChainCRF",
    "METHODS",
    "Method",
    "MethodArgs",
    "FinetuneModelArgs",
    "TrainArgs",
    "apply_method",
    "build_args",
    "check_supported",
    "dump_recipe",
    "export",
    "load_adapter",
    "load_finetuned",
    "merge_adapter",
    "register_method",
    "run_finetune",
    "unwrap",
]
