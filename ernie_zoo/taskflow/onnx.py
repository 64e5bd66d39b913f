"""ONNX export of Taskflow's encoder heads, and the ONNX Runtime backend that runs them in a Taskflow task.

    ernie-zoo export --onnx runs/ner exported/ner                # or Taskflow's shipped directories
    Taskflow("ner", task_path="exported/ner", backend="onnxruntime")

One exported directory holds one task's graph (`model.onnx`), the files of the model
directory that are not weights (config.json, tokenizer, lexicons, confusion sets, the n-gram LM), the CRF's
transition scores (`crf.safetensors`, decoded outside the graph), `onnx.json` (the task, the graph's inputs and
outputs, the exporter's versions) and `manifest.json` (sha256 of every file, checked before anything is loaded).

What runs inside the graph and what outside:

    tokenizer (input_ids, token_type_ids, pinyin_ids) ─┐
    Taskflow task (lexicon_ids of an entity lexicon) ──┤
    backend (sentiment-lexicon bits from input_ids) ───┼─► model.onnx ─► logits / emissions / hidden states
    attention_mask ────────────────────────────────────┘   (radical/stroke tables are buffers inside it)
                                                              │
    task postprocess, CRF Viterbi (models/crf.py, torch) ◄────┘  the torch backend's code, unchanged

The backend (`OnnxRuntimeModel`) stands where the torch module stands in a task: called with the padded batch it
returns the same output fields as torch tensors, and the task's preprocess/postprocess are shared. Its `module`
is the torch head built on the meta device (no weights): its config, its lexicons and their bit computation are
the torch model's own code.

Exporter: the TorchScript exporter (`torch.onnx.export(dynamo=False)`) traced the encoder, the CRF tagger's
emissions and the ensemble's mean of members in one pass with dynamic batch and length axes; the padding mask is
given to the encoder as a ready (B, 1, 1, T) additive mask, because transformers' own mask construction from a 2-D
mask traced into a graph that was wrong on padded batches (logits off by 0.1-2.5).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ernie_zoo.models.crf import LinearChainCRF
from ernie_zoo.models.crf_tagger import default_crf_mask, viterbi_predictions
from ernie_zoo.utils import (
    MANIFEST,
    ManifestError,
    atomic_directory,
    read_manifest,
    verify_manifest,
    write_manifest,
)
from ernie_zoo.version import __version__

from .models import LoadedModel, ModelSource, load_model
from .onnx_int8 import quantize_graph

logger = logging.getLogger(__name__)

BACKENDS = ("torch", "onnxruntime")
SPEC_FILE = "onnx.json"
GRAPH_FILES = {
    "fp32": "model.onnx",
    "int8": "model.int8.onnx",
}  # precision -> graph file (int8: onnx_int8.py)
CRF_FILE = "crf.safetensors"
OPSET = 17
SPEC_FORMAT = 1
#: the tasks an encoder head is exported for, and the graph outputs of each
OUTPUTS = {
    "sentiment_analysis": ("logits",),
    "ner": ("logits",),  # CRF heads: emissions; Viterbi runs outside the graph
    "fill_mask": ("mask_logits",),  # (M, V) at the flat positions `mask_index`
    "feature_extraction": ("last_hidden_state",),
    "text_correction": ("logits", "detection_logits"),
    # (B, T) each; spans are paired outside the graph (taskflow/information_extraction.py)
    "information_extraction": ("start_logits", "end_logits"),
}
#: a directory's head -> the task its export serves unless --task says otherwise
DEFAULT_TASK = {
    # plain transformers checkpoints (ERNIE 3.0, BERT / RoBERTa-wwm): their own config, vocab.txt, no char features
    **{f"{family}ForSequenceClassification": "sentiment_analysis" for family in ("Ernie", "Bert")},
    **{f"{family}ForTokenClassification": "ner" for family in ("Ernie", "Bert")},
    **{f"{family}ForMaskedLM": "fill_mask" for family in ("Ernie", "Bert")},
    **{f"{family}Model": "feature_extraction" for family in ("Ernie", "Bert")},
    "ErnieZooForSequenceClassification": "sentiment_analysis",
    "ErnieZooForTokenClassification": "ner",
    "ErnieZooForTokenClassificationCRF": "ner",
    "ErnieZooEnsembleForTokenClassificationCRF": "ner",
    "ErnieZooForMaskedLM": "fill_mask",
    "ErnieZooModel": "feature_extraction",
    "ErnieZooForSpellingCorrection": "text_correction",
    "ErnieZooForSpanExtraction": "information_extraction",
}
#: a head's task -> the other tasks its export may serve (a masked LM's encoder gives the hidden states)
ALSO_SERVES = {"fill_mask": ("feature_extraction",)}
#: each task's graph outputs and their ranks, checked when a graph is loaded (`output_shapes` in onnx.json, where
#: the export recorded them, also pins the fixed sizes)
OUTPUT_RANKS = {
    "sentiment_analysis": {"logits": 2},  # (batch, labels)
    "ner": {"logits": 3},  # (batch, length, labels)
    "fill_mask": {"mask_logits": 2},  # (masks, vocab)
    "feature_extraction": {"last_hidden_state": 3},  # (batch, length, hidden)
    "text_correction": {"logits": 3, "detection_logits": 2},  # (batch, length, vocab), (batch, length)
}
_TOKENIZER_KEYS = ("input_ids", "token_type_ids", "pinyin_ids")
# weight files never copied into an exported directory (the graph holds the weights; no pickles)
_NOT_COPIED = ("model.safetensors", "manifest.json", "README.md")
_NOT_COPIED_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".onnx")


class OnnxExportError(ValueError):
    """A model directory cannot be exported, or an exported directory cannot be run."""


# ----------------------------------------------------------------------------------------------- export
class _Graph(nn.Module):
    """The traced function of one task: padded int64 inputs -> the task's outputs (see `OUTPUTS`)."""

    def __init__(self, model: nn.Module, task: str, inputs: tuple[str, ...]):
        super().__init__()
        self.model, self.task, self.inputs = model, task, inputs

    def forward(self, *tensors: torch.Tensor):
        given = dict(zip(self.inputs, tensors))
        mask_index = given.pop("mask_index", None)
        attention_mask = given.pop("attention_mask")
        # (B, T) 0/1 -> (B, 1, 1, T) additive: transformers uses a 4-D mask as given (module docstring)
        additive = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        kw = dict(given, attention_mask=additive)
        model = self.model
        if self.task == "ner" and hasattr(model, "members"):  # ensemble: the members' mean emissions
            return torch.stack([m.encode(**kw)[0] for m in model.members]).mean(0)
        if self.task == "ner" and hasattr(model, "crf"):
            return model.encode(**kw)[0]
        if self.task == "fill_mask":
            hidden = getattr(model, model.base_model_prefix)(**kw).last_hidden_state  # (B, T, H)
            return model.cls(hidden.reshape(-1, hidden.shape[-1])[mask_index])  # (M, V)
        if self.task == "feature_extraction":
            base = getattr(model, model.base_model_prefix, model) if hasattr(model, "cls") else model
            return base(**kw).last_hidden_state
        out = model(**kw)
        if self.task == "text_correction":
            return out.logits, out.detection_logits
        if self.task == "information_extraction":
            return out.start_logits, out.end_logits
        return out.logits


