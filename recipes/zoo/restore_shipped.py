"""Put a shipped model back where its recipes put it, so that later recipes can start from it on a new machine.

    python recipes/zoo/restore_shipped.py                      # ernie-zoo-mini-zh
    python recipes/zoo/restore_shipped.py ernie-zoo-mini-ner

Run directories hold checkpoints, which are never committed: a new machine has the shipped fp16 copies in
ernie_zoo/zoo/ and nothing under runs/zoo/. This writes a shipped model's weights in fp32 (each fp16 value read
exactly, so a recipe that starts from the restored directory gets the very weights it would get from the package
copy) to the source directory that recipes/zoo/ship.py ships it from, e.g. runs/zoo/pretrain6/checkpoint-4000, with
its tokenizer in the tokenizer directory named there, and restored.json saying where the weights came from (sha256
of the shipped file). A shipped ensemble of taggers goes back as one tagger per source directory, its int8 weights
dequantised. What is lost is what fp16 (or int8) rounded off, and the optimizer state: a restored pretraining
checkpoint has no manifest, so ernie-pretrain never resumes from it (it warns and skips it), but `model.init_from`
and ernie-finetune's `model.model_name_or_path` read it. An existing directory is left as it is.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIPPED = Path("ernie_zoo/zoo")


def _ship_module():
    spec = importlib.util.spec_from_file_location("ship", HERE / "ship.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def restore(name: str, shipped: Path = SHIPPED) -> list[Path]:
    """Write the shipped model `name` (fp32) and its tokenizer to the directories ship.py takes them from; returns
    the directories written."""
    from ernie_zoo.finetune.export import load_finetuned
    from ernie_zoo.utils import atomic_directory, atomic_write_json, sha256_file

    models = _ship_module().MODELS
    if name not in models:
        raise SystemExit(f"unknown model {name!r}; expected one of {list(models)}")
    package = shipped / name
    weights = package / "model.safetensors"
    if not weights.is_file():
        raise SystemExit(f"{package} holds no shipped model (no model.safetensors)")
    src, tok, _, _ = models[name]
    sources = src if isinstance(src, list) else [src]
    targets = [Path(d) for d in (*sources, tok) if d is not None and not Path(d).exists()]
    if not targets:
        return []
    model, tokenizer = load_finetuned(package)  # fp32, whatever the file holds
    # An ensemble goes back member by member, each to the run directory it was shipped from.
    if isinstance(src, list) and getattr(model.config, "ensemble_size", None) != len(sources):
        raise SystemExit(
            f"{package} does not hold an ensemble of {len(sources)} taggers, as ship.py's sources say"
        )
    parts = [model.member(i) for i in range(len(sources))] if isinstance(src, list) else [model]
    stored = "int8 (dequantised)" if isinstance(src, list) else "fp16"
    for source, part in zip(sources, parts):
        if Path(source).exists():
            continue
        with atomic_directory(Path(source)) as tmp:
            part.save_pretrained(tmp, safe_serialization=True)
            if tok is None:
                tokenizer.save_pretrained(tmp)
            atomic_write_json(
                tmp / "restored.json",
                {
                    "restored_from": str(package),
                    "shipped_weights_sha256": sha256_file(weights),
                    "note": f"fp32 copy of the shipped {stored} weights; no optimizer state",
                },
            )
    if tok is not None and not Path(tok).exists():
        with atomic_directory(Path(tok)) as tmp:
            tokenizer.save_pretrained(tmp)
    return targets


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=["ernie-zoo-mini-zh"], help="shipped models to restore")
    ap.add_argument("--shipped", type=Path, default=SHIPPED, help="where the shipped models are")
    args = ap.parse_args(argv)
    for name in args.names:
        written = restore(name, args.shipped)
        print(f"{name}: " + (", ".join(map(str, written)) if written else "already there, left as it is"))


if __name__ == "__main__":
    main()
