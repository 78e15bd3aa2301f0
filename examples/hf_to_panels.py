"""Quantize a Hugging Face checkpoint (safetensors, sharded or not) into a panel bundle.

    python examples/hf_to_panels.py HF_FOLDER [out.ppk] [q4_0|q4_k|q8_0]

Without arguments it uses the embedded tiny Llama (the same checkpoint `panelpack demo` makes).
"""

from __future__ import annotations

import sys
import tempfile

from panelpack.convert import convert
from panelpack.convert.example import write_tiny_llama
from panelpack.convert.report import render_ledger


def main(folder: str, out: str, quant: str) -> None:
    result = convert(folder, out, layout="panel64", quant=quant, force=True)
    print(render_ledger(result.ledger))
    worst = max((r["error"]["rel_rms"], r["name"]) for r in result.ledger if r.get("error"))
    print(f"largest quantization error: {worst[0]:.4f} relative RMS ({worst[1]})")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "model.ppk", sys.argv[3] if len(sys.argv) > 3 else "q4_k")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(str(write_tiny_llama(tmp + "/tiny")), "tiny-llama.ppk", "q4_k")
