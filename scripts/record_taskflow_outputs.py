"""Record the shipped models' Taskflow outputs on fixed texts, to check that a refactor changes none of them.

    python scripts/record_taskflow_outputs.py            # rewrites tests/data/taskflow_outputs.json
    python scripts/record_taskflow_outputs.py --check    # exits 1 if today's outputs differ from the file

tests/test_taskflow_outputs.py recomputes `record()` and compares it with the file as JSON text, byte for byte.
Floats are rounded to 6 decimals (scores) and embeddings to 5 decimals plus a SHA-256 of the rounded vector, so
the file stays small and a last-bit difference between CPU instruction sets does not count as a change, while
any change a user could see does. Run on CPU with one thread (OMP_NUM_THREADS=1), the way the tests run.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "taskflow_outputs.json"

TEXTS = [
    "这家餐厅的菜很好吃，服务也很周到。",
    "快递太慢了，包装还破了，非常失望。",
    "张伟在北京大学读书。",
    "李娜去上海旅游，住在外滩附近的酒店。",
    "新华社报道，联合国秘书长明天访问南京。",
    "他去重庆吃火锅。",
    "我们明天在杭州开会讨论项目进度。",
    "中国银行宣布下调存款利率。",
    "今天天气不错，适合出去散步。",
    "这部手机的电池续航时间太短了。",
    "王芳和刘洋在广州的一家公司工作。",
    "2024年，Apple在北京发布了新产品。",
    "床前明月光，疑是地上霜。",
    "小明的成绩一直很好，老师经常表扬他。",
    "这本书的内容很有意思，值得推荐。",
    "长城是中国古代最伟大的建筑之一。",
    "我今天去商店买了一些水果和蔬菜。",
    "价格有点贵，但是质量还可以。",
    "Ｈｉ！赵敏说天津很好。",
    "机器学习是人工智能的一个分支。",
]
# Texts with a spelling error each (and two without) for text_correction.
CORRECTION_TEXTS = [
    "我今天很高性见到你。",
    "他们在公园里完了一下午。",
    "这个问题很难，我们需要仔细思考。",
    "我门明天一起去图书馆吧。",
    "他的身体很建康。",
    "这家饭店的菜很好吃。",
    "请在这里签上你的明字。",
    "我们要努力学习，天天向上。",
]
MASK_TEXTS = [
    "北京是中国的首[MASK]。",
    "床前明[MASK]光，疑是地上霜。",
    "今天天气很[MASK]。",
    "我喜欢吃苹[MASK]。",
    "他在[MASK]学读书。",
    "这家餐厅的菜很好[MASK]。",
]
IE_TEXTS = ["国务院总理李鹏今天会见了美国客人。", "1998年3月5日上午，公司拿出三十万元和2.5亿美元。"]
PROMPTS = ["春", "明月", "秋风", "江南", "故乡"]
GENERAL_PROMPTS = ["今天天气很好，", "据新华社报道，", "这家酒店的服务", "成语“画蛇添足”是什么意思？答："]


def _round(value: Any, digits: int = 6) -> Any:
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _round(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v, digits) for v in value]
    return value


def _embedding(result: dict[str, Any]) -> dict[str, Any]:
    vector = [round(float(x), 5) for x in result["embedding"]]
    digest = hashlib.sha256(json.dumps(vector).encode()).hexdigest()
    return {"text": result["text"], "dim": len(vector), "head": vector[:8], "sha256": digest}


def record() -> dict[str, Any]:
    """Every shipped Taskflow task's outputs on the fixed texts (CPU, default options, greedy generation)."""
    import torch

    from ernie_zoo.taskflow import Taskflow, clear_model_cache

    torch.manual_seed(0)
    runs: dict[str, Any] = {}
    runs["sentiment_analysis"] = Taskflow("sentiment_analysis", device="cpu")(TEXTS)
    runs["ner/accurate"] = Taskflow("ner", device="cpu", mode="accurate")(TEXTS)
    runs["ner/fast"] = Taskflow("ner", device="cpu", mode="fast")(TEXTS)
    runs["ner/accurate/entity_only=False"] = Taskflow("ner", device="cpu", entity_only=False)(TEXTS[:5])
    runs["word_segmentation"] = Taskflow("word_segmentation")(TEXTS)
    runs["pos_tagging"] = Taskflow("pos_tagging")(TEXTS)
    runs["fill_mask"] = Taskflow("fill_mask", device="cpu")(MASK_TEXTS)
    runs["feature_extraction"] = [_embedding(r) for r in Taskflow("feature_extraction", device="cpu")(TEXTS)]
    runs["feature_extraction/cls+normalize"] = [
        _embedding(r)
        for r in Taskflow("feature_extraction", device="cpu", pooling="cls", normalize=True)(TEXTS[:5])
    ]
    runs["text_similarity"] = Taskflow("text_similarity", device="cpu")(
        [[a, b] for a, b in zip(TEXTS[:6], TEXTS[1:7])] + [[TEXTS[0], TEXTS[0]]]
    )
    runs["information_extraction"] = Taskflow(
        "information_extraction", device="cpu", schema=["人物", "地点", "机构", "时间"]
    )(TEXTS)
    runs["information_extraction/relations"] = Taskflow(
        "information_extraction", device="cpu", schema={"人物": ["职务", "任职机构"]}
    )(TEXTS[:8] + IE_TEXTS)
    runs["text_correction"] = Taskflow("text_correction", device="cpu")(CORRECTION_TEXTS + TEXTS[:4])
    runs["text_generation/greedy"] = Taskflow(
        "text_generation", device="cpu", mode="poetry", decode_strategy="greedy"
    )(PROMPTS)
    runs["text_generation/general"] = Taskflow("text_generation", device="cpu")(PROMPTS + GENERAL_PROMPTS)
    clear_model_cache()
    return _round(runs)


def dumps(records: dict[str, Any]) -> str:
    return json.dumps(records, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def main() -> int:
    text = dumps(record())
    if "--check" in sys.argv[1:]:
        same = OUTPUT.read_text(encoding="utf-8") == text
        print("same" if same else f"differs from {OUTPUT}")
        return 0 if same else 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT} ({len(text)} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
