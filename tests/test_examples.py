"""The examples run as documented (on the embedded tiny checkpoint and a small GGUF)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from builders import tiny_llama_gguf

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(tmp_path, *args) -> str:
    r = subprocess.run([sys.executable, *map(str, args)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.slow
def test_hf_example_and_runtime_reader(tmp_path):
    out = _run(tmp_path, EXAMPLES / "hf_to_panels.py")
    assert "largest quantization error" in out and (tmp_path / "tiny-llama.ppk" / "manifest.json").is_file()
    out = _run(tmp_path, EXAMPLES / "read_bundle.py", tmp_path / "tiny-llama.ppk", "lm_head.weight")
    assert "region panels" in out and "ZT0: 00 00 00 00 01" in out and "y = W·x: (1, 500)" in out


@pytest.mark.slow
def test_gguf_example(tmp_path):
    tiny_llama_gguf(tmp_path / "t.gguf")
    out = _run(tmp_path, EXAMPLES / "convert_gguf.py", tmp_path / "t.gguf", tmp_path / "t.ppk")
    assert "verify OK" in out and "byte-identical to the source" in out
    assert (tmp_path / "t.ppk.tar.zst").is_file()
