"""Chinese-text building blocks, the lowest layer of ernie_zoo (imports only the standard library):

- `tags`: `Span` and the BIO/BIOES/BMES tag codec (`tags_to_spans`, `spans_to_tags`, `parse_tag`, ...);
- `metrics`: entity-span precision/recall/F1 (`span_scores`, `prf`);
- `sentences`: the sentence splitter that cuts long texts into chunks (`chunk_spans`, `chunk_text`);
- `confusion`: confusion sets of spelling correction (`ConfusionSets`);
- `correction`: spelling-correction scores, sentence level as pycorrector defines them (`correction_scores`).
"""

from .confusion import ConfusionSets
from .correction import correction_scores
from .metrics import prf, span_scores
from .sentences import chunk_spans, chunk_text, sentence_spans
from .tags import Span, as_span, parse_tag, spans_to_tags, tags_to_spans

__all__ = [
    "ConfusionSets",
    "Span",
    "as_span",
    "chunk_spans",
    "chunk_text",
    "correction_scores",
    "parse_tag",
    "prf",
    "sentence_spans",
    "span_scores",
    "spans_to_tags",
    "tags_to_spans",
]
