"""Multi-turn chat SFT (#49 item 2): `ernie-finetune --task instruction` on `messages` rows (system / user /
assistant turns), the loss on the assistant turns only; the chat template saved with the tokenizer, so plain
transformers' `apply_chat_template` gives the training text and prompts; `Taskflow("text_generation")` takes a
conversation (a list of messages) and answers as `model.generate` does on the templated conversation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from conftest import write_jsonl

from ernie_zoo.finetune import build_args, run_finetune
from ernie_zoo.finetune.objectives import make_objective
from ernie_zoo.tokenization import ErnieZooTokenizerFast
from ernie_zoo.training.supervised import IGNORE

ANTONYMS = ["大小", "多少", "上下", "左右", "前后", "高低", "长短", "冷热"]
SYSTEM = {"role": "system", "content": "你只回答反义词。"}


def conversations() -> list[dict]:
    """16 chats: a system turn, then two question / answer rounds."""
    rows = []
    for a, b in ANTONYMS:
        for x, y in ((a, b), (b, a)):
            rows.append(
                {
                    "messages": [
                        SYSTEM,
                        {"role": "user", "content": f"{x}的反义词是什么？"},
                        {"role": "assistant", "content": y},
                        {"role": "user", "content": f"{y}的反义词呢？"},
                        {"role": "assistant", "content": x},
                    ]
                }
            )
    return rows


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("chat")
    return {"train": write_jsonl(root / "train.jsonl", conversations()), "root": str(root)}


def _args(data, out: Path, **data_args):
    return build_args(
        {
            "task": "instruction",
            "data": {"train_file": data["train"], "max_length": 48, **data_args},
            "model": {"preset": "ernie4.5-tiny", "vocab_size": 120},
            "method": {"method": "lora", "lora_r": 4, "lora_dropout": 0.0},
            "train": {"output_dir": str(out), "batch_size": 8, "max_steps": 6, "learning_rate": 2e-2,
                      "progress": False, "tensorboard": False, "num_threads": 1},
        }
    )  # fmt: skip


def test_the_loss_is_on_the_assistant_turns_and_the_template_gives_the_training_text(data):
    task = make_objective(_args(data, Path(data["root"]) / "unused"))
    task.read()
    tok = ErnieZooTokenizerFast.train_vocab(
        task.vocab_texts(), vocab_size=120, min_frequency=1, show_progress=False
    )
    features = task.encode(task.splits["train"], tok)
    for f, row in zip(features, conversations()):
        messages = row["messages"]
        # one token per character: the whole conversation in the template is the training text
        text = tok.apply_chat_template(messages, tokenize=False)
        assert f["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]
        # the learnt tokens are the two answers, each closed by the end token
        learnt = [t for t, label in zip(f["input_ids"], f["labels"]) if label != IGNORE]
        assert [t for t, label in zip(f["input_ids"], f["labels"]) if label != IGNORE] == [
            label for label in f["labels"] if label != IGNORE
        ]
        sep = tok.sep_token_id
        answers = tok.decode(learnt).replace(" ", "").split("[SEP]")
        assert answers == [messages[2]["content"], messages[4]["content"], ""] and learnt.count(sep) == 2
        # each answer follows the prompt plain transformers builds for it
        for k in (2, 4):
            prompt = tok.apply_chat_template(messages[:k], add_generation_prompt=True, tokenize=False)
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            assert f["input_ids"][: len(ids)] == ids and f["labels"][len(ids) - 1] == IGNORE
            assert f["labels"][len(ids)] == f["input_ids"][len(ids)] != IGNORE
        assert "你只回答反义词" in tok.decode(f["input_ids"]).replace(" ", "")  # the system turn is read ...
        assert "你" not in tok.decode(learnt)  # ... not learnt


def test_bad_conversations_are_named(data, tmp_path):
    args = _args(data, tmp_path / "x")
    cases = [
        ([{"messages": [{"role": "user", "content": "大"}]}], r"row 1: the conversation has no assistant turn"),
        ([{"messages": [{"role": "assistant", "content": "小"}]}], r"row 1: the first assistant turn answers no user"),
        ([{"messages": [{"role": "bot", "content": "小"}]}], r"row 1: 'messages' message 1 has role 'bot'"),
        ([{"messages": "大"}], r"row 1: 'messages' must be a non-empty list"),
    ]  # fmt: skip
    for rows, message in cases:
        args.data.train_file = write_jsonl(tmp_path / "bad.jsonl", rows)
        with pytest.raises(ValueError, match=message):
            run_finetune(args)
    args = _args(data, tmp_path / "x", max_length=20)
    with pytest.raises(ValueError, match=r"row 1: no assistant token falls within data.max_length = 20"):
        run_finetune(args)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_chat_sft_runs_and_taskflow_answers_a_conversation(data, tmp_path):
    from ernie_zoo.taskflow import Taskflow

    out = tmp_path / "chat"
    run_finetune(_args(data, out))
    state = json.loads(next((out / "checkpoints").glob("checkpoint-*/trainer_state.json")).read_text())[
        "state"
    ]
    assert state["train_losses"][-1] < state["train_losses"][0]
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert tok.chat_template == (out / "chat_template.jinja").read_text(encoding="utf-8")
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    chats = [
        [SYSTEM, {"role": "user", "content": "大的反义词是什么？"}],
        [SYSTEM, {"role": "user", "content": "冷的反义词是什么？"}, {"role": "assistant", "content": "热"},
         {"role": "user", "content": "热的反义词呢？"}],
    ]  # fmt: skip
    flow = Taskflow("text_generation", task_path=out, max_new_tokens=3)
    got = flow(chats)
    assert [g["text"] for g in got] == chats
    for chat, answer in zip(chats, got):
        ids = torch.tensor([tok.apply_chat_template(chat, add_generation_prompt=True)["input_ids"]])
        gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                             eos_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id)[0, ids.shape[1]:].tolist()  # fmt: skip
        gen = gen[: gen.index(tok.sep_token_id)] if tok.sep_token_id in gen else gen
        assert answer["generated"] == [tok.decode(gen, skip_special_tokens=True).replace(" ", "")]
    assert flow(chats[0]) == got[0]  # one conversation in, one result out
    assert flow(["大的反义词是什么？", chats[0]])[1] == got[0]  # texts and conversations mixed
    with pytest.raises(TypeError, match=r"input item 1 is neither a str nor a conversation"):
        flow([chats[0], {"role": "user"}])


def test_a_conversation_needs_a_chat_model():
    from ernie_zoo.taskflow import Taskflow

    poet = Taskflow("text_generation", mode="poetry", max_new_tokens=2)
    with pytest.raises(
        ValueError, match=r"input 0 is a conversation, but this model's tokenizer has no chat"
    ):
        poet([{"role": "user", "content": "春眠不觉晓，"}])
