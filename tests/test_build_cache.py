"""The build cache: content-addressed, atomic, and never trusted blindly."""

from __future__ import annotations

from kernelwatch.harness.build.cache import BuildCache, cache_key, default_cache_dir
from kernelwatch.harness.records import BuildMetrics

RECORD = BuildMetrics("s", "k", "k_kernel", "triton", "sm_90a", None, "ok", registers=40)
PARTS = {"source": "abc", "launch": "(...)", "arch": "sm_90a", "toolchain": {"triton": "3.9.0"}}


def test_key_changes_with_every_part():
    keys = {cache_key(PARTS)}
    for name, value in (("source", "abd"), ("arch", "sm_100a"), ("toolchain", {"triton": "4"})):
        keys.add(cache_key({**PARTS, name: value}))
    assert len(keys) == 4
    assert cache_key(dict(reversed(list(PARTS.items())))) == cache_key(PARTS)


def test_round_trip_and_unreadable_entries(tmp_path):
    cache = BuildCache(tmp_path)
    key = cache_key(PARTS)
    assert cache.get(key) is None
    cache.put(key, RECORD)
    assert cache.get(key) == RECORD
    (tmp_path / key[:2] / f"{key}.json").write_text("{truncated")
    assert cache.get(key) is None


def test_location(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELWATCH_BUILD_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("KERNELWATCH_BUILD_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "kernelwatch" / "build"
