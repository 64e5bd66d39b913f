"""Markers used by transformers' common model tests (modeling_common.py), registered for `--strict-markers`."""


def pytest_configure(config):
    for marker in (
        "flash_attn_test",
        "flash_attn_3_test",
        "flash_attn_4_test",
        "torch_compile_test",
        "accelerate_tests",
    ):
        config.addinivalue_line("markers", f"{marker}: transformers' test marker (peer suite)")
