"""Training: the one training loop (loop.py) with pretraining as a task on it (pretrain.py, `ernie-pretrain`;
fine-tuning is the other, in finetune/), typed recipes (recipe.py), what every run shares (core.py:
seeding, device, AdamW groups, schedule), model building (build.py), the choice of engine per backend
(backends.py), the single-device engine (engine.py), the DeepSpeed ZeRO + AutoTP one (deepspeed_engine.py), the
pipeline one (pipeline_engine.py), fine-tuning's engines (task_engine.py), the masked-only MLM loss
(mlm.py), atomic checkpoints with exact resume (checkpoint.py), data order and sharding (data.py), MFU (mfu.py)
and logs (logging_utils.py).

Nothing is imported here; import the submodule you need.
"""
