"""How word-like a stretch of Chinese text is: the log-probability of its best segmentation under a word unigram
model (jieba's dictionary frequencies, the counts behind jieba's own cutting).

    logprob("非常好") = max over segmentations w1..wm of  sum_i log(freq(w_i) / total)

A character that is no word of the dictionary counts once (freq 1). A spelling corrector uses the difference
between a window with and without a candidate change: 非长 -> 非常 turns two rare single characters into one
common word, which the unigram model rewards by several nats.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

__all__ = ["WordUnigram"]


class WordUnigram:
    """Best-segmentation log-probability of a text under a word unigram model.

    Args:
        freqs: word -> count.
        max_word_length: longest word tried at each position (longer dictionary words are never matched).
    """

    def __init__(self, freqs: dict[str, int], max_word_length: int = 6):
        if not freqs:
            raise ValueError("a word unigram model needs at least one word")
        self.freqs = freqs
        self.max_word_length = max_word_length
        self.log_total = math.log(sum(freqs.values()))

    @classmethod
    @lru_cache(maxsize=1)
    def jieba(cls) -> WordUnigram:
        """The model of jieba's bundled ``dict.txt`` (``word freq [tag]`` lines; 349k words), loaded once."""
        import jieba

        freqs = {}
        path = Path(jieba.__file__).parent / "dict.txt"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            parts = line.split()
            if len(parts) < 2 or not parts[1].isdigit():
                raise ValueError(f"{path}:{n}: expected 'word freq [tag]', got {line!r}")
            freqs[parts[0]] = int(parts[1])
        return cls(freqs)

    def logprob(self, text: str) -> float:
        """Natural-log probability of `text`'s most probable segmentation (0.0 for an empty text)."""
        best = [0.0] + [-math.inf] * len(text)
        get, log_total, longest = self.freqs.get, self.log_total, self.max_word_length
        for end in range(1, len(text) + 1):
            score = -math.inf
            for start in range(max(0, end - longest), end):
                freq = get(text[start:end])
                if freq is None:
                    if end - start > 1:
                        continue
                    freq = 1
                score = max(score, best[start] + math.log(max(freq, 1)) - log_total)
            best[end] = score
        return best[-1]
