"""Chinese-text building blocks, ernie_zoo's lowest layer (the standard library at import time; `utils` on first use):

- `tags`: `Span` and the BIO/BIOES/BMES tag codec (`tags_to_spans`, `spans_to_tags`, `parse_tag`, ...);
- `metrics`: entity-span precision/recall/F1 (`span_scores`, `prf`);
- `sentences`: the sentence splitter that cuts long texts into chunks (`chunk_spans`, `chunk_text`);
- `confusion`: confusion sets of spelling correction (`ConfusionSets`);
- `correction`: spelling-correction scores, sentence level as pycorrector defines them (`correction_scores`);
- `segment`: word segmentation and user dictionaries (`Segmenter`, `read_user_dict`; rjieba or jieba, loaded on
  first use), shared by knowledge masking and the segmentation, POS, NER and correction Taskflows;
- `lexicon`: entity lexicons (`EntityLexicon`: entity masking's leftmost-longest spans, the NER tagger's per-character
  lexicon bits, both file formats) and the Aho-Corasick matcher under them (`AhoCorasick`);
- `sentiment`: sentiment lexicons read and applied (`SentimentLexicon`, the HowNet-style `lexicon_score`, the silver
  `weak_sentiment_label`, and the per-token input bits of a lexicon-reading sentiment classifier);
- `traditional`: Traditional -> Simplified, one character to one (`to_simplified`; the tokenizer's, pinyin's too);
- `words`: how word-like a text is under jieba's word frequencies (`WordUnigram`), a score of fused spelling
  correction.
"""

from .confusion import ConfusionSets
from .correction import correction_scores
from .lexicon import AhoCorasick, EntityLexicon
from .metrics import prf, span_scores
from .segment import Segmenter, read_user_dict
from .sentences import chunk_spans, chunk_text, sentence_spans
from .tags import Span, as_span, parse_tag, spans_to_tags, tags_to_spans
from .words import WordUnigram

__all__ = [
    "AhoCorasick",
    "ConfusionSets",
    "EntityLexicon",
    "Segmenter",
    "Span",
    "WordUnigram",
    "as_span",
    "chunk_spans",
    "chunk_text",
    "correction_scores",
    "parse_tag",
    "prf",
    "read_user_dict",
    "sentence_spans",
    "span_scores",
    "spans_to_tags",
    "tags_to_spans",
]
