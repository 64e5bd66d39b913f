"""JSON bodies of the server's answers: UTF-8 with Chinese kept readable, numpy arrays as lists, lone surrogates as
U+FFFD (shared by the task endpoints in app.py and the OpenAI endpoints in openai_api.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi.responses import JSONResponse, Response

_SURROGATE = re.compile(
    "[\ud800-\udfff]"
)  # a str from JSON holds surrogates only unpaired (pairs are joined)


def encode_json(content: Any) -> bytes:
    """JSON as UTF-8 with Chinese kept readable and numpy arrays as lists. A lone surrogate cannot be encoded in
    UTF-8: it is written as U+FFFD (the texts are cleaned on the way in; this covers e.g. an echoed option)."""
    text = json.dumps(content, ensure_ascii=False, separators=(",", ":"), default=_to_list)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text).encode("utf-8")


class ResultsResponse(Response):
    """JSON with Chinese kept readable and numpy arrays (feature_extraction's return_numpy) as lists."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return encode_json(content)


class ErrorResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return encode_json(content)


def _to_list(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


__all__ = ["ErrorResponse", "ResultsResponse", "encode_json"]