def _example_inputs(loaded: LoadedModel, names: tuple[str, ...]) -> tuple[torch.Tensor, ...]:
    """Two padded rows of different lengths (dynamic axes are traced from a real padded batch)."""
    enc = loaded.tokenizer(
        ["新华社北京三月五日电，李明在北京大学发表讲话。", "好的"], padding=True, return_tensors="pt"
    )
    batch = {k: enc[k] for k in _TOKENIZER_KEYS if k in enc}
    batch["attention_mask"] = enc["attention_mask"]
    batch["lexicon_ids"] = torch.zeros_like(enc["input_ids"])
    batch["mask_index"] = torch.tensor([2, enc["input_ids"].shape[1] + 1])
    return tuple(batch[n] for n in names)


def graph_inputs(loaded: LoadedModel, task: str) -> tuple[str, ...]:
    """The graph's input names: the tokenizer outputs the model reads, the mask, lexicon bits, mask positions."""
    from ernie_zoo.models import ErnieZooPreTrainedModel

    probe = loaded.tokenizer("中文")
    keys = _TOKENIZER_KEYS if isinstance(loaded.model, ErnieZooPreTrainedModel) else _TOKENIZER_KEYS[:2]
    names = [k for k in keys if k in probe] + ["attention_mask"]
    if getattr(loaded.model, "reads_lexicon", False):
        names.append("lexicon_ids")
    if task == "fill_mask":
        names.append("mask_index")
    return tuple(names)


