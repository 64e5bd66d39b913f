"""Spelling correction evaluation: the SIGHAN-2015 test, a confusion-set + n-gram baseline, a model's scores.

* :func:`read_sighan2015` — the 707 (source, target) pairs of pycorrector's ``data/sighan2015_test.tsv`` (real
  learner sentences, 373 with errors), read from its wheel. It is the **test** set: scored once per shipped model,
  never used for choices (those use the synthetic dev split of ``ernie_zoo.data.spelling``).
* :class:`NgramCorrector` — the classic pipeline users had before neural CSC (pycorrector's rule/kenlm path):
  for each character, try its confusable characters and keep the one that raises a character n-gram language
  model's log-probability of the sentence the most, if by more than a threshold (chosen on dev). The LM is our
  interpolated Kneser-Ney :class:`~ernie_zoo.models.ngram.CharNgramLM` on the same clean text the neural model
  learns from; the candidates are the same confusion sets.
* :func:`evaluate_correction_model` — Taskflow("text_correction") on the synthetic dev and SIGHAN-2015 test, with
  sentence-level scores exactly as pycorrector's ``eval_model_batch`` and character-level detection/correction F1
  (``ernie_zoo.text.correction``), plus the n-gram baseline side by side when asked.

    python -m ernie_zoo.evaluation.correction --model ernie_zoo/zoo/ernie-zoo-mini-csc --csc-data ~/.cache/ernie_zoo/csc
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ernie_zoo.data.sources import DEFAULT_CACHE, fetch, read_archive_member
from ernie_zoo.models.correction import FusionWeights, candidate_gains, choose_corrections
from ernie_zoo.models.ngram import CharNgramLM
from ernie_zoo.text.confusion import CONFUSION_FILE, ConfusionSets
from ernie_zoo.text.correction import correction_scores

logger = logging.getLogger(__name__)

__all__ = [
    "NgramCorrector",
    "attach_ngram_lm",
    "build_correction_lm",
    "correction_lms",
    "correction_lm_texts",
    "evaluate_correction_model",
    "read_pairs",
    "read_sighan2015",
]

SIGHAN_MEMBER = "pycorrector/data/sighan2015_test.tsv"


def read_sighan2015(raw_dir: Path | None = None) -> list[tuple[str, str]]:
    """(source, target) pairs of SIGHAN-2015 as pycorrector ships and reads them (tab-separated; '#' lines and
    lines without exactly two fields skipped, as its eval_model_batch does)."""
    text = read_archive_member(fetch("pycorrector", raw_dir), SIGHAN_MEMBER).decode("utf-8")
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) == 2:
            pairs.append((parts[0], parts[1]))
    return pairs


def read_pairs(path: str | Path, limit: int | None = None) -> list[tuple[str, str]]:
    """(source, target) pairs of a JSONL file written by `python -m ernie_zoo.data.spelling`."""
    pairs = []
    with Path(path).expanduser().open(encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if limit is not None and len(pairs) >= limit:
                break
            try:
                row = json.loads(line)
                pairs.append((row["source"], row["target"]))
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{i}: expected {{'source': ..., 'target': ...}} ({e})") from None
    return pairs


class NgramCorrector:
    """Confusion-set candidates ranked by a character n-gram LM alone (see the module docstring).

    Every candidate of every character is scored against the sentence as written, in one vectorised LM call per
    sentence: its gain is the change in log-probability of the characters whose context includes its position
    (i .. i + order - 1). Changes with a gain above `threshold` nats are applied best first, skipping any within
    `order - 1` characters of one already applied (their gains assumed the other as written): the model's fused
    decoding (`ernie_zoo.models.correction.choose_corrections`) with the n-gram term only.
    """

    def __init__(self, lm: CharNgramLM, confusion: ConfusionSets, threshold: float = 4.0):
        self.lm, self.confusion, self.threshold = lm, confusion, threshold

    def proposals(self, text: str) -> list[tuple[int, str, float]]:
        """(position, new character, gain) of every change the corrector makes, by position."""
        candidates = {
            i: dict.fromkeys(cands, 0.0)
            for i, ch in enumerate(text)
            if ch in self.confusion and (cands := self.confusion.candidates(ch))
        }
        weights = FusionWeights(threshold=self.threshold, min_distance=self.lm.order)
        return choose_corrections(candidate_gains(text, candidates, self.lm), weights)

    def correct(self, text: str) -> str:
        chars = list(text)
        for i, ch, _ in self.proposals(text):
            chars[i] = ch
        return "".join(chars)


def _scores(pairs: Sequence[tuple[str, str]], predictions: Sequence[str]) -> dict[str, float]:
    return correction_scores([s for s, _ in pairs], [t for _, t in pairs], predictions)


def ngram_baseline(
    csc_data: Path, dev: Sequence[tuple[str, str]], test: Sequence[tuple[str, str]], order: int = 4
) -> dict[str, Any]:
    """The n-gram corrector: LM on the clean side of the synthetic train split, threshold chosen on `dev`."""
    t0 = time.perf_counter()
    train_targets = [t for _, t in read_pairs(csc_data / "train.jsonl")]
    lm = CharNgramLM(order=order).fit(train_targets)
    confusion = ConfusionSets.load(csc_data / CONFUSION_FILE)
    fit_seconds = time.perf_counter() - t0
    # Changes are chosen best-gain first, so a higher threshold keeps a prefix of the same choices: propose once
    # at threshold 0 and filter.
    corrector = NgramCorrector(lm, confusion, 0.0)

    def apply(text: str, props: list[tuple[int, str, float]], threshold: float) -> str:
        chars = list(text)
        for i, ch, gain in props:
            if gain > threshold:
                chars[i] = ch
        return "".join(chars)

    dev_props = [corrector.proposals(s) for s, _ in dev]
    sweep = {
        t: _scores(dev, [apply(s, p, t) for (s, _), p in zip(dev, dev_props)])["sentence_f1"]
        for t in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
    }
    threshold = max(sweep, key=sweep.get)
    logger.info("n-gram corrector: dev sentence F1 by threshold %s; chosen %.1f", sweep, threshold)
    t1 = time.perf_counter()
    preds = [apply(s, corrector.proposals(s), threshold) for s, _ in test]
    test_seconds = time.perf_counter() - t1
    return {
        "system": f"char {order}-gram Kneser-Ney LM + confusion sets (threshold chosen on dev)",
        "train_sentences": len(train_targets),
        "threshold": threshold,
        "dev_sentence_f1_by_threshold": {str(k): v for k, v in sweep.items()},
        "dev": _scores(dev, [apply(s, p, threshold) for (s, _), p in zip(dev, dev_props)]),
        "test": _scores(test, preds),
        "fit_seconds": round(fit_seconds, 1),
        "test_seconds": round(test_seconds, 1),
    }


def evaluate_correction_model(
    model_dir: Path,
    csc_data: Path | None = None,
    *,
    dev_samples: int = 1000,
    baseline: bool = False,
    batch_size: int = 32,
) -> dict[str, Any]:
    """Scores of the text_correction model in `model_dir` on the synthetic dev split (if `csc_data` holds one) and
    on the SIGHAN-2015 test; `baseline` adds the n-gram corrector on the same sets."""
    from ernie_zoo.taskflow import Taskflow

    flow = Taskflow("text_correction", task_path=str(model_dir), batch_size=batch_size)
    test = read_sighan2015()
    fusion = flow._task.fusion
    results: dict[str, Any] = {
        "model": str(model_dir),
        **({"fusion": fusion.to_dict()} if fusion is not None else {"min_prob": flow._task.min_prob}),
    }
    dev = (
        read_pairs(csc_data / "dev.jsonl", dev_samples)
        if csc_data and (csc_data / "dev.jsonl").is_file()
        else []
    )
    if dev:
        results["dev"] = _scores(dev, [r["target"] for r in flow([s for s, _ in dev])])
    t0 = time.perf_counter()
    outputs = flow([s for s, _ in test])
    seconds = time.perf_counter() - t0
    results["sighan2015_test"] = {
        **_scores(test, [r["target"] for r in outputs]),
        "seconds": round(seconds, 2),
        "sentences_per_second": round(len(test) / seconds, 1),
    }
    if baseline:
        if not dev:
            raise ValueError(
                "the n-gram baseline chooses its threshold on the synthetic dev split: pass csc_data"
            )
        results["ngram_baseline"] = ngram_baseline(csc_data, dev, test)
    return results


TRAIN_TEXT = "train"


def correction_lm_texts(sources: Sequence[str], csc_data: Path) -> tuple[list[str], dict[str, int]]:
    """The clean sentences a correction n-gram LM is fitted on, and what was dropped.

    A source is `"train"` (the clean side of `csc_data`'s synthetic training split) or a text file of running text
    (one text a line: the corpora `scripts/prepare_corpora.py` writes), cut into sentences as the synthetic split
    was (`ernie_zoo.data.spelling.iter_sentences`), each sentence once and not at all when an earlier source holds
    it (the training split's as the split holds them). Every sentence of `csc_data`'s dev split (its targets) and
    every SIGHAN-2015 test sentence (source or target, cut the same way) is dropped, so that neither dev choices nor
    the test score read text the LM was fitted on (the test is read only when a source beyond the training split
    is named: the split holds none of its sentences)."""
    from ernie_zoo.data.spelling import iter_sentences

    dev = {t for _, t in read_pairs(csc_data / "dev.jsonl")} if (csc_data / "dev.jsonl").is_file() else set()
    test = (
        {s for pair in read_sighan2015() for s in iter_sentences(pair)} if sources != [TRAIN_TEXT] else set()
    )
    texts: list[str] = []
    seen: set[str] = set()
    dropped = {"dev": 0, "sighan2015_test": 0}
    for source in sources:
        if source == TRAIN_TEXT:  # as the split holds them: a sentence it repeats counts as often
            new = [t for _, t in read_pairs(csc_data / "train.jsonl")]
        else:
            path = Path(source).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"LM text {source!r}: neither {TRAIN_TEXT!r} nor a text file")
            with path.open(encoding="utf-8") as f:
                new = [t for t in dict.fromkeys(iter_sentences(f)) if t not in seen]
        for text in new:
            if text in dev:
                dropped["dev"] += 1
            elif text in test:
                dropped["sighan2015_test"] += 1
            else:
                texts.append(text)
        seen.update(new)
    return texts, dropped


def correction_lms(
    csc_data: Path,
    order: int,
    min_counts: Sequence[int],
    sources: Sequence[str] = (TRAIN_TEXT,),
    prune_from: Sequence[int] = (2,),
) -> Iterator[tuple[CharNgramLM, dict[str, Any]]]:
    """The character n-gram LM of fused decoding, fitted once on `correction_lm_texts(sources, csc_data)`, then for
    each order in `prune_from` (those above `order` skipped) and each of `min_counts`, pruned to the n-grams of that
    order and above seen `min_count` times (`CharNgramLM.prune`); each with its description (what
    bench/csc_fusion.py records and `attach_ngram_lm` rebuilds from)."""
    texts, dropped = correction_lm_texts(list(sources), csc_data)
    fitted_lm = CharNgramLM(order=order).fit(texts)
    fitted = fitted_lm.num_ngrams
    for from_order in [k for k in prune_from if k <= order]:
        lm = copy.deepcopy(fitted_lm) if len(prune_from) > 1 else fitted_lm
        # ascending: each prune starts from the last, which is the same as pruning the fitted LM
        for min_count in sorted(min_counts):
            lm.prune(min_count, from_order)
            yield (
                lm,
                {
                    "order": order,
                    "min_count": min_count,
                    "prune_from_order": from_order,
                    "text": list(sources),
                    "sentences": len(texts),
                    "characters": sum(map(len, texts)),
                    "dropped_sentences": dropped,
                    "ngrams_fitted": fitted,
                    "ngrams_kept": lm.num_ngrams,
                },
            )


def build_correction_lm(
    csc_data: Path, order: int, min_count: int, sources: Sequence[str] = (TRAIN_TEXT,), prune_from: int = 2
) -> tuple[CharNgramLM, dict[str, Any]]:
    """One LM of `correction_lms`: fitted on `sources`, pruned at `min_count` from order `prune_from` up."""
    return next(correction_lms(csc_data, order, [min_count], sources, [prune_from]))


def attach_ngram_lm(
    model_dir: Path, csc_data: Path, fusion: Path, max_bytes: int = 25_000_000
) -> dict[str, Any]:
    """Ship fused decoding with a text_correction model: fit the character n-gram LM that `fusion` (the results
    of bench/csc_fusion.py) describes on the text it names (`build_correction_lm`), prune it the same way,
    write it into `model_dir` as `ngram_lm.safetensors`, set the chosen weights as config.json's
    `correction_fusion`, and rewrite the manifest. Refused when the directory would exceed `max_bytes`."""
    from ernie_zoo.models.correction import NGRAM_FILE
    from ernie_zoo.utils import atomic_write_json, write_manifest

    chosen = json.loads(Path(fusion).read_text(encoding="utf-8"))
    spec, weights = chosen["ngram_lm"], FusionWeights(**chosen["chosen"])
    lm, _ = build_correction_lm(
        csc_data,
        spec["order"],
        spec["min_count"],
        spec.get("text", [TRAIN_TEXT]),
        spec.get("prune_from_order", 2),
    )
    if lm.num_ngrams != spec["ngrams_kept"]:
        raise ValueError(
            f"the LM fitted on {csc_data} keeps {lm.num_ngrams} n-grams, {fusion} chose its weights with "
            f"{spec['ngrams_kept']}: not the same training text"
        )
    config_path = Path(model_dir) / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    tmp = Path(model_dir) / f".{NGRAM_FILE}.tmp"
    lm.save(tmp)
    others = sum(f.stat().st_size for f in Path(model_dir).iterdir() if f.name != NGRAM_FILE and f != tmp)
    total = others + tmp.stat().st_size
    if total > max_bytes:
        tmp.unlink()
        raise ValueError(f"{model_dir} with the n-gram LM would take {total:,} bytes > {max_bytes:,}")
    tmp.replace(Path(model_dir) / NGRAM_FILE)
    config["correction_fusion"] = weights.to_dict()
    atomic_write_json(config_path, config, indent=2, sort_keys=True)
    write_manifest(model_dir)
    return {
        "ngrams": lm.num_ngrams,
        "bytes": (Path(model_dir) / NGRAM_FILE).stat().st_size,
        "fusion": weights.to_dict(),
    }


@dataclass
class Args:
    """Score a text_correction model and / or the n-gram baseline, or ship fused decoding with a model."""

    model: Path | None = None
    """A text_correction model directory."""
    csc_data: Path = DEFAULT_CACHE / "csc"
    """The synthetic data (dev.jsonl) of `python -m ernie_zoo.data.spelling`."""
    dev_samples: int = 1000
    """Dev pairs scored."""
    baseline: bool = False
    """Run the n-gram + confusion-set corrector too (alone without --model: what the csc card quotes,
    bench/results/correction_baselines.json)."""
    out: Path | None = None
    """Write the results JSON here."""
    attach_lm: Path | None = None
    """Ship fused decoding with this model directory: the n-gram LM and the weights --fusion chose."""
    fusion: Path = Path("bench/results/csc_fusion.json")
    """The fusion weights chosen on dev (bench/csc_fusion.py)."""

    def validate(self) -> None:
        if self.attach_lm is None and self.model is None and not self.baseline:
            raise ValueError("give --model DIR, --baseline, --attach-lm DIR, or a combination")


def run(args: Args, argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.attach_lm is not None:
        print(json.dumps(attach_ngram_lm(args.attach_lm, args.csc_data, args.fusion)))
        return 0
    if args.model is not None:
        results = evaluate_correction_model(
            args.model, args.csc_data, dev_samples=args.dev_samples, baseline=args.baseline
        )
    else:
        dev = read_pairs(args.csc_data / "dev.jsonl", args.dev_samples)
        results = {"ngram": ngram_baseline(args.csc_data, dev, read_sighan2015())}
    text = json.dumps(results, ensure_ascii=False, indent=2)
    if args.out:
        from ernie_zoo.utils import atomic_write_text

        atomic_write_text(args.out, text + "\n")
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    from ernie_zoo.recipe_cli import command_main

    return command_main(Args, run, "python -m ernie_zoo.evaluation.correction", __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    from ernie_zoo.utils import run_console

    raise SystemExit(run_console("python -m ernie_zoo.evaluation.correction", main))
