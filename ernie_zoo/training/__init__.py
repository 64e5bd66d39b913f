"""Training: the `ernie-pretrain` loop (pretrain.py), typed recipes (recipe.py), the engine a parallel backend
replaces (engine.py), the masked-only MLM loss (mlm.py), atomic checkpoints with exact resume
(checkpoint.py), data order and sharding (data.py), MFU (mfu.py) and logs (logging_utils.py).

Nothing is imported here; import the submodule you need.
"""