def is_export(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds an earlier export and nothing else: its `onnx.json`, and only files its
    manifest lists (a file a user added beside them, a subdirectory, makes it no export: replacing it would
    delete them)."""
    directory = Path(directory)
    if not (directory / SPEC_FILE).is_file():
        return False
    try:
        listed = set(read_manifest(directory))
    except ManifestError:
        return False
    for entry in directory.rglob("*"):
        rel = entry.relative_to(directory).as_posix()
        if entry.is_symlink() or not entry.is_file() or (rel not in listed and rel != MANIFEST):
            return False
    return True


def check_out_dir(out_dir: str | os.PathLike, overwrite: bool = False) -> None:
    """Refuse an output path whose contents an export would destroy: a file or link (never replaced by a
    directory), or a non-empty directory that is not an earlier export unless `overwrite`."""
    out = Path(out_dir)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OnnxExportError(
            f"{out_dir} is {'a symbolic link' if out.is_symlink() else 'a file'}, not a directory: give the "
            "export a directory path (new, empty, or an earlier export)"
        )
    if out.is_dir() and any(out.iterdir()) and not overwrite and not is_export(out):
        found = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir())
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise OnnxExportError(
            f"{out_dir} is not empty and holds no earlier export ({shown}); an export replaces the whole "
            "directory: give a new or empty directory, or --overwrite to replace it and everything in it"
        )


def export_onnx(
    model_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    task: str | None = None,
    *,
    int8: bool = True,
    overwrite: bool = False,
) -> Path:
    """Export the encoder head of `model_dir` (a directory written by save_pretrained / ernie-finetune, or a
    shipped model's) for `task` (default: the head's task, `DEFAULT_TASK`; a task the head does not serve is
    refused) into `out_dir` (written in a temporary directory beside it and renamed into place).
    `int8`: also write the int8 graph (`model.int8.onnx`, per-token input scales as Taskflow's torch int8 mode:
    `ernie_zoo.taskflow.onnx_int8`). `out_dir` must be new, empty or an earlier export (`is_export`); `overwrite`
    replaces any other directory; a file is never replaced. Returns `out_dir`."""
    from .task import get_task

    check_out_dir(out_dir, overwrite)
    source_dir = Path(model_dir).expanduser().resolve()
    if not (source_dir / "config.json").is_file():
        raise OnnxExportError(f"{model_dir}: not a model directory (no config.json)")
    config = json.loads((source_dir / "config.json").read_text(encoding="utf-8"))
    arch = (config.get("architectures") or ["?"])[0] if isinstance(config, dict) else "?"
    if arch not in DEFAULT_TASK:
        raise OnnxExportError(
            f"{source_dir / 'config.json'}: architectures {arch!r} has no ONNX export; exportable heads: "
            f"{', '.join(DEFAULT_TASK)} (decoders and generation are not exported)"
        )
    served = (DEFAULT_TASK[arch], *ALSO_SERVES.get(DEFAULT_TASK[arch], ()))
    task = get_task(task).name if task is not None else served[0]
    if task not in OUTPUTS:
        raise OnnxExportError(f"task {task!r} has no ONNX export; tasks that do: {', '.join(OUTPUTS)}")
    if task not in served:
        raise OnnxExportError(
            f"{model_dir} is a {arch} head, which serves {' or '.join(map(repr, served))}, not --task {task!r}: "
            f"leave --task out, or export a model directory fine-tuned for {task}"
        )
    cls = get_task(task)
    kind = "shipped" if source_dir.parent == Path(__file__).resolve().parent.parent / "zoo" else "local"
    # Taskflow's own loading: the directory checks, the manifest of a shipped model, finite weights
    loaded = load_model(ModelSource(kind, str(source_dir)), cls.auto_class, "fp32", None, cls.ignore_missing)
    model = loaded.model
    names = graph_inputs(loaded, task)
    outputs = OUTPUTS[task]
    axes = {n: ({0: "masks"} if n == "mask_index" else {0: "batch", 1: "length"}) for n in names}
    for n in outputs:
        axes[n] = {0: "masks"} if n == "mask_index" or task == "fill_mask" else {0: "batch", 1: "length"}
    if task == "sentiment_analysis":
        axes["logits"] = {0: "batch"}
    before = model.config._attn_implementation
    with atomic_directory(out_dir) as tmp:  # check_out_dir said what it may replace
        for entry in sorted(source_dir.iterdir()):
            if entry.is_file() and not entry.name.startswith("."):
                if entry.name in _NOT_COPIED or entry.name.endswith(_NOT_COPIED_SUFFIXES):
                    continue
                if entry.name.startswith("model") and entry.name.endswith(".safetensors"):
                    continue
                shutil.copyfile(entry, tmp / entry.name)
        crf = getattr(model, "crf", None)
        if task == "ner" and crf is not None:
            save_file(
                {k: v.detach().float().contiguous() for k, v in crf.state_dict().items()}, str(tmp / CRF_FILE)
            )
        try:
            model.set_attn_implementation("eager")  # plain MatMul/Softmax ops; restored below (cached model)
            # TracerWarnings name the shape checks that run in Python (constant in the trace; the inputs are
            # checked by the backend) and the deprecation of the TorchScript exporter (module docstring)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    _Graph(model, task, names).eval(),
                    _example_inputs(loaded, names),
                    str(tmp / GRAPH_FILES["fp32"]),
                    input_names=list(names),
                    output_names=list(outputs),
                    dynamic_axes=axes,
                    opset_version=OPSET,
                    dynamo=False,
                )
        finally:
            model.set_attn_implementation(before)
        graphs = {"fp32": GRAPH_FILES["fp32"]}
        if int8:
            quantize_graph(tmp / GRAPH_FILES["fp32"], tmp / GRAPH_FILES["int8"])
            graphs["int8"] = GRAPH_FILES["int8"]
        spec = {
            "format": SPEC_FORMAT,
            "task": task,
            "architecture": type(model).__name__,
            "inputs": list(names),
            "outputs": list(outputs),
            "output_shapes": _output_shapes(tmp / GRAPH_FILES["fp32"]),
            "graphs": graphs,
            "crf": CRF_FILE if (tmp / CRF_FILE).is_file() else None,
            "opset": OPSET,
            "exported_from": str(source_dir),
            "versions": {"ernie_zoo": __version__, "torch": torch.__version__},
        }
        (tmp / SPEC_FILE).write_text(json.dumps(spec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        write_manifest(tmp)
    return Path(out_dir)


def _output_shapes(graph: Path) -> dict[str, list[str | int | None]]:
    """{output: its dims} of an ONNX graph file: a dynamic axis by name, a fixed one by size, None if unknown."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    return {
        o.name: [
            d.dim_param or (d.dim_value if d.HasField("dim_value") else None)
            for d in o.type.tensor_type.shape.dim
        ]
        for o in model.graph.output
    }


