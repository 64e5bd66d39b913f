"""Scores for a general-domain generator: per-character perplexity, idiom explanations, and a verse-form check.

* :func:`char_perplexity` — a causal LM's perplexity per *character* of held-out text (the token NLL summed over
  a text, divided by its characters), comparable with :class:`~ernie_zoo.models.ngram.CharNgramLM`'s, which also
  predicts every character and nothing after the last.
* :func:`explanation_scores` — character F1 and ROUGE-L (F, on characters) of generated idiom explanations
  against the dictionary's; :func:`retrieval_baseline` answers each question with the explanation of the
  training idiom sharing the most characters (the baseline a generator must beat to be more than a lookup).
* :func:`looks_like_verse` — the form test of the register check: a continuation made of two or more clauses
  of 5 or 7 characters each is verse, whatever its words.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch

from ernie_zoo.models.generation import greedy_continuations
from ernie_zoo.text.metrics import char_f1, distinct2, rouge_l  # re-exported: the generator's scores

from .poetry import LINE_LENGTHS, poem_lines

__all__ = [
    "char_f1",
    "choose_decoding",
    "distinct2",
    "char_perplexity",
    "explanation_scores",
    "looks_like_verse",
    "retrieval_baseline",
    "rouge_l",
    "start_token_id",
    "token_logprobs",
]


def choose_decoding(rows: Sequence[dict], score: str, min_distinct2: float, smaller: Sequence[str]) -> dict:
    """The decoding setting (a row of dev results) with the best `score` among the rows whose "distinct2" is at
    least `min_distinct2` (all rows if none is), ties going to the smaller values of the `smaller` keys in order."""
    ok = [r for r in rows if r["distinct2"] >= min_distinct2] or list(rows)
    return max(ok, key=lambda r: (round(r[score], 6), *(-r[k] for k in smaller)))


def start_token_id(tokenizer) -> int:
    """The token a text is scored after: the tokenizer's BOS, else its CLS (the poetry model's start)."""
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    if start is None:
        raise ValueError("scoring a text needs a tokenizer with a bos_token (or cls_token) to condition on")
    return start


@torch.inference_mode()
def token_logprobs(
    model, tokenizer, ids: list[list[int]], batch_size: int = 64
) -> tuple[list[float], list[int]]:
    """(sum of ln p(token | start token + previous tokens) per sequence, tokens scored per sequence) for token
    ids without special tokens; no end token is predicted. Sequences are batched by length."""
    start, pad = start_token_id(tokenizer), tokenizer.pad_token_id or 0
    sums, counts = [0.0] * len(ids), [len(x) for x in ids]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    for b in range(0, len(order), batch_size):
        rows = order[b : b + batch_size]
        width = 1 + max(len(ids[i]) for i in rows)
        inp = torch.full((len(rows), width), pad)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            seq = [start, *ids[i]]
            inp[r, : len(seq)] = torch.tensor(seq)
            att[r, : len(seq)] = 1
        logp = torch.log_softmax(model(input_ids=inp, attention_mask=att).logits.float(), dim=-1)
        tok = logp[:, :-1].gather(-1, inp[:, 1:, None])[..., 0] * att[:, 1:]
        for r, i in enumerate(rows):
            sums[i] = float(tok[r].sum())
    return sums, counts


def char_perplexity(model, tokenizer, texts: Sequence[str], *, batch_size: int = 16) -> float:
    """exp(-total log-probability / total characters) over ``texts``: each text scored after the start token
    (:func:`start_token_id`), every token of it predicted and nothing after it."""
    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("char_perplexity needs at least one non-empty text")
    model.eval()
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    sums, _ = token_logprobs(model, tokenizer, ids, batch_size)
    value = math.exp(-sum(sums) / sum(map(len, texts)))
    if not math.isfinite(value):
        raise FloatingPointError(
            f"char_perplexity is {value}: the model produced non-finite log-probabilities"
        )
    return value


def explanation_scores(predictions: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Mean character F1 and ROUGE-L of ``predictions`` against ``references`` (same length)."""
    if len(predictions) != len(references) or not references:
        raise ValueError(
            f"need as many predictions as references (got {len(predictions)} and {len(references)})"
        )
    n = len(references)
    return {
        "char_f1": sum(map(char_f1, predictions, references)) / n,
        "rouge_l": sum(map(rouge_l, predictions, references)) / n,
        "n": n,
    }


def retrieval_baseline(train: Sequence[dict], words: Sequence[str]) -> list[str]:
    """For each idiom in ``words``, the explanation of the training idiom sharing the most characters with it
    (ties: the earlier training record)."""
    by_char: dict[str, list[int]] = {}
    for i, rec in enumerate(train):
        for ch in set(rec["word"]):
            by_char.setdefault(ch, []).append(i)
    answers = []
    for word in words:
        votes: Counter[int] = Counter()
        for ch in set(word):
            votes.update(by_char.get(ch, ()))
        best = min(votes, key=lambda i: (-votes[i], i)) if votes else 0
        answers.append(train[best]["explanation"])
    return answers


def looks_like_verse(text: str) -> bool:
    """True if ``text`` has two or more complete lines (closed by a mark) and every one has a verse line's length
    (5 or 7 Han characters, :data:`~ernie_zoo.evaluation.poetry.LINE_LENGTHS`); an unclosed last line is ignored."""
    lines = [line for line, mark in poem_lines(text) if mark]
    return len(lines) >= 2 and all(len(line) in LINE_LENGTHS for line in lines)


