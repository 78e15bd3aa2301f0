"""``panelpack batch PLAN``: plans, resume, isolation, retries after SIGKILL, local and Ray executors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from panelpack.cli import main
from panelpack.convert import batch as batch_mod
from panelpack.convert import convert
from panelpack.convert.batch import FAULT_ENV, batch, finished, run_job
from panelpack.convert.batch_plan import load
from panelpack.convert.example import write_tiny_llama
from panelpack.formats.errors import BadInputError

from builders import tiny_llama_gguf


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("src")
    tiny_llama_gguf(d / "tiny.gguf")
    write_tiny_llama(d / "hf")
    (d / "corrupt.gguf").write_bytes(b"GGUF" + b"\xff" * 60)
    return d


PLAN = """
out_dir = "out"
verify = "structure"
[[target]]
layout = "panel64"
[[target]]
layout = "ggml-x8"
out = "{{name}}-x8.ppk"
{sources}
"""


def write_plan(tmp_path: Path, src: Path, names=("tiny.gguf", "hf"), extra: str = "") -> Path:
    blocks = []
    for n in names:
        blocks.append(f'[[source]]\npath = "{src / n}"\n' + ('quant = "q4_k"\n' if n == "hf" else ""))
    p = tmp_path / "plan.toml"
    p.write_text(extra + PLAN.format(sources="\n".join(blocks)))
    return p


def tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(Path(path).rglob("*")) if p.is_file()}


def leftovers(out: Path) -> list[str]:
    """Anything in the output folder that is neither a finished bundle nor the records."""
    return sorted(p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".panelpack-batch")


# -- the plan ---------------------------------------------------------------------------------
def test_plan_cascades_options_and_names_outputs(tmp_path, sources):
    p = write_plan(tmp_path, sources, extra='digest = "sha256"\n')
    bp = load(p)
    assert [j.name for j in bp.jobs] == ["tiny", "hf"]
    hf = bp.jobs[1]
    assert [(Path(t.out).name, t.layout, t.quant, t.digest) for t in hf.targets] == [
        ("hf.panel64.ppk", "panel64", "q4_k", "sha256"), ("hf-x8.ppk", "ggml-x8", "q4_k", "sha256")]
    assert bp.jobs[0].entry != load(write_plan(tmp_path, sources)).jobs[0].entry  # the digest is part of the entry


def test_the_documented_plan_loads(tmp_path):
    doc = (Path(__file__).parents[1] / "docs" / "CONVERT.md").read_text()
    text = doc.split("## Batches")[1].split("```toml\n")[1].split("```")[0]
    (tmp_path / "plan.toml").write_text(text)
    bp = load(tmp_path / "plan.toml")
    assert [(j.name, j.verify, [(Path(t.out).name, t.layout, t.quant, t.requant) for t in j.targets]) for j in bp.jobs] == [
        ("smollm2", "all", [("smollm2.panel64.ppk", "panel64", None, "q4_0"), ("smollm2-x86.ppk", "ggml-x8", None, "q4_0")]),
        ("gemma-hf", "all", [("gemma-hf.il8-nibble.ppk", "il8-nibble", "Q4_K_M", None)])]
    assert bp.out_dir == str((tmp_path / "bundles").resolve())


@pytest.mark.parametrize("text, message", [
    ('[[source]]\npath = "x"\nlayuot = "panel64"\n[[source.target]]\n', "unknown key 'layuot'"),
    ('verify = "most"\n[[source]]\npath = "x"\n[[source.target]]\n', "verify = 'most'"),
    ('[[source]]\npath = "x"\n', "no targets"),
    ('[[target]]\n[[source]]\npath = "a/x"\n[[source]]\npath = "b/x"\n', "share the job name 'x'"),
    ('[[target]]\nout = "same.ppk"\n[[source]]\npath = "x"\n[[source]]\npath = "y"\n', "written by two targets"),
    ("[[source]\n", "not a valid TOML plan"),
    ('pack = "yes"\n[[source]]\npath = "x"\n', "pack must be a bool"),
])
def test_bad_plans_are_one_line_errors(tmp_path, text, message):
    p = tmp_path / "plan.toml"
    p.write_text(text)
    with pytest.raises(BadInputError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load(p)
    r = CliRunner().invoke(main, ["batch", str(p)])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "Traceback" not in r.output


# -- one job, in process (what a worker runs) -------------------------------------------------
def test_a_job_writes_the_single_commands_bytes_and_resumes(tmp_path, sources):
    bp = load(write_plan(tmp_path, sources, names=("tiny.gguf",)))
    job = bp.jobs[0]
    assert finished(job) is None
    row = run_job(job)
    assert row.status == "done" and [o["verify"] for o in row.outputs] == ["ok", "ok"], row
    x8 = row.outputs[1]
    assert x8["fallbacks"] == len(x8["fallback_reasons"]) > 0
    assert "not a multiple of 8" in x8["fallback_reasons"]["output.weight"]
    (tmp_path / "alone").mkdir()
    for t in job.targets:
        single = convert(sources / "tiny.gguf", tmp_path / "alone" / Path(t.out).name, layout=t.layout)
        assert tree(Path(t.out)) == tree(single.bundle)
    again = finished(job)
    assert again is not None and again.status == "skipped" and again.outputs == row.outputs
    # a damaged output, or another plan entry, is not finished
    next((Path(job.targets[1].out) / "tensors").iterdir()).unlink()
    assert finished(job) is None
    assert run_job(job).status == "done" and finished(job) is not None
    (Path(job.targets[0].out) / "manifest.json").write_text("{}")
    assert finished(job) is None
    row = run_job(job)  # not a bundle any more: not ours to delete
    assert row.status == "failed" and "not a panelpack bundle" in row.error
    other = load(write_plan(tmp_path, sources, names=("tiny.gguf",), extra='jobs = 1\n')).jobs[0]
    assert finished(other) is None


def test_a_changed_source_is_not_finished(tmp_path, sources):
    src = tmp_path / "src.gguf"
    src.write_bytes((sources / "tiny.gguf").read_bytes())
    p = tmp_path / "plan.toml"
    p.write_text(f'out_dir = "out"\n[[target]]\nlayout = "rowmajor"\n[[source]]\npath = "{src}"\n')
    job = load(p).jobs[0]
    assert run_job(job).status == "done" and finished(job) is not None
    tiny_llama_gguf(src, seed=5)  # same shapes, other weights
    assert finished(job) is None


def test_pack_writes_the_archive_and_resume_needs_it(tmp_path, sources):
    p = tmp_path / "plan.toml"
    p.write_text(f'out_dir = "out"\npack = true\nverify = "none"\n[[target]]\nlayout = "rowmajor"\n'
                 f'[[source]]\npath = "{sources / "tiny.gguf"}"\n')
    job = load(p).jobs[0]
    row = run_job(job)
    archive = Path(row.outputs[0]["pack"])
    assert row.status == "done" and row.outputs[0]["verify"] == "-" and archive.name == "tiny.rowmajor.ppk.tar.zst"
    assert archive.is_file() and finished(job) is not None
    archive.unlink()
    assert finished(job) is None


def test_a_corrupt_source_fails_its_row_with_one_line(tmp_path, sources):
    job = load(write_plan(tmp_path, sources, names=("corrupt.gguf",))).jobs[0]
    row = run_job(job)
    assert row.status == "failed" and "corrupt.gguf" in row.error and "\n" not in row.error
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.ppk"))


def test_ray_missing_is_a_clear_message(tmp_path, sources, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    p = write_plan(tmp_path, sources, names=("tiny.gguf",))
    for args in (["batch", str(p), "--ray"], ["batch", "--ray", str(p)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "pip install 'panelpack[ray]'" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


def test_ray_unreachable_cluster_is_bad_input(tmp_path, sources, monkeypatch):
    """A cluster that cannot be joined (wrong address, missing token) is the user's input: exit 2
    with Ray's reason and what to check, no traceback, nothing written."""
    import types

    class AuthenticationError(Exception):
        pass

    calls = []

    def init(**kw):
        calls.append(kw)
        raise ConnectionError(f"Failed to connect to Ray cluster at {kw['address']}")

    fake = types.ModuleType("ray")
    fake.is_initialized = lambda: False
    fake.init = init
    fake.exceptions = types.SimpleNamespace(AuthenticationError=AuthenticationError)
    monkeypatch.setitem(sys.modules, "ray", fake)
    p = write_plan(tmp_path, sources, names=("tiny.gguf",))
    r = CliRunner().invoke(main, ["batch", str(p), "--ray=10.9.9.9:6379"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "cannot join the Ray cluster at 10.9.9.9:6379" in r.output and "RAY_AUTH_MODE=token" in r.output
    assert calls and calls[0]["address"] == "10.9.9.9:6379"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# -- the local executor (a process per attempt) -----------------------------------------------
@pytest.mark.slow
def test_local_batch_isolates_a_bad_source_and_resumes(tmp_path, sources):
    p = write_plan(tmp_path, sources, names=("tiny.gguf", "corrupt.gguf", "hf"))
    r = CliRunner().invoke(main, ["batch", str(p), "--json"])
    assert r.exit_code == 2, r.output
    doc = json.loads(r.output)
    assert [j["status"] for j in doc["jobs"]] == ["done", "failed", "done"]
    assert "corrupt.gguf" in doc["jobs"][1]["error"]
    (tmp_path / "alone").mkdir()
    single = convert(sources / "hf", tmp_path / "alone" / "hf-x8.ppk", layout="ggml-x8", quant="q4_k")
    assert tree(tmp_path / "out" / "hf-x8.ppk") == tree(single.bundle)
    # again: the finished jobs are skipped, the bad one fails again
    r2 = CliRunner().invoke(main, ["batch", str(p), "--json"])
    doc2 = json.loads(r2.output)
    assert [j["status"] for j in doc2["jobs"]] == ["skipped", "failed", "skipped"] and r2.exit_code == 2
    r3 = CliRunner().invoke(main, ["batch", str(p)])
    assert "skipped" in r3.output and "job" in r3.output.splitlines()[0]


@pytest.mark.slow
def test_a_worker_killed_mid_job_is_retried_and_leaves_nothing_half_written(tmp_path, sources, monkeypatch):
    p = write_plan(tmp_path, sources, names=("tiny.gguf",))
    monkeypatch.setenv(FAULT_ENV, "kill:tiny:1")  # the first attempt's worker SIGKILLs itself mid-write
    res = batch(p, retries=0)
    out = tmp_path / "out"
    assert res.rows[0].status == "died" and "SIGKILL" in res.rows[0].error and res.exit_code == 3
    assert not list(out.glob("*.ppk"))  # nothing that looks like an output
    assert all(not (q / "manifest.json").exists() for q in out.iterdir() if q.name != ".panelpack-batch")
    res = batch(p, retries=1)  # attempt 1 killed again, attempt 2 finishes and sweeps the partials
    row = res.rows[0]
    assert row.status == "done" and row.attempts == 2, row
    assert leftovers(out) == [] and sorted(q.name for q in out.glob("*.ppk")) == ["tiny-x8.ppk", "tiny.panel64.ppk"]
    (tmp_path / "alone").mkdir()
    single = convert(sources / "tiny.gguf", tmp_path / "alone" / "tiny.panel64.ppk", layout="panel64")
    assert tree(out / "tiny.panel64.ppk") == tree(single.bundle)


# -- the Ray executor -------------------------------------------------------------------------
@pytest.mark.slow
def test_ray_executor_same_outputs_as_local(tmp_path, sources, monkeypatch):
    ray = pytest.importorskip("ray")
    local = tmp_path / "local"
    on_ray = tmp_path / "ray"
    local.mkdir()
    on_ray.mkdir()
    res_local = batch(write_plan(local, sources, names=("tiny.gguf", "corrupt.gguf", "hf")))
    monkeypatch.setenv(FAULT_ENV, "kill:tiny:1")  # the Ray workers inherit it: tiny's first attempt dies
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        res_ray = batch(write_plan(on_ray, sources, names=("tiny.gguf", "corrupt.gguf", "hf")), executor="ray")
    finally:
        ray.shutdown()
    assert [r.status for r in res_ray.rows] == [r.status for r in res_local.rows] == ["done", "failed", "done"]
    assert [r.attempts for r in res_ray.rows] == [2, 1, 1]  # the killed worker's job ran again
    for name in ("tiny.panel64.ppk", "tiny-x8.ppk", "hf.panel64.ppk", "hf-x8.ppk"):
        assert tree(on_ray / "out" / name) == tree(local / "out" / name)
    assert batch(write_plan(on_ray, sources, names=("tiny.gguf", "hf")), executor="local").counts() == {"skipped": 2}


def test_cli_needs_a_plan():
    r = CliRunner().invoke(main, ["batch"])
    assert r.exit_code == 2 and "missing the PLAN file" in r.output


def test_executors_table():
    assert set(batch_mod.EXECUTORS) == {"local", "ray"}
    with pytest.raises(BadInputError, match="unknown executor"):
        batch_mod.batch(load_plan_stub(), executor="dask")


def load_plan_stub():
    from panelpack.convert.batch_plan import BatchPlan

    return BatchPlan("stub.toml", "out", [])


@pytest.mark.slow
def test_real_checkpoint_batch_matches_single_commands(tmp_path, smollm2):
    p = tmp_path / "plan.toml"
    p.write_text(f'out_dir = "out"\nverify = "lossless"\n[[source]]\npath = "{smollm2}"\nname = "smollm2"\n'
                 '[[source.target]]\nlayout = "panel64"\n[[source.target]]\nlayout = "ggml-x8"\nrequant = "q4_0"\n')
    res = batch(p)
    assert res.counts() == {"done": 1} and [o["verify"] for o in res.rows[0].outputs] == ["ok", "ok"]
    (tmp_path / "alone").mkdir()
    for layout, requant, name in (("panel64", None, "smollm2.panel64.ppk"), ("ggml-x8", "q4_0", "smollm2.ggml-x8.ppk")):
        single = convert(smollm2, tmp_path / "alone" / name, layout=layout, requant=requant)
        assert tree(tmp_path / "out" / name) == tree(single.bundle)
    assert batch(p).counts() == {"skipped": 1}