# ----------------------------------------------------------------------------------------------- runtime
@dataclasses.dataclass
class OnnxOutput:
    """The fields of a torch head's output that Taskflow's tasks read (torch tensors)."""

    logits: torch.Tensor | None = None
    predictions: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None
    detection_logits: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None
    end_logits: torch.Tensor | None = None


def read_spec(directory: str | os.PathLike) -> dict[str, Any]:
    """`onnx.json` of an exported directory, its manifest verified first; OnnxExportError naming the problem."""
    directory = Path(directory)
    path = directory / SPEC_FILE
    if not path.is_file():
        raise OnnxExportError(
            f"{directory} has no {SPEC_FILE}: backend='onnxruntime' runs a directory written by "
            f"`ernie-zoo export --onnx MODEL_DIR OUT_DIR`"
        )
    verify_manifest(directory, complete=True)  # sha256 of every file before any of them is read
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OnnxExportError(f"{path}: unreadable ({exc})") from exc
    if not isinstance(spec, dict) or spec.get("format") != SPEC_FORMAT:
        raise OnnxExportError(f"{path}: expected format {SPEC_FORMAT}; export the model again")
    for key in ("task", "architecture", "inputs", "outputs", "graphs"):
        if key not in spec:
            raise OnnxExportError(f"{path}: missing field {key!r}; export the model again")
    return spec


def onnx_default_precision(directory: str | os.PathLike) -> str:
    """The precision of an exported directory given none: config.json's `taskflow_cpu_precision` when that
    graph was exported, else fp32."""
    from .models import default_precision

    spec = read_spec(directory)
    wanted = default_precision(ModelSource("local", str(directory)), torch.device("cpu"))
    return wanted if wanted in spec["graphs"] else "fp32"