# ------------------------------------------------------------------------------------------- the whole card
@torch.inference_mode()
def _continue(
    model,
    tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int,
    repetition_penalty: float,
    batch_size: int = 32,
) -> list[str]:
    """Greedy continuations of `prompts` (each after the start token), decoded without special tokens and cut at
    the end token. Prompts of equal token length are generated together (no padding, so a prompt's continuation
    does not depend on the others beyond floating-point summation order)."""
    start = start_token_id(tokenizer)
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return greedy_continuations(
        model,
        [[start, *tokenizer(p, add_special_tokens=False)["input_ids"]] for p in prompts],
        eos_token_id=eos,
        pad_token_id=pad,
        max_new_tokens=max_new_tokens,
        decode=lambda new: tokenizer.decode(new, skip_special_tokens=True).replace(" ", ""),
        batch_size=batch_size,
        repetition_penalty=repetition_penalty,
    )


def evaluate_generator(
    model_dir,
    data_dir,
    datasets,
    *,
    n_idioms: int | None = None,
    max_new_tokens: int = 48,
    repetition_penalty: float = 1.2,
    ngram_order: int = 4,
    poetry_dir=None,
    max_chars: int = 500,
) -> dict:
    """The general generator's card numbers: per-character perplexity on the held-out modern text (per domain)
    beside a character n-gram LM fitted on the generator's own training text and beside the poetry model; the
    verse-form rate of its continuations of the 200 held-out prefixes (per domain); idiom explanations on the test
    idioms (character F1, ROUGE-L) beside the retrieval baseline. `data_dir` holds `recipes/zoo/generator_data.py`'s
    output, `datasets` the prepared splits."""
    import json
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    import ernie_zoo.auto  # noqa: F401  (the poetry model's class)

    from ..models.ngram import CharNgramLM

    data_dir, datasets = Path(data_dir), Path(datasets)

    def jsonl(path: Path) -> list[dict]:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    # Each held-out text is cut to its first `max_chars` characters for every system: the poetry model reads at
    # most 512 positions, and a few reviews run to ~1,000 characters.
    held = [{**h, "text": h["text"][:max_chars]} for h in jsonl(data_dir / "generator_heldout.jsonl")]
    domains = sorted({h["source"] for h in held})
    by_domain = {d: [h["text"] for h in held if h["source"] == d] for d in domains}
    result: dict = {
        "heldout": {d: {"texts": len(t), "chars": sum(map(len, t))} for d, t in by_domain.items()}
    }

    def load(path):
        return AutoModelForCausalLM.from_pretrained(
            str(path), dtype=torch.float32
        ).eval(), AutoTokenizer.from_pretrained(str(path))

    model, tokenizer = load(model_dir)
    ppl = {"generator": {d: char_perplexity(model, tokenizer, t) for d, t in by_domain.items()}}
    ppl["generator"]["all"] = char_perplexity(model, tokenizer, [h["text"] for h in held])
    train = [line for line in (data_dir / "generator.txt").read_text(encoding="utf-8").splitlines() if line]
    lm = CharNgramLM(order=ngram_order).fit(train)
    ppl[f"char_{ngram_order}gram_kn"] = {d: lm.perplexity(t) for d, t in by_domain.items()}
    ppl[f"char_{ngram_order}gram_kn"]["all"] = lm.perplexity([h["text"] for h in held])
    del lm, train
    if poetry_dir is not None:
        poet, poet_tok = load(poetry_dir)
        ppl["poetry_model"] = {d: char_perplexity(poet, poet_tok, t) for d, t in by_domain.items()}
        ppl["poetry_model"]["all"] = char_perplexity(poet, poet_tok, [h["text"] for h in held])
        del poet
    result["perplexity_per_char"] = ppl

    prefixes = jsonl(data_dir / "generator_prefixes.jsonl")
    conts = _continue(model, tokenizer, [p["prefix"] for p in prefixes], max_new_tokens, repetition_penalty)
    register: dict = {}
    for domain in sorted({p["domain"] for p in prefixes}):
        rows = [c for p, c in zip(prefixes, conts) if p["domain"] == domain]
        register[domain] = {"prefixes": len(rows), "verse_rate": sum(map(looks_like_verse, rows)) / len(rows)}
    result["register"] = register
    result["continuations"] = [{**p, "continuation": c} for p, c in zip(prefixes, conts)]

    train_idioms = jsonl(datasets / "idioms" / "train.jsonl")
    test_idioms = jsonl(datasets / "idioms" / "test.jsonl")[:n_idioms]
    from ..data.generation import idiom_prompt

    answers = _continue(
        model, tokenizer, [idiom_prompt(r["word"]) for r in test_idioms], 64, repetition_penalty
    )
    gold = [r["explanation"] for r in test_idioms]
    result["idioms"] = {
        "generator": explanation_scores(answers, gold),
        "retrieval_baseline": explanation_scores(
            retrieval_baseline(train_idioms, [r["word"] for r in test_idioms]), gold
        ),
        "examples": [
            {"word": r["word"], "gold": g, "generated": a} for r, g, a in zip(test_idioms[:10], gold, answers)
        ],
    }
    result["decoding"] = (
        f"greedy, repetition_penalty {repetition_penalty:g}, max_new_tokens {max_new_tokens} (idioms: 64)"
    )
    return result
