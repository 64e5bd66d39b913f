"""Stand-ins for the parts of transformers' test tree that its source distribution does not ship (see the note at
the top of modeling_common.py). Harness only: no assertion lives here."""

from __future__ import annotations

import functools
import re
import sys


class ExportTesterMixin:
    """`tests/exporters/test_export.py` is not in the sdist: no torch.export tests."""


class GenerationTesterMixin:
    """`tests/generation/test_utils.py` is not in the sdist: no generate() tests from transformers."""


class parameterized:  # noqa: N801  (the name modeling_common.py imports)
    @staticmethod
    def expand(params, **_):
        """`parameterized.expand`: one test method per parameter tuple, named `test_x_<i>_<first param>`."""

        def decorate(func):
            namespace = sys._getframe(1).f_locals  # the class body being defined
            for i, param in enumerate(params):
                args = param if isinstance(param, tuple) else (param,)
                suffix = re.sub(r"\W+", "_", str(args[0]))
                name = f"{func.__name__}_{i}_{suffix}"

                @functools.wraps(func)
                def test(self, _args=args):
                    return func(self, *_args)

                test.__name__ = name
                namespace[name] = test
            return None  # the undecorated method is not a test

        return decorate