def _check_graph(graph: Path, spec: dict[str, Any], session: Any, config: Any) -> None:
    """The loaded graph against `onnx.json`: the same inputs, the same outputs (names and count), each output of
    the task's rank, with the fixed sizes the export recorded (`output_shapes`) and as many logits as the config
    has labels. A graph copied from another export (a sentiment graph in a NER directory) fails here, naming
    the file, instead of as an IndexError in postprocessing."""
    where = f"{graph} does not match {graph.parent / SPEC_FILE}"
    inputs = sorted(i.name for i in session.get_inputs())
    if inputs != sorted(spec["inputs"]):
        raise OnnxExportError(
            f"{where}: the graph's inputs are {inputs}, onnx.json says {sorted(spec['inputs'])}"
        )
    shapes = {o.name: list(o.shape) for o in session.get_outputs()}
    if sorted(shapes) != sorted(spec["outputs"]):
        raise OnnxExportError(
            f"{where}: the graph's outputs are {sorted(shapes)}, onnx.json says {sorted(spec['outputs'])}"
        )
    ranks = OUTPUT_RANKS.get(spec["task"], {})
    recorded = spec.get("output_shapes") or {}
    labels = getattr(config, "num_labels", None) if spec["task"] in ("sentiment_analysis", "ner") else None
    for name, shape in shapes.items():
        expected = recorded.get(name)
        rank = len(expected) if isinstance(expected, list) else ranks.get(name)
        if rank is not None and len(shape) != rank:
            raise OnnxExportError(
                f"{where}: output {name!r} has shape {shape} (rank {len(shape)}); a {spec['task']} export's "
                f"{name} has rank {rank}" + (f" {expected}" if expected else "")
            )
        for axis, (got, want) in enumerate(zip(shape, expected or [])):
            if isinstance(got, int) and isinstance(want, int) and got != want:
                raise OnnxExportError(
                    f"{where}: output {name!r} has {got} at axis {axis}, onnx.json says {want}"
                )
        if name == "logits" and labels and isinstance(shape[-1], int) and shape[-1] != labels:
            raise OnnxExportError(
                f"{where}: output 'logits' has {shape[-1]} labels, config.json has {labels}"
            )


