"""The ``panelpack`` command: thin shells over library functions.

Each command parses its options, calls one library function, and prints what it returns.
Our exceptions become one line on stderr and an exit code (0 ok, 1 verification failed,
2 bad input or usage); any other exception is a bug: one line "internal error, please
report" and exit 3 (the traceback with ``-v``), so it never reads as "verification failed".
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from typing import Any, Callable

import click

from panelpack import __version__
from panelpack import cli_choices as choices
from panelpack import cli_outputs as _outputs
from panelpack.formats.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_VERIFY_FAILED, BadInputError, PanelpackError

log = logging.getLogger("panelpack")


def _fail(message: str, code: int) -> None:
    from panelpack.formats.text import escape

    click.echo(f"panelpack: error: {escape(message)}", err=True)  # one line, whatever a name holds
    sys.exit(code)


class _EscapingFormatter(logging.Formatter):
    """Log lines as one line each: names from a file cannot start a line of their own."""

    def format(self, record: logging.LogRecord) -> str:
        from panelpack.formats.text import escape

        return escape(super().format(record))


def _echo_text(text: str, **kw) -> None:
    """A report for people: every control character but newline and tab escaped (the renderers
    escape names and metadata field by field; this is the last guard)."""
    from panelpack.formats.text import escape_text

    click.echo(escape_text(text), **kw)


def command(fn):
    """Map panelpack's exceptions (and Ctrl-C) to a message and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PanelpackError as e:
            _fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except BrokenPipeError:  # `panelpack inspect x | head`
            sys.stderr.close()
            sys.exit(0)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as e:  # a bug: its own exit code, so it never reads as "verification failed"
            _internal_error(e)

    return wrapper


def _internal_error(e: Exception) -> None:
    """One line (exit 3) for an unexpected exception; the traceback only with ``-v``."""
    ctx = click.get_current_context(silent=True)
    verbose = ctx.find_root().params.get("verbose", 0) if ctx is not None else 0
    if verbose:
        import traceback

        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    hint = "" if verbose else " (run with -v for the traceback)"
    first = (str(e).splitlines() or [""])[0][:500]
    _fail(f"internal error, please report: {type(e).__name__}: {first}{hint}", EXIT_INTERNAL)


def echo_json(doc) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def echo_result(result, as_json: bool) -> None:
    """Print a result object: its ``to_json()`` with ``--json``, else its ``render()``."""
    if as_json:
        echo_json(result.to_json())
    else:
        _echo_text(result.render())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="panelpack")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Convert, repack and verify quantized LLM checkpoints for SME2, NEON and int8 kernels."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for h in logging.getLogger().handlers:
        h.setFormatter(_EscapingFormatter("%(levelname)s %(name)s: %(message)s"))


