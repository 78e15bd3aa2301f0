"""The cactus-compute side of the oracle tests, run in a separate interpreter that has
cactus-compute 2.2.2 and torch (``pip install -e .[oracle-cactus]``); panelpack's own process
never imports torch.

``python tests/cactus_oracle.py JOB.json`` runs every operation listed in the job file; each
writes its result under the job's folder. Operations (``op`` plus arguments):

* ``components`` ``seed, group, out``: cactus's signs/permutation -> npz
* ``codebook`` ``group, bits, out``: cactus's codebook -> npz
* ``quantize`` ``inp (npz: w), bits, rotation, out``: ``quantize_hadamard``/``quantize_orthogonal``
  -> npz indices, norms, input_scale (for orthogonal, ``rotation_npz`` injects our rotation
  into cactus's rotation cache first, so both sides rotate with the same matrix)
* ``write`` ``inp (npz: indices, norms, input_scale), bits, rotation, interleaved, out``:
  ``write_cq_tensor`` -> the file at ``out`` (its stem decides cactus's interleave rule)
* ``fp16`` ``inp (npz: a), out``: ``save_tensor_with_header(..., precision="FP16")``
* ``qdq`` ``path, out``: cactus's reader, ``dequantize_path(path, float32)`` -> npz
* ``convert`` ``model, out, bits``: the whole converter (``cactus.convert.cli.main``)
* ``time_quantize`` ``n, k, bits, out``: seconds of ``quantize_hadamard`` on a seeded matrix
* ``spm_train`` ``corpus, folder, model_type, vocab_size[, user_defined, control]``: a small
  SentencePiece model trained by the ``sentencepiece`` package -> ``folder/tokenizer.model``
* ``spm_pieces`` ``model, out``: its pieces, scores, types and special ids (JSON), read with
  sentencepiece's model proto (through ``spm_proto_shim``)
* ``tokenizer`` ``model, out[, spm_proto_shim]``: only the converter's tokenizer step: the processor its adapter
  loads from the HF folder ``model``, its side-file copy, then ``convert_hf_tokenizer`` into the
  new folder ``out``. sentencepiece 0.2.3's model proto needs protobuf >= 7 while the oracle pins
  protobuf < 7, so transformers cannot read a ``tokenizer.model`` there (it falls back to
  tiktoken, fails, and the converter writes no tokenizer files); ``spm_proto_shim`` gives it the
  same proto generated for protobuf 6 (transformers' own copy), i.e. what cactus writes where its
  SentencePiece extraction works
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np


def _spm_proto_shim() -> None:
    import sentencepiece
    from transformers.utils import sentencepiece_model_pb2_new

    sys.modules["sentencepiece.sentencepiece_model_pb2"] = sentencepiece_model_pb2_new
    sentencepiece.sentencepiece_model_pb2 = sentencepiece_model_pb2_new


def main(job_path: str) -> None:
    import torch
    from cactus.convert.quantization import cq as ccq

    job = json.loads(Path(job_path).read_text())
    torch.set_num_threads(int(job.get("threads", 2)))
    for op in job["ops"]:
        kind = op["op"]
        if kind == "components":
            left, right, perm = ccq.make_hadamard_components(op["group"], op["seed"])
            np.savez(op["out"], left=left, right=right, perm=perm)
        elif kind == "codebook":
            np.savez(op["out"], cb=ccq.make_codebook(op["group"], op["bits"]))
        elif kind == "quantize":
            w = np.load(op["inp"])["w"]
            if op["rotation"] == "orthogonal":
                if op.get("rotation_npz"):
                    r = np.load(op["rotation_npz"])["r"].astype(np.float32)
                    ccq._ORTHO_CACHE[(int(w.shape[1]), 1234)] = r
                t = ccq.quantize_orthogonal(w, bits=op["bits"])
            else:
                t = ccq.quantize_hadamard(w, op["bits"])
            np.savez(op["out"], indices=t.indices, norms=t.norms, input_scale=t.input_scale)
        elif kind == "write":
            d = np.load(op["inp"])
            if op["rotation"] == "orthogonal" and op.get("rotation_npz"):
                r = np.load(op["rotation_npz"])["r"].astype(np.float32)
                ccq._ORTHO_CACHE[(int(d["indices"].shape[1]), 1234)] = r
            k = int(d["indices"].shape[1])
            t = ccq.CQTensor(indices=d["indices"], norms=d["norms"], input_scale=d["input_scale"],
                             bits=op["bits"], group_size=k if op["rotation"] == "orthogonal" else 128,
                             rotation_family=op["rotation"], interleaved_4row=bool(op["interleaved"]))
            ccq.write_cq_tensor(Path(op["out"]), t)
        elif kind == "fp16":
            from cactus.convert.cactus_adapters.tensor_io import save_tensor_with_header

            save_tensor_with_header(np.load(op["inp"])["a"], Path(op["out"]), precision="FP16")
        elif kind == "qdq":
            from cactus.convert.export.qdq import dequantize_path

            t, _h = dequantize_path(Path(op["path"]), torch.float32, 2048)
            np.savez(op["out"], w=t.numpy())
        elif kind == "convert":
            from cactus.convert.cli import main as cactus_main

            t0 = time.perf_counter()
            cactus_main(["convert", "--model", op["model"], "--out", op["out"], "--bits", str(op["bits"]),
                         "--device", "cpu"])
            Path(op["out"] + ".seconds").write_text(f"{time.perf_counter() - t0:.3f}\n")
        elif kind == "time_quantize":
            w = np.random.default_rng(op.get("seed", 0)).standard_normal((op["n"], op["k"])).astype(np.float32)
            t0 = time.perf_counter()
            ccq.quantize_hadamard(w, op["bits"])
            Path(op["out"]).write_text(f"{time.perf_counter() - t0:.4f}\n")
        elif kind == "spm_train":
            import sentencepiece as spm

            prefix = Path(op["folder"]) / "tokenizer"
            spm.SentencePieceTrainer.train(
                input=op["corpus"], model_prefix=str(prefix), model_type=op["model_type"], vocab_size=op["vocab_size"],
                byte_fallback=True, character_coverage=1.0, user_defined_symbols=op.get("user_defined", []),
                control_symbols=op.get("control", []), num_threads=1, minloglevel=2)
            prefix.with_suffix(".vocab").unlink()
        elif kind == "spm_pieces":  # the pieces as sentencepiece's model proto reads them
            _spm_proto_shim()
            from sentencepiece import sentencepiece_model_pb2 as pb

            m = pb.ModelProto()
            m.ParseFromString(Path(op["model"]).read_bytes())
            Path(op["out"]).write_text(json.dumps({
                "pieces": [[p.piece, p.score, p.type] for p in m.pieces],
                "bos": m.trainer_spec.bos_id, "eos": m.trainer_spec.eos_id, "unk": m.trainer_spec.unk_id,
                "pad": m.trainer_spec.pad_id}))
        elif kind == "tokenizer":
            from cactus.convert.cactus_adapters.tokenizer import convert_hf_tokenizer
            from cactus.convert.export.files import copy_runtime_files
            from cactus.convert.model_adapters.adapters import adapter_for_family
            from cactus.convert.model_adapters.detection import detect_family
            from transformers import AutoConfig

            if op.get("spm_proto_shim"):
                _spm_proto_shim()
            family = detect_family(AutoConfig.from_pretrained(op["model"]), "auto")
            proc = adapter_for_family(family).load_processor(op["model"])
            out = Path(op["out"])
            out.mkdir(parents=True, exist_ok=True)
            copy_runtime_files(op["model"], out)
            tok = getattr(proc, "tokenizer", proc)
            if tok is not None:  # as the converter: no processor, no tokenizer files
                convert_hf_tokenizer(tok, out, model_id=op["model"], model_type=family)
        else:
            raise SystemExit(f"unknown oracle op {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1])
