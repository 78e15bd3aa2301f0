"""Detection rates of damage to a bundle: flip one byte, does panelpack notice? (not collected by pytest)

For a small GGUF-sourced bundle (tests/fuzzing.py's seed), flips one random bit of one
random byte in each class of file and records the outcome:

* ``verify --level structure`` (and ``lossless``) on the damaged bundle: detected when the
  report fails or our exception is raised;
* ``export``: ``export`` = refused, ``export_identical`` = wrote the source GGUF byte for byte
  anyway (the damage does not reach the GGUF, e.g. ``metadata.json``), ``export_wrote_wrong_bytes``
  = wrote a GGUF that differs from the source without refusing (the failure to avoid);
* ``crashes``: an exception that is not panelpack's (a traceback for the user);
* ``pack``: detected when it refuses.

Run::

    PYTHONPATH=/path/to/pp nice -n 10 python tests/fuzz/detection_rates.py --cases 300

Prints a table and, on the last line, JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import fuzzing  # noqa: E402


def _classes(bundle: Path) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {"manifest.json": [bundle / "manifest.json"],
                                  "tensors/*": sorted((bundle / "tensors").iterdir())}
    for p in sorted((bundle / "source").iterdir()):
        out[f"source/{p.name}"] = [p]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=200, help="flips per file class")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from panelpack.convert.gguf_export import export_gguf
    from panelpack.formats import archive
    from panelpack.formats.errors import PanelpackError
    from panelpack.verify import bundle_check

    rnd = random.Random(args.seed)
    results = {}
    with tempfile.TemporaryDirectory(prefix="panelpack-detect-") as tmp:
        tmp = Path(tmp)
        corpus = fuzzing.Corpus(tmp / "corpus")
        source_gguf = (tmp / "corpus" / "seed.gguf").read_bytes()
        for cls in _classes(corpus.bundle):
            counts = {"cases": 0, "verify_structure": 0, "verify_lossless": 0, "export": 0, "export_identical": 0,
                      "export_wrote_wrong_bytes": 0, "pack": 0, "crashes": 0}
            for i in range(args.cases):
                b = tmp / "b.ppk"
                if b.exists():
                    shutil.rmtree(b)
                shutil.copytree(corpus.bundle, b)
                files = _classes(b)[cls]
                f = rnd.choice(files)
                data = bytearray(f.read_bytes())
                pos = rnd.randrange(len(data))
                data[pos] ^= 1 << rnd.randrange(8)
                f.write_bytes(bytes(data))
                counts["cases"] += 1
                for level in ("structure", "lossless"):
                    try:
                        detected = not bundle_check.verify(b, level=level).ok
                    except PanelpackError:
                        detected = True
                    except Exception:  # noqa: BLE001 - a crash: counted, not a detection
                        detected = False
                        counts["crashes"] += 1
                    counts[f"verify_{level}"] += detected
                out = tmp / "x.gguf"
                try:
                    export_gguf(b, out, force=True)
                    same = out.read_bytes() == source_gguf
                    counts["export_identical" if same else "export_wrote_wrong_bytes"] += 1
                except PanelpackError:
                    counts["export"] += 1
                except Exception:  # noqa: BLE001
                    counts["crashes"] += 1
                try:
                    archive.pack(b, tmp / "x.ppk.tar.zst", force=True, threads=0)
                except PanelpackError:
                    counts["pack"] += 1
                except Exception:  # noqa: BLE001
                    counts["crashes"] += 1
            results[cls] = counts
            print(f"{cls:28s} {counts}", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