class OnnxRuntimeModel:
    """An ONNX Runtime session standing where a torch head stands in a Taskflow task (module docstring)."""

    # attributes a task reads from its model, served by the weightless torch module
    _FROM_MODULE = (
        "config",
        "entity_lexicon",
        "sentiment_lexicon",
        "reads_lexicon",
        "fusion",
        "confusion_sets",
        "ngram_lm",
    )

    def __init__(self, directory: str | os.PathLike, precision: str = "fp32"):
        import onnxruntime as ort
        from transformers import AutoConfig

        import ernie_zoo.auto  # noqa: F401  (registers ErnieZoo with the Auto classes)
        import ernie_zoo.models as models

        directory = Path(directory)
        self.spec = spec = read_spec(directory)
        if precision not in spec["graphs"]:
            raise OnnxExportError(
                f"{directory} has no {precision} graph (it has {', '.join(spec['graphs'])}); "
                + "; export it again (`ernie-zoo export --onnx` writes both) or use precision='fp32'"
            )
        import transformers

        cls = getattr(models, spec["architecture"], None)
        if not (isinstance(cls, type) and issubclass(cls, models.ErnieZooPreTrainedModel)):
            cls = getattr(transformers, spec["architecture"], None)  # a plain ERNIE 3.0 / BERT head
            if spec["architecture"] not in DEFAULT_TASK or not isinstance(cls, type):
                raise OnnxExportError(
                    f"{directory / SPEC_FILE}: unknown architecture {spec['architecture']!r}"
                )
        config = AutoConfig.from_pretrained(directory, local_files_only=True)
        with torch.device("meta"):
            self.module = cls(config)  # the head's code without its weights (the graph holds them)
        if hasattr(self.module, "load_saved_files"):
            self.module.load_saved_files(directory)
        self.crf = None
        if spec.get("crf"):
            state = load_file(str(directory / spec["crf"]))
            self.crf = LinearChainCRF(state["transitions"].shape[0])
            self.crf.load_state_dict(state)
        options = ort.SessionOptions()
        # the same thread count as torch in this process (OMP_NUM_THREADS / torch.set_num_threads)
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        graph = directory / spec["graphs"][precision]
        try:
            self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        except (
            Exception
        ) as exc:  # onnxruntime's InvalidProtobuf / Fail / ... (pybind classes, no common base)
            detail = " ".join(str(exc).split())[:200]
            raise OnnxExportError(
                f"{graph}: not a loadable ONNX graph, the file is corrupt or truncated ({detail}); export the "
                "model again with `ernie-zoo export --onnx MODEL_DIR OUT_DIR`"
            ) from None
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_names = tuple(o.name for o in self.session.get_outputs())
        self.task = spec["task"]
        _check_graph(graph, spec, self.session, config)

    def __getattr__(self, name: str) -> Any:
        if name in OnnxRuntimeModel._FROM_MODULE:
            return getattr(self.__dict__["module"], name, None)
        raise AttributeError(name)

    def _feed(self, batch: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
        given = dict(batch)
        if "lexicon_ids" in self.input_names and "lexicon_ids" not in given:
            # a sentiment classifier's lexicon bits, computed from the ids as the torch head computes them
            bits = self.module._lexicon_ids_for(given["input_ids"])
            given["lexicon_ids"] = bits if bits is not None else torch.zeros_like(given["input_ids"])
        missing = [n for n in self.input_names if n not in given]
        if missing:
            raise ValueError(f"the ONNX graph needs inputs {missing} that the batch lacks")
        return {n: given[n].detach().cpu().numpy().astype(np.int64, copy=False) for n in self.input_names}

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return dict(zip(self.output_names, map(torch.from_numpy, self.session.run(None, feed))))

    def __call__(self, logits_mask: torch.Tensor | None = None, **batch: torch.Tensor) -> OnnxOutput:
        """The torch head's outputs for `batch`. `logits_mask` (B, T) bool, as the spelling corrector's torch
        forward takes it: `logits` holds the (N, V) rows at the True positions only, in row-major order (the graph
        computes every position; the selection keeps the task's contract)."""
        out = self.run(self._feed(batch))
        if logits_mask is not None and out.get("logits") is not None:
            out["logits"] = out["logits"][logits_mask.to(torch.bool)]
        predictions = None
        if self.crf is not None:  # the CRF tagger's Viterbi path, decoded by the torch head's code
            predictions = viterbi_predictions(
                self.crf, out["logits"], default_crf_mask(batch["attention_mask"])
            )
        return OnnxOutput(
            logits=out.get("logits"),
            predictions=predictions,
            last_hidden_state=out.get("last_hidden_state"),
            detection_logits=out.get("detection_logits"),
            start_logits=out.get("start_logits"),
            end_logits=out.get("end_logits"),
        )

    def mask_logits(
        self, batch: dict[str, torch.Tensor], rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        """(M, V) vocabulary scores at the M mask positions (rows, cols) only, as the fill-mask task asks."""
        width = batch["input_ids"].shape[1]
        return self.run(self._feed({**batch, "mask_index": rows * width + cols}))["mask_logits"]


_CACHE: dict[tuple[str, str], LoadedModel] = {}
_CACHE_LOCK = threading.Lock()


def load_onnx_model(source: ModelSource, task: str, precision: str, device: torch.device) -> LoadedModel:
    """The exported directory `source` as a LoadedModel whose `model` is an `OnnxRuntimeModel` (cached per
    process, like torch models). The directory must hold an export for `task`, at `precision`, on CPU."""
    from transformers import AutoTokenizer

    if device.type != "cpu":
        raise ValueError(
            f"backend='onnxruntime' runs on CPU here, not {device}; use backend='torch' on a GPU"
        )
    if source.kind != "local":
        raise OnnxExportError(
            f"backend='onnxruntime' needs an exported directory (task_path=DIR or model=DIR), not the "
            f"{source.kind} model {source.location!r}: export it first with "
            f"`ernie-zoo export --onnx {source.location} OUT_DIR`"
        )
    key = (source.location, precision)
    with _CACHE_LOCK:
        if key not in _CACHE:
            model = OnnxRuntimeModel(source.location, precision)
            tokenizer = AutoTokenizer.from_pretrained(source.location, local_files_only=True)
            _CACHE[key] = LoadedModel(
                model=model, tokenizer=tokenizer, source=source, precision=precision, device=device
            )
        loaded = _CACHE[key]
    if loaded.model.task != task:
        raise OnnxExportError(
            f"{source.location} was exported for task {loaded.model.task!r}, not {task!r}: export it again with "
            f"`ernie-zoo export --onnx MODEL_DIR OUT_DIR --task {task}`"
        )
    return loaded


def clear_onnx_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()


__all__ = [
    "BACKENDS",
    "OnnxExportError",
    "OnnxRuntimeModel",
    "clear_onnx_cache",
    "export_onnx",
    "load_onnx_model",
    "onnx_default_precision",
    "read_spec",
]
