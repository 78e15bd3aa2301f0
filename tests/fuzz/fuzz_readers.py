"""Long-running fuzz target for panelpack's readers (not collected by pytest).

Every case mutates a seed file of one reader (``tests/fuzzing.py``: GGUF, safetensors, HF
index, bundle manifest, packed bundle) with 1..8 random mutations (JSON files: 1..3, half of
them a token replaced by a hostile JSON value) and checks the property:
read cleanly or raise a panelpack exception, in < 2 s and < 64 MiB. A finding is written to
``--findings`` (the mutated bytes plus a ``.txt`` with the exception) and the run goes on;
the summary prints cases tried, outcomes and distinct findings, as JSON on the last line.

Run (from the repository root, on a shared machine with ``nice``)::

    PYTHONPATH=/path/to/pp nice -n 10 python tests/fuzz/fuzz_readers.py --reader all --minutes 50

``--reader gguf|safetensors|index|manifest|archive|all`` (``all`` splits the time evenly),
``--seed N`` for a reproducible sequence. Turn each finding into a regression test (see
``tests/test_fuzz_readers.py``, ``REGRESSIONS``) before fixing it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import fuzzing  # noqa: E402

JSON_READERS = ("index", "manifest")
JSON_OP = fuzzing.OPS.index("json")


def run(reader: str, seconds: float, seed: int, corpus: fuzzing.Corpus, findings: Path, tmp: Path) -> dict:
    rnd = random.Random(f"{seed}-{reader}")
    seed_bytes = corpus.seeds[reader]
    outcomes: dict[str, int] = {}
    found: dict[str, str] = {}
    cases = 0
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        if reader in JSON_READERS:  # fewer, more often semantic mutations: most byte edits only break the syntax
            ops = [(JSON_OP if rnd.random() < 0.5 else rnd.randrange(len(fuzzing.OPS)), rnd.randrange(1 << 30),
                    rnd.randrange(1 << 16)) for _ in range(rnd.randint(1, 3))]
        else:
            ops = [(rnd.randrange(len(fuzzing.OPS)), rnd.randrange(1 << 30), rnd.randrange(1 << 16))
                   for _ in range(rnd.randint(1, 8))]
        data = fuzzing.mutate(seed_bytes, ops)
        cases += 1
        try:
            out = fuzzing.check(reader, data, tmp / reader / str(cases % 4), corpus)
        except fuzzing.Finding as e:
            msg = str(e)
            key = msg.split(":")[1].strip() + ":" + _where(e)
            out = "FINDING"
            if key not in found:
                found[key] = msg
                h = hashlib.sha256(data).hexdigest()[:12]
                findings.mkdir(parents=True, exist_ok=True)
                (findings / f"{reader}-{h}.bin").write_bytes(data)
                (findings / f"{reader}-{h}.txt").write_text(f"{msg}\nops={ops}\nwhere={_where(e)}\n")
                print(f"[{reader}] finding: {msg[:200]}", flush=True)
        outcomes[out] = outcomes.get(out, 0) + 1
    return {"reader": reader, "seconds": round(seconds), "cases": cases, "outcomes": outcomes,
            "findings": len(found), "distinct": sorted(found.values())}


def _where(e: BaseException) -> str:
    """The innermost panelpack frame of the exception that caused the finding."""
    import traceback

    cause = e.__cause__ or e
    frames = [f for f in traceback.extract_tb(cause.__traceback__) if "panelpack" in f.filename or "/wt-" in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{Path(f.filename).name}:{f.lineno}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reader", default="all", choices=[*fuzzing.READERS, "all"])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--findings", type=Path, default=HERE / "findings")
    args = ap.parse_args()
    import logging

    logging.disable(logging.WARNING)  # the readers' warnings about mutated files are expected
    readers = list(fuzzing.READERS) if args.reader == "all" else [args.reader]
    with tempfile.TemporaryDirectory(prefix="panelpack-fuzz-") as tmp:
        corpus = fuzzing.Corpus(Path(tmp) / "corpus")
        per = args.minutes * 60 / len(readers)
        results = [run(r, per, args.seed, corpus, args.findings, Path(tmp)) for r in readers]
    for r in results:
        print(f"{r['reader']:12s} {r['cases']:7d} cases in {r['seconds']} s, {r['findings']} finding(s), "
              f"outcomes {r['outcomes']}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