@main.command()
@click.argument("path", type=click.Path(exists=False, dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON document.")
@command
def inspect(path: str, as_json: bool) -> None:
    """Show what a GGUF, safetensors file, HF folder, bundle or .ppk.tar.zst holds.

    Checkpoints: architecture, hyperparameters, type histogram, tensor table. Bundles: source,
    options, layouts and types written, the ledger summary (fallbacks and why), tensor table.
    """
    from panelpack.formats import describe

    doc = describe.describe(path)
    if as_json:
        echo_json(doc)
    else:
        _echo_text(describe.render(doc))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON document.")
@command
def layouts(as_json: bool) -> None:
    """List every layout with its source types and constraints."""
    from panelpack import repack

    doc = repack.describe()
    if as_json:
        echo_json(doc)
        return
    from panelpack.formats.text import table

    rows = []
    for d in doc:
        types = "any" if d.get("any_type") else ", ".join(d["source_types"])
        inv = d.get("invertible")
        if isinstance(inv, dict):
            inv = "yes" if all(inv.values()) else "no: " + ", ".join(k for k, v in inv.items() if not v)
        else:
            inv = "yes" if inv else "no"
        target = ", ".join(f"{k}={v}" for k, v in d.get("target", {}).items())
        rows.append((d["name"], d.get("row_multiple", 1), types, inv, target, d.get("description", "")))
    click.echo(table(rows, ("layout", "N multiple", "source types", "invertible", "target", "description")))
    for d in doc:
        if "code_forms" in d:
            cf = d["code_forms"]
            forms = ", ".join(f"{d['name']}:{f} -> {lay}" for f, lay in cf["forms"].items())
            click.echo(f"\n{d['name']} writes the {cf['default']} code form unless asked ({forms}; a type "
                       f"without that form is written in {d['name']})")
    click.echo("\n" + "\n".join(f"  {term:<14} {text}" for term, text in _LAYOUT_TERMS))


#: The words of the `layouts` table, explained under it.
_LAYOUT_TERMS = (
    ("N multiple", "a matrix's row count N must be a multiple of this, else it stays rowmajor (the ledger says why)"),
    ("source types", "quantized block types the layout packs; other types are kept rowmajor (or --requant)"),
    ("invertible", "unpacks to the source blocks byte for byte (verify --level lossless, export to GGUF)"),
    ("target", "the CPU (isa) and runtime the bytes are arranged for"),
    ("SME2, SVL", "Arm's Scalable Matrix Extension 2; SVL = its streaming vector length in bits"),
    ("LUTI4", "the SME2 instruction that expands 4-bit codes through a 64-byte table (ZT0)"),
    ("seed", "the reference CPU backend whose 8-row interleaved GEMM kernels il8-* feed"),
    ("d*sc, dmin*m", "Q4_K's block scales multiplied out into f32 (faster to use, no longer the source bytes)"),
)


class _TqdmProgress:
    """Progress bar over bytes, with the tensor count as a postfix (stderr, TTY only)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.done = 0

    def start(self, tensors: int, nbytes: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        self.total = tensors
        self.bar = tqdm(total=nbytes, unit="B", unit_scale=True, unit_divisor=1024, desc="convert",
                        file=sys.stderr, dynamic_ncols=True, leave=False)

    def tensor_done(self, name: str, nbytes: int) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.done}/{self.total} tensors", refresh=False)
            self.bar.update(nbytes)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _announce_compiles() -> None:
    """One line on stderr when the first kernel is about to compile (numba cache cold); the
    hook list lives in formats/engine.py, so registering it does not import numba."""
    from panelpack.formats import engine

    if not engine.cold_cache_hooks:
        engine.cold_cache_hooks.append(lambda: click.echo(
            "compiling kernels (first run on this machine; later runs load them from the cache) ...", err=True))


class _Progress:
    """A progress bar on stderr (TTY only), called once per finished item: verify's over
    tensors, the batch's over jobs. ``label(item)`` is the bar's postfix for that item."""

    def __init__(self, enabled: bool, unit: str, desc: str, label: Callable[[Any], str]):
        self.enabled = enabled
        self.unit, self.desc, self.label = unit, desc, label
        self.bar = None

    def start(self, total: int) -> None:
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit=self.unit, desc=self.desc, file=sys.stderr, dynamic_ncols=True,
                            leave=False)

    def __call__(self, item) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(self.label(item), refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _install_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so partial output is cleaned up."""
    import signal

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # not the main thread
        pass


@main.command(cls=_outputs.MultiOutputCommand)
@click.argument("source", type=click.Path(exists=False))
@click.option("-o", "--out", "out", type=click.Path(),
              help="Bundle directory to write (OUT.ppk). Required, unless --dry-run. Repeat it for several "
                   "bundles from one read: --layout, --quant, --requant and --digest after an -o are that "
                   "output's own (before the first -o: every output's default).")
@click.option("--layout", default="panel64", show_default=True, type=choices.LAYOUT,
              help="Target layout (see `panelpack layouts`); panel64 stores the 5/6/2/3-bit types as compact "
                   "bit planes, panel64:int8 as int8 panels.")
@click.option("--quant", default=None, type=choices.QUANT,
              help="A llama.cpp mix (Q4_K_M, Q5_K_S, Q8_0, ...: see below), for HF sources a type for every 2-D "
                   "matmul weight (q4_k, q5_k, ...), or cq1..cq4 (--target cactus).")
@click.option("--requant", default=None, type=choices.REQUANT,
              help="GGUF sources: re-quantize what the layout cannot take to this type.")
@click.option("--include", multiple=True, metavar="GLOB", help="Only tensors whose name matches (repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Skip tensors whose name matches (repeatable).")
@click.option("-j", "--jobs", default=None, type=click.IntRange(1, 64),
              help="Tensors converted at once (threads). Default: 2 for a job big enough to run the kernels "
                   "(when 2 cores are usable), else 1. Helps when cores are idle: the packing kernels and the "
                   "hashing release the GIL; a quantizing job's kernels already use every core at -j 1.")
@click.option("--dry-run", is_flag=True, help="Print the plan and ledger without reading tensor data.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (for pipelines).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--target", type=choices.TARGET, default=None,
              help="bundle (default) | cactus: a folder the cactus engine loads (--quant cq1..cq4) | gguf: "
                   "the GGUF llama.cpp's converter and quantizer write (the default when OUT ends in .gguf).")
@click.option("--outtype", default=None, type=choices.OUTTYPE,
              help="GGUF output from an HF folder: the type of its matrices, as convert_hf_to_gguf.py --outtype "
                   "(default auto; with a --quant mix the source's own float type, the quantizer's input).")
@click.option("--cactus-panels", is_flag=True, help="cactus target: CQ4 matmul weights as .cq4p.weights panels.")
@click.option("--allow-nonfinite", is_flag=True,
              help="Quantize weights holding NaN/Inf (refused by default, naming the tensor and index).")
@click.option("--pure", is_flag=True,
              help="With a --quant mix: every quantized tensor gets the mix's default type (llama-quantize --pure).")
@click.option("--tensor-type", "tensor_types", multiple=True, metavar="REGEX=TYPE",
              help="With a --quant mix: tensors whose (llama.cpp) name matches REGEX get TYPE (repeatable; first match wins).")
@click.option("--output-tensor-type", default=None, metavar="TYPE", help="With a --quant mix: the type of output.weight.")
@click.option("--token-embedding-type", default=None, metavar="TYPE", help="With a --quant mix: the type of token_embd.weight.")
@click.option("--leave-output-tensor", is_flag=True, help="With a --quant mix: keep output.weight as stored.")
@click.option("--imatrix", "imatrix", default=None, metavar="FILE",
              help="With a --quant mix: llama.cpp importance matrix (GGUF or legacy .dat) to quantize with.")
@click.option("--digest", default=None, type=choices.DIGEST,
              help="Algorithm of the bundle's per-tensor digests. Default: blake3 (2x faster); sha256 for a "
                   "runtime without BLAKE3 (docs/FORMAT.md, \"Digests\").")
@command
def convert(source, out, layout, quant, requant, include, exclude, jobs, dry_run, force, as_json, no_progress,
            target, outtype, cactus_panels, allow_nonfinite, pure, tensor_types, output_tensor_type,
            token_embedding_type, leave_output_tensor, imatrix, digest):
    """Convert a GGUF file or an HF checkpoint into a bundle (or a cactus folder).

    --quant takes a llama.cpp file type (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L
    Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K, any case): each tensor's type is chosen as llama-quantize
    chooses it, GGUF sources included (re-quantized). A plain type (q4_k, q5_k) quantizes every
    2-D matmul weight of an HF source to it.

    With -o MODEL.gguf (or --target gguf) the output is the GGUF llama.cpp's convert_hf_to_gguf.py
    writes (--outtype) and, with a --quant mix, what llama-quantize then writes from it.

    Several -o write several bundles from one read of SOURCE (the dequantization and each
    quantization shared by the outputs that need the same blocks):
    panelpack convert SRC -o a.ppk --layout panel64 -o b.ppk --layout ggml-x8
    """
    from panelpack.convert import convert as convert_fn
    from panelpack.convert import mixes

    ctx = click.get_current_context()
    outputs = ctx.meta.get(_outputs.META_KEY)
    if outputs:
        _refuse_bundle_options(ctx, "a multi-output convert (bundles only)", ("outtype", "cactus_panels"))
        if target not in (None, "bundle"):
            raise click.UsageError(f"several -o write bundles only, not --target {target}")
        out = None
    elif out is None and not dry_run:
        raise click.UsageError("missing -o/--out (or use --dry-run)")
    if target == "cactus" or (quant or "").lower().startswith("cq") or cactus_panels:
        _convert_cactus(source, out, target, quant, cactus_panels, dry_run, force, as_json)
        return
    _install_sigterm()
    _announce_compiles()
    mix_options = mixes.Options(pure=pure, tensor_types=tuple(mixes.parse_tensor_type(s) for s in tensor_types),
                                output_tensor_type=output_tensor_type, token_embedding_type=token_embedding_type,
                                leave_output_tensor=leave_output_tensor, imatrix=imatrix)
    if target == "gguf" or (target is None and out is not None and str(out).lower().endswith(".gguf")):
        _refuse_bundle_options(click.get_current_context(), "GGUF output", ("layout", "requant", "include", "exclude",
                                                                            "digest", "allow_nonfinite"))
        from panelpack.convert import to_gguf

        echo_result(to_gguf(source, out, outtype=outtype, quant=quant, mix_options=mix_options, dry_run=dry_run,
                            force=force, jobs=jobs), as_json)
        return
    if outtype is not None:
        raise click.UsageError("--outtype is for GGUF output (-o MODEL.gguf or --target gguf)")
    if outputs:
        _convert_many(ctx, source, outputs, dict(layout=layout, quant=quant, requant=requant, digest=digest),
                      include=include, exclude=exclude, jobs=jobs, dry_run=dry_run, force=force, as_json=as_json,
                      no_progress=no_progress, allow_nonfinite=allow_nonfinite, mix_options=mix_options)
        return
    progress = _TqdmProgress(enabled=not (as_json or no_progress or dry_run) and sys.stderr.isatty())
    result = convert_fn(source, out, layout=layout, quant=quant, requant=requant, include=include,
                        exclude=exclude, jobs=jobs, dry_run=dry_run, force=force, progress=progress,
                        allow_nonfinite=allow_nonfinite, mix_options=mix_options, digest=digest)
    for w in result.plan.warnings:
        _echo_text(f"warning: {w}", err=True)
    echo_result(result, as_json)


def _convert_many(ctx, source, outputs, defaults, *, as_json, no_progress, dry_run, **run) -> None:
    """``convert SRC -o a.ppk ... -o b.ppk ...``: one read, several bundles (cli_outputs.py)."""
    from panelpack.convert import Target, convert_many

    targets = [Target(**row) for row in _outputs.resolve(ctx, outputs, defaults)]
    gguf = [str(t.out) for t in targets if str(t.out).lower().endswith(".gguf")]
    if gguf:
        raise click.UsageError(f"several -o write bundles only; convert {gguf[0]} on its own")
    progress = _TqdmProgress(enabled=not (as_json or no_progress or dry_run) and sys.stderr.isatty())
    results = convert_many(source, targets, dry_run=dry_run, progress=progress, **run)
    for w in dict.fromkeys(w for r in results for w in r.plan.warnings):
        _echo_text(f"warning: {w}", err=True)
    if as_json:
        echo_json({"targets": [r.to_json() for r in results]})
    else:
        _echo_text("\n\n".join(f"== {t.out} ({t.layout}) ==\n{r.render()}" for t, r in zip(targets, results)))


def _refuse_bundle_options(ctx, what: str, names) -> None:
    """Options given on the command line that ``what`` does not take: a usage error naming them."""
    from click.core import ParameterSource

    given = [n for n in names if ctx.get_parameter_source(n) == ParameterSource.COMMANDLINE]
    if given:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        raise click.UsageError(f"{what} does not take {flags}")


def _convert_cactus(source, out, target, quant, panels, dry_run, force, as_json) -> None:
    """``convert --target cactus``: the cactus folder writer (convert/cactus.py)."""
    from panelpack.convert.cactus import QUANTS, convert_cactus

    if target == "bundle":
        raise click.UsageError(f"--quant {quant} / --cactus-panels need --target cactus")
    q = (quant or "cq4").lower()
    if q not in QUANTS:
        raise click.UsageError(f"--target cactus takes --quant {' | '.join(QUANTS)}, got {quant!r}")
    if dry_run:
        raise click.UsageError("--dry-run is not available for --target cactus")
    result = convert_cactus(source, out, bits=QUANTS[q], panels=panels, force=force)
    echo_result(result, as_json)


@main.command()
@click.argument("plan", type=click.Path(exists=False), required=False)
@click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
              help="Run the jobs on a Ray cluster (pip install 'panelpack[ray]'): ADDRESS (host:port, ray://..., "
                   "auto), or none for a local one (write ADDRESS as --ray=ADDRESS when PLAN follows).")
@click.option("-w", "--workers", default=None, type=click.IntRange(1, 256),
              help="Local executor: jobs at once (default: the plan's workers, else the usable cores).")
@click.option("--retries", default=None, type=click.IntRange(0, 100),
              help="New attempts for a job whose worker died (default: the plan's retries, else 2).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@command
def batch(plan, ray_address, workers, retries, as_json, no_progress):
    """Run a TOML plan of sources x targets (docs/CONVERT.md, "Batches"): each source read once,
    verified and packed as the plan says, on local processes or a Ray cluster. Finished jobs are
    skipped; a bad source fails its own row; a worker that dies is retried. Exit code: the worst
    row's (0 done or skipped, 1 a verification failed, 2 a bad source, 3 an internal error)."""
    from panelpack.convert.batch import batch as batch_fn

    if plan is None and ray_address and ray_address.lower().endswith(".toml"):
        plan, ray_address = ray_address, ""  # `batch --ray PLAN`: --ray took the plan as its address
    if plan is None:
        raise click.UsageError("missing the PLAN file (a TOML plan: docs/CONVERT.md, \"Batches\")")
    _install_sigterm()
    bar = _Progress(not (as_json or no_progress) and sys.stderr.isatty(), "job", "batch",
                    lambda row: f"{row.name[-30:]}: {row.status}")
    try:
        result = batch_fn(plan, executor="local" if ray_address is None else "ray", address=ray_address or None,
                          workers=workers, retries=retries, on_start=bar.start, on_row=bar)
    finally:
        bar.close()
    echo_result(result, as_json)
    if result.exit_code:
        sys.exit(result.exit_code)


@main.command()
@click.argument("bundle", type=click.Path(exists=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="GGUF file to write.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@command
def export(bundle, out, force, as_json):
    """Write a bundle as a GGUF file.

    A GGUF-sourced bundle whose blocks are the source's comes back byte for byte; any other bundle
    (HF-sourced, or re-quantized with a --quant mix) is written as the GGUF of the blocks it holds,
    named and arranged as llama.cpp's converter and quantizer would write it. Tensors whose layout
    cannot be inverted are refused by name.
    """
    from panelpack.convert.gguf_export import export_gguf

    res = export_gguf(bundle, out, force=force)
    echo_result(res, as_json)


@main.command()
@click.argument("bundle", type=click.Path(exists=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Archive to write (FILE.ppk.tar.zst).")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--level", default=9, show_default=True, type=click.IntRange(1, 22), help="zstd level.")
@click.option("--threads", default=-1, show_default=True, type=int, help="zstd worker threads (-1: all cores).")
@click.option("--allow-extra", is_flag=True,
              help="Leave files the manifest does not list out of the archive (a warning each) instead of refusing.")
@command
def pack(bundle, out, force, level, threads, allow_extra):
    """Write a bundle as a deterministic .ppk.tar.zst archive.

    The bundle is checked first (verify's structure level: manifest, every file's size and
    digests, regions, layouts, no links, no unlisted files): a bundle `verify --level
    structure` would reject is not packed (exit 1). Its signature (model.sig) goes with it.
    """
    from panelpack.verify import gate

    _install_sigterm()
    r = gate.pack(bundle, out, force=force, level=level, threads=threads, allow_extra=allow_extra)
    _echo_text(f"packed {r.files} files, {r.bytes_in:,} bytes -> {r.path} ({r.bytes_out:,} bytes)")


@main.command()
@click.argument("archive_path", metavar="ARCHIVE", type=click.Path(exists=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Bundle directory to restore.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists (only a bundle folder is ever replaced).")
@click.option("--allow-large", is_flag=True,
              help="Accept members declaring more than 64x the archive's size (and over 64 MiB): "
                   "refused by default as a likely decompression bomb.")
@command
def unpack(archive_path, out, force, allow_large):
    """Restore a bundle directory from a .ppk.tar.zst archive.

    The restored files are checked against the manifest's sizes and sha256 (and the zstd
    frame checksums) before the folder appears under OUT; on any failure nothing is left.
    """
    from panelpack.verify import gate

    _install_sigterm()
    r = gate.unpack(archive_path, out, force=force, allow_large=allow_large)
    _echo_text(f"unpacked {r.files} files, {r.bytes_in:,} bytes -> {r.path}")


@main.command()
@click.argument("bundle", type=click.Path(exists=False))
@click.option("--level", type=choices.LEVEL, default="all",
              show_default=True, help="What to prove (structure always runs).")
@click.option("--json", "report_path", type=click.Path(), default=None, metavar="REPORT",
              help="Also write the full report as JSON to REPORT ('-' for stdout instead of the table).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random activations.")
@click.option("--sample", default=2, show_default=True, type=click.IntRange(0, None),
              help="Super-blocks (64 rows) per tensor run through the emulated leaves (0: all).")
@click.option("--svl-bits", default=512, type=click.Choice(["128", "256", "512", "1024", "2048"]), hidden=True,
              help="Read panels as a runtime with this streaming vector length would (negative tests).")
@click.option("--tensor", "names", multiple=True, metavar="NAME", help="Only these tensors (repeatable).")
@click.option("--native", "native", is_flag=False, flag_value="auto", default=None, type=choices.NATIVE,
              help="Also run the C kernels (verify/native) on the sampled rows: auto (default), qemu "
                   "(the aarch64 leaves under qemu-aarch64), host (what runs natively). docs/NATIVE.md")
@click.option("--allow-extra", is_flag=True, help="Files the manifest does not list are a warning each, not a failure.")
@click.option("--signed-by", type=click.Path(), default=None, metavar="KEY|CERT",
              help="Check the bundle's signature (model.sig) with this PEM public key, or these PEM trust-anchor "
                   "certificates: exit 1 unless every file is the one signed. Names the signer.")
@click.option("--signer-identity", default=None, metavar="ID",
              help="Keyless: the Sigstore identity (e-mail, workflow URI) that must have signed (needs the network).")
@click.option("--signer-issuer", default=None, metavar="URL", help="Keyless: the OIDC issuer of --signer-identity.")
@click.option("--force", is_flag=True, help="Replace the --json REPORT file if it exists.")
@command
def verify(bundle, level, report_path, seed, sample, svl_bits, names, native, allow_extra, signed_by,
           signer_identity, signer_issuer, force):
    """Prove a bundle (or .ppk.tar.zst): structure, lossless, agreement; print the dispatch ledger.

    Exit 0 when every tensor agrees, 1 on any mismatch, missing file, bad checksum, file the
    manifest does not list, unexplained fallback or (with --signed-by) signature that does
    not hold, 2 on bad input. The last lines say whether the bundle is signed, and by whom.
    """
    from panelpack.verify import bundle_check

    if report_path not in (None, "-"):
        from panelpack.formats import atomic, guard

        guard.check_disjoint(bundle, report_path, "the bundle", "the report")
        atomic.check_target(report_path, force)  # before the work, not after it
    _announce_compiles()
    progress = _Progress(sys.stderr.isatty() and report_path != "-", "tensor", "verify",
                         lambda verdict: verdict.name[-40:])
    try:
        rep = bundle_check.verify(bundle, level=level, seed=seed, sample=sample, svl_bits=int(svl_bits),
                                  names=list(names) or None, progress=progress, native=native,
                                  allow_extra=allow_extra, signed_by=signed_by, identity=signer_identity,
                                  issuer=signer_issuer)
    finally:
        progress.close()
    if report_path == "-":
        echo_json(rep.to_json())
    else:
        _echo_text(rep.render())
        if report_path:
            from panelpack.formats import atomic

            atomic.write_bytes(report_path, (json.dumps(rep.to_json(), indent=2) + "\n").encode(), force=force)
    if not rep.ok:
        sys.exit(EXIT_VERIFY_FAILED)


@main.command()
@click.option("-o", "--out", "out", default="tiny-llama.ppk", show_default=True, type=click.Path(),
              help="Bundle directory to write (replaced if it is a bundle; any other folder is refused).")
@click.option("--source", "source", default=None, type=click.Path(),
              help="Where to write the generated HF checkpoint (default: a temporary folder).")
@click.option("--layout", default="panel64", show_default=True, type=choices.LAYOUT,
              help="Layout of the demo bundle (see `panelpack layouts`).")
@click.option("--quant", default="q4_k", show_default=True, type=choices.QUANT,
              help="Quantize the demo's matrices to this type.")
@click.option("--verify", "verify_level", default="structure", show_default=True, type=choices.DEMO_LEVEL,
              help="Verification level to run on the bundle afterwards. 'all' adds the emulated SME2 and "
                   "NEON leaves and the compiled kernels; the first run on a machine compiles them (about 12 s "
                   "on 2 free cores, 20 s on one), later runs take about two seconds.")
@click.option("--no-verify", is_flag=True, help="Same as --verify none.")
@command
def demo(out, source, layout, quant, verify_level, no_verify):
    """The embedded default: generate a tiny Llama, convert it, print the ledger, check it."""
    import tempfile

    from panelpack.convert import convert as convert_fn
    from panelpack.convert import report
    from panelpack.convert.example import write_tiny_llama
    from panelpack.formats import guard

    guard.check_replaceable_bundle(out)  # demo replaces OUT: only ever a bundle
    _announce_compiles()
    if source:
        guard.check_disjoint(source, out, "the generated checkpoint", "the bundle")
    with tempfile.TemporaryDirectory(prefix="panelpack-demo-") as tmp:
        src = write_tiny_llama(source or tmp + "/tiny-llama-hf")
        _echo_text(f"generated {src} (tiny Llama-shaped checkpoint, bf16)")
        result = convert_fn(src, out, layout=layout, quant=quant, force=True)
    _echo_text(report.render_result(result))
    if no_verify or verify_level == "none":
        return
    from panelpack.verify import bundle_check

    rep = bundle_check.verify(out, level=verify_level)
    _echo_text(rep.render())
    if not rep.ok:
        sys.exit(EXIT_VERIFY_FAILED)
    if verify_level != "all":
        _echo_text(f"next: panelpack verify {out} --level all   (integer partials of the emulated SME2/NEON "
                   "leaves and compiled kernels against the standard dispatch)")
    _echo_text(f"also: panelpack eval {out} / panelpack generate {out} --prompt TEXT run the model on the bundle's own "
               "kernels (perplexity, KL and top-1 agreement against the standard blocks, bit-identical); this tiny "
               "Llama is random, so on a real model (e.g. a SmolLM2 bundle) they show the numbers that matter")


def _set_threads(threads):
    if threads:
        import numba

        numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))


class _EvalProgress:
    """eval's progress bar over token positions (stderr, TTY only)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="tok", desc="eval", file=sys.stderr, dynamic_ncols=True, leave=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@main.command(name="eval")
@click.argument("bundle", type=click.Path(exists=False))
@click.option("--text", "text_file", type=click.Path(), default=None, help="Text file to run (default: the shipped text).")
@click.option("--tokens", type=click.IntRange(2, None), default=None, help="Only the first N tokens of the text.")
@click.option("--against", type=choices.AGAINST, default="standard", show_default=True,
              help="Reference run: the standard blocks (must be bit-identical), dequantized f32 weights, or llama.cpp.")
@click.option("--kernels", type=choices.KERNELS, default="compiled", show_default=True,
              help="Kernel path of the bundle run.")
@click.option("--source", type=click.Path(), default=None,
              help="The original checkpoint: the f32 reference's weights, the GGUF llama.cpp runs.")
@click.option("--threads", type=click.IntRange(1, 256), default=None, help="Kernel threads (default: all cores).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@command
def eval_cmd(bundle, text_file, tokens, against, kernels, source, threads, as_json):
    """Run a text through BUNDLE: perplexity, and KL, top-1 agreement, max |dlogit| and
    bit-identity against a reference run. Exit 1 when the logits are not bit-identical to
    --against standard."""
    from panelpack.verify.runtime import evaluate

    _set_threads(threads)
    text = None
    if text_file is not None:
        try:
            with open(text_file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise BadInputError(f"cannot read the text ({e})", path=text_file) from None
    progress = _EvalProgress(enabled=sys.stderr.isatty() and not as_json)
    try:
        rep = evaluate.evaluate(bundle, text=text, tokens=tokens, against=against, kernels=kernels, source=source,
                                progress=progress)
    finally:
        progress.close()
    echo_result(rep, as_json)
    if not rep.ok:
        sys.exit(EXIT_VERIFY_FAILED)


@main.command()
@click.argument("bundle", type=click.Path(exists=False))
@click.option("--prompt", required=True, help="Text to continue.")
@click.option("-n", "n_tokens", type=click.IntRange(1, None), default=32, show_default=True, help="Tokens to generate.")
@click.option("--temp", type=click.FloatRange(0, None), default=0.0, show_default=True, help="Sampling temperature (0: greedy).")
@click.option("--seed", type=click.IntRange(0, None), default=0, show_default=True, help="Sampling seed (>= 0).")
@click.option("--kernels", type=choices.KERNELS, default="compiled", show_default=True)
@click.option("--threads", type=click.IntRange(1, 256), default=None, help="Kernel threads (default: all cores).")
@command
def generate(bundle, prompt, n_tokens, temp, seed, kernels, threads):
    """Continue PROMPT with BUNDLE's own kernels, printing tokens as they come (greedy by default).

    The bundle is checked first (verify's structure level): a damaged one is not run (exit 1)."""
    from panelpack.verify.runtime import Model

    _set_threads(threads)
    model = Model.open(bundle, kernels)
    tok = model.tokenizer
    tokens = model.generate(prompt, n_tokens, temp=temp, seed=seed)  # checks the options before any output
    _echo_text(prompt, nl=False)
    pending = b""
    for t in tokens:
        pending += tok.token_bytes(t)
        try:
            text, pending = pending.decode("utf-8"), b""
        except UnicodeDecodeError:  # a character split across tokens: wait for the rest
            continue
        _echo_text(text, nl=False)
    _echo_text(pending.decode("utf-8", errors="replace"))



@main.command()
@click.argument("bundle", type=click.Path(exists=False))
@click.option("--key", type=click.Path(), default=None, metavar="KEY.pem",
              help="PEM elliptic-curve private key (P-256/384/521): key signing, or with --cert certificate signing.")
@click.option("--cert", type=click.Path(), default=None, metavar="CERT.pem", help="The key's signing certificate.")
@click.option("--chain", type=click.Path(), multiple=True, metavar="CA.pem",
              help="With --cert: the certificates that issued it (repeatable).")
@click.option("--password-file", type=click.Path(), default=None, help="File holding the key's password (first line).")
@click.option("--keyless", is_flag=True, help="Sigstore keyless signing with an OIDC identity (needs the network).")
@click.option("--identity-token", default=None, help="Keyless: an OIDC identity token (else the browser flow).")
@click.option("--force", is_flag=True, help="Replace the bundle's existing signature.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@command
def sign(bundle, key, cert, chain, password_file, keyless, identity_token, force, as_json):
    """Sign BUNDLE: model.sig (OpenSSF model-signing) covering every file, kept in the bundle.

    The bundle is checked first (verify's structure level; a damaged one is not signed, exit
    1). `verify --signed-by PUBLIC_KEY|CA_CERT` then fails on any change to any file and names
    the signer; `pack` carries the signature. Needs `pip install 'panelpack[sign]'`.
    """
    from panelpack.verify import gate

    password = None
    if password_file is not None:
        try:
            with open(password_file, encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise BadInputError(f"cannot read the password ({e})", path=password_file) from None
    res = gate.sign(bundle, key=key, certificate=cert, chain=chain, password=password, keyless=keyless,
                    identity_token=identity_token, force=force)
    echo_result(res, as_json)


if __name__ == "__main__":  # pragma: no cover
    main()

__all__ = ["main", "command", "EXIT_BAD_INPUT"]
