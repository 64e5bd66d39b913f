"""Training: the one training loop (loop.py) with pretraining as a task on it (pretrain.py, `ernie-pretrain`;
fine-tuning is the other, in finetune/), typed recipes (recipe.py), what every run shares (core.py:
seeding, device, AdamW groups, schedule), model building (build.py), the choice of engine per backend
(backends.py), one engine per backend behind one contract (engine.py: the contract and the single-device
engine; deepspeed_engine.py: DeepSpeed ZeRO + AutoTP; pipeline_engine.py), pretraining's objective (objective.py)
and the masked-only MLM loss (mlm.py), atomic checkpoints with exact resume (checkpoint.py), data order and sharding (data.py), MFU (mfu.py)
and logs (logging_utils.py).

Nothing is imported here; import the submodule you need.
"""
